import { describe, expect, test } from "bun:test";
import { answerSource, END_GRACE_MS, type DirectController, type StreamAnswerOptions } from "../../../src/gateway/stream-answer.ts";
import { anthropicAdapter } from "../../../src/providers/anthropic/anthropic-adapter.ts";
import { openaiAdapter } from "../../../src/providers/openai/openai-adapter.ts";
import { Deadline } from "../../../src/gateway/deadline.ts";
import { BodyQueue } from "../../../src/transport/http1/body-queue.ts";
import { relayStageOptions } from "../../helpers/stream-stage.ts";
import type { ReadResult } from "../../../src/transport/transport.ts";


/**
 * The stream stage driven directly, with a controller that records what Bun's would send: each
 * write, and whether it happened in the turn the stream started (Bun sends a direct stream's head
 * on its own unless the first write comes in that turn, docs/benchmarks.md).
 */

const enc = new TextEncoder();
const chunk = (i: number, extra = "") =>
  `data: {"id":"chatcmpl-up","object":"chat.completion.chunk","created":1,"model":"gpt-up","choices":[{"index":0,"delta":{"content":"w${i} "}${extra}}]}\n\n`;
const FIRST = `data: {"id":"chatcmpl-up","object":"chat.completion.chunk","created":1,"model":"gpt-up","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n`;
const LAST =
  `data: {"id":"chatcmpl-up","object":"chat.completion.chunk","created":1,"model":"gpt-up","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n` +
  `data: {"id":"chatcmpl-up","object":"chat.completion.chunk","created":1,"model":"gpt-up","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}\n\n` +
  `data: [DONE]\n\n`;

/** A body whose reads are scripted: queued results are there at once, later ones arrive when pushed. */
function scriptedBody() {
  const queued: ReadResult[] = [];
  let waiting: ((r: ReadResult) => void) | null = null;
  return {
    arrive(r: ReadResult) {
      if (waiting) {
        const w = waiting;
        waiting = null;
        w(r);
      } else queued.push(r);
    },
    reader: {
      readNow: () => queued.shift(),
      read: () => {
        const r = queued.shift();
        return r ? Promise.resolve(r) : new Promise<ReadResult>((resolve) => (waiting = resolve));
      },
      cancelled: 0,
      async cancel() {
        this.cancelled++;
      },
    },
  };
}
/**
 * A scripted body that also wakes its reader the way our HTTP/1.1 client's queue does
 * (`onReadable`): what arrives is taken in `arrive`'s own call, as in the socket's callback.
 * `read()` is counted: a stream woken this way never needs it.
 */
function wakingBody() {
  const queued: ReadResult[] = [];
  let failure: Error | undefined;
  let ready: (() => void) | null = null;
  const wake = () => {
    const r = ready;
    ready = null;
    r?.();
  };
  const reader = {
    reads: 0,
    wakes: 0,
    cancelled: 0,
    readNow: (): ReadResult | undefined => {
      const r = queued.shift();
      if (!r && failure) throw failure;
      return r;
    },
    read(): Promise<ReadResult> {
      this.reads++;
      return Promise.reject(new Error("read() called: a stream woken by onReadable must not need it"));
    },
    onReadable(r: () => void) {
      this.wakes++;
      ready = r;
    },
    async cancel() {
      this.cancelled++;
      ready = null;
    },
  };
  return {
    arrive(r: ReadResult) {
      queued.push(r);
      wake();
    },
    fail(err: Error) {
      failure = err;
      wake();
    },
    reader,
  };
}
const data = (text: string): ReadResult => ({ done: false, value: enc.encode(text) });
const END: ReadResult = { done: true, value: undefined };

function recorder() {
  const writes: string[] = [];
  let closed = false;
  const controller: DirectController = {
    write(c) {
      writes.push(c);
      return c.length;
    },
    flush: () => 0,
    close() {
      closed = true;
    },
  };
  return { controller, writes, closed: () => closed };
}

function options(reader: StreamAnswerOptions["upstream"], events: string[], outcome: { value?: string }): StreamAnswerOptions {
  const onDone = (o: string) => {
    outcome.value = o;
  };
  return relayStageOptions(reader, onDone, {
    beforeEnd: async () => {
      events.push("settling");
      await new Promise((resolve) => setTimeout(resolve, 20));
      events.push("settled");
    },
  });
}

