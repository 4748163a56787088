/**
 * `bun run bench --scenario iso` — one key's flood of free token counts against another key
 * (issue 32 items 3 and 4): the other key's small counts, and its chat requests that need the
 * tokenizer (a prompt near the model's context window), timed alone and then while key B keeps 8
 * counts of ~4 MB each going without pause (the default `limits.count_tokens_per_key_bytes` admits
 * 4 at once; the others are refused with 429 and try again after Retry-After). Then item 4: key C
 * (max_concurrent_requests 8) keeps 64 slow streams knocking (2 s each, from a slow upstream in
 * this process), and key A's ordinary chat is timed alone and beside them. The acceptance: a
 * flood raises the other key's p99 by at most 50 ms.
 *   options: --quick (50 samples and 2 s per figure instead of 300 and 6 s)  --samples N  --seconds S
 *   (each figure takes at least N samples and S seconds, so the flood runs through many of its counts)
 * Processes, on 127.0.0.1: the bench's fake upstream and the gateway as users run it
 * (`bun src/index.ts`, SQLite, a config file); this process is both clients.
 * Writes bench/results/iso-latest.json.
 */
import type { Subprocess } from "bun";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pct, sortNum } from "./stats.ts";
import { readyPort } from "./child-process.ts";

const argv = process.argv.slice(2);
const opt = (name: string) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : undefined;
};
const SAMPLES = Number(opt("samples") ?? (argv.includes("--quick") ? 50 : 300));
const SECONDS = Number(opt("seconds") ?? (argv.includes("--quick") ? 2 : 6));
/** Loops of key B's flood: twice what its byte cap admits at once, so it always knocks. */
const FLOOD = 8;
const ADMIN_TOKEN = "bench-iso-admin-0123456789abcdef0123456789";
const BUDGET_MS = 50;
const ROOT = join(import.meta.dir, "..");
const work = mkdtempSync(join(tmpdir(), "switchyard-iso-"));
const children: Subprocess[] = [];

async function startGateway(config: string): Promise<string> {
  const proc = Bun.spawn(["bun", "src/index.ts"], {
    cwd: ROOT,
    env: { ...process.env, PORT: "0", HOST: "127.0.0.1", LOG_LEVEL: "info", SWITCHYARD_DB: join(work, "iso.sqlite"), SWITCHYARD_CONFIG: config, SWITCHYARD_ADMIN_TOKEN: ADMIN_TOKEN, SWITCHYARD_DEMO: "0" },
    stdout: "ignore",
    stderr: "pipe",
  });
  children.push(proc);
  // The log (stderr) names the address once listening; the access log after it is read and dropped.
  const reader = proc.stderr.getReader();
  let log = "";
  while (!/"switchyard listening"/.test(log)) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`gateway did not start: ${log}`);
    log += new TextDecoder().decode(value);
  }
  void (async () => {
    while (!(await reader.read()).done);
  })();
  return /"url":"(http:\/\/[^"]+)"/.exec(log)![1]!;
}

