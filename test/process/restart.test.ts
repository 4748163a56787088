import { Database } from "bun:sqlite";
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startFakeUpstream, type FakeUpstream } from "../helpers/fake-upstream.ts";
import { startGatewayProcess as startProcess } from "../helpers/gateway-process.ts";
import { rawUpstream, type RawUpstream } from "../helpers/raw-upstream.ts";

let upstream: FakeUpstream;
let dir: string;

beforeAll(async () => {
  upstream = await startFakeUpstream();
  dir = mkdtempSync(join(tmpdir(), "switchyard-restart-"));
});
afterAll(async () => {
  await upstream.stop();
  rmSync(dir, { recursive: true, force: true });
});

function ledgerState(dbPath: string) {
  const db = new Database(dbPath, { readonly: true });
  try {
    return {
      id: db.query<{ id: string }, []>("SELECT id FROM accounts WHERE name = 'demo'").get()!.id,
      balance: db.query<{ b: number }, []>("SELECT balance_micro AS b FROM accounts WHERE name = 'demo'").get()!.b,
    };
  } finally {
    db.close();
  }
}

/** What the running gateway says the account has and holds, through the admin API. */
async function accountView(url: string, id: string): Promise<{ balance: number; reserved: number }> {
  return (await (await fetch(`${url}/v1/admin/accounts/${id}`, { headers: { authorization: "Bearer restart-admin-0123456789abcdef0123456789abcdef" } })).json()) as any;
}

