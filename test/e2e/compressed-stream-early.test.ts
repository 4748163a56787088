import { afterAll, beforeAll, expect, test } from "bun:test";
import { gzipSync } from "node:zlib";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { OPENAI_MODEL, OPENAI_PRICING, post, startGateway, type Gateway } from "../helpers/gateway.ts";
import { rawUpstream, type RawSocket, type RawUpstream } from "../helpers/raw-upstream.ts";

/**
 * A stream the upstream compressed although the gateway asks for identity is decoded as it
 * comes, by a reader with `read()` only: the stream stage could not look at its first bytes, so a
 * failure there (bytes that are not gzip, an end marker and nothing else) was a 200 with an error
 * frame, never the next model (left by the tenth session's probe; met again by a raw-TCP probe).
 * The stage now reads ahead for at most keepalive_ms, as it waits for an uncompressed stream.
 */
const healthy = useFakeUpstream();
const RAW_MODEL = "test/raw-gzip";
const KEEPALIVE_MS = 600;
const chunk = (content: string | null, finish: string | null = null, usage?: unknown) =>
  `data: ${JSON.stringify({ id: "chatcmpl-gz", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, delta: content === null ? {} : { content }, finish_reason: finish }], ...(usage ? { usage } : {}) })}\n\n`;
const WHOLE = chunk("Hel") + chunk("lo") + chunk(null, "stop", { prompt_tokens: 9, completion_tokens: 2, total_tokens: 11 }) + "data: [DONE]\n\n";
const HEAD = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n";
const piece = (bytes: Uint8Array | string) => {
  const b = typeof bytes === "string" ? Buffer.from(bytes, "latin1") : Buffer.from(bytes);
  return Buffer.concat([Buffer.from(`${b.length.toString(16)}\r\n`), b, Buffer.from("\r\n")]);
};

let answer: (socket: RawSocket) => void = () => {};
let raw: RawUpstream;
let gw: Gateway;

beforeAll(async () => {
  raw = rawUpstream((_request, socket) => answer(socket));
  gw = await startGateway({
    upstreamUrl: healthy.url,
    credits: 100,
    retry: { max_retries: 0 },
    server: { keepalive_ms: KEEPALIVE_MS },
    extraProviders: [{ id: "raw", kind: "openai", base_url: `${raw.url}/v1`, api_key_env: "TEST_OPENAI_KEY", timeouts: { first_byte_ms: 5_000, whole_answer_ms: 5_000, idle_ms: 5_000, total_ms: 60_000 } }],
    extraModels: [{ id: RAW_MODEL, provider: "raw", upstream_model: "gpt-4o-mini", category: "text", context_length: 128_000, pricing: OPENAI_PRICING }],
  });
});
afterAll(async () => {
  await gw?.stop();
  raw?.stop();
});

const ask = (models: string[]) => post(gw, "/v1/chat/completions", { models, messages: [{ role: "user", content: "Hello" }], stream: true, stream_options: { include_usage: true } });
const records = () => gw.db.query<{ model: string; status: string }, []>("SELECT model, status FROM usage_records ORDER BY id").all();

test("a gzip stream whose bytes are not gzip: the next model answers, and alone it is a 502 that costs nothing", async () => {
  answer = (socket) => {
    socket.write(HEAD + piece(WHOLE).toString("latin1"));
    setTimeout(() => socket.data.closed || socket.write("0\r\n\r\n"), 20);
  };
  const before = records().length;
  const fellBack = await ask([RAW_MODEL, OPENAI_MODEL]);
  expect(fellBack.status).toBe(200);
  const text = await fellBack.text();
  expect(text).toContain(`"model":"${OPENAI_MODEL}"`);
  expect(text).not.toContain('"error"');
  await gw.app.services.settled();
  expect(records().slice(before).map((r) => [r.model, r.status])).toEqual([[OPENAI_MODEL, "ok"]]);

  const balance = await gw.balanceMicro();
  const alone = await ask([RAW_MODEL]);
  expect(alone.status).toBe(502);
  expect(((await alone.json()) as any).error.type).toBe("upstream_error");
  expect(await gw.balanceMicro()).toBe(balance);
  expect(gw.app.services.ledger.openHolds()).toBe(0);
});

