// Pool task: parse and check a large JSON request body off the event loop
// (src/http/json-body.ts decides which bodies come here). The parsed value goes
// back by structured clone, which costs the event loop far less than parsing.
import { parseJsonBody, type JsonLimits, type ParsedJson } from '../lib/json-check.ts';

export function parseJson(input: { text: string; limits: JsonLimits }): ParsedJson {
  return parseJsonBody(input.text, input.limits);
}