test("a killed gateway leaves no credit locked: the next process starts with all of it", async () => {
  const config = join(dir, "switchyard.json");
  writeFileSync(config, JSON.stringify({
    providers: [{ id: "up", kind: "openai", base_url: `${upstream.url}/v1` }],
    models: [{ id: "test/paid", provider: "up", upstream_model: "m", category: "text", context_length: 100000, pricing: { input_per_mtok: 1000, output_per_mtok: 1000 } }],
  }));
  const env = { SWITCHYARD_CONFIG: config, SWITCHYARD_DB: join(dir, "ledger.sqlite"), SWITCHYARD_ADMIN_TOKEN: "restart-admin-0123456789abcdef0123456789abcdef" };

  const first = await startProcess(env);
  // Room held for the spill file from the start (a disk that fills up while settlements wait).
  expect(statSync(`${env.SWITCHYARD_DB}.spill.reserve`).size).toBe(4 * 1024 * 1024);
  const balanceBefore = ledgerState(env.SWITCHYARD_DB).balance;
  upstream.reply({ kind: "sse", holdOpen: true, chunks: ['data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}\n\n'] });
  const res = await fetch(`${first.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${first.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "test/paid", max_tokens: 1000, messages: [{ role: "user", content: "Hello" }], stream: true }),
  });
  const reader = res.body!.getReader();
  await reader.read();
  const { id } = ledgerState(env.SWITCHYARD_DB);
  const during = await accountView(first.url, id);
  expect(during.reserved).toBeGreaterThan(0);
  expect(during.balance * 1e6).toBe(balanceBefore);

  first.child.kill("SIGKILL");
  await first.child.exited;
  reader.cancel().catch(() => {});

  const second = await startProcess(env);
  try {
    // Holds die with their process: the new one starts with every credit available and nothing charged.
    const after = await accountView(second.url, id);
    expect(after.reserved).toBe(0);
    expect(after.balance * 1e6).toBe(balanceBefore);
    expect(ledgerState(env.SWITCHYARD_DB).balance).toBe(balanceBefore);
    // The demo key printed by the new process works, and the curl line names a served model.
    const models = await fetch(`${second.url}/v1/models`, { headers: { authorization: `Bearer ${second.key}` } });
    expect(models.status).toBe(200);
    expect(second.banner).toContain('"model":"test/paid"');
  } finally {
    second.child.kill("SIGTERM");
    expect(await second.child.exited).toBe(0);
  }
}, 40_000);

test("a SIGTERM whose grace ends before a stream does: the stream ends with an error frame its SDK can read (OpenAI's and Anthropic's), while the ledger still writes, and is charged for what it sent", async () => {
  const config = join(dir, "switchyard-grace.json");
  writeFileSync(config, JSON.stringify({
    providers: [{ id: "up", kind: "openai", base_url: `${upstream.url}/v1` }],
    models: [{ id: "test/paid", provider: "up", upstream_model: "m", category: "text", context_length: 100000, pricing: { input_per_mtok: 1000, output_per_mtok: 1000 } }],
  }));
  const env = { SWITCHYARD_CONFIG: config, SWITCHYARD_DB: join(dir, "grace.sqlite"), SWITCHYARD_SHUTDOWN_GRACE_MS: "300", SWITCHYARD_SPILL_DIR: dir };
  const gw = await startProcess(env);
  const balanceBefore = ledgerState(env.SWITCHYARD_DB).balance;
  // Words every 50 ms for 4 s: it is still running when the 300 ms grace ends.
  const word = (w: string) => `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"${w} "},"finish_reason":null}]}\n\n`;
  const answer = { kind: "sse" as const, delayMs: 50, chunks: [...Array.from({ length: 80 }, (_, i) => word(`word${i}`)), 'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n', "data: [DONE]\n\n"] };
  upstream.reply(answer);
  upstream.reply(answer);
  const open = async (path: string, id: string) => {
    const res = await fetch(`${gw.url}${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json", "x-request-id": id },
      body: JSON.stringify({ model: "test/paid", max_tokens: 1000, messages: [{ role: "user", content: "Hello" }], stream: true }),
    });
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    const seen = { text: "", reset: false };
    while (!seen.text.includes("word3")) seen.text += decoder.decode((await reader.read()).value);
    return { seen, rest: async () => {
      for (;;) {
        const read = await reader.read().catch(() => ((seen.reset = true), { done: true as const, value: undefined }));
        if (read.done) return seen;
        seen.text += decoder.decode(read.value);
      }
    } };
  };
  const chat = await open("/v1/chat/completions", "cut-by-shutdown");
  const messages = await open("/v1/messages", "cut-by-shutdown-messages");
  gw.child.kill("SIGTERM");
  const [openai, anthropic] = await Promise.all([chat.rest(), messages.rest()]);
  expect(await gw.child.exited).toBe(0);
  // Cut: the client never saw the end of the answer, and was told why in its own format, in a
  // body that ended (not a reset connection).
  expect(openai.text).not.toContain("[DONE]");
  expect(openai.reset).toBe(false);
  const lastData = JSON.parse(openai.text.trim().split("\n").at(-1)!.slice("data: ".length));
  expect(lastData.error.message).toContain("shutting down");
  expect(anthropic.text).not.toContain("message_stop");
  expect(anthropic.reset).toBe(false);
  expect(anthropic.text.trimEnd()).toMatch(/event: error\ndata: \{"type":"error","error":\{"type":"overloaded_error","message":"The gateway is shutting down[^"]*"\}\}$/);
  // The access log says the gateway cut them, at warn (it said `client_abort`, blaming the clients).
  const access = gw.stderr().split("\n").filter((l) => l.includes('"message":"request"') && l.includes("cut-by-shutdown")).map((l) => JSON.parse(l));
  expect(access).toHaveLength(2);
  for (const line of access) expect(line).toMatchObject({ level: "warn", status: 200, outcome: "error", errorType: "overloaded", stream: true });
  const db = new Database(env.SWITCHYARD_DB, { readonly: true });
  try {
    const records = db.query<{ status: string; cost: number }, []>("SELECT status, cost_micro AS cost FROM usage_records WHERE client_request_id LIKE 'cut-by-shutdown%'").all();
    // Recorded and charged for what each sent, in the same file: nothing left for a spill file.
    expect(records.map((r) => r.status)).toEqual(["cancelled", "cancelled"]);
    for (const r of records) expect(r.cost).toBeGreaterThan(0);
    expect(balanceBefore - db.query<{ b: number }, []>("SELECT balance_micro AS b FROM accounts WHERE name = 'demo'").get()!.b).toBe(records[0]!.cost + records[1]!.cost);
  } finally {
    db.close();
  }
}, 40_000);