/** The stage over a scripted body, with what it settled and how it ended recorded, and a recording controller. */
async function stage(body: ReturnType<typeof scriptedBody> | ReturnType<typeof wakingBody>, extra: Partial<StreamAnswerOptions> = {}) {
  const events: string[] = [];
  const outcome: { value?: string } = {};
  const source = await answerSource({ ...options(body.reader, events, outcome), ...extra });
  return { source, events, outcome, ...recorder() };
}

describe("stream stage: what goes out with the head", () => {
  test("an answer already whole when the stream starts is settled first, then head, frames and end leave in one write", async () => {
    const body = scriptedBody();
    body.arrive(data(FIRST + chunk(1) + chunk(2) + LAST));
    body.arrive(END);
    const { source, events, outcome, controller, writes, closed } = await stage(body);
    // The charge is durable before the stream (and with it the head) is handed to the server.
    expect(events).toEqual(["settling", "settled"]);

    const pulled = source.pull(controller);
    // Written in the turn the stream started: the server sends it with the head.
    expect(writes.length).toBe(1);
    await pulled;
    expect(writes.length).toBe(1);
    expect(writes[0]).toContain('"content":"w1 "');
    expect(writes[0]).toContain('"content":"w2 "');
    expect(writes[0]).toContain('"finish_reason":"stop"');
    expect(writes[0]!.endsWith("data: [DONE]\n\n")).toBe(true);
    // The gateway's model and id, never the vendor's; the usage chunk the client did not ask for is dropped.
    expect(writes[0]).toContain('"model":"ours/model"');
    expect(writes[0]).not.toContain("gpt-up");
    expect(writes[0]).not.toContain('"usage"');
    expect(closed()).toBe(true);
    expect(outcome.value).toBe("completed");
  });

  test("frames already here go out in the stream's first turn; the rest as it comes; the last frames wait for the settlement and leave with the end", async () => {
    const body = scriptedBody();
    body.arrive(data(FIRST + chunk(1)));
    const { source, events, outcome, controller, writes, closed } = await stage(body);
    expect(events).toEqual([]);

    const pulled = source.pull(controller);
    expect(writes.length).toBe(1);
    expect(writes[0]).toContain('"content":"w1 "');
    expect(writes[0]).not.toContain("[DONE]");

    await Bun.sleep(5);
    body.arrive(data(chunk(2)));
    await Bun.sleep(5);
    expect(writes.length).toBe(2);
    expect(writes[1]).toContain('"content":"w2 "');
    expect(events).toEqual([]);

    body.arrive(data(LAST));
    body.arrive(END);
    await pulled;
    expect(events).toEqual(["settling", "settled"]);
    // The last frames and the end arrived together: one write, once the charge is durable.
    expect(writes.length).toBe(3);
    expect(writes[2]).toContain('"finish_reason":"stop"');
    expect(writes[2]!.endsWith("data: [DONE]\n\n")).toBe(true);
    expect(closed()).toBe(true);
    expect(outcome.value).toBe("completed");
  });

  test("nothing here yet: nothing is written until the upstream sends", async () => {
    const body = scriptedBody();
    const { source, events, outcome, controller, writes } = await stage(body);
    const pulled = source.pull(controller);
    expect(writes.length).toBe(0);
    body.arrive(data(FIRST + chunk(1) + LAST));
    body.arrive(END);
    await pulled;
    expect(writes.join("")).toContain('"content":"w1 "');
    expect(writes.join("").endsWith("data: [DONE]\n\n")).toBe(true);
    expect(outcome.value).toBe("completed");
  });

  // Bun's timers fire up to a millisecond early by performance.now(): the wait's end at 599 ms of
  // 600 is the wait run out, not a wait with a third of keepalive_ms still to go (a CI run: the
  // head at the clock's first tick, 805 ms). A wait that ended 200 ms short writes nothing yet.
  test.each([
    ["ran keepalive_ms, by a timer that fired a millisecond early: the keep-alive is the first write, at once", 599, [": keep-alive\n\n"]],
    ["ended with a third of keepalive_ms still to go: no keep-alive yet", 400, []],
  ])("the head's wait %s", async (_name, waitedMs, written) => {
    const body = scriptedBody();
    const source = await answerSource({ ...options(body.reader, [], {}), keepAliveMs: 600 }, performance.now() - waitedMs);
    const { controller, writes } = recorder();
    const pulled = source.pull(controller);
    expect(writes).toEqual(written);
    await source.cancel?.();
    body.arrive(END);
    await pulled;
  });

  test("a broken frame that came with the head fails the stream with an error frame, uncharged by its own settlement", async () => {
    const body = scriptedBody();
    body.arrive(data(FIRST + "data: {not json\n\n"));
    body.arrive(END);
    const { source, events, outcome, controller, writes, closed } = await stage(body);
    await source.pull(controller);
    const sent = writes.join("");
    expect(sent).toContain('"error"');
    expect(sent).not.toContain("[DONE]");
    expect(events).toEqual([]);
    expect(closed()).toBe(true);
    expect(outcome.value).toBe("failed");
  });
});