const admin = { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" };
async function newKey(url: string, name: string, options: Record<string, unknown> = {}): Promise<string> {
  const account = (await (await fetch(`${url}/v1/admin/accounts`, { method: "POST", headers: admin, body: JSON.stringify({ name, credits: 1_000_000 }) })).json()) as { id: string };
  return ((await (await fetch(`${url}/v1/admin/accounts/${account.id}/keys`, { method: "POST", headers: admin, body: JSON.stringify(options) })).json()) as { key: string }).key;
}

const smallCount = JSON.stringify({ model: "bench/gpt", messages: [{ role: "user", content: "How many tokens is this short question?" }] });
/** ~4 MB: just under the default count_tokens_max_bytes. */
const bigCount = JSON.stringify({ model: "bench/gpt", messages: [{ role: "user", content: "word ".repeat(800_000) }] });
/** 20 KB on an 8,192-token model: the cheap bound does not fit, so admission counts it with the tokenizer. */
const nearWindowChat = JSON.stringify({ model: "bench/gpt", max_tokens: 16, messages: [{ role: "user", content: "hello ".repeat(3400) }] });

async function timed(url: string, path: string, key: string, body: string): Promise<number> {
  const t0 = performance.now();
  const res = await fetch(url + path, { method: "POST", headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" }, body });
  await res.arrayBuffer();
  if (res.status !== 200) throw new Error(`${path}: ${res.status}`);
  return performance.now() - t0;
}

async function series(url: string, path: string, key: string, body: string): Promise<{ p50: number; p99: number; n: number }> {
  const times: number[] = [];
  const until = performance.now() + SECONDS * 1000;
  while (times.length < SAMPLES || performance.now() < until) times.push(await timed(url, path, key, body));
  const sorted = sortNum(times);
  return { p50: pct(sorted, 50), p99: pct(sorted, 99), n: sorted.length };
}

/** Key C's streams: this many loops, each opening a slow stream as soon as its last one ends. */
const STREAM_FLOOD = 64;
/** What key C may have open at once (max_concurrent_requests on its key). */
const STREAM_CAP = 8;
const plainChat = JSON.stringify({ model: "bench/gpt", max_tokens: 16, messages: [{ role: "user", content: "Say hello." }] });
const slowStream = JSON.stringify({ model: "bench/slow", max_tokens: 64, stream: true, messages: [{ role: "user", content: "Take your time." }] });

/**
 * An OpenAI-kind upstream that answers every chat with a stream of 20 chunks, 100 ms apart: a
 * slow model, so key C's streams stay open (the bench's fake upstream answers at once).
 */
function startSlowUpstream(): { url: string; stop(): void } {
  const enc = new TextEncoder();
  const chunk = (content: string) => `data: ${JSON.stringify({ id: "chatcmpl-slow", object: "chat.completion.chunk", created: 1761565012, model: "slow-1", choices: [{ index: 0, delta: { content }, finish_reason: null }] })}\n\n`;
  const done = `data: ${JSON.stringify({ id: "chatcmpl-slow", object: "chat.completion.chunk", created: 1761565012, model: "slow-1", choices: [{ index: 0, delta: {}, finish_reason: "stop" }], usage: { prompt_tokens: 12, completion_tokens: 20, total_tokens: 32 } })}\n\ndata: [DONE]\n\n`;
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch: () => {
      let timer: ReturnType<typeof setInterval> | undefined;
      const body = new ReadableStream<Uint8Array>({
        start(controller) {
          let sent = 0;
          timer = setInterval(() => {
            try {
              if (sent++ < 20) controller.enqueue(enc.encode(chunk(" word")));
              else {
                clearInterval(timer);
                controller.enqueue(enc.encode(done));
                controller.close();
              }
            } catch {
              clearInterval(timer); // the gateway went away
            }
          }, 100);
        },
        cancel() {
          clearInterval(timer);
        },
      });
      return new Response(body, { headers: { "content-type": "text/event-stream" } });
    },
  });
  return { url: `http://127.0.0.1:${server.port}`, stop: () => server.stop(true) };
}

/**
 * `loops` clients, each sending again as soon as its last request is answered. A refused one
 * waits for Retry-After (1 s) before trying again, as the SDKs do, so that this process's own CPU
 * (the gateway shares the machine) is not what is measured.
 */
function keepKnocking(loops: number, send: () => Promise<boolean>): { stop(): Promise<{ answered: number; refused: number }> } {
  let running = true;
  let answered = 0;
  let refused = 0;
  const all = Array.from({ length: loops }, async () => {
    while (running) {
      if (await send().catch(() => false)) {
        answered++;
        continue;
      }
      refused++;
      await Bun.sleep(1000);
    }
  });
  return {
    async stop() {
      running = false;
      await Promise.all(all);
      return { answered, refused };
    },
  };
}

/** Key C's streams: STREAM_FLOOD loops of slow streams, and the most that were open at once. */
function streamFlood(url: string, key: string): { stop(): Promise<{ streamed: number; refused: number; maxOpen: number }> } {
  let open = 0;
  let maxOpen = 0;
  const knocking = keepKnocking(STREAM_FLOOD, async () => {
    const res = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: slowStream });
    if (res.status !== 200) {
      await res.arrayBuffer();
      return false;
    }
    maxOpen = Math.max(maxOpen, ++open);
    try {
      await res.arrayBuffer();
    } finally {
      open--;
    }
    return true;
  });
  return {
    async stop() {
      const { answered, refused } = await knocking.stop();
      return { streamed: answered, refused, maxOpen };
    },
  };
}