test("a SIGTERM whose grace ends before an answer came: the requests cut then (non-stream, and a stream with nothing sent) get a 503 to retry in their client's format (not an empty reply), are recorded and cost nothing", async () => {
  const config = join(dir, "switchyard-cut-free.json");
  writeFileSync(config, JSON.stringify({
    providers: [{ id: "up", kind: "openai", base_url: `${upstream.url}/v1` }],
    models: [
      { id: "test/paid", provider: "up", upstream_model: "m", category: "text", context_length: 100000, pricing: { input_per_mtok: 1000, output_per_mtok: 1000 } },
      // A model that reasons out of sight: a stream of it left by its client is read to its end, but not past the cut.
      { id: "test/o3", provider: "up", upstream_model: "o3", category: "text", context_length: 100000, pricing: { input_per_mtok: 1000, output_per_mtok: 1000 } },
    ],
  }));
  const env = { SWITCHYARD_CONFIG: config, SWITCHYARD_DB: join(dir, "cut-free.sqlite"), SWITCHYARD_SHUTDOWN_GRACE_MS: "300", SWITCHYARD_SPILL_DIR: dir };
  const gw = await startProcess(env);
  const balanceBefore = ledgerState(env.SWITCHYARD_DB).balance;
  // The upstream has both requests and answers neither: the gateway's own stop ends them, not their clients.
  upstream.reply({ kind: "hang" });
  upstream.reply({ kind: "hang" });
  // A third's whole answer has its head out and the rest 1.5 s later, after the cut (500 ms was
  // not always after it on a loaded CI machine, and the answer was whole and charged): read to its
  // end, but its client's connection was reset, so none of it went out.
  const answer = JSON.stringify({ id: "c", object: "chat.completion", created: 1, model: "m", choices: [{ index: 0, message: { role: "assistant", content: "a whole answer nobody got" }, finish_reason: "stop" }], usage: { prompt_tokens: 900, completion_tokens: 7, total_tokens: 907 } });
  upstream.reply({ kind: "sse", headers: { "content-type": "application/json" }, chunks: [answer.slice(0, 40), answer.slice(40)], delayMs: 1_500 });
  const sentBefore = upstream.requests.length;
  const ask = (id: string, stream: boolean) =>
    fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json", "x-request-id": id },
      body: JSON.stringify({ model: "test/paid", max_tokens: 100, messages: [{ role: "user", content: "a prompt the vendor has ".repeat(200) }], stream }),
    }).then((r) => r.text(), () => "cut");
  const answered = (id: string, stream: boolean) =>
    fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json", "x-request-id": id },
      body: JSON.stringify({ model: "test/paid", max_tokens: 100, messages: [{ role: "user", content: "a prompt the vendor has ".repeat(200) }], stream }),
    }).then(async (r) => ({ status: r.status, retryAfter: r.headers.get("retry-after"), body: (await r.json()) as { error: { type: string; message: string } } }));
  const waitedFor = [answered("cut-whole", false), answered("cut-stream", true)];
  const asked: Promise<unknown>[] = [...waitedFor];
  for (const until = Date.now() + 5_000; upstream.requests.length < sentBefore + 2 && Date.now() < until; ) await Bun.sleep(10);
  asked.push(ask("cut-head-came", false));
  for (const until = Date.now() + 5_000; upstream.requests.length < sentBefore + 3 && Date.now() < until; ) await Bun.sleep(10);
  // A reasoning stream with its first words out and no end: cut, it is settled, not read on past the process.
  upstream.reply({ kind: "sse", holdOpen: true, chunks: ['data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"o3","choices":[{"index":0,"delta":{"content":"thinking done, "},"finish_reason":null}]}\n\n'] });
  asked.push(fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json", "x-request-id": "cut-reasoning" },
    body: JSON.stringify({ model: "test/o3", max_tokens: 100, messages: [{ role: "user", content: "think" }], stream: true }),
  }).then((r) => r.text()).catch(() => "cut"));
  for (const until = Date.now() + 5_000; upstream.requests.length < sentBefore + 4 && Date.now() < until; ) await Bun.sleep(10);
  expect(upstream.requests.length).toBe(sentBefore + 4);
  await Bun.sleep(50); // its head is out
  gw.child.kill("SIGTERM");
  await Promise.all(asked);
  // The two the upstream had not answered: a 503 with retry-after, OpenAI-shaped (the stream's head had not gone out either).
  for (const got of await Promise.all(waitedFor)) {
    expect([got.status, got.retryAfter, got.body.error.type]).toEqual([503, "1", "server_error"]);
    expect(got.body.error.message).toContain("shutting down");
  }
  expect(await gw.child.exited).toBe(0);
  const db = new Database(env.SWITCHYARD_DB, { readonly: true });
  try {
    const records = db.query<{ id: string; status: string; cost: number }, []>("SELECT client_request_id AS id, status, cost_micro AS cost FROM usage_records WHERE client_request_id LIKE 'cut-%' ORDER BY 1").all();
    expect(records.filter((r) => r.id !== "cut-reasoning")).toEqual([{ id: "cut-head-came", status: "cancelled", cost: 0 }, { id: "cut-stream", status: "upstream_error", cost: 0 }, { id: "cut-whole", status: "upstream_error", cost: 0 }]);
    // Recorded before the process ended, charged for the words it sent.
    const reasoning = records.find((r) => r.id === "cut-reasoning");
    expect(reasoning?.status).toBe("cancelled");
    expect(reasoning!.cost).toBeGreaterThan(0);
    expect(db.query<{ b: number }, []>("SELECT balance_micro AS b FROM accounts WHERE name = 'demo'").get()!.b).toBe(balanceBefore - reasoning!.cost);
  } finally {
    db.close();
  }
}, 40_000);

