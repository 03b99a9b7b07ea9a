/** A UUID in its plain form (ajv's `uuid` format also takes a `urn:uuid:` prefix, which PostgreSQL refuses). */
export const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