describe("stream stage: images that came with the head", () => {
  test("their downloads do not hold the head back: the stream is handed over at once, the frame follows once inlined", async () => {
    const body = scriptedBody();
    const imageFrame = `data: {"id":"chatcmpl-up","object":"chat.completion.chunk","created":1,"model":"gpt-up","choices":[{"index":0,"delta":{"images":[{"image_url":{"url":"https://img.example/a.png"}}]},"finish_reason":null}]}\n\n`;
    body.arrive(data(FIRST + chunk(1) + imageFrame + LAST));
    body.arrive(END);
    const events: string[] = [];
    const outcome: { value?: string } = {};
    let release!: () => void;
    const download = new Promise<void>((resolve) => (release = resolve));
    const source = await answerSource({
      ...options(body.reader, events, outcome),
      resolveImages: async (evs) => {
        events.push("downloading");
        await download;
        for (const e of evs) if (e.type === "image") e.url = "data:image/png;base64,AAAA";
      },
    });
    // Handed over before the download finished, and before anything was settled.
    expect(events).toEqual([]);
    const { controller, writes, closed } = recorder();
    const pulled = source.pull(controller);
    // What came before the image goes out with the head.
    expect(writes.length).toBe(1);
    expect(writes[0]).toContain('"content":"w1 "');
    await Bun.sleep(5);
    expect(events).toEqual(["downloading"]);
    release();
    await pulled;
    const sent = writes.join("");
    expect(sent).toContain("data:image/png;base64,AAAA");
    expect(sent.endsWith("data: [DONE]\n\n")).toBe(true);
    expect(events).toEqual(["downloading", "settling", "settled"]);
    expect(closed()).toBe(true);
    expect(outcome.value).toBe("completed");
  });
});

describe("stream stage: the vendor's end marker", () => {
  test("both vendors' decoders mark their end: OpenAI's [DONE], Anthropic's message_stop", () => {
    expect(openaiAdapter.createStreamDecoder()({ event: undefined, data: "[DONE]", id: undefined, retry: undefined }).last).toBe(true);
    const anthropic = anthropicAdapter.createStreamDecoder();
    expect(anthropic({ event: "message_stop", data: '{"type":"message_stop"}', id: undefined, retry: undefined }).last).toBe(true);
    expect(anthropic({ event: "ping", data: '{"type":"ping"}', id: undefined, retry: undefined }).last).toBeUndefined();
  });

  test("a body left open after [DONE] is waited for only END_GRACE_MS, then dropped; the answer completes", async () => {
    const body = scriptedBody();
    body.arrive(data(FIRST + chunk(1) + LAST));
    const { source, events, outcome, controller, writes, closed } = await stage(body);
    const started = performance.now();
    await source.pull(controller);
    const took = performance.now() - started;
    expect(took).toBeGreaterThanOrEqual(END_GRACE_MS - 50);
    expect(took).toBeLessThan(END_GRACE_MS + 1_000);
    expect(body.reader.cancelled).toBe(1);
    expect(writes.join("").endsWith("data: [DONE]\n\n")).toBe(true);
    expect(events).toEqual(["settling", "settled"]);
    expect(closed()).toBe(true);
    expect(outcome.value).toBe("completed");
  });

  test("the body's end right after [DONE] is taken as it comes: nothing dropped, no wait", async () => {
    const body = scriptedBody();
    body.arrive(data(FIRST + chunk(1) + LAST));
    const { source, events, outcome, controller } = await stage(body);
    const pulled = source.pull(controller);
    await Bun.sleep(5);
    body.arrive(END);
    await pulled;
    expect(body.reader.cancelled).toBe(0);
    expect(outcome.value).toBe("completed");
  });
});