test("a SIGTERM whose grace ends while a whole answer waits for its settlement's commit: the answer goes out before the connections close, and is charged once for it", async () => {
  const config = join(dir, "switchyard-commit-wait.json");
  writeFileSync(config, JSON.stringify({
    providers: [{ id: "up", kind: "openai", base_url: `${upstream.url}/v1` }],
    models: [{ id: "test/paid", provider: "up", upstream_model: "m", category: "text", context_length: 100000, pricing: { input_per_mtok: 1000, output_per_mtok: 1000 } }],
  }));
  const env = { SWITCHYARD_CONFIG: config, SWITCHYARD_DB: join(dir, "commit-wait.sqlite"), SWITCHYARD_SHUTDOWN_GRACE_MS: "300", SWITCHYARD_SPILL_DIR: dir };
  const gw = await startProcess(env);
  const balanceBefore = ledgerState(env.SWITCHYARD_DB).balance;
  // Another writer holds the ledger (the admin CLI, a backup): the answer's commit, which its body
  // waits for, is retried until the writer lets go, 600 ms after the SIGTERM (past the 300 ms
  // grace, within the second after which the ledger would count as failing).
  const other = new Database(env.SWITCHYARD_DB);
  other.run("BEGIN IMMEDIATE");
  let released = false;
  const release = () => {
    if (released) return;
    released = true;
    other.run("ROLLBACK");
    other.close();
  };
  try {
    const sent = upstream.requests.length;
    const answered = fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json", "x-request-id": "whole-while-committing" },
      body: JSON.stringify({ model: "test/paid", max_tokens: 50, messages: [{ role: "user", content: "Hello" }] }),
    }).then(async (r) => ({ status: r.status, body: await r.text() }), () => ({ status: 0, body: "reset" }));
    for (const until = Date.now() + 5_000; upstream.requests.length === sent && Date.now() < until; ) await Bun.sleep(10);
    await Bun.sleep(100); // its answer is read and its settlement waits for the writer
    gw.child.kill("SIGTERM");
    await Bun.sleep(600);
    release();
    const got = await answered;
    expect(await gw.child.exited).toBe(0);
    // Without the wait, the connection was closed while the commit waited: a reset, and the answer charged in full.
    expect(got.status).toBe(200);
    expect(JSON.parse(got.body).choices[0].message.content.length).toBeGreaterThan(0);
  } finally {
    release();
  }
  const db = new Database(env.SWITCHYARD_DB, { readonly: true });
  try {
    const records = db.query<{ status: string; cost: number }, []>("SELECT status, cost_micro AS cost FROM usage_records WHERE client_request_id = 'whole-while-committing'").all();
    expect(records).toHaveLength(1);
    expect(records[0]!.status).toBe("ok");
    expect(records[0]!.cost).toBeGreaterThan(0);
    expect(balanceBefore - db.query<{ b: number }, []>("SELECT balance_micro AS b FROM accounts WHERE name = 'demo'").get()!.b).toBe(records[0]!.cost);
  } finally {
    db.close();
  }
}, 30_000);

