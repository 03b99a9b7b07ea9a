// Pool task (pool-tasks.ts): classify one inbound message off the event loop.
import { classifyMessage, type AddressHint, type Classified, type ParseLimits } from './parse.ts';

export type ClassifyInput = { raw: Uint8Array; hints: (AddressHint | undefined)[]; limits: ParseLimits };

/** One classification per hint (a message to two signed addresses is about two messages). */
export async function classifyInbound(input: ClassifyInput): Promise<Classified[]> {
  const hints = input.hints.length > 0 ? input.hints : [undefined];
  const out: Classified[] = [];
  for (const hint of hints) out.push(await classifyMessage(input.raw, hint, input.limits));
  return out;
}
