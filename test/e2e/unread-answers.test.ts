/**
 * Whole (non-streamed) answers an account's clients do not read. A hostile-tenant probe (twenty-third
 * session) sent 40 base64 embeddings requests of ~33 MB answers, ~US$0.0003 each, on connections it
 * never read: every answer waited whole in the gateway, 330 MB → 4 GB in 35 s. Now an account's
 * requests hold at most `limits.answer_per_account_bytes` of whole answers (those not yet read, and
 * what embeddings lists under way are expected to take); past it, 429 before anything is held or
 * charged. A large answer goes out as fast as its client reads, and a client that reads nothing for
 * `client_idle_ms` is given up, which gives its bytes back. Other accounts are not held up.
 */
import { afterEach, expect, setDefaultTimeout, test } from "bun:test";
import net from "node:net";
import { fakeEmbedding, fakeEmbeddingBase64, useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, IMAGES_API_MODEL, OPENAI_MODEL, post, startGateway, useGateway } from "../helpers/gateway.ts";
import { until } from "../helpers/until.ts";

setDefaultTimeout(30_000);

const EMBED = "test/embed";
/**
 * 1,024 inputs of 3,072 dimensions in base64: 16.8 MB an answer, and as much expected of each
 * request; more than the kernel's socket buffers on loopback take of an answer nobody reads
 * (4 MB to send here), so such an answer is still being sent while its client reads nothing.
 */
const INPUTS = 1_024;
const DIMENSIONS = 3_072;
const SHARE = 48 * 1024 * 1024;
const upstream = useFakeUpstream();
const gw = useGateway(() => ({
  upstreamUrl: upstream.url,
  clientIdleMs: 3_000,
  limits: { answer_per_account_bytes: SHARE },
  extraModels: [{ id: EMBED, provider: "fake-openai", upstream_model: "text-embedding-3-small", category: "embedding", context_length: 8192, pricing: { input_per_mtok: 20, output_per_mtok: 0 } }],
}));

const inputs = Array.from({ length: INPUTS }, (_, i) => `input number ${i}`);
const embeddingsBody = JSON.stringify({ model: EMBED, input: inputs, encoding_format: "base64", dimensions: DIMENSIONS });

const sockets: net.Socket[] = [];
afterEach(() => {
  for (const s of sockets.splice(0)) s.destroy();
});

