import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { OPENAI_MODEL, ANTHROPIC_MODEL, post, sseFrames, startGateway, type Gateway } from "../helpers/gateway.ts";
import { startFakeUpstream, type FakeUpstream } from "../helpers/fake-upstream.ts";
import { rawUpstream, type RawSocket, type RawUpstream } from "../helpers/raw-upstream.ts";
import { until } from "../helpers/until.ts";

/**
 * A raw-TCP upstream whose bytes are scripted per request: the head and some of the body, then
 * silence. The OpenAI-kind provider points here; the Anthropic-kind one at a well-behaved fake,
 * so `models: [stalling, healthy]` shows the fallback.
 */
let script: (socket: RawSocket) => void = () => {};
let raw: RawUpstream;
let healthy: FakeUpstream;

beforeAll(async () => {
  healthy = await startFakeUpstream();
  raw = rawUpstream((_request, socket) => script(socket));
});
afterAll(async () => {
  for (const s of raw.sockets) if (!s.data.closed) s.end();
  raw.stop();
  await healthy.stop();
});

async function gatewayWith(o: { idleMs?: number; firstByteMs?: number; wholeAnswerMs?: number; totalMs?: number; clientIdleMs?: number; maxTokensCap?: number }): Promise<Gateway> {
  return startGateway({
    upstreamUrl: raw.url, idleMs: o.idleMs ?? 300, firstByteMs: o.firstByteMs ?? 2_000, wholeAnswerMs: o.wholeAnswerMs, totalMs: o.totalMs, clientIdleMs: o.clientIdleMs, retry: { max_retries: 0 },
    ...(o.maxTokensCap ? { limits: { max_tokens_cap: o.maxTokensCap } } : {}),
  });
}

function records(gw: Gateway) {
  const db = new Database(gw.dbPath, { readonly: true });
  try {
    return db.query<{ status: string; cost_micro: number; model: string }, []>("SELECT status, cost_micro, model FROM usage_records ORDER BY id").all();
  } finally {
    db.close();
  }
}

const question = [{ role: "user", content: "Hello" }];
const CHUNKED_HEAD = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
const chunked = (text: string) => `${text.length.toString(16)}\r\n${text}\r\n`;