test("a SIGTERM whose grace ends while a cut stream's counts take longer than the stop waits (a 6 MB prompt, no usage from its upstream): the stream is recorded and charged an estimate, not lost", async () => {
  const config = join(dir, "switchyard-slow-count.json");
  writeFileSync(config, JSON.stringify({
    providers: [{ id: "up", kind: "openai", base_url: `${upstream.url}/v1` }],
    models: [{ id: "test/big", provider: "up", upstream_model: "m", category: "text", context_length: 100_000_000, pricing: { input_per_mtok: 1, output_per_mtok: 1000 } }],
    limits: { max_body_bytes: 16 * 1024 * 1024 },
  }));
  const env = { SWITCHYARD_CONFIG: config, SWITCHYARD_DB: join(dir, "slow-count.sqlite"), SWITCHYARD_SHUTDOWN_GRACE_MS: "300", SWITCHYARD_SPILL_DIR: dir };
  const gw = await startProcess(env);
  const balanceBefore = ledgerState(env.SWITCHYARD_DB).balance;
  // Words out, then nothing and no usage: the charge is what our tokenizer counts, the prompt
  // included. A million distinct words take the tokenizer's thread seconds, more than the second
  // the stop gave a cut answer to settle before the ledger closed and the process exited.
  upstream.reply({ kind: "sse", holdOpen: true, chunks: ['data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"first words "},"finish_reason":null}]}\n\n'] });
  let seed = 7;
  const word = () => ((seed = (seed * 1664525 + 1013904223) >>> 0) % 2_176_782_336).toString(36);
  const prompt = Array.from({ length: 1_000_000 }, word).join(" ");
  const res = await fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json", "x-request-id": "cut-while-counting" },
    body: JSON.stringify({ model: "test/big", max_tokens: 100, messages: [{ role: "user", content: prompt }], stream: true }),
  });
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  let text = "";
  while (!text.includes("first words")) text += new TextDecoder().decode((await reader.read()).value);
  gw.child.kill("SIGTERM");
  for (;;) {
    const read = await reader.read().catch(() => ({ done: true as const, value: undefined }));
    if (read.done) break;
  }
  expect(await gw.child.exited).toBe(0);
  const db = new Database(env.SWITCHYARD_DB, { readonly: true });
  try {
    const records = db.query<{ status: string; cost: number; estimated: number; prompt: number }, []>("SELECT status, cost_micro AS cost, estimated, prompt_tokens AS prompt FROM usage_records WHERE client_request_id = 'cut-while-counting'").all();
    expect(records).toHaveLength(1);
    expect(records[0]!.status).toBe("cancelled");
    expect(records[0]!.estimated).toBe(1);
    expect(records[0]!.prompt).toBeGreaterThan(1_000_000);
    expect(records[0]!.cost).toBeGreaterThan(0);
    expect(balanceBefore - db.query<{ b: number }, []>("SELECT balance_micro AS b FROM accounts WHERE name = 'demo'").get()!.b).toBe(records[0]!.cost);
  } finally {
    db.close();
  }
}, 30_000);