describe("stream stage woken by the transport (onReadable): no promise a chunk", () => {
  test("chunks after the head are taken and written in the transport's callback; the last frames wait for the settlement and leave with the end; read() is never called", async () => {
    const body = wakingBody();
    body.arrive(data(FIRST + chunk(1)));
    const { source, events, outcome, controller, writes, closed } = await stage(body);
    const pulled = source.pull(controller);
    expect(writes.length).toBe(1);
    await Bun.sleep(1);

    body.arrive(data(chunk(2)));
    // Written within arrive(): no turn, no promise in between.
    expect(writes.length).toBe(2);
    expect(writes[1]).toContain('"content":"w2 "');
    body.arrive(data(chunk(3)));
    expect(writes.length).toBe(3);
    expect(events).toEqual([]);

    body.arrive(data(LAST));
    body.arrive(END);
    await pulled;
    expect(events).toEqual(["settling", "settled"]);
    // The vendor's end marker hands the stream back to its loop, which takes the end as it comes:
    // the last frames, settled, then out with the end in one write.
    expect(writes.length).toBe(4);
    expect(writes[3]).toContain('"finish_reason":"stop"');
    expect(writes[3]!.endsWith("data: [DONE]\n\n")).toBe(true);
    expect(closed()).toBe(true);
    expect(outcome.value).toBe("completed");
    expect(body.reader.reads).toBe(0);
    expect(body.reader.cancelled).toBe(0);
  });

  test("the body's end without an end marker: the answer ended early, an error frame, nothing settled", async () => {
    const body = wakingBody();
    const { source, events, outcome, controller, writes, closed } = await stage(body);
    const pulled = source.pull(controller);
    body.arrive(data(FIRST + chunk(1)));
    body.arrive(END);
    await pulled;
    const sent = writes.join("");
    expect(sent).toContain('"content":"w1 "');
    expect(sent).toContain("ended the answer early");
    expect(events).toEqual([]);
    expect(closed()).toBe(true);
    expect(outcome.value).toBe("failed");
    expect(body.reader.reads).toBe(0);
  });

  test("a connection lost while waiting, and a broken frame taken in the callback, each fail the stream with an error frame", async () => {
    const lost = wakingBody();
    const a = await stage(lost);
    const pulledA = a.source.pull(a.controller);
    lost.arrive(data(FIRST + chunk(1)));
    lost.fail(new Error("socket closed"));
    await pulledA;
    expect(a.writes.join("")).toContain("connection to the upstream provider was lost");
    expect(a.outcome.value).toBe("failed");
    expect(a.closed()).toBe(true);

    const broken = wakingBody();
    const b = await stage(broken);
    const pulledB = b.source.pull(b.controller);
    broken.arrive(data(FIRST + "data: {not json\n\n"));
    await pulledB;
    expect(b.writes.join("")).toContain('"error"');
    expect(b.writes.join("")).not.toContain("[DONE]");
    expect(b.outcome.value).toBe("failed");
    expect(b.events).toEqual([]);
  });

  test("a client slower than the upstream: the callback stops taking until the client drains, then the rest follows in order", async () => {
    const body = wakingBody();
    const { source, outcome, events } = await stage(body);
    const writes: string[] = [];
    let drain!: () => void;
    let slow = false;
    const controller: DirectController = {
      write(c) {
        writes.push(c);
        return c.length;
      },
      flush() {
        if (!slow) return 0;
        slow = false;
        return new Promise<number>((resolve) => (drain = () => resolve(0)));
      },
      close() {},
    };
    const pulled = source.pull(controller);
    slow = true;
    body.arrive(data(FIRST + chunk(1)));
    expect(writes.length).toBe(1);
    // The client has not taken it yet: what arrives now waits in the body, unread.
    body.arrive(data(chunk(2)));
    expect(writes.length).toBe(1);
    expect(body.reader.wakes).toBe(1);
    drain();
    await Bun.sleep(1);
    expect(writes.length).toBe(2);
    expect(writes[1]).toContain('"content":"w2 "');
    body.arrive(data(chunk(3) + LAST));
    body.arrive(END);
    await pulled;
    expect(writes.join("").indexOf("w2 ")).toBeLessThan(writes.join("").indexOf("w3 "));
    expect(events).toEqual(["settling", "settled"]);
    expect(outcome.value).toBe("completed");
    expect(body.reader.reads).toBe(0);
  });

  test("no keep-alive follows the answer's end while a slow client is still taking it", async () => {
    const body = wakingBody();
    // A keep-alive check every 5 ms, due after 15 ms of quiet.
    const { source, outcome } = await stage(body, { keepAliveMs: 15 });
    const writes: string[] = [];
    const controller: DirectController = {
      write(c) {
        writes.push(c);
        // The end's write: the client takes it slowly (80 ms), long past the keep-alive's due time.
        return c.includes("[DONE]") ? new Promise<number>((resolve) => setTimeout(() => resolve(c.length), 80)) : c.length;
      },
      flush: () => 0,
      close() {},
    };
    const pulled = source.pull(controller);
    body.arrive(data(FIRST + chunk(1) + LAST));
    body.arrive(END);
    await pulled;
    await Bun.sleep(30);
    const end = writes.findIndex((w) => w.includes("[DONE]"));
    expect(end).toBeGreaterThanOrEqual(0);
    expect(writes.slice(end + 1)).toEqual([]);
    expect(outcome.value).toBe("completed");
  });

  test("a frame with an image arriving mid-stream is inlined in its place; the frames after it wait for it", async () => {
    const body = wakingBody();
    const imageFrame = `data: {"id":"chatcmpl-up","object":"chat.completion.chunk","created":1,"model":"gpt-up","choices":[{"index":0,"delta":{"images":[{"image_url":{"url":"https://img.example/a.png"}}]},"finish_reason":null}]}\n\n`;
    let release!: () => void;
    const download = new Promise<void>((resolve) => (release = resolve));
    const { source, outcome, controller, writes } = await stage(body, {
      resolveImages: async (evs) => {
        await download;
        for (const e of evs) if (e.type === "image") e.url = "data:image/png;base64,AAAA";
      },
    });
    const pulled = source.pull(controller);
    body.arrive(data(FIRST + chunk(1)));
    body.arrive(data(imageFrame + chunk(2)));
    body.arrive(data(chunk(3)));
    await Bun.sleep(2);
    expect(writes.join("")).not.toContain("w2 ");
    release();
    body.arrive(data(LAST));
    body.arrive(END);
    await pulled;
    const sent = writes.join("");
    const at = (s: string) => sent.indexOf(s);
    expect(at("w1 ")).toBeLessThan(at("data:image/png;base64,AAAA"));
    expect(at("data:image/png;base64,AAAA")).toBeLessThan(at("w2 "));
    expect(at("w2 ")).toBeLessThan(at("w3 "));
    expect(sent.endsWith("data: [DONE]\n\n")).toBe(true);
    expect(outcome.value).toBe("completed");
  });

  test("the client leaves while the stream waits: nothing more is taken or written", async () => {
    const body = wakingBody();
    const { source, outcome, controller, writes } = await stage(body);
    void source.pull(controller);
    body.arrive(data(FIRST + chunk(1)));
    const written = writes.length;
    source.cancel();
    expect(outcome.value).toBe("cancelled");
    expect(body.reader.cancelled).toBe(1);
    body.arrive(data(chunk(2)));
    expect(writes.length).toBe(written);
  });
});