describe("one deadline per attempt, for every kind of answer", () => {
  /** The upstream writes `wire` and goes quiet: a 502 timeout after the 250 ms idle limit, the hold released. */
  async function expectIdleTimeout(gw: Gateway, wire: string): Promise<void> {
    script = (s) => s.write(wire);
    const started = performance.now();
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
    const elapsed = performance.now() - started;
    expect(res.status).toBe(502);
    expect(((await res.json()) as any).error.type).toBe("timeout_error");
    expect(elapsed).toBeGreaterThanOrEqual(240);
    expect(elapsed).toBeLessThan(2_000);
    await gw.app.services.settled();
    expect(gw.app.services.ledger.openHolds()).toBe(0);
  }

  test("a JSON answer that stalls after its head: 502 timeout within idle_ms, nothing charged, hold released", async () => {
    const gw = await gatewayWith({ idleMs: 250 });
    try {
      await expectIdleTimeout(gw, CHUNKED_HEAD + chunked('{"id":"chatcmpl-x","object":"chat.completion","choices":[{"index":0,'));
      expect(records(gw)).toEqual([{ status: "upstream_error", cost_micro: 0, model: OPENAI_MODEL }]);
    } finally {
      await gw.stop();
    }
  });

  test("a Content-Length answer that stalls after its head: idle_ms applies, not first_byte_ms", async () => {
    const gw = await gatewayWith({ idleMs: 250, firstByteMs: 5_000 });
    try {
      await expectIdleTimeout(gw, 'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{"id":"chatcmpl-x","object":"chat.completion","choices":[');
    } finally {
      await gw.stop();
    }
  });

  test("a Content-Length answer that trickles past first_byte_ms but never goes quiet for idle_ms is read whole", async () => {
    const gw = await gatewayWith({ idleMs: 300, firstByteMs: 400 });
    try {
      const body = JSON.stringify({ id: "chatcmpl-x", object: "chat.completion", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, message: { role: "assistant", content: "slow but steady" }, finish_reason: "stop" }], usage: { prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 } });
      script = (s) => {
        s.write(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n`);
        // Eight pieces 100 ms apart: 800 ms in all, never 300 ms without a byte.
        const pieces = body.match(/[\s\S]{1,40}/g)!;
        const size = Math.ceil(pieces.length / 8);
        for (let i = 0; i < 8; i++) setTimeout(() => s.write(pieces.slice(i * size, (i + 1) * size).join("")), 100 * (i + 1));
      };
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
      expect(res.status).toBe(200);
      expect(((await res.json()) as any).choices[0].message.content).toBe("slow but steady");
    } finally {
      await gw.stop();
    }
  });

  test("an error status whose body stalls: 502 within idle_ms, not a hang", async () => {
    const gw = await gatewayWith({ idleMs: 250 });
    try {
      script = (s) => s.write("HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n" + chunked('{"error":{"message":"bo'));
      const started = performance.now();
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
      expect(res.status).toBe(502);
      expect(performance.now() - started).toBeLessThan(2_000);
      await gw.app.services.settled();
      expect(gw.app.services.ledger.openHolds()).toBe(0);
    } finally {
      await gw.stop();
    }
  });

  test("a whole (non-stream) answer waits whole_answer_ms for its head, a stream first_byte_ms: a long answer is not cut at the stream's limit", async () => {
    // The vendor writes its head only with the whole answer: 600 ms here, past first_byte_ms (200), within whole_answer_ms (3 s).
    const gw = await gatewayWith({ idleMs: 5_000, firstByteMs: 200, wholeAnswerMs: 3_000 });
    try {
      const body = JSON.stringify({ id: "chatcmpl-slow", object: "chat.completion", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, message: { role: "assistant", content: "A long answer." }, finish_reason: "stop" }], usage: { prompt_tokens: 5, completion_tokens: 4, total_tokens: 9 } });
      script = (s) => void setTimeout(() => s.write(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`), 600);
      const started = performance.now();
      const whole = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
      expect(whole.status).toBe(200);
      expect(((await whole.json()) as any).choices[0].message.content).toBe("A long answer.");
      expect(performance.now() - started).toBeGreaterThanOrEqual(590);
      // A stream's head that takes as long is past first_byte_ms: 502.
      const streamed = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true });
      expect(streamed.status).toBe(502);
      await streamed.text();
    } finally {
      await gw.stop();
    }
  });

  test("no head at all: first_byte_ms, then the next model in `models` answers", async () => {
    const gw = await startGateway({ upstreamUrl: healthy.url, firstByteMs: 200, retry: { max_retries: 0 } });
    try {
      healthy.reply({ kind: "hang" });
      const started = performance.now();
      const res = await post(gw, "/v1/chat/completions", { models: [OPENAI_MODEL, ANTHROPIC_MODEL], messages: question });
      expect(res.status).toBe(200);
      expect(((await res.json()) as any).model).toBe(ANTHROPIC_MODEL);
      expect(performance.now() - started).toBeGreaterThanOrEqual(190);
      await gw.app.services.settled();
      const rows = records(gw);
      expect(rows).toHaveLength(1);
      expect(rows[0]).toMatchObject({ status: "ok", model: ANTHROPIC_MODEL });
    } finally {
      await gw.stop();
    }
  });

  test("a stream that stalls mid-answer: a timeout frame after idle_ms, charged for what came", async () => {
    const gw = await gatewayWith({ idleMs: 250 });
    try {
      script = (s) =>
        s.write("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n" +
          chunked('data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Partial answer here"},"finish_reason":null}]}\n\n'));
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true });
      const frames = sseFrames(await res.text());
      expect(frames[0]!.data).toContain("Partial answer");
      expect(JSON.parse(frames.at(-1)!.data).error.type).toBe("timeout_error");
      await gw.app.services.settled();
      const [row] = records(gw);
      expect(row!.status).toBe("stream_failed");
      expect(row!.cost_micro).toBeGreaterThan(0);
    } finally {
      await gw.stop();
    }
  });
});

describe("the deadline's AbortSignal, made only for a transport that reads it", () => {
  test("our HTTP/1.1 client: a whole answer and a stream make no AbortController; a stall still ends at first_byte_ms", async () => {
    const gw = await startGateway({ upstreamUrl: healthy.url, firstByteMs: 200, retry: { max_retries: 0 } });
    const Original = globalThis.AbortController;
    let made = 0;
    globalThis.AbortController = class extends Original {
      constructor() {
        super();
        made++;
      }
    };
    try {
      const whole = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 5, messages: question });
      expect(whole.status).toBe(200);
      await whole.text();
      const stream = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 5, messages: question, stream: true });
      expect(sseFrames(await stream.text()).at(-1)?.data).toBe("[DONE]");
      expect(made).toBe(0);
      healthy.reply({ kind: "hang" });
      const started = performance.now();
      const stalled = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 5, messages: question });
      expect(stalled.status).toBe(502);
      expect(((await stalled.json()) as any).error.type).toBe("timeout_error");
      expect(performance.now() - started).toBeGreaterThanOrEqual(190);
    } finally {
      globalThis.AbortController = Original;
      await gw.stop();
    }
  });

  test("a transport that copies the request's init (a wrapper over fetch) gets the signal, and a stall ends at first_byte_ms", async () => {
    let sawSignal = 0;
    const wrapper = (url: string, init: RequestInit) => {
      const copy = { ...init };
      if (copy.signal) sawSignal++;
      return fetch(url, copy);
    };
    const gw = await startGateway({ upstreamUrl: healthy.url, firstByteMs: 200, retry: { max_retries: 0 }, fetch: wrapper });
    try {
      const ok = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 5, messages: question });
      expect(ok.status).toBe(200);
      await ok.text();
      healthy.reply({ kind: "hang" });
      const started = performance.now();
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 5, messages: question });
      expect(res.status).toBe(502);
      expect(((await res.json()) as any).error.type).toBe("timeout_error");
      const elapsed = performance.now() - started;
      expect(elapsed).toBeGreaterThanOrEqual(190);
      expect(elapsed).toBeLessThan(3_000);
      expect(sawSignal).toBe(2);
      await gw.app.services.settled();
      expect(gw.app.services.ledger.openHolds()).toBe(0);
    } finally {
      await gw.stop();
    }
  });
});

