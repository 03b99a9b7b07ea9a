// Row types of the Tracking and bot decisions (issue 5) tables, joined into Database in schema.ts.
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface TrackingTables {}
