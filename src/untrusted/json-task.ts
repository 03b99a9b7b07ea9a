// Pool task: decode, parse and check a large JSON request body off the event
// loop (src/http/json-body.ts decides which bodies come here; their bytes
// arrive by transfer). The parsed value goes back by structured clone, which
// costs the event loop far less than decoding and parsing.
import { parseJsonBody, type JsonLimits, type ParsedJson } from '../lib/json-check.ts';

export function parseJson(input: { bytes: Uint8Array; limits: JsonLimits }): ParsedJson {
  const { bytes } = input;
  return parseJsonBody(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8'), input.limits);
}
