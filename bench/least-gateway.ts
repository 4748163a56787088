/**
 * The least gateway: what the defaults' duties cost in Bun, done the cheapest way each can be
 * done, with nothing else. Set between the floor (a bare pass-through) and the gateway, it tells
 * how much of the gateway's cost over the floor any Bun gateway with these duties would pay, and
 * how much is ours to cut (docs/benchmarks.md, "How far the defaults can go").
 *
 * Per request, chat completions (an OpenAI-kind upstream), non-stream and streamed:
 * - the key: `Authorization: Bearer …`, its SHA-256 looked up in a map (keys are stored hashed);
 * - the body: `req.json()`, the model name swapped for the upstream's, `JSON.stringify`, `fetch`;
 * - the answer: `json()`, its usage read and priced; the usage record written to SQLite, in one
 *   transaction a turn with every other answer of that turn (synchronous = NORMAL, WAL, as ours);
 *   the answer leaves after that commit, with our model name (durable settlement);
 * - one access-log line of the same fields as ours, written once a turn to stderr.
 * A stream is passed on as it comes, read (not parsed) as text: the model name swapped in each
 * chunk by a string replace, the usage read from the chunk that carries it, and `data: [DONE]`
 * held back until the settlement's commit (durable settlement), then written.
 * Not done: body validation, rate limiting, credit holds and balances, request ids, deadlines,
 * retries, metrics, translation, streams, error handling beyond a 502.
 *
 *   UPSTREAM=http://127.0.0.1:PORT bun bench/least-gateway.ts [--port N] [--db FILE]
 *   LEAST_SKIP=ledger,log,hash   the same without those duties
 *
 * Prints `READY <port>`; the bench key is `svc-sk-least` (stderr carries the access log).
 */
import { Database } from "bun:sqlite";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs, serveAsChild } from "./child-process.ts";

const args = parseArgs();
const upstream = (args.get("upstream") ?? process.env.UPSTREAM ?? "").replace(/\/+$/, "");
if (!/^http:\/\/127\.0\.0\.1:\d+$/.test(upstream)) {
  console.error("least-gateway: UPSTREAM must be http://127.0.0.1:PORT");
  process.exit(2);
}
/** LEAST_SKIP=hash,ledger,log: leave duties out, to see what each costs. */
const SKIP = new Set((process.env.LEAST_SKIP ?? "").split(",").filter(Boolean));
const sha256 = SKIP.has("hash") ? (text: string) => text : (text: string) => new Bun.CryptoHasher("sha256").update(text).digest("hex");
const KEYS = new Map([[sha256("svc-sk-least"), { accountId: "acct_least", keyId: "key_least" }]]);
const PRICE = { input: 150, output: 600 }; // micro-credits per token × 1,000,000 / 1M tokens

// A file, as ours: WAL frames written on every commit (":memory:" would measure no ledger at all).
const db = new Database(args.get("db") ?? join(mkdtempSync(join(tmpdir(), "least-gateway-")), "ledger.sqlite"));
db.exec("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA page_size = 1024;");
db.exec(`CREATE TABLE IF NOT EXISTS usage_records (id INTEGER PRIMARY KEY, request_id TEXT NOT NULL UNIQUE, account_id TEXT NOT NULL,
  key_id TEXT NOT NULL, model TEXT NOT NULL, prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL, cost_micro INTEGER NOT NULL,
  created_at INTEGER NOT NULL)`);
db.exec("CREATE INDEX IF NOT EXISTS usage_account_time ON usage_records(account_id, created_at)");
const insert = db.query("INSERT INTO usage_records (request_id, account_id, key_id, model, prompt_tokens, completion_tokens, cost_micro, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)");

// One commit a turn: every answer of the turn waits for it.
let batch: { row: (string | number)[]; done: () => void }[] = [];
const writeBatch = db.transaction((rows: (string | number)[][]) => {
  for (const row of rows) insert.run(...row);
});
const commitSoon = () =>
  setImmediate(() => {
    const now = batch;
    batch = [];
    writeBatch(now.map((b) => b.row));
    for (const b of now) b.done();
  });