/** An embeddings POST (to `url`'s gateway) on a raw socket that reads nothing past its status line, which it resolves with. */
function unreadPost(key: string, path = "/v1/embeddings", body = embeddingsBody, url = gw.url): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(new URL(url).port), "127.0.0.1");
    sockets.push(socket);
    socket.once("error", reject);
    socket.once("data", (d) => {
      resolve(d.toString("latin1").split("\r\n")[0]!);
      // From here on it reads nothing more.
      socket.pause();
    });
    socket.write(`POST ${path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${key}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  });
}

/** Streamed chat answers of 60,000 small frames (~11 MB), far more than the sockets take unread. */
function largeStreams(): void {
  const frame = `data: ${JSON.stringify({ id: "chatcmpl-s", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, delta: { content: "a" }, finish_reason: null }] })}\n\n`;
  upstream.rule((rec) => (rec.path === "/v1/chat/completions" && rec.body?.stream ? { kind: "sse", chunks: Array.from({ length: 600 }, () => frame.repeat(100)).concat("data: [DONE]\n\n") } : undefined));
}
const STREAM_BODY = JSON.stringify({ model: "test/free", stream: true, messages: [{ role: "user", content: "hi" }] });

const ask = (key = gw.key) => fetch(`${gw.url}/v1/embeddings`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: embeddingsBody });

/** The answer is whole: every vector the fake upstream made, byte for byte. */
async function expectWhole(res: Response): Promise<void> {
  expect(res.status).toBe(200);
  const body = (await res.json()) as { data: { index: number; embedding: string }[] };
  expect(body.data.length).toBe(INPUTS);
  for (const i of [0, 127, INPUTS - 1]) expect(body.data[i]!.embedding).toBe(fakeEmbeddingBase64(fakeEmbedding(inputs[i]!, DIMENSIONS)));
}

test("unread whole answers hold at most the account's share; past it 429, nothing charged; another account is served; given up after client_idle_ms, the share comes back", async () => {
  // Six at once, none read: two fit in 48 MiB (16.8 MB expected of each), the others are refused.
  const lines = await Promise.all(Array.from({ length: 6 }, () => unreadPost(gw.key)));
  expect(lines.filter((l) => l.startsWith("HTTP/1.1 200")).length).toBe(2);
  expect(lines.filter((l) => l.startsWith("HTTP/1.1 429")).length).toBe(4);

  // While they wait unread, the account is refused before anything is held: nothing charged.
  const before = await gw.balanceMicro();
  const recordsBefore = gw.db.query("SELECT count(*) AS n FROM usage_records").get() as { n: number };
  const refused = await ask();
  expect(refused.status).toBe(429);
  expect(refused.headers.get("retry-after")).toBe("1");
  const error = ((await refused.json()) as any).error;
  expect(error.type).toBe("rate_limit_error");
  expect(error.code).toBe("rate_limit_exceeded");
  expect(error.message).toContain("limits.answer_per_account_bytes");
  expect(await gw.balanceMicro()).toBe(before);
  expect((gw.db.query("SELECT count(*) AS n FROM usage_records").get() as { n: number }).n).toBe(recordsBefore.n);

  // Another account is not held up by this one's unread answers.
  const other = await gw.app.services.accounts.createAccount("other", 1_000_000_000);
  const otherKey = (await gw.app.services.accounts.createKey(other.id, "other"))!;
  await expectWhole(await ask(otherKey.key));

  // The non-readers are given up after client_idle_ms (3 s); then a reader gets the whole answer.
  // Asked again until the share is back, not after a fixed wait: a share never given back fails at the bound.
  const whole = await until("the non-readers given up and their share back", 10_000, async () => {
    const res = await ask();
    if (res.status !== 429) return res;
    await res.arrayBuffer();
    return false;
  }, 100);
  await expectWhole(whole);
});

test("a large whole chat answer goes out paced and whole; a request that failed upstream gives its share back", async () => {
  const content = "z".repeat(3_000_000);
  upstream.reply({
    kind: "json",
    body: { id: "chatcmpl-big", object: "chat.completion", created: 1, model: "free-model", choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: "stop" }], usage: { prompt_tokens: 5, completion_tokens: 100, total_tokens: 105 } },
  });
  const res = await post(gw, "/v1/chat/completions", { model: "test/free", messages: [{ role: "user", content: "hi" }] });
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toBe("application/json;charset=utf-8");
  const body = (await res.json()) as { choices: { message: { content: string } }[] };
  expect(body.choices[0]!.message.content).toBe(content);

  // Failed embeddings requests (the upstream's 500s) hold nothing afterwards: more of them than
  // the share would take at once still leave room for a whole answer.
  for (let i = 0; i < 6; i++) {
    upstream.reply({ kind: "json", status: 400, body: { error: { message: "bad", type: "invalid_request_error", param: null, code: null } } });
    const failed = await ask();
    expect(failed.status).toBe(400);
    await failed.arrayBuffer();
  }
  await expectWhole(await ask());
});

test("a client given up after client_idle_ms gets no answer framed as whole: its connection is closed, not ended with a short body", async () => {
  // A 16.8 MB answer nobody reads for client_idle_ms (3 s) and more, then read to the end.
  const socket = net.connect(Number(new URL(gw.url).port), "127.0.0.1");
  sockets.push(socket);
  const chunks: Buffer[] = [];
  const ended = new Promise<string>((resolve) => {
    socket.once("close", () => resolve("closed"));
    socket.once("error", () => resolve("closed"));
  });
  const head = new Promise<void>((resolve) => socket.once("data", () => (socket.pause(), resolve())));
  socket.on("data", (d: Buffer) => chunks.push(d));
  socket.write(`POST /v1/embeddings HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${gw.key}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(embeddingsBody)}\r\n\r\n${embeddingsBody}`);
  // Counted from the answer's first bytes: making it takes seconds on a loaded machine.
  await head;
  await Bun.sleep(4_500);
  socket.resume();
  // Given up, the answer is cut: the connection closes without chunked encoding's last chunk, so
  // the client sees a failed read (which the SDKs retry), not a short JSON body framed as whole on
  // a connection left open for its next request.
  const outcome = await Promise.race([ended, Bun.sleep(5_000).then(() => "still open")]);
  const received = Buffer.concat(chunks).toString("latin1");
  expect(received.startsWith("HTTP/1.1 200")).toBe(true);
  expect(received.length).toBeLessThan(16_000_000);
  expect(received.endsWith("\r\n0\r\n\r\n")).toBe(false);
  expect(outcome).toBe("closed");
});

test("a whole answer that comes after a stream failed before it started is held in the share too", async () => {
  // A stream asked of a model that fails before its first byte (Anthropic's overloaded error after
  // message_start), then of the images API, which answers whole: 10 MB of image as the client's
  // frames, which its client does not read. The stream's attempt had given the request's hold back,
  // and the whole answer after it was paced but never counted: the account's share looked empty.
  const share = 20 * 1024 * 1024;
  const gw2 = await startGateway({
    upstreamUrl: upstream.url,
    clientIdleMs: 5_000,
    retry: { max_retries: 0 },
    maxImageBytes: 8 * 1024 * 1024,
    limits: { answer_per_account_bytes: share },
    extraModels: [{ id: EMBED, provider: "fake-openai", upstream_model: "text-embedding-3-small", category: "embedding", context_length: 8192, pricing: { input_per_mtok: 20, output_per_mtok: 0 } }],
  });
  try {
    const ev = (type: string, data: object) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
    upstream.reply({ kind: "sse", chunks: [
      ev("message_start", { message: { id: "msg_1", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 10, output_tokens: 1 } } }) +
        ev("error", { error: { type: "overloaded_error", message: "Overloaded" } }),
    ] });
    const png = Buffer.alloc(7_500_000);
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]).copy(png);
    upstream.reply({ kind: "json", body: { created: 1, data: [{ b64_json: png.toString("base64"), revised_prompt: "x" }] } });
    const body = JSON.stringify({ models: [ANTHROPIC_MODEL, IMAGES_API_MODEL], max_tokens: 50, messages: [{ role: "user", content: "a cat" }], stream: true });
    const socket = net.connect(Number(new URL(gw2.url).port), "127.0.0.1");
    sockets.push(socket);
    const line = await new Promise<string>((resolve, reject) => {
      socket.once("error", reject);
      socket.once("data", (d: Buffer) => {
        resolve(d.toString("latin1").split("\r\n")[0]!);
        socket.pause();
      });
      socket.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${gw2.key}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    });
    expect(line).toBe("HTTP/1.1 200 OK");
    expect(upstream.requests.map((r) => new URL(r.url).pathname)).toEqual(["/v1/messages", "/v1/images/generations"]);
    // 16.8 MB expected of the embeddings request: alone it fits the 20 MiB share; beside the
    // 10 MB answer still unread, it does not.
    const refused = await fetch(`${gw2.url}/v1/embeddings`, { method: "POST", headers: { authorization: `Bearer ${gw2.key}`, "content-type": "application/json" }, body: embeddingsBody });
    await refused.arrayBuffer();
    expect(refused.status).toBe(429);
  } finally {
    await gw2.stop();
  }
});

/**
 * A chat completion as OpenAI writes it with `logprobs` and 20 `top_logprobs`: every token of the
 * answer limit with its 21 entries, ~1.2 KB a token (~10 MB for 8,192 tokens, ~US$0.005 at
 * GPT-6 Luna's prices).
 */
function logprobsAnswer(body: any) {
  const tokens = Array.from({ length: body.max_tokens ?? body.max_completion_tokens }, () => " lo");
  const entry = (token: string, logprob: number) => ({ token, logprob, bytes: [...Buffer.from(token)] });
  const content = tokens.map((t) => ({ ...entry(t, -0.0123456), top_logprobs: Array.from({ length: body.top_logprobs }, (_, k) => entry(` w${k}`, -3.14159 - k)) }));
  return {
    id: "chatcmpl-lp", object: "chat.completion", created: 1, model: "gpt-4o-mini",
    choices: [{ index: 0, message: { role: "assistant", content: tokens.join(""), refusal: null }, logprobs: { content, refusal: null }, finish_reason: "length" }],
    usage: { prompt_tokens: 8, completion_tokens: tokens.length, total_tokens: tokens.length + 8 },
  };
}

test("whole chat answers with logprobs count in the share before they are made: many at once on unread sockets are not all admitted", async () => {
  // A hostile-tenant probe (twenty-fourth session): chat answers expected nothing, so 60 such
  // requests at once were all admitted while the share was empty, ~590 MB of answers held unread
  // and the gateway at 2.6 GB, for 246 credits. Each expects ~11 MB here: 4 fit in 48 MiB.
  upstream.rule((rec) => (rec.path === "/v1/chat/completions" && rec.body?.logprobs ? { kind: "json", body: logprobsAnswer(rec.body) } : undefined));
  const chat = JSON.stringify({ model: OPENAI_MODEL, max_tokens: 8192, logprobs: true, top_logprobs: 20, messages: [{ role: "user", content: "hi" }] });
  const lines = await Promise.all(Array.from({ length: 10 }, () => unreadPost(gw.key, "/v1/chat/completions", chat)));
  const served = lines.filter((l) => l.startsWith("HTTP/1.1 200")).length;
  expect(served).toBeGreaterThanOrEqual(1);
  expect(served).toBeLessThanOrEqual(5);
  // Every other one refused (429); on a failure, what the others were answered says why.
  expect(lines.filter((l) => !l.startsWith("HTTP/1.1 200") && !l.startsWith("HTTP/1.1 429"))).toEqual([]);
  expect(lines.filter((l) => l.startsWith("HTTP/1.1 429")).length).toBe(10 - served);
  // The upstream was asked only for those admitted: the refused held nothing and cost nothing.
  expect(upstream.requests.filter((r) => r.path === "/v1/chat/completions").length).toBe(served);

  // Once the non-readers are gone (closed, or given up after client_idle_ms), the share is back
  // and such an answer is served whole.
  for (const s of sockets.splice(0)) s.destroy();
  const res = await until("the share back once the unread sockets are gone", 10_000, async () => {
    // A reset on a pooled keep-alive connection is tried again on a new one: seen once in a CI run
    // (the fetch's ECONNRESET before any answer; not reproduced in isolation, docs/decisions.md).
    const r = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 8192, logprobs: true, top_logprobs: 20, messages: [{ role: "user", content: "hi" }] })
      .catch((err: { code?: string }) => {
        if (err?.code === "ECONNRESET") return undefined;
        throw err;
      });
    if (!r) return false;
    if (r.status !== 429) return r;
    await r.arrayBuffer();
    return false;
  }, 100);
  expect(res.status).toBe(200);
  const body = (await res.json()) as any;
  expect(body.choices[0].logprobs.content.length).toBe(8192);
  upstream.rule(undefined);
});

test("whole image answers count in the share before they are made: many at once on unread sockets are not all admitted, streamed or not", async () => {
  // The same probe: 40 image requests at once (an 8 MB PNG each, ~10.7 MB as a data URI) were all
  // admitted, the gateway at 1.66 GB. Each now expects an image of max_image_bytes (8 MiB, ~11.2 MB
  // in base64): 4 fit in 48 MiB. The images API answers whole even to `stream: true`.
  const png = new Uint8Array(8_000_000);
  png.set([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  const b64 = Buffer.from(png).toString("base64");
  upstream.rule((rec) => (rec.path === "/v1/images/generations" ? { kind: "json", body: { created: 1, data: [{ b64_json: b64 }] } } : undefined));
  for (const stream of [false, true]) {
    upstream.requests.length = 0;
    const image = JSON.stringify({ model: IMAGES_API_MODEL, stream, messages: [{ role: "user", content: "a cat" }] });
    const lines = await Promise.all(Array.from({ length: 10 }, () => unreadPost(gw.key, "/v1/chat/completions", image)));
    const served = lines.filter((l) => l.startsWith("HTTP/1.1 200")).length;
    expect(served).toBeGreaterThanOrEqual(1);
    expect(served).toBeLessThanOrEqual(5);
    expect(lines.filter((l) => l.startsWith("HTTP/1.1 429")).length).toBe(10 - served);
    expect(upstream.requests.filter((r) => r.path === "/v1/images/generations").length).toBe(served);
    for (const s of sockets.splice(0)) s.destroy();
    // Served whole once the unread answers are let go and the share is back.
    const res = await until("served once the share is back", 10_000, async () => {
      const r = await post(gw, "/v1/chat/completions", { model: IMAGES_API_MODEL, messages: [{ role: "user", content: "a cat" }] });
      if (r.status !== 429) return r;
      await r.arrayBuffer();
      return false;
    }, 100);
    expect(res.status).toBe(200);
    expect(((await res.json()) as any).choices[0].message.content).toContain(b64.slice(0, 1000));
  }
  upstream.rule(undefined);
});

/** A raw request that reads nothing past its first bytes; resolves when the gateway closes the connection (or with "open" at `waitMs`). */
function closedWithin(path: string, body: string, waitMs: number): Promise<{ status: string; closedAfterMs: number | "open" }> {
  return new Promise((resolve) => {
    const socket = net.connect(Number(new URL(gw.url).port), "127.0.0.1");
    sockets.push(socket);
    const started = performance.now();
    let status = "";
    socket.once("data", (d) => {
      status = d.toString("latin1").split("\r\n")[0]!;
      socket.pause();
    });
    const timer = setTimeout(() => resolve({ status, closedAfterMs: "open" }), waitMs);
    socket.once("close", () => {
      clearTimeout(timer);
      resolve({ status, closedAfterMs: performance.now() - started });
    });
    socket.on("error", () => {});
    socket.write(`POST ${path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${gw.key}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  });
}

