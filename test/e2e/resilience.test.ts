import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readFixture, useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, OPENAI_MODEL, post, sseFrames, startGateway, type Gateway } from "../helpers/gateway.ts";

const upstream = useFakeUpstream();

const question = [{ role: "user", content: "Hello" }];
const chunk = (text: string) => `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":${JSON.stringify(text)}},"finish_reason":null}]}\n\n`;

function ledger(gw: Gateway) {
  const db = new Database(gw.dbPath, { readonly: true });
  try {
    return {
      reservations: gw.app.services.ledger.openHolds(),
      records: db.query<{ status: string; cost_micro: number }, []>("SELECT status, cost_micro FROM usage_records ORDER BY id").all(),
    };
  } finally {
    db.close();
  }
}

describe("client disconnects", () => {
  test("40 streams aborted midway: every upstream request aborted, nothing left open or reserved", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url });
    try {
      const runs = Array.from({ length: 40 }, async (_, i) => {
        upstream.reply({ kind: "sse", holdOpen: true, chunks: [chunk(`part ${i}`)] });
        const controller = new AbortController();
        // Both client formats, over the same OpenAI-speaking upstream.
        const res = await post(gw, i % 2 ? "/v1/chat/completions" : "/v1/messages",
          { model: OPENAI_MODEL, max_tokens: 100, messages: question, stream: true }, {}, controller.signal);
        const reader = res.body!.getReader();
        await reader.read();
        controller.abort();
      });
      await Promise.all(runs);
      const deadline = Date.now() + 1000;
      while (upstream.openStreams() > 0 && Date.now() < deadline) await Bun.sleep(10);
      expect(upstream.openStreams()).toBe(0);
      expect(upstream.abortedStreams()).toBe(40);
      await gw.app.services.settled();
      expect(gw.app.services.inflight.count).toBe(0);
      const state = ledger(gw);
      expect(state.reservations).toBe(0);
      expect(state.records.filter((r) => r.status === "cancelled").length).toBe(40);
    } finally {
      await gw.stop();
    }
  });
});

describe("client disconnects before the answer starts", () => {
  test("40 concurrent streams whose clients leave while the answer is on its way: nothing left open, held or half-recorded", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url });
    try {
      // Concurrent, so each answer is held for the end of its event-loop turn (gateway/end-of-turn.ts):
      // the clients leave at staggered moments around the upstream's head, the hold included.
      const runs = Array.from({ length: 40 }, async (_, i) => {
        upstream.reply({ kind: "sse", holdOpen: true, chunks: [chunk(`part ${i}`)] });
        const controller = new AbortController();
        const pending = post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 100, messages: question, stream: true }, {}, controller.signal);
        await Bun.sleep(i % 8);
        // The last few wait until some request has reached the upstream, so a busy machine that
        // lets every client leave first still tests what the gateway does with one under way.
        if (i >= 32) for (const until = Date.now() + 2_000; upstream.requests.length === 0 && Date.now() < until; ) await Bun.sleep(2);
        controller.abort();
        await pending.then((res) => res.body?.cancel()).catch(() => {});
      });
      await Promise.all(runs);
      const deadline = Date.now() + 2000;
      while ((upstream.openStreams() > 0 || gw.app.services.inflight.count > 0) && Date.now() < deadline) await Bun.sleep(10);
      expect(upstream.openStreams()).toBe(0);
      await gw.app.services.settled();
      expect(gw.app.services.inflight.count).toBe(0);
      expect(gw.app.services.upstream.openConnections()).toBe(0);
      const state = ledger(gw);
      expect(state.reservations).toBe(0);
      // Every request that reached the upstream left its record, and each ended as cancelled.
      expect(state.records.length).toBeLessThanOrEqual(40);
      expect(state.records.length).toBeGreaterThanOrEqual(upstream.requests.length);
      expect(upstream.requests.length).toBeGreaterThan(0);
      for (const r of state.records) expect(r.status).toBe("cancelled");
    } finally {
      await gw.stop();
    }
  });
});

