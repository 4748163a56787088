/**
 * The gateway's own CPU per request, without sockets: the real app (auth, limiter, ledger on)
 * driven through `app.handle`, with an upstream `fetch` that answers from memory. What it
 * measures is what the gateway adds on top of the floor's work (accepting a request, one fetch,
 * one response), so it moves with every change to the hot path while the loopback bench's
 * ratios drown small changes in noise. Informative: the targets are judged by `bun run bench`.
 *
 *   bun bench/in-process.ts [--requests N] [--concurrency C] [--only nonstream,stream,translated,large]
 *
 * SWITCHYARD_METRICS=off and SWITCHYARD_ACCESS_LOG=off measure what counting and access-log lines
 * cost (the lines go to a silent logger: building them is measured, writing them is not).
 *
 * With `--cpu-prof-md` before the script (`bun --cpu-prof-md bench/in-process.ts`) it doubles as
 * the quickest profile of the hot path.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createApp } from "../src/app.ts";
import { resolveSettings } from "../src/config/load-config.ts";
import { openDatabase } from "../src/store/database.ts";
import { silentLogger } from "../src/log/log.ts";
import { opsSettings } from "../src/config/ops-settings.ts";
import { parseArgs } from "./child-process.ts";
import { agentConversation } from "./agent-conversation.ts";
import { offerWholeBody } from "../src/transport/http1/body-queue.ts";

const args = parseArgs();
const REQUESTS = Number(args.get("requests") ?? 40_000);
const CONCURRENCY = Number(args.get("concurrency") ?? 32);
const ONLY = (args.get("only") ?? "nonstream,stream,translated").split(",");
/** A real upstream (bench/fake-upstream.ts) instead of answers from memory: adds the fetch's own cost. */
const UPSTREAM = args.get("upstream");

const enc = new TextEncoder();
const usage = { prompt_tokens: 20, completion_tokens: 20, total_tokens: 40, prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 }, completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 } };
const words = Array.from({ length: 20 }, (_, i) => (i ? " " : "") + ["Switchyard", "forwards", "each", "token", "as", "soon", "as", "it", "arrives"][i % 9]);
const openaiBody = enc.encode(JSON.stringify({
  id: "chatcmpl-Bench", object: "chat.completion", created: 1761565012, model: "gpt-4o-mini-2024-07-18",
  choices: [{ index: 0, message: { role: "assistant", content: words.join(""), refusal: null, annotations: [] }, logprobs: null, finish_reason: "stop" }],
  usage, service_tier: "default", system_fingerprint: "fp_560af6e559",
}));
const chunk = (choices: unknown[], u: unknown = null) =>
  `data: ${JSON.stringify({ id: "chatcmpl-Bench", object: "chat.completion.chunk", created: 1761565012, model: "gpt-4o-mini-2024-07-18", service_tier: "default", system_fingerprint: "fp_560af6e559", choices, usage: u, obfuscation: "abc" })}\n\n`;
const openaiFrames = [
  chunk([{ index: 0, delta: { role: "assistant", content: "", refusal: null }, logprobs: null, finish_reason: null }]),
  ...words.map((w) => chunk([{ index: 0, delta: { content: w }, logprobs: null, finish_reason: null }])),
  chunk([{ index: 0, delta: {}, logprobs: null, finish_reason: "stop" }]),
  chunk([], usage),
  "data: [DONE]\n\n",
].map((s) => enc.encode(s));
const ev = (type: string, data: unknown) => `event: ${type}\ndata: ${JSON.stringify(data)}\n\n`;
const anthropicFrames = [
  ev("message_start", { type: "message_start", message: { id: "msg_Bench", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 20, output_tokens: 1 } } }),
  ev("content_block_start", { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }),
  ...words.map((w) => ev("content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: w } })),
  ev("content_block_stop", { type: "content_block_stop", index: 0 }),
  ev("message_delta", { type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 20 } }),
  ev("message_stop", { type: "message_stop" }),
].map((s) => enc.encode(s));

