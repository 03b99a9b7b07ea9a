// Row types of the Campaign engine: decisions, leads, sales (issue 5) tables, joined into Database in schema.ts.
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface EngineTables {}