test("a client given up after client_idle_ms has its connection closed, a whole answer's or a stream's", async () => {
  // A hostile-tenant probe (twenty-fourth session): given up, the answer was closed gracefully,
  // which waits for the client to take what the server still holds: it never does, and the
  // connection stayed open (200 s seen, client_idle_ms 3 s), a descriptor and its socket buffers
  // held outside every bound (the request had ended: no concurrency place, no share).
  const whole = closedWithin("/v1/embeddings", embeddingsBody, 20_000);
  largeStreams();
  const stream = closedWithin("/v1/chat/completions", STREAM_BODY, 20_000);
  const [w, st] = await Promise.all([whole, stream]);
  upstream.rule(undefined);
  expect(w.status).toBe("HTTP/1.1 200 OK");
  expect(st.status).toBe("HTTP/1.1 200 OK");
  // client_idle_ms is 3 s: closed within a few of them, never left open.
  expect(w.closedAfterMs).not.toBe("open");
  expect(st.closedAfterMs).not.toBe("open");
});

test("streams waiting for clients that read nothing count in the account's share: past it 429, another account served; once they are gone the share comes back", async () => {
  // A hostile-tenant probe (twenty-fourth session): 1,000 streams of a free model never read held
  // ~310 MB of the gateway, 3,000 1.44 GB, each tenant bounded only by its keys' request rates
  // (and keys are free to make). A stream that waits for its client now holds its place in the
  // share (STALLED_STREAM_BYTES and the write it waits on) while it waits.
  const small = await startGateway({ upstreamUrl: upstream.url, clientIdleMs: 20_000, limits: { answer_per_account_bytes: 256 * 1024 } });
  try {
    largeStreams();
    const chat = (key: string) => fetch(`${small.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify({ model: OPENAI_MODEL, messages: [{ role: "user", content: "hi" }] }) });
    expect(await unreadPost(small.key, "/v1/chat/completions", STREAM_BODY, small.url)).toBe("HTTP/1.1 200 OK");
    expect(await unreadPost(small.key, "/v1/chat/completions", STREAM_BODY, small.url)).toBe("HTTP/1.1 200 OK");

    // Once they wait for their clients, the account's next request is refused (before anything is
    // held or charged, as the first test shows for whole answers: the same refusal).
    const refused = await until("the unread streams counted in the share", 10_000, async () => {
      const res = await chat(small.key);
      if (res.status === 429) return res;
      await res.arrayBuffer();
      return false;
    }, 50);
    expect(refused.headers.get("retry-after")).toBe("1");
    expect(((await refused.json()) as any).error.message).toContain("limits.answer_per_account_bytes");

    // Another account is not held up by them.
    const other = await small.app.services.accounts.createAccount("other", 1_000_000_000);
    const otherKey = (await small.app.services.accounts.createKey(other.id, "other"))!;
    const served = await chat(otherKey.key);
    expect(served.status).toBe(200);
    await served.arrayBuffer();

    // The non-readers leave: their streams end, and the share is the account's again.
    for (const s of sockets.splice(0)) s.destroy();
    const back = await until("the share back once the unread streams ended", 10_000, async () => {
      const res = await chat(small.key);
      if (res.status !== 429) return res;
      await res.arrayBuffer();
      return false;
    }, 50);
    expect(back.status).toBe(200);
    await back.arrayBuffer();
  } finally {
    upstream.rule(undefined);
    for (const s of sockets.splice(0)) s.destroy();
    await small.stop();
  }
});