describe("stream stage on the HTTP/1.1 client's queue: a read that also ends the body", () => {
  const FINISH = `data: {"id":"chatcmpl-up","object":"chat.completion.chunk","created":1,"model":"gpt-up","choices":[{"index":0,"delta":{"content":"LASTWORD"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}\n\n`;
  const queued = async () => {
    const queue = new BodyQueue({ bodyTaken() {}, bodyCancelled() {} });
    const events: string[] = [];
    const outcome: { value?: string } = {};
    const source = await answerSource(options(queue, events, outcome));
    const writes: string[] = [];
    const controller: DirectController = {
      write(c) {
        writes.push(c);
        events.push(`write ${writes.length}`);
        return c.length;
      },
      flush: () => 0,
      close() {},
    };
    return { queue, events, outcome, source, controller, writes };
  };

  test("an upstream without an end marker whose last read carries the body's end: the last frames wait for the settlement and leave with the end", async () => {
    const { queue, events, outcome, source, controller, writes } = await queued();
    const pulled = source.pull(controller);
    queue.push([enc.encode(FIRST + chunk(1))]);
    expect(writes.length).toBe(1);
    // As Exchange.data does when one read holds the last frames and the chunked terminator.
    queue.push([enc.encode(chunk(2) + FINISH)], true);
    expect(writes.length).toBe(1);
    queue.end();
    await pulled;
    expect(outcome.value).toBe("completed");
    const last = writes.findIndex((w) => w.includes("LASTWORD"));
    expect(last).toBe(writes.length - 1);
    expect(events.indexOf(`write ${last + 1}`)).toBeGreaterThan(events.indexOf("settled"));
    expect(writes[last]!.endsWith("data: [DONE]\n\n")).toBe(true);
  });

  test("a read that does not end the body goes out at once, as it did before", async () => {
    const { queue, outcome, source, controller, writes } = await queued();
    const pulled = source.pull(controller);
    queue.push([enc.encode(FIRST + chunk(1))]);
    queue.push([enc.encode(chunk(2))]);
    expect(writes.length).toBe(2);
    expect(writes[1]).toContain('"content":"w2 "');
    queue.push([enc.encode(FINISH)], true);
    queue.end();
    await pulled;
    expect(outcome.value).toBe("completed");
  });

  test("cancelled while waiting: the pull returns and nothing more is written", async () => {
    const { queue, outcome, source, controller, writes } = await queued();
    const pulled = source.pull(controller);
    queue.push([enc.encode(FIRST + chunk(1))]);
    const written = writes.length;
    source.cancel();
    queue.push([enc.encode(chunk(2))]);
    const settled = await Promise.race([pulled.then(() => "returned"), Bun.sleep(200).then(() => "hung")]);
    expect(settled).toBe("returned");
    expect(outcome.value).toBe("cancelled");
    expect(writes.length).toBe(written);
  });
});

