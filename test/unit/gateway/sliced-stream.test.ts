/**
 * The stream stage (gateway/stream-answer.ts) over a sliced reader (transport/sliced-reader.ts):
 * the gateway's stop and a client's leaving while the next slice of a large read waits for its
 * turn end the stream as they do over the reader as it comes (a review of the slices found the
 * stop hung: the waiting read was dropped, never settled).
 */
import { describe, expect, test } from "bun:test";
import { answerSource, streamAnswer, type DirectController, type StreamAnswerOptions } from "../../../src/gateway/stream-answer.ts";
import { UsageMeter } from "../../../src/billing/usage-meter.ts";
import { slicedReader } from "../../../src/transport/sliced-reader.ts";
import type { ChunkReader } from "../../../src/transport/transport.ts";
import { relayStageOptions, stageTokenizer } from "../../helpers/stream-stage.ts";

const enc = new TextEncoder();
const chunk = (i: number) =>
  `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"w${i} "}}]}\n\n`;
const FIRST = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n`;

/** ~300 KB of frames in one read, from a real ReadableStream (a decompressed body, fetch's): read() only. */
function plainReader(): ChunkReader {
  let text = FIRST;
  for (let i = 0; text.length < 300_000; i++) text += chunk(i);
  const stream = new ReadableStream<Uint8Array>({
    start(c) {
      c.enqueue(enc.encode(text));
      // the upstream then stays open (more to come)
    },
  });
  return stream.getReader() as unknown as ChunkReader;
}

function cutsRecorder() {
  const watching = new Set<() => void>();
  return { watching, cuts: { watch: (end: () => void) => watching.add(end), unwatch: (end: () => void) => watching.delete(end) }, cut: () => [...watching].forEach((end) => end()) };
}

async function run(wrap: boolean) {
  const c = cutsRecorder();
  const outcome: { value?: string } = {};
  const writes: string[] = [];
  let closed = false;
  const controller: DirectController = { write: (s) => (writes.push(s), s.length), flush: () => 0, close: () => void (closed = true) };
  const upstream = wrap ? slicedReader(plainReader()) : plainReader();
  const o = relayStageOptions(upstream, (v) => void (outcome.value = v), { cuts: c.cuts });
  const source = await answerSource(o);
  const pulled = source.pull(controller);
  // Let the first read (the first slice) be taken and written; the next read is then under way
  // (waiting for the slice's turn, when wrapped). Microtasks only: no macrotask runs meanwhile.
  for (let i = 0; i < 200 && writes.length === 0; i++) await Promise.resolve();
  for (let i = 0; i < 50; i++) await Promise.resolve();
  expect(writes.length).toBeGreaterThan(0);
  c.cut(); // the gateway's stop, past its grace
  const ended = await Promise.race([pulled.then(() => "ended"), Bun.sleep(1_000).then(() => "hung")]);
  return { ended, closed, outcome: outcome.value, errorFrameLast: (writes.at(-1) ?? "").includes("shutting down"), watched: c.watching.size };
}

describe("the gateway's stop while the relay loop waits on a sliced read() (a reader without readNow: fetch's, a decompressed body)", () => {
  test("the reader as it comes: the shutdown's error frame, closed, recorded cancelled, no longer watched", async () => {
    const r = await run(false);
    expect(r).toMatchObject({ ended: "ended", closed: true, outcome: "cancelled", watched: 0, errorFrameLast: true });
  });

  test("sliced, its next slice waiting for its turn: the same (a cancel ends the waiting read as done, as a stream reader's)", async () => {
    const r = await run(true);
    expect(r).toMatchObject({ ended: "ended", closed: true, outcome: "cancelled", watched: 0, errorFrameLast: true });
  });
});

describe("a client that leaves an answer read to its end (readRest) while a slice waits for its turn", () => {
  for (const plain of [true, false]) {
    test(`${plain ? "read()-only" : "fast"} reader: the rest is read to the vendor's end, then cancelled`, async () => {
      const { BodyQueue } = await import("../../../src/transport/http1/body-queue.ts");
      let text = FIRST;
      for (let i = 0; text.length < 400_000; i++) text += chunk(i);
      text += `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n` +
        `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":77777,"total_tokens":8}}\n\ndata: [DONE]\n\n`;
      const q = new BodyQueue({ bodyTaken() {}, bodyCancelled() {} });
      q.push([enc.encode(text)]);
      const inner: ChunkReader = plain ? { read: () => q.read(), cancel: () => q.cancel() } : q;
      const outcome: { value?: string } = {};
      const meter = new UsageMeter(stageTokenizer.count);
      const o = relayStageOptions(slicedReader(inner), (v) => void (outcome.value = v), { meter, readToEndOnCancel: () => true });
      const source = await answerSource(o);
      const writes: string[] = [];
      const controller: DirectController = { write: (s) => (writes.push(s), s.length), flush: () => 0, close: () => {} };
      const pulled = source.pull(controller);
      for (let i = 0; i < 200 && writes.length === 0; i++) await Promise.resolve();
      expect(writes.length).toBeGreaterThan(0);
      source.cancel(); // the client leaves; the next slice is waiting for its turn
      await Promise.race([pulled, Bun.sleep(500)]);
      for (let i = 0; i < 100 && outcome.value === undefined; i++) await Bun.sleep(5);
      expect(outcome.value).toBe("cancelled");
      expect(meter.reported).toBeTruthy();
    });
  }
});