test("a real gzip stream, its second half later than keepalive_ms: a keep-alive at keepalive_ms, then every byte in order, charged once", async () => {
  const packed = gzipSync(Buffer.from(WHOLE));
  const half = Math.floor(packed.length / 2);
  answer = (socket) => {
    socket.write(Buffer.concat([Buffer.from(HEAD), piece(packed.subarray(0, half))]));
    setTimeout(() => socket.data.closed || socket.write(Buffer.concat([piece(packed.subarray(half)), Buffer.from("0\r\n\r\n")])), 2 * KEEPALIVE_MS);
  };
  const before = records().length;
  const started = performance.now();
  const res = await ask([RAW_MODEL]);
  expect(res.status).toBe(200);
  // The head comes with the first keep-alive (or the first frames), never later than keepalive_ms allows.
  expect(performance.now() - started).toBeLessThan(2 * KEEPALIVE_MS);
  const text = await res.text();
  expect(text).toContain('"content":"Hel"');
  expect(text).toContain('"content":"lo"');
  expect(text.indexOf('"content":"Hel"')).toBeLessThan(text.indexOf('"content":"lo"'));
  expect(text).toEndWith("data: [DONE]\n\n");
  await gw.app.services.settled();
  expect(records().slice(before).map((r) => [r.model, r.status])).toEqual([[RAW_MODEL, "ok"]]);
  expect(gw.app.services.ledger.openHolds()).toBe(0);
});

test("bytes that are not the coding the head names (gzip, br, zstd): the 502 says the answer was malformed, not that the connection was lost; the next request is answered", async () => {
  for (const coding of ["gzip", "br", "zstd"]) {
    answer = (socket) => socket.write(HEAD.replace("gzip", coding) + piece(WHOLE).toString("latin1") + "0\r\n\r\n");
    const res = await ask([RAW_MODEL]);
    expect(res.status).toBe(502);
    const message = ((await res.json()) as { error: { message: string } }).error.message;
    // Bun's decoder fails with a TypeError ("inflate failed"), which was told as a lost connection.
    expect(message).toBe("The upstream provider sent malformed data.");
  }
  answer = (socket) => socket.write(HEAD.replace("content-encoding: gzip\r\n", "") + piece(WHOLE).toString("latin1") + "0\r\n\r\n");
  expect((await ask([RAW_MODEL])).status).toBe(200);
});

test("the same through fetch (a proxy configured): fetch's decoding failure is malformed data too", async () => {
  const viaFetch = await startGateway({
    upstreamUrl: healthy.url,
    upstreamViaProxy: true,
    retry: { max_retries: 0 },
    server: { keepalive_ms: KEEPALIVE_MS },
    extraProviders: [{ id: "raw", kind: "openai", base_url: `${raw.url}/v1`, api_key_env: "TEST_OPENAI_KEY", timeouts: { first_byte_ms: 5_000, whole_answer_ms: 5_000, idle_ms: 5_000, total_ms: 60_000 } }],
    extraModels: [{ id: RAW_MODEL, provider: "raw", upstream_model: "gpt-4o-mini", category: "text", context_length: 128_000, pricing: OPENAI_PRICING }],
  });
  try {
    for (const coding of ["gzip", "br", "zstd"]) {
      answer = (socket) => socket.write(HEAD.replace("gzip", coding) + piece(WHOLE).toString("latin1") + "0\r\n\r\n");
      const res = await post(viaFetch, "/v1/chat/completions", { model: RAW_MODEL, messages: [{ role: "user", content: "Hello" }], stream: true });
      expect(res.status).toBe(502);
      // fetch fails with a TypeError whose code is ZlibError (BrotliDecompressionError, ZstdDecompressionError).
      expect(((await res.json()) as { error: { message: string } }).error.message).toBe("The upstream provider sent malformed data.");
    }
  } finally {
    await viaFetch.stop();
  }
});

test("a real gzip stream broken mid-way: not-gzip bytes are malformed data, a reset is still a lost connection", async () => {
  const packed = gzipSync(Buffer.from(WHOLE));
  const half = Math.floor(packed.length / 2);
  for (const [name, rest, expected] of [
    ["garbage after the first half", (socket: RawSocket) => socket.write(piece("this is not the rest of the gzip stream at all\n\n").toString("latin1") + "0\r\n\r\n"), "malformed data"],
    ["a reset after the first half", (socket: RawSocket) => socket.terminate(), "connection to the upstream provider was lost"],
  ] as const) {
    answer = (socket) => {
      socket.write(Buffer.concat([Buffer.from(HEAD), piece(packed.subarray(0, half))]));
      setTimeout(() => socket.data.closed || rest(socket), 2 * KEEPALIVE_MS);
    };
    const res = await ask([RAW_MODEL]);
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text, name).toContain(expected);
  }
});