describe("BodyQueue.onReadable: the reader is told once, in the push", () => {
  test("told when a chunk arrives, when the body ends and when it fails; never after a cancel", () => {
    let drained = 0;
    const queue = new BodyQueue({ bodyTaken: () => drained++, bodyCancelled() {} });
    let told = 0;
    queue.onReadable(() => told++);
    expect(drained).toBe(1);
    queue.push([enc.encode("ab")]);
    expect(told).toBe(1);
    // Once: a second chunk before the reader asks again tells nobody.
    queue.push([enc.encode("cd")]);
    expect(told).toBe(1);
    expect(new TextDecoder().decode(queue.readNow()!.value)).toBe("abcd");
    queue.onReadable(() => told++);
    queue.end();
    expect(told).toBe(2);
    expect(queue.readNow()).toEqual({ done: true, value: undefined });

    const failing = new BodyQueue({ bodyTaken() {}, bodyCancelled() {} });
    let failed = 0;
    failing.onReadable(() => failed++);
    failing.end(new Error("connection lost"));
    expect(failed).toBe(1);
    expect(() => failing.readNow()).toThrow("connection lost");

    const cancelled = new BodyQueue({ bodyTaken() {}, bodyCancelled() {} });
    let after = 0;
    cancelled.onReadable(() => after++);
    void cancelled.cancel();
    cancelled.push([enc.encode("late")]);
    cancelled.end();
    expect(after).toBe(0);
  });

  test("a push that also ends the body tells the reader once, at the end, with both there", () => {
    const queue = new BodyQueue({ bodyTaken() {}, bodyCancelled() {} });
    const seen: unknown[] = [];
    queue.onReadable(() => {
      seen.push(new TextDecoder().decode(queue.readNow()!.value));
      seen.push(queue.readNow());
    });
    queue.push([enc.encode("last")], true);
    expect(seen).toEqual([]);
    queue.end();
    expect(seen).toEqual(["last", { done: true, value: undefined }]);
  });

  test("asked while something is already there: told at once", () => {
    const queue = new BodyQueue({ bodyTaken() {}, bodyCancelled() {} });
    queue.push([enc.encode("x")]);
    let told = 0;
    queue.onReadable(() => told++);
    expect(told).toBe(1);
  });
});