/** Key B's flood: FLOOD loops of big counts (a refusal may also arrive as a connection the gateway closed while the body was still going out). */
function flood(url: string, key: string): { stop(): Promise<{ counted: number; refused: number }> } {
  const knocking = keepKnocking(FLOOD, async () => {
    const res = await fetch(`${url}/v1/messages/count_tokens`, { method: "POST", headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" }, body: bigCount });
    await res.arrayBuffer();
    return res.status === 200;
  });
  return {
    async stop() {
      const { answered, refused } = await knocking.stop();
      return { counted: answered, refused };
    },
  };
}

try {
  const upstream = Bun.spawn(["bun", join(import.meta.dir, "fake-upstream.ts"), "--exit-on-stdin-eof", "1"], { stdin: "pipe", stdout: "pipe", stderr: "inherit" });
  children.push(upstream);
  const upstreamUrl = `http://127.0.0.1:${await readyPort(upstream.stdout, "fake upstream")}`;
  const slow = startSlowUpstream();
  const config = join(work, "config.json");
  writeFileSync(config, JSON.stringify({
    providers: [{ id: "up", kind: "openai", base_url: `${upstreamUrl}/v1` }, { id: "slow", kind: "openai", base_url: `${slow.url}/v1` }],
    models: [
      { id: "bench/gpt", provider: "up", upstream_model: "gpt-4o-mini", category: "text", context_length: 8192, pricing: { input_per_mtok: 1, output_per_mtok: 1 } },
      { id: "bench/slow", provider: "slow", upstream_model: "slow-1", category: "text", context_length: 8192, pricing: { input_per_mtok: 1, output_per_mtok: 1 } },
    ],
    limits: { requests_per_minute: 100_000_000 },
  }));
  const url = await startGateway(config);
  const keyA = await newKey(url, "tenant-a");
  const keyB = await newKey(url, "tenant-b");
  const keyC = await newKey(url, "tenant-c", { max_concurrent_requests: STREAM_CAP });
  // Warm: tables loaded, routes composed, connections open.
  await series(url, "/v1/messages/count_tokens", keyA, smallCount);
  await timed(url, "/v1/chat/completions", keyA, nearWindowChat);

  const countAlone = await series(url, "/v1/messages/count_tokens", keyA, smallCount);
  const chatAlone = await series(url, "/v1/chat/completions", keyA, nearWindowChat);
  const flooding = flood(url, keyB);
  await Bun.sleep(500);
  const countFlooded = await series(url, "/v1/messages/count_tokens", keyA, smallCount);
  const chatFlooded = await series(url, "/v1/chat/completions", keyA, nearWindowChat);
  const floodTotals = await flooding.stop();

  // Item 4: key C's slow streams, capped per key, beside key A's ordinary chat.
  await timed(url, "/v1/chat/completions", keyA, plainChat);
  const plainAlone = await series(url, "/v1/chat/completions", keyA, plainChat);
  const streaming = streamFlood(url, keyC);
  await Bun.sleep(500);
  const plainFlooded = await series(url, "/v1/chat/completions", keyA, plainChat);
  const streamTotals = await streaming.stop();

  const rows = [
    { figure: "key A's small count_tokens (B counts)", alone: countAlone, flooded: countFlooded },
    { figure: "key A's chat near the context window (B counts)", alone: chatAlone, flooded: chatFlooded },
    { figure: `key A's chat (C keeps ${STREAM_FLOOD} slow streams knocking)`, alone: plainAlone, flooded: plainFlooded },
  ];
  console.log(`\nbench --scenario iso: sequential requests, at least ${SAMPLES} and ${SECONDS} s per figure; key B keeps ${FLOOD} counts of ~4 MB going (${floodTotals.counted} counted, ${floodTotals.refused} refused while key A was measured); key C (max_concurrent_requests ${STREAM_CAP}) keeps ${STREAM_FLOOD} streams of 2 s knocking (${streamTotals.streamed} streamed, ${streamTotals.refused} refused with 429, at most ${streamTotals.maxOpen} open at once)\n`);
  console.log("| figure | requests alone / flooded | p50 alone ms | p99 alone ms | p50 flooded ms | p99 flooded ms | p99 raised by ms | within 50 ms |");
  console.log("|---|---|---|---|---|---|---|---|");
  for (const r of rows) {
    const raised = r.flooded.p99 - r.alone.p99;
    console.log(`| ${r.figure} | ${r.alone.n} / ${r.flooded.n} | ${r.alone.p50.toFixed(2)} | ${r.alone.p99.toFixed(2)} | ${r.flooded.p50.toFixed(2)} | ${r.flooded.p99.toFixed(2)} | ${raised.toFixed(2)} | ${raised <= BUDGET_MS ? "yes" : "NO"} |`);
  }
  const results = join(import.meta.dir, "results");
  mkdirSync(results, { recursive: true });
  writeFileSync(join(results, "iso-latest.json"), JSON.stringify({ at: new Date().toISOString(), samples: SAMPLES, seconds: SECONDS, flood: { concurrent: FLOOD, ...floodTotals }, streams: { loops: STREAM_FLOOD, cap: STREAM_CAP, ...streamTotals }, budgetMs: BUDGET_MS, rows }, null, 2));
  if (streamTotals.maxOpen > STREAM_CAP) console.log(`NO: key C had ${streamTotals.maxOpen} streams open at once, above its cap of ${STREAM_CAP}`);
  slow.stop();
} finally {
  for (const c of children) c.kill("SIGTERM");
  await Promise.all(children.map((c) => c.exited));
  rmSync(work, { recursive: true, force: true });
}
