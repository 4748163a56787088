/**
 * The stream stage alone (gateway/stream-answer.ts with the OpenAI relay, its SSE parser and
 * usage meter), on the loopback bench's 20-chunk answer arriving in one read, as it does there:
 * no sockets, no routing, no ledger. What a stream costs beyond a whole answer's work, in
 * isolation; the same stage costs two to three times as much inside the loaded gateway
 * (docs/benchmarks.md), so this moves with the stage's own work, not with the gateway's figure.
 *
 *   bun bench/stream-stage.ts [N]            CPU per stream over N streams (default 100,000)
 *   BUN_JSC_logGC=1 bun bench/stream-stage.ts 2>gc.log   and the collector's cycles beside it
 */
import { answerSource } from "../src/gateway/stream-answer.ts";
import { createOpenAIRelay } from "../src/streaming/encode-openai.ts";
import { openaiAdapter } from "../src/providers/openai/openai-adapter.ts";
import { UsageMeter } from "../src/billing/usage-meter.ts";
import type { ChunkReader, ReadResult } from "../src/transport/transport.ts";
import { buildOpenAI } from "./fake-answers.ts";

/** What bench/fake-upstream.ts sends for 20 chunks with include_usage (its prompt count aside). */
const { whole: answer, frames } = buildOpenAI(true, 20, true, 20);

const END: ReadResult = { done: true, value: undefined };
const deadline = { touch() {}, pause() {}, resume() {}, abort() {}, clear() {}, expired: undefined };

/** One stream: the answer in one read, then its end; handed over whole, as the gateway does. */
async function stream(): Promise<Response> {
  let reads = 0;
  const upstream: ChunkReader = {
    readNow: () => (reads++ === 0 ? { done: false, value: answer } : END),
    read: async () => END,
    cancel: async () => {},
  };
  const source = await answerSource({
    upstream,
    decode: openaiAdapter.createStreamDecoder(),
    sink: createOpenAIRelay({ id: "chatcmpl-ours", created: 1, model: "bench/gpt", includeUsage: true }),
    meter: new UsageMeter(),
    deadline,
    estimateUsage: async () => undefined,
    keepAliveMs: 15_000,
    clientIdleMs: 30_000,
    maxFrameBytes: 1 << 20,
    beforeEnd: async () => {},
    onDone() {},
  });
  const body = source.whole();
  if (body === undefined) throw new Error("the answer was not handed over whole");
  return new Response(body);
}

const N = Number(process.argv[2] ?? 100_000);
for (let i = 0; i < 5_000; i++) await stream();
const before = process.cpuUsage();
for (let i = 0; i < N; i++) await stream();
const spent = process.cpuUsage(before);
console.log(`stream stage: ${((spent.user + spent.system) / N).toFixed(2)} µs CPU per stream (${answer.length}-byte answer, ${frames.length} frames, ${N} streams)`);