describe("BodyQueue.readNow: a chunk already received, without a promise", () => {
  test("queued pieces come at once as one, then undefined while waiting, then the end", async () => {
    let drained = 0;
    const queue = new BodyQueue({ bodyTaken: () => drained++, bodyCancelled() {} });
    expect(queue.readNow()).toBeUndefined();
    queue.push([enc.encode("ab"), enc.encode("cd")]);
    queue.push([enc.encode("ef")]);
    const first = queue.readNow();
    expect(first?.done).toBe(false);
    expect(new TextDecoder().decode(first!.value)).toBe("abcdef");
    expect(drained).toBeGreaterThan(0);
    expect(queue.readNow()).toBeUndefined();
    queue.end();
    expect(queue.readNow()).toEqual({ done: true, value: undefined });
    // read() agrees with it.
    expect(await queue.read()).toEqual({ done: true, value: undefined });
  });

  test("a failed body throws its failure from readNow and rejects read()", async () => {
    const queue = new BodyQueue({ bodyTaken() {}, bodyCancelled() {} });
    queue.push([enc.encode("x")]);
    queue.end(new Error("connection lost"));
    expect(queue.readNow()?.done).toBe(false);
    expect(() => queue.readNow()).toThrow("connection lost");
    expect(queue.read()).rejects.toThrow("connection lost");
  });
});

describe("stream stage: an answer whole before its head is handed over as one body (whole())", () => {
  /** A stage whose endings and first writes are counted, not just the last one kept. */
  async function counted(body: ReturnType<typeof scriptedBody>, extra: Partial<StreamAnswerOptions> = {}) {
    const events: string[] = [];
    const ends: string[] = [];
    let firstWrites = 0;
    const source = await answerSource({
      ...options(body.reader, events, {}),
      onDone: (o) => ends.push(o),
      onFirstWrite: () => firstWrites++,
      ...extra,
    });
    return { source, events, ends, firstWrites: () => firstWrites };
  }
  const whole = () => {
    const body = scriptedBody();
    body.arrive(data(FIRST + chunk(1) + chunk(2) + LAST));
    body.arrive(END);
    return body;
  };

  test("the same bytes the stream would write, settled first; it ends once, completed, with one first write; a later cancel changes nothing", async () => {
    const streamed = await stage(whole());
    await streamed.source.pull(streamed.controller);

    const { source, events, ends, firstWrites } = await counted(whole());
    expect(events).toEqual(["settling", "settled"]);
    const body = source.whole();
    expect(body).toBe(streamed.writes.join(""));
    expect(ends).toEqual(["completed"]);
    expect(firstWrites()).toBe(1);
    source.cancel();
    expect(ends).toEqual(["completed"]);
  });

  test("not whole: an upstream error before the head, an answer that ended early, a broken frame, one still arriving, frames held for their images", async () => {
    const cases: Record<string, () => ReturnType<typeof scriptedBody>> = {
      "an error frame": () => {
        const b = scriptedBody();
        b.arrive(data(FIRST + chunk(1) + `data: {"error":{"message":"upstream overloaded","type":"server_error"}}\n\n`));
        b.arrive(END);
        return b;
      },
      "ended early": () => {
        const b = scriptedBody();
        b.arrive(data(FIRST + chunk(1)));
        b.arrive(END);
        return b;
      },
      "a broken frame": () => {
        const b = scriptedBody();
        b.arrive(data(FIRST + "data: {not json\n\n"));
        b.arrive(END);
        return b;
      },
      "still arriving": () => {
        const b = scriptedBody();
        b.arrive(data(FIRST + chunk(1)));
        return b;
      },
    };
    for (const [name, make] of Object.entries(cases)) {
      const { source, events, ends } = await counted(make());
      expect({ name, body: source.whole() }).toEqual({ name, body: undefined });
      // Nothing was settled as a whole answer, nothing ended: the stream decides, as it would have.
      expect({ name, events, ends }).toEqual({ name, events: [], ends: [] });
    }

    const images = scriptedBody();
    const imageFrame = `data: {"id":"chatcmpl-up","object":"chat.completion.chunk","created":1,"model":"gpt-up","choices":[{"index":0,"delta":{"images":[{"image_url":{"url":"https://img.example/a.png"}}]},"finish_reason":null}]}\n\n`;
    images.arrive(data(FIRST + imageFrame + LAST));
    images.arrive(END);
    const held = await counted(images, { resolveImages: async () => {} });
    expect(held.source.whole()).toBeUndefined();
    expect(held.ends).toEqual([]);
  });
});