describe("upstreams that misbehave", () => {
  test("a frame larger than the cap → error frame, partial charge, nothing reserved", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url, maxFrameBytes: 4096 });
    try {
      upstream.reply({ kind: "sse", chunks: [chunk("Hi"), `data: {"x":"${"A".repeat(10_000)}"}\n\n`] });
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true });
      const frames = sseFrames(await res.text());
      expect(JSON.parse(frames.at(-1)!.data).error.message).toMatch(/larger/);
      await gw.app.services.settled();
      expect(ledger(gw)).toMatchObject({ reservations: 0, records: [{ status: "stream_failed" }] });
    } finally {
      await gw.stop();
    }
  });

  test("a frame still arriving that is longer than the answer's limit could make is given up then, not gathered to max_frame_bytes", async () => {
    // The default cap (32 MiB); max_tokens 10 makes frames of at most ~76 KB (usage-meter.ts, longestFrame).
    const gw = await startGateway({ upstreamUrl: upstream.url, idleMs: 10_000 });
    try {
      upstream.reply({ kind: "sse", holdOpen: true, chunks: [chunk("Hi"), `data: {"x":"${"A".repeat(1024 * 1024)}`] });
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 10, messages: question, stream: true });
      const frames = sseFrames(await res.text());
      expect(frames[0]!.data).toContain("Hi");
      // Not the idle timeout 10 s later: the frame was refused while it arrived.
      expect(JSON.parse(frames.at(-1)!.data).error.message).toMatch(/larger/);
      await gw.app.services.settled();
      expect(ledger(gw)).toMatchObject({ reservations: 0, records: [{ status: "stream_failed" }] });
    } finally {
      await gw.stop();
    }
  });

  test("HTML with 200 to a non-stream request → 502, nothing charged", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url });
    try {
      upstream.reply({ kind: "text", status: 200, headers: { "content-type": "text/html" }, body: "<html><body>Bad gateway at lb-17.internal</body></html>" });
      const res = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 10, messages: question });
      expect(res.status).toBe(502);
      const text = await res.text();
      expect(text).not.toContain("internal");
      expect(text).not.toContain("<html>");
      await gw.app.services.settled();
      expect(ledger(gw)).toMatchObject({ reservations: 0, records: [{ status: "upstream_error", cost_micro: 0 }] });
    } finally {
      await gw.stop();
    }
  });

  test("an upstream that goes quiet past idle_ms mid-stream → timeout frame, charged for what came", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url, idleMs: 300, keepaliveMs: 100 });
    try {
      upstream.reply({ kind: "sse", holdOpen: true, chunks: [chunk("The start of an answer")] });
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true });
      const text = await res.text();
      const frames = sseFrames(text);
      expect(frames[0]!.data).toContain("The start");
      expect(JSON.parse(frames.at(-1)!.data).error).toMatchObject({ type: "timeout_error" });
      await gw.app.services.settled();
      const state = ledger(gw);
      expect(state.reservations).toBe(0);
      expect(state.records[0]!.status).toBe("stream_failed");
      expect(state.records[0]!.cost_micro).toBeGreaterThan(0);
      // The gateway aborted its upstream request: the fake vendor sees its stream cancelled.
      const deadline = Date.now() + 1000;
      while (upstream.openStreams() > 0 && Date.now() < deadline) await Bun.sleep(10);
      expect(upstream.openStreams()).toBe(0);
    } finally {
      await gw.stop();
    }
  });

  test("total_ms bounds an answer that keeps trickling", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url, totalMs: 400, keepaliveMs: 50 });
    try {
      upstream.reply({ kind: "sse", delayMs: 100, chunks: Array.from({ length: 50 }, (_, i) => chunk(`w${i} `)) });
      const started = performance.now();
      const res = await post(gw, "/v1/messages", { model: OPENAI_MODEL, max_tokens: 100, messages: question, stream: true });
      const frames = sseFrames(await res.text());
      expect(performance.now() - started).toBeLessThan(3000);
      expect(frames.at(-1)!.event).toBe("error");
    } finally {
      await gw.stop();
    }
  });
});

