// Row types of the Dashboard users and sessions (issue 6) tables, joined into Database in schema.ts.
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface DashboardTables {}