/**
 * A gateway whose one model's upstream is `raw` is stopped (SIGTERM, a 300 ms grace) while each
 * request waits before its head (`asks`: path, request id, prompt); what each client got (status,
 * retry-after, error type) and the records (request id, status, cost), with the balance unchanged.
 */
async function stoppedWhileWaiting(name: string, raw: RawUpstream, asks: [path: string, id: string, content: string][]) {
  const config = join(dir, `switchyard-${name}.json`);
  writeFileSync(config, JSON.stringify({
    providers: [{ id: "up", kind: "openai", base_url: `${raw.url}/v1` }],
    models: [{ id: "test/paid", provider: "up", upstream_model: "m", category: "text", context_length: 100000, pricing: { input_per_mtok: 1000, output_per_mtok: 1000 } }],
    server: { keepalive_ms: 20_000 },
  }));
  const env = { SWITCHYARD_CONFIG: config, SWITCHYARD_DB: join(dir, `${name}.sqlite`), SWITCHYARD_SHUTDOWN_GRACE_MS: "300", SWITCHYARD_SPILL_DIR: dir };
  const gw = await startProcess(env);
  try {
    const balanceBefore = ledgerState(env.SWITCHYARD_DB).balance;
    const answers = asks.map(([path, id, content]) =>
      fetch(`${gw.url}${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json", "anthropic-version": "2023-06-01", "x-request-id": id },
        body: JSON.stringify({ model: "test/paid", max_tokens: 100, messages: [{ role: "user", content }], stream: true }),
      }).then(async (r) => ({ status: r.status, retryAfter: r.headers.get("retry-after"), body: await r.text() })));
    for (const until = Date.now() + 5_000; raw.requests.length < asks.length && Date.now() < until; ) await Bun.sleep(10);
    expect(raw.requests.length).toBe(asks.length);
    await Bun.sleep(100); // every head is in: the streams wait
    gw.child.kill("SIGTERM");
    const told = (await Promise.all(answers)).map((a) => [a.status, a.retryAfter, JSON.parse(a.body).error.type]);
    expect(await gw.child.exited).toBe(0);
    const db = new Database(env.SWITCHYARD_DB, { readonly: true });
    try {
      const records = db.query<{ id: string; status: string; cost: number }, []>("SELECT client_request_id AS id, status, cost_micro AS cost FROM usage_records ORDER BY 1").all();
      expect(db.query<{ b: number }, []>("SELECT balance_micro AS b FROM accounts WHERE name = 'demo'").get()!.b).toBe(balanceBefore);
      return { told, records };
    } finally {
      db.close();
    }
  } finally {
    if (gw.child.exitCode === null) gw.child.kill("SIGKILL");
    raw.stop();
  }
}

test("a SIGTERM whose grace ends while a stream waits for its upstream's first body bytes (its head came, nothing went to the client): a 503 to retry, as a request waiting for its head gets, recorded and free", async () => {
  // The stream stage waits up to keepalive_ms for the first body bytes after the head: the cut
  // landing in that wait gave the client a 200 and an error frame, which the SDKs do not retry,
  // though no byte had gone out (a kill -9 and fault probe, eighteenth session).
  const raw = rawUpstream((_request, socket) => {
    socket.write("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n");
  });
  const { told, records } = await stoppedWhileWaiting("cut-head-only", raw, [
    ["/v1/chat/completions", "head-only-openai", "a prompt"],
    ["/v1/messages", "head-only-anthropic", "a prompt"],
  ]);
  expect(told).toEqual([[503, "1", "server_error"], [503, "1", "overloaded_error"]]);
  expect(records).toEqual([{ id: "head-only-anthropic", status: "upstream_error", cost: 0 }, { id: "head-only-openai", status: "upstream_error", cost: 0 }]);
}, 30_000);

test("a SIGTERM whose grace ends while a stream has had nothing to write yet (a role chunk an Anthropic client is not shown; a compressed stream read ahead): a 503 to retry, recorded and free", async () => {
  // The stage waits on while what arrived gives the client nothing, and reads a compressed
  // stream ahead (a fifth raw-TCP probe): the gateway's stop in either wait is the 503 a call
  // still waiting gets, as in the wait for the first body bytes above.
  const role = `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }] })}\n\n`;
  const raw = rawUpstream((request, socket) => {
    if (request.body.includes("gzip please")) socket.write("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n");
    else socket.write(`HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n${role.length.toString(16)}\r\n${role}\r\n`);
  });
  const { told, records } = await stoppedWhileWaiting("cut-nothing-yet", raw, [
    ["/v1/messages", "nothing-yet-role-chunk", "a prompt"],
    ["/v1/chat/completions", "nothing-yet-gzip", "gzip please"],
  ]);
  expect(told).toEqual([[503, "1", "overloaded_error"], [503, "1", "server_error"]]);
  expect(records).toEqual([{ id: "nothing-yet-gzip", status: "upstream_error", cost: 0 }, { id: "nothing-yet-role-chunk", status: "upstream_error", cost: 0 }]);
}, 30_000);

test("a ledger that takes no writes at start (here locked by another connection): the demo key is one log line, the gateway serves, no stack", async () => {
  const config = join(dir, "switchyard-locked.json");
  writeFileSync(config, JSON.stringify({
    providers: [{ id: "up", kind: "openai", base_url: `${upstream.url}/v1` }],
    models: [{ id: "test/paid", provider: "up", upstream_model: "m", category: "text", context_length: 100000, pricing: { input_per_mtok: 1000, output_per_mtok: 1000 } }],
  }));
  const dbPath = join(dir, "locked.sqlite");
  // Made once (schema and all), then held by another connection's write lock through the next start.
  const first = await startProcess({ SWITCHYARD_CONFIG: config, SWITCHYARD_DB: dbPath });
  first.child.kill("SIGTERM");
  await first.child.exited;
  const holder = new Database(dbPath);
  holder.exec("BEGIN EXCLUSIVE");
  const child = Bun.spawn(["bun", "src/index.ts"], {
    cwd: join(import.meta.dir, "../.."),
    env: { ...process.env, PORT: "0", HOST: "127.0.0.1", LOG_LEVEL: "info", SWITCHYARD_DEMO: "1", SWITCHYARD_CONFIG: config, SWITCHYARD_DB: dbPath },
    stdout: "pipe",
    stderr: "pipe",
  });
  try {
    let errors = "";
    const decoder = new TextDecoder();
    const reading = (async () => {
      for await (const chunk of child.stderr) errors += decoder.decode(chunk, { stream: true });
    })();
    for (const until = Date.now() + 20_000; !errors.includes("switchyard listening") && child.exitCode === null && Date.now() < until; ) await Bun.sleep(50);
    expect(child.exitCode).toBeNull();
    expect(errors).toContain("no demo key");
    expect(errors).not.toContain("    at ");
    const url = JSON.parse(errors.split("\n").find((l) => l.includes("switchyard listening"))!).url;
    expect((await fetch(`${url}/health`)).status).toBe(200);
    child.kill("SIGTERM");
    holder.exec("ROLLBACK");
    await child.exited;
    await reading;
  } finally {
    holder.close();
    child.kill("SIGKILL");
  }
}, 40_000);
