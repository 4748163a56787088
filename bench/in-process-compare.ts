/**
 * Our own CPU per request, this checkout against another, paired in one process: both apps
 * (`createApp` of each checkout, each on its own SQLite file) driven through `app.handle` with an
 * upstream answered from memory, in alternating rounds, so both meet the same machine at every
 * instant. The loopback bench's `--compare` measures the whole process under wrk; this isolates
 * the JavaScript and SQLite work, and with `--cpu-prof-md` before the script the profile tells the
 * two checkouts' functions apart by path. Informative: targets are judged by `bun run bench`.
 *
 *   git worktree add /tmp/ref <ref> && ln -s "$PWD/node_modules" /tmp/ref/node_modules
 *   bun bench/in-process-compare.ts /tmp/ref [--scenario nonstream|stream] [--rounds 15] [--requests 20000]
 *
 * Prints each checkout's median µs per request and the median of the per-round ratios (this ÷ ref).
 */
import { mkdtempSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "./child-process.ts";

const REF = process.argv[2];
const args = parseArgs(process.argv.slice(3));
if (!REF || REF.startsWith("--") || !existsSync(join(REF, "src/app.ts"))) {
  console.error("usage: bun bench/in-process-compare.ts <checkout of the ref, with node_modules> [--scenario nonstream|stream] [--rounds N] [--requests N]");
  process.exit(2);
}
const ROOTS = [resolve(REF), resolve(import.meta.dir, "..")];
const SCEN = args.get("scenario") ?? "nonstream";
const N = Number(args.get("requests") ?? 20000);
const ROUNDS = Number(args.get("rounds") ?? 15);
const CONC = 32;
const enc = new TextEncoder();
const usage = { prompt_tokens: 20, completion_tokens: 20, total_tokens: 40, prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 }, completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 } };
const words = Array.from({ length: 20 }, (_, i) => (i ? " " : "") + ["Switchyard", "forwards", "each", "token", "as", "soon", "as", "it", "arrives"][i % 9]);
const openaiBody = enc.encode(JSON.stringify({ id: "chatcmpl-Bench", object: "chat.completion", created: 1761565012, model: "gpt-4o-mini-2024-07-18", choices: [{ index: 0, message: { role: "assistant", content: words.join(""), refusal: null, annotations: [] }, logprobs: null, finish_reason: "stop" }], usage, service_tier: "default", system_fingerprint: "fp_560af6e559" }));
const chunk = (choices: unknown[], u: unknown = null) => `data: ${JSON.stringify({ id: "chatcmpl-Bench", object: "chat.completion.chunk", created: 1761565012, model: "gpt-4o-mini-2024-07-18", service_tier: "default", system_fingerprint: "fp_560af6e559", choices, usage: u, obfuscation: "abc" })}\n\n`;
const openaiFrames = [chunk([{ index: 0, delta: { role: "assistant", content: "", refusal: null }, logprobs: null, finish_reason: null }]), ...words.map((w) => chunk([{ index: 0, delta: { content: w }, logprobs: null, finish_reason: null }])), chunk([{ index: 0, delta: {}, logprobs: null, finish_reason: "stop" }]), chunk([], usage), "data: [DONE]\n\n"].map((s) => enc.encode(s));
const frameStream = (frames: Uint8Array[]) => { let i = 0; return new ReadableStream<Uint8Array>({ pull(c) { if (i < frames.length) c.enqueue(frames[i++]!); else c.close(); } }); };