const settle = (row: (string | number)[]) =>
  new Promise<void>((done) => {
    if (batch.length === 0) commitSoon();
    batch.push({ row, done });
  });

let log = "";
const line = (fields: Record<string, unknown>) => {
  if (log.length === 0) setImmediate(() => {
    process.stderr.write(log);
    log = "";
  });
  log += `{"time":"${new Date().toISOString()}","level":"info","message":"request",${JSON.stringify(fields).slice(1)}\n`;
};

const server = Bun.serve({
  port: Number(args.get("port") ?? 0),
  hostname: "127.0.0.1",
  idleTimeout: 0,
  async fetch(req) {
    const started = performance.now();
    const auth = req.headers.get("authorization");
    const key = auth?.startsWith("Bearer ") ? KEYS.get(sha256(auth.slice(7))) : undefined;
    if (!key) return Response.json({ error: { message: "invalid key", type: "authentication_error" } }, { status: 401 });
    const body = (await req.json()) as { model: string };
    const model = body.model;
    body.model = "gpt-4o-mini";
    const r = await fetch(`${upstream}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: "Bearer sk-least-upstream" },
      body: JSON.stringify(body),
    });
    if (r.status !== 200) return Response.json({ error: { message: "upstream failed", type: "upstream_error" } }, { status: 502 });
    const id = crypto.randomUUID();
    const finish = async (input: number, output: number, stream: boolean) => {
      const cost = Math.ceil((input * PRICE.input + output * PRICE.output) / 1000);
      if (!SKIP.has("ledger")) await settle([`req_${id}`, key.accountId, key.keyId, model, input, output, cost, Date.now()]);
      if (!SKIP.has("log")) line({ requestId: `req_${id}`, method: "POST", path: "/v1/chat/completions", status: 200, outcome: "complete", stream, model, promptTokens: input, completionTokens: output, credits: cost / 1e6, totalMs: Math.round((performance.now() - started) * 1000) / 1000, accountId: key.accountId, keyId: key.keyId });
    };
    if ((body as { stream?: boolean }).stream === true) return new Response(relay(r.body!, model, finish), { headers: { "content-type": "text/event-stream", "cache-control": "no-cache" } });
    const answer = (await r.json()) as { id: string; model: string; usage: { prompt_tokens: number; completion_tokens: number } };
    await finish(answer.usage.prompt_tokens, answer.usage.completion_tokens, false);
    answer.model = model;
    answer.id = `chatcmpl-${id}`;
    return Response.json(answer);
  },
});

/** The upstream's stream as it comes, our model named in it; its end after the settlement. */
function relay(upstreamBody: ReadableStream<Uint8Array>, model: string, finish: (input: number, output: number, stream: true) => Promise<void>): ReadableStream<string> {
  const reader = upstreamBody.getReader();
  const decoder = new TextDecoder();
  const named = `"model":${JSON.stringify(model)}`;
  let usage = { input: 0, output: 0 };
  return new ReadableStream<string>({
    async pull(controller) {
      const { value, done } = await reader.read();
      if (done) {
        await finish(usage.input, usage.output, true);
        controller.enqueue("data: [DONE]\n\n");
        controller.close();
        return;
      }
      let text = decoder.decode(value, { stream: true }).replace(/"model":"[^"]*"/g, named);
      const end = text.indexOf("data: [DONE]");
      if (end >= 0) text = text.slice(0, end);
      const at = text.indexOf(`"usage":{"prompt_tokens":`);
      if (at >= 0) {
        const counts = /"prompt_tokens":(\d+),"completion_tokens":(\d+)/.exec(text.slice(at));
        if (counts) usage = { input: Number(counts[1]), output: Number(counts[2]) };
      }
      if (text.length > 0) controller.enqueue(text);
    },
    cancel: () => reader.cancel(),
  });
}

serveAsChild(server, args.get("exit-on-stdin-eof") === "1");