describe("random read sizes and arrival times through the slices (fast and read()-only readers)", () => {
  const LAST = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n` +
    `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}\n\ndata: [DONE]\n\n`;
  let seed = 12345;
  const random = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;

  /** One answer of `n` frames cut into reads of 1 B to 400 KB, some with the head, the rest after microtasks, immediates or timers. */
  async function once(n: number, plain: boolean): Promise<{ words: string[]; outcome?: string; tail: string }> {
    const { BodyQueue } = await import("../../../src/transport/http1/body-queue.ts");
    let text = FIRST;
    for (let i = 0; i < n; i++) text += chunk(i);
    const bytes = enc.encode(text + LAST);
    const q = new BodyQueue({ bodyTaken() {}, bodyCancelled() {} });
    const reads: Uint8Array[] = [];
    for (let at = 0; at < bytes.length; ) {
      const r = random();
      const size = 1 + Math.floor(random() * (r < 0.3 ? 200 : r < 0.6 ? 70_000 : 400_000));
      reads.push(bytes.slice(at, at + size));
      at += size;
    }
    for (let i = Math.floor(random() * 3); i > 0 && reads.length > 0; i--) q.push([reads.shift()!]);
    let outcome: string | undefined;
    const o = relayStageOptions(slicedReader(plain ? { read: () => q.read(), cancel: () => q.cancel() } : q), (v) => void (outcome = v), { keepAliveMs: 5 + Math.floor(random() * 30) });
    const feeding = (async () => {
      while (reads.length > 0) {
        const r = random();
        if (r < 0.25) await Promise.resolve();
        else if (r < 0.5) await new Promise((resolve) => setImmediate(resolve));
        else if (r < 0.75) await Bun.sleep(Math.floor(random() * 3));
        q.push([reads.shift()!]);
      }
      q.end();
    })();
    const stream = await streamAnswer(o);
    const out = typeof stream === "string" ? stream : await Promise.race([new Response(stream).text(), Bun.sleep(15_000).then(() => "HUNG")]);
    await feeding;
    return { words: [...out.matchAll(/"content":"(w\d+) "/g)].map((m) => m[1]!), outcome, tail: out.slice(-20) };
  }

  test("every frame once, in order, then [DONE]; the stream completes (20 answers of 2,000–8,000 frames)", async () => {
    for (let i = 0; i < 20; i++) {
      const n = 2_000 + Math.floor(random() * 6_000);
      const r = await once(n, i % 2 === 1);
      expect({ run: i, outcome: r.outcome, tail: r.tail.endsWith("[DONE]\n\n"), words: r.words.length }).toEqual({ run: i, outcome: "completed", tail: true, words: n });
      expect(r.words.every((w, k) => w === `w${k}`)).toBe(true);
    }
  }, 60_000);
});