async function make(root: string) {
  const { createApp } = await import(`${root}/src/app.ts`);
  const { resolveSettings } = await import(`${root}/src/config/load-config.ts`);
  const { openDatabase } = await import(`${root}/src/store/database.ts`);
  // Older checkouts keep these elsewhere, or not at all (a logger that does nothing, no ops settings).
  const pick = async (paths: string[], name: string) => {
    for (const path of paths) if (existsSync(`${root}/${path}`)) return (await import(`${root}/${path}`))[name];
    return undefined;
  };
  const silentLogger = (await pick(["src/log/log.ts", "src/log.ts"], "silentLogger")) ?? (() => {});
  const opsSettings = await pick(["src/config/ops-settings.ts", "src/ops/ops-settings.ts"], "opsSettings");
  const offerWholeBody = (await pick(["src/transport/http1/body-queue.ts"], "offerWholeBody")) ?? (() => {});
  const upstreamFetch = async (_url: string, init: RequestInit): Promise<Response> => {
    const body = JSON.parse(init.body as string) as { stream?: boolean };
    if (body.stream) return new Response(frameStream(openaiFrames), { headers: { "content-type": "text/event-stream" } });
    const response = new Response(openaiBody, { headers: { "content-type": "application/json" } });
    offerWholeBody(response, openaiBody);
    return response;
  };
  const dir = mkdtempSync(join(tmpdir(), "switchyard-ab-"));
  const db = openDatabase(join(dir, "gateway.sqlite"));
  const timeouts = { first_byte_ms: 10_000, idle_ms: 30_000, total_ms: 600_000 };
  const settings = resolveSettings({
    providers: [{ id: "o", kind: "openai", base_url: "http://upstream.invalid/v1", api_key_env: "K", timeouts }],
    models: [{ id: "bench/gpt", provider: "o", upstream_model: "gpt-4o-mini", category: "text", context_length: 128_000, pricing: { input_per_mtok: 150, output_per_mtok: 600 } }],
    limits: { requests_per_minute: 1e9 },
  }, { K: "sk-bench" }, "bench");
  const app = createApp({ db, settings, log: silentLogger, fetch: upstreamFetch, ...(opsSettings ? { ops: opsSettings(process.env) } : {}) });
  const account = await app.services.accounts.createAccount("bench", 1e15);
  const key = (await app.services.accounts.createKey(account.id, "bench"))!.key;
  const messages = [{ role: "user", content: "Tell me how a railway switchyard sorts its wagons." }];
  const body = SCEN === "stream" ? JSON.stringify({ model: "bench/gpt", messages, max_tokens: 20, stream: true, stream_options: { include_usage: true } }) : JSON.stringify({ model: "bench/gpt", messages, max_tokens: 20 });
  const one = async () => {
    const res = await app.handle(new Request("http://localhost/v1/chat/completions", { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "content-length": String(body.length) }, body }));
    if (res.status !== 200) throw new Error(`status ${res.status}: ${await res.text()}`);
    await res.arrayBuffer();
  };
  return async (n: number) => {
    let next = 0;
    const start = process.cpuUsage();
    await Promise.all(Array.from({ length: CONC }, async () => { while (next++ < n) await one(); }));
    await app.services.settled();
    const used = process.cpuUsage(start);
    return (used.user + used.system) / n;
  };
}
const runs = [] as ((n: number) => Promise<number>)[];
for (const r of ROOTS) runs.push(await make(r));
for (const r of runs) await r(5000);
const per: number[][] = ROOTS.map(() => []);
const ratios: number[] = [];
for (let i = 0; i < ROUNDS; i++) {
  const order = i % 2 ? [1, 0] : [0, 1];
  const v: number[] = [];
  for (const j of order) v[j] = await runs[j]!(N);
  v.forEach((x, j) => per[j]!.push(x));
  ratios.push(v[1]! / v[0]!);
}
const med = (xs: number[]) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
ROOTS.forEach((r, j) => console.log(`${r}: median ${med(per[j]!).toFixed(1)} µs/request`));
console.log(`${SCEN}: ratio ${ROOTS[1]} ÷ ${ROOTS[0]} median ${med(ratios).toFixed(3)} [${Math.min(...ratios).toFixed(3)}–${Math.max(...ratios).toFixed(3)}]`);
process.exit(0);
