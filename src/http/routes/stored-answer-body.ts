import type { BodyBudget } from "../../limits/body-budget.ts";
import { pacedBody } from "../../streaming/paced-body.ts";

/**
 * A stored Responses answer (`GET /v1/responses/{id}`, free) sent in chunks, as fast as the client
 * reads (streaming/paced-body.ts): a tenant asking for a 9 MB answer ten times a second on
 * connections it never read took the gateway from 170 MB to 3.7 GB in 40 s when each went out
 * whole. The account's answers still being sent may hold `budget`'s share of bytes between them
 * (their sizes; more: 429), given back once an answer is sent, given up or cancelled.
 */
export function storedAnswerBody(json: string, o: { budget: BodyBudget; holder: string; idleMs: number }): { stream: ReadableStream<Uint8Array>; bytes: number } | "busy" {
  const bytes = Buffer.from(json);
  const size = bytes.byteLength;
  if (o.budget.take(o.holder, size) !== undefined) return "busy";
  const stream = pacedBody(bytes, { idleMs: o.idleMs, done: () => o.budget.give(o.holder, size) });
  return { stream, bytes: size };
}