describe("an upstream that says its answer is over but keeps the body open", () => {
  const answerFrames =
    chunked('data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"The whole answer"},"finish_reason":null}]}\n\n') +
    chunked('data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n') +
    chunked('data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}\n\n');

  test("[DONE] without the body's end: the client gets the whole answer within the grace, not after idle_ms; charged; the connection is dropped", async () => {
    const gw = await gatewayWith({ idleMs: 10_000 });
    try {
      let served: RawSocket | undefined;
      script = (s) => {
        served = s;
        s.write("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n" + answerFrames + chunked("data: [DONE]\n\n"));
      };
      const started = performance.now();
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true });
      const text = await res.text();
      const took = performance.now() - started;
      expect(took).toBeLessThan(5_000);
      expect(text).toContain("The whole answer");
      expect(text.trimEnd().endsWith("data: [DONE]")).toBe(true);
      expect(text).not.toContain('"error"');
      await gw.app.services.settled();
      const [row] = records(gw);
      expect(row!.status).toBe("ok");
      expect(row!.cost_micro).toBeGreaterThan(0);
      // Not kept for another request: its framing never ended.
      await until("the served connection closed", 3_000, () => served !== undefined && served.data.closed);
    } finally {
      await gw.stop();
    }
  });

  test("bytes after [DONE] never reach the client, and end the answer at once", async () => {
    const gw = await gatewayWith({ idleMs: 10_000 });
    try {
      script = (s) => {
        s.write("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n" + answerFrames + chunked("data: [DONE]\n\n"));
        setTimeout(() => s.write(chunked('data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"INJECTED"},"finish_reason":null}]}\n\n')), 50);
      };
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true });
      const text = await res.text();
      expect(text).toContain("The whole answer");
      expect(text).not.toContain("INJECTED");
      expect(text.trimEnd().endsWith("data: [DONE]")).toBe(true);
      await gw.app.services.settled();
      expect(records(gw)[0]!.status).toBe("ok");
    } finally {
      await gw.stop();
    }
  });
});

describe("a client that stops reading", () => {
  test("is given up after client_idle_ms: the upstream request is cut, what was produced is charged", async () => {
    // An answer limit high enough that the endless answer meets the client's idleness before it
    // passes what its limit could make (a stream past that is cut: usage-meter.ts, RELAY_CHARS_PER_TOKEN).
    const gw = await gatewayWith({ idleMs: 5_000, clientIdleMs: 300, maxTokensCap: 1_000_000 });
    let streaming: RawSocket | undefined;
    let written = 0;
    try {
      // An endless answer, as fast as the gateway takes it: 64 KB frames.
      const frame = chunked(`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"${"word ".repeat(13_000)}"},"finish_reason":null}]}\n\n`);
      script = (s) => {
        streaming = s;
        s.write("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n");
        // What the socket has not taken yet of the frame being written (ASCII: characters are bytes).
        let rest = frame;
        const pump = () => {
          if (s.data.closed) return;
          // Write while the socket takes it whole; otherwise the rest a little later. A frame
          // written again from its start after a partial write would break the chunked body, and
          // the gateway would rightly fail the stream (seen once under a full suite's load).
          const wrote = Math.max(0, s.write(rest));
          written += wrote;
          if (wrote < rest.length) {
            rest = rest.slice(wrote);
            setTimeout(pump, 20);
          } else {
            rest = frame;
            setImmediate(pump);
          }
        };
        pump();
      };
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true, max_tokens: 100_000 });
      const reader = res.body!.getReader();
      await reader.read(); // the first bytes, then nothing more is read
      const deadline = Date.now() + 5_000;
      while (gw.app.services.inflight.count > 0 && Date.now() < deadline) await Bun.sleep(20);
      expect(gw.app.services.inflight.count).toBe(0);
      await gw.app.services.settled();
      const [row] = records(gw);
      expect(row!.status).toBe("cancelled");
      expect(row!.cost_micro).toBeGreaterThan(0);
      // The upstream connection was cut rather than read to the end…
      await until("the streaming connection closed", 3_000, () => streaming!.data.closed);
      expect(streaming!.data.closed).toBe(true);
      // …and while the client did not read, the upstream was not read either: what it managed to
      // write is what the sockets' buffers hold, not an answer piling up in the gateway.
      if (process.env.DEBUG_WRITTEN) console.log("written", written);
      expect(written).toBeLessThan(32 * 1024 * 1024);
      reader.cancel().catch(() => {});
    } finally {
      script = () => {};
      await gw.stop();
    }
  });
});
