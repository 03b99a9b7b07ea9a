// Pool task (pool-tasks.ts): classify one inbound message off the event loop.
import { classifyMessage, type AddressHint, type Classified, type ParseLimits } from './parse.ts';

export type ClassifyInput = { raw: Uint8Array; hints: (AddressHint | undefined)[]; limits: ParseLimits };

/** Several messages in one task (the listener batches what arrives together); one result list per input, in order. */
export async function classifyInboundBatch(inputs: ClassifyInput[]): Promise<Classified[][]> {
  const out: Classified[][] = [];
  for (const input of inputs) out.push(await classifyInbound(input));
  return out;
}

/** One classification per hint (a message to two signed addresses is about two messages). */
export async function classifyInbound(input: ClassifyInput): Promise<Classified[]> {
  const hints = input.hints.length > 0 ? input.hints : [undefined];
  const out: Classified[] = [];
  for (const hint of hints) out.push(await classifyMessage(input.raw, hint, input.limits));
  return out;
}