/** `--one-read`: the whole answer in one chunk, as the loopback bench's fake upstream delivers it under load. */
const ONE_READ = process.argv.includes("--one-read");
const frameStream = (frames: Uint8Array[]) => {
  if (ONE_READ) frames = [Buffer.concat(frames)];
  let i = 0;
  return new ReadableStream<Uint8Array>({
    pull(c) {
      if (i < frames.length) c.enqueue(frames[i++]!);
      else c.close();
    },
  });
};

const upstreamFetch = async (url: string, init: RequestInit): Promise<Response> => {
  const body = JSON.parse(init.body as string) as { stream?: boolean };
  if (url.endsWith("/messages")) return new Response(frameStream(anthropicFrames), { headers: { "content-type": "text/event-stream" } });
  if (body.stream) return new Response(frameStream(openaiFrames), { headers: { "content-type": "text/event-stream" } });
  // As our HTTP/1.1 client hands over a whole answer: the Response, and the buffer it was read into.
  const response = new Response(openaiBody, { headers: { "content-type": "application/json" } });
  offerWholeBody(response, openaiBody);
  return response;
};

const dir = mkdtempSync(join(tmpdir(), "switchyard-inproc-"));
const db = openDatabase(join(dir, "gateway.sqlite"));
const timeouts = { first_byte_ms: 10_000, idle_ms: 30_000, total_ms: 600_000 };
const settings = resolveSettings({
  providers: [
    { id: "o", kind: "openai", base_url: `${UPSTREAM ?? "http://upstream.invalid"}/v1`, api_key_env: "K", timeouts },
    { id: "a", kind: "anthropic", base_url: UPSTREAM ?? "http://upstream.invalid", api_key_env: "K", timeouts },
  ],
  models: [
    { id: "bench/gpt", provider: "o", upstream_model: "gpt-4o-mini", category: "text", context_length: 128_000, pricing: { input_per_mtok: 150, output_per_mtok: 600 } },
    { id: "bench/claude", provider: "a", upstream_model: "claude-sonnet-4-5", category: "text", context_length: 200_000, pricing: { input_per_mtok: 3000, output_per_mtok: 15000 } },
  ],
  limits: { requests_per_minute: 1e9 },
}, { K: "sk-bench" }, "bench");
const app = createApp({ db, settings, log: silentLogger, fetch: UPSTREAM ? undefined : upstreamFetch, ops: opsSettings(process.env) });
const account = await app.services.accounts.createAccount("bench", 1e15);
const key = (await app.services.accounts.createKey(account.id, "bench"))!.key;

const messages = [{ role: "user", content: "Tell me how a railway switchyard sorts its wagons." }];
const scenarios: Record<string, string> = {
  nonstream: JSON.stringify({ model: "bench/gpt", messages, max_tokens: 20 }),
  stream: JSON.stringify({ model: "bench/gpt", messages, max_tokens: 20, stream: true, stream_options: { include_usage: true } }),
  translated: JSON.stringify({ model: "bench/claude", messages, max_tokens: 20, stream: true }),
  /** An agent-sized conversation, about 210 KB (not run unless asked for with --only). */
  large: JSON.stringify({ model: "bench/gpt", messages: agentConversation(), max_tokens: 20 }),
};

async function one(body: string): Promise<void> {
  const res = await app.handle(new Request("http://localhost/v1/chat/completions", {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "content-length": String(body.length) },
    body,
  }));
  if (res.status !== 200) throw new Error(`status ${res.status}: ${await res.text()}`);
  await res.arrayBuffer();
}

async function run(body: string, n: number): Promise<number> {
  let next = 0;
  const start = process.cpuUsage();
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (next++ < n) await one(body);
  }));
  await app.services.settled();
  const used = process.cpuUsage(start);
  return (used.user + used.system) / n;
}

for (const name of ONLY) {
  const body = scenarios[name];
  if (!body) throw new Error(`unknown scenario ${name}`);
  await run(body, Math.min(5000, REQUESTS)); // warm-up: JIT, caches, tokenizer
  const rounds = [await run(body, REQUESTS / 2), await run(body, REQUESTS / 2)];
  console.log(`${name.padEnd(11)} ${Math.min(...rounds).toFixed(1)} µs CPU per request (rounds ${rounds.map((r) => r.toFixed(1)).join(", ")}; concurrency ${CONCURRENCY})`);
}
db.close();
rmSync(dir, { recursive: true, force: true });