describe("stream stage: the gateway cuts what runs (its stop, past the grace)", () => {
  /** The inflight's watch as a set the test reads and fires. */
  function cutsRecorder() {
    const watching = new Set<() => void>();
    return { watching, cuts: { watch: (end: () => void) => watching.add(end), unwatch: (end: () => void) => watching.delete(end) }, cut: () => [...watching].forEach((end) => end()) };
  }

  test("waiting for the upstream (woken by the transport): what came is out, then an error frame that says so, the stream closes, it ends cancelled and stops being watched", async () => {
    const body = wakingBody();
    body.arrive(data(FIRST + chunk(1)));
    const c = cutsRecorder();
    const deadline = new Deadline({ firstByteMs: 60_000, idleMs: 60_000, totalMs: 60_000 });
    const { source, events, outcome, controller, writes, closed } = await stage(body, { cuts: c.cuts, deadline });
    const pulled = source.pull(controller);
    await Bun.sleep(1);
    expect(c.watching.size).toBe(1);
    c.cut();
    await pulled;
    expect(writes.join("")).toContain('"content":"w1 "');
    const last = JSON.parse(writes.at(-1)!.trim().slice("data: ".length));
    expect(last.error.message).toContain("shutting down");
    expect(writes.join("")).not.toContain("[DONE]");
    expect(closed()).toBe(true);
    expect(outcome.value).toBe("cancelled");
    expect(events).toEqual([]);
    expect(c.watching.size).toBe(0);
    // The upstream request is dropped with the attempt's deadline.
    expect(deadline.reason).toBeDefined();
  });

  test("waiting on a read() promise: the read is cancelled and the same error frame ends the stream", async () => {
    const body = scriptedBody();
    body.arrive(data(FIRST + chunk(1)));
    const c = cutsRecorder();
    const { source, outcome, controller, writes, closed } = await stage(body, { cuts: c.cuts });
    const pulled = source.pull(controller);
    await Bun.sleep(1);
    c.cut();
    // The scripted body's cancel does not end its read: the upstream's own end arrives as a reset would.
    body.arrive(END);
    await pulled;
    expect(writes.at(-1)).toContain("shutting down");
    expect(closed()).toBe(true);
    expect(outcome.value).toBe("cancelled");
    expect(body.reader.cancelled).toBeGreaterThan(0);
  });

  test("an answer whose end is being settled finishes as it is: no error frame after its end", async () => {
    const body = wakingBody();
    body.arrive(data(FIRST + chunk(1)));
    const c = cutsRecorder();
    const { source, events, outcome, controller, writes } = await stage(body, { cuts: c.cuts });
    const pulled = source.pull(controller);
    await Bun.sleep(1);
    body.arrive(data(LAST));
    body.arrive(END);
    while (!events.includes("settling")) await Bun.sleep(1);
    c.cut();
    await pulled;
    expect(writes.at(-1)!.endsWith("data: [DONE]\n\n")).toBe(true);
    expect(writes.join("")).not.toContain("shutting down");
    expect(outcome.value).toBe("completed");
    expect(c.watching.size).toBe(0);
  });

  test("after the vendor's end marker, its body's end held back: a cut ends the wait at once, so the answer settles whole and [DONE] goes out before the connections close (a raw-TCP probe)", async () => {
    // A body read by promises: the read after [DONE] waits for the end that does not come.
    const body = scriptedBody();
    body.arrive(data(FIRST + chunk(1)));
    const c = cutsRecorder();
    const { source, events, outcome, controller, writes } = await stage(body, { cuts: c.cuts });
    const pulled = source.pull(controller);
    await Bun.sleep(1);
    // The whole answer and [DONE], but no end of the body: the stage would wait END_GRACE_MS for it.
    body.arrive(data(LAST));
    await Bun.sleep(20);
    expect(outcome.value).toBeUndefined();
    const started = performance.now();
    c.cut();
    await pulled;
    expect(performance.now() - started).toBeLessThan(END_GRACE_MS / 2);
    expect(writes.at(-1)!.endsWith("data: [DONE]\n\n")).toBe(true);
    expect(writes.join("")).not.toContain("shutting down");
    expect(events).toEqual(["settling", "settled"]);
    expect(outcome.value).toBe("completed");
  });

  test("a stream that ended before the cut is not watched, and a cut leaves it alone", async () => {
    const body = wakingBody();
    body.arrive(data(FIRST + chunk(1) + LAST));
    body.arrive(END);
    const c = cutsRecorder();
    const { source, outcome } = await stage(body, { cuts: c.cuts });
    expect(source.whole()).toBeDefined();
    expect(outcome.value).toBe("completed");
    expect(c.watching.size).toBe(0);
  });
});
