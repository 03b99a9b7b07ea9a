/**
 * A UUID in its plain form (ajv's `uuid` format also takes a `urn:uuid:` prefix,
 * which PostgreSQL refuses). One definition: the pattern string goes into JSON
 * schemas (no flags there, hence both cases spelled out), the RegExp into code.
 */
export const UUID_PATTERN = '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$';
export const UUID_RE = new RegExp(UUID_PATTERN);