describe("compressed upstream answers", () => {
  test("gzip from the upstream is decoded once; the client never sees a stale Content-Encoding", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url });
    try {
      const json = JSON.stringify({ id: "c", object: "chat.completion", created: 1, model: "m", choices: [{ index: 0, message: { role: "assistant", content: "zipped hello" }, finish_reason: "stop" }], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } });
      upstream.reply({ kind: "bytes", headers: { "content-type": "application/json", "content-encoding": "gzip" }, body: Bun.gzipSync(json) });
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
      expect(res.headers.get("content-encoding")).toBeNull();
      expect(((await res.json()) as any).choices[0].message.content).toBe("zipped hello");

      const sse = readFixture("openai-text.sse");
      upstream.reply({ kind: "bytes", headers: { "content-type": "text/event-stream", "content-encoding": "gzip" }, body: Bun.gzipSync(new Uint8Array(sse)) });
      const stream = await post(gw, "/v1/messages", { model: OPENAI_MODEL, max_tokens: 50, messages: question, stream: true });
      expect(stream.headers.get("content-encoding")).toBeNull();
      expect(sseFrames(await stream.text()).at(-1)!.event).toBe("message_stop");
    } finally {
      await gw.stop();
    }
  });
});

describe("graceful shutdown", () => {
  test("SIGTERM lets the running stream finish, writes its usage record, then exits 0", async () => {
    const dir = mkdtempSync(join(tmpdir(), "switchyard-shutdown-"));
    try {
      const config = join(dir, "switchyard.json");
      writeFileSync(config, JSON.stringify({
        providers: [{ id: "up", kind: "openai", base_url: `${upstream.url}/v1` }],
        models: [{ id: "test/paid", provider: "up", upstream_model: "m", category: "text", context_length: 100000, pricing: { input_per_mtok: 1000, output_per_mtok: 1000 } }],
      }));
      const dbPath = join(dir, "ledger.sqlite");
      const child = Bun.spawn(["bun", "src/index.ts"], {
        cwd: join(import.meta.dir, "../.."),
        env: { ...process.env, PORT: "0", HOST: "127.0.0.1", LOG_LEVEL: "warn", SWITCHYARD_CONFIG: config, SWITCHYARD_DB: dbPath },
        stdout: "pipe",
        stderr: "pipe",
      });
      const reader = child.stdout.getReader();
      let banner = "";
      while (!banner.includes("curl")) banner += new TextDecoder().decode((await reader.read()).value);
      const url = banner.match(/listening on (http:\/\/\S+)/)![1]!;
      const key = banner.match(/svc-sk-[A-Za-z0-9_-]+/)![0];

      upstream.reply({ kind: "fixture", name: "openai-text.sse", split: "frames", delayMs: 60 });
      const res = await fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "test/paid", messages: question, stream: true }),
      });
      const body = res.body!.getReader();
      await body.read();
      child.kill("SIGTERM");
      let text = "";
      for (;;) {
        const { value, done } = await body.read();
        if (done) break;
        text += new TextDecoder().decode(value);
      }
      expect(text).toContain("data: [DONE]");
      expect(await child.exited).toBe(0);
      const db = new Database(dbPath, { readonly: true });
      const rows = db.query<{ status: string; prompt_tokens: number; cost_micro: number }, []>("SELECT status, prompt_tokens, cost_micro FROM usage_records").all();
      const balance = db.query<{ b: number }, []>("SELECT balance_micro AS b FROM accounts WHERE name = 'demo'").get()!.b;
      db.close();
      expect(rows).toEqual([{ status: "ok", prompt_tokens: 12, cost_micro: 12 * 1000 + 9 * 1000 }]);
      // The debit reached the disk before exit: 1,000 demo credits less exactly this answer.
      expect(balance).toBe(1_000_000_000 - rows[0]!.cost_micro);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 30_000);
});
