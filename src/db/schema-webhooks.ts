// Row types of the Webhooks (issue 4) tables, joined into Database in schema.ts.
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface WebhookTables {}
