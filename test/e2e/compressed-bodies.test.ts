/**
 * Request bodies sent with a Content-Encoding (Codex's `enable_request_compression` sends its
 * Responses requests as zstd). They were read as they came: a gzip body was "not valid UTF-8", and
 * a plain body labelled `br` was served (a hostile-tenant probe). Now the model routes decode
 * gzip, deflate, br and zstd within `limits.max_body_bytes`, counted as they decode (a bomb is a
 * 413 as soon as its output passes the cap), and refuse other codings with a 415.
 */
import { describe, expect, test } from "bun:test";
import * as zlib from "node:zlib";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { OPENAI_MODEL, useGateway } from "../helpers/gateway.ts";

const CAP = 1024 * 1024;
const EMBED = "test/embed";
const upstream = useFakeUpstream();
const gw = useGateway(() => ({
  upstreamUrl: upstream.url,
  // Less than a megabyte of prompt is held at (a token a byte, at 150 or 200 credits a million).
  credits: 100,
  limits: { max_body_bytes: CAP },
  extraModels: [{ id: EMBED, provider: "fake-openai", upstream_model: "text-embedding-3-small", category: "embedding", context_length: 8192, pricing: { input_per_mtok: 200, output_per_mtok: 0 } }],
}));

const zstd = (b: string | Buffer): Buffer => (zlib as unknown as { zstdCompressSync(b: string | Buffer): Buffer }).zstdCompressSync(b);
const ENCODERS: Record<string, (b: string | Buffer) => Buffer> = {
  gzip: (b) => zlib.gzipSync(b),
  deflate: (b) => zlib.deflateSync(b),
  br: (b) => zlib.brotliCompressSync(b),
  zstd,
};

function post(path: string, body: Uint8Array | string, encoding: string | undefined): Promise<Response> {
  return fetch(`${gw.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json", "anthropic-version": "2023-06-01", ...(encoding ? { "content-encoding": encoding } : {}) },
    body,
  });
}

const ROUTES = [
  { path: "/v1/chat/completions", body: { model: OPENAI_MODEL, max_tokens: 5, messages: [{ role: "user", content: "compressed hello" }] }, anthropic: false },
  { path: "/v1/messages", body: { model: OPENAI_MODEL, max_tokens: 5, messages: [{ role: "user", content: "compressed hello" }] }, anthropic: true },
  { path: "/v1/responses", body: { model: OPENAI_MODEL, max_output_tokens: 5, input: "compressed hello" }, anthropic: false },
  { path: "/v1/embeddings", body: { model: EMBED, input: "compressed hello" }, anthropic: false },
];

async function expectError(res: Response, status: number, anthropic: boolean, words: string): Promise<void> {
  expect(res.status).toBe(status);
  const body = await res.json() as { type?: string; error: { type: string; message: string } };
  if (anthropic) expect(body.type).toBe("error");
  expect(body.error.message).toContain(words);
}

describe("a compressed body on the model routes is decoded and answered", () => {
  test.each(ROUTES.flatMap((r) => Object.keys(ENCODERS).map((enc) => [r.path, enc, r] as const)))("%s as %s", async (_p, enc, route) => {
    const res = await post(route.path, ENCODERS[enc]!(JSON.stringify(route.body)), enc);
    expect(res.status).toBe(200);
    await res.text();
    // The vendor got the request, decoded: the client's words, in plain JSON.
    expect(upstream.requests.at(-1)!.rawBody).toContain("compressed hello");
    expect(upstream.requests.at(-1)!.headers["content-encoding"]).toBeUndefined();
  });

  test("raw deflate (no zlib wrapper, as many clients send it) and two codings in turn", async () => {
    const body = JSON.stringify(ROUTES[0]!.body);
    expect((await post("/v1/chat/completions", zlib.deflateRawSync(body), "deflate")).status).toBe(200);
    expect((await post("/v1/chat/completions", zstd(zlib.gzipSync(body)), "gzip, zstd")).status).toBe(200);
    expect((await post("/v1/chat/completions", zlib.gzipSync(body), "identity, GZIP")).status).toBe(200);
  });
});

describe("a compressed body is measured by what it decodes to", () => {
  // The hold bounds a prompt at a token a byte of its body: taken from the Content-Length, a 2 KB
  // gzip of a megabyte of prompt was held (and charged at most) as 2,000 tokens, and skipped the
  // context check. Plain and compressed must be refused alike: past the model's window (400), or
  // at the same worst case (402).
  test.each(ROUTES.map((r) => [r.path, r] as const))("%s: the same refusal for the same body, plain, gzip or zstd", async (path, route) => {
    const big = path === "/v1/embeddings" ? { ...route.body, input: Array.from({ length: 100 }, () => "word ".repeat(1900)) }
      : path === "/v1/responses" ? { ...route.body, input: "word ".repeat(190_000) }
      : { ...route.body, messages: [{ role: "user", content: "word ".repeat(190_000) }] };
    const plain = JSON.stringify(big);
    const answers = [];
    for (const [body, enc] of [[plain, undefined], [zlib.gzipSync(plain), "gzip"], [zstd(plain), "zstd"]] as const) {
      const res = await post(path, body, enc);
      const text = await res.text();
      answers.push([res.status, res.status === 200 ? "answered" : (JSON.parse(text) as { error: { message: string } }).error.message]);
    }
    expect([400, 402]).toContain(answers[0]![0] as number);
    expect(answers[1]).toEqual(answers[0]!);
    expect(answers[2]).toEqual(answers[0]!);
    expect(upstream.requests.length).toBe(0);
  });
});

describe("what is refused", () => {
  test("a bomb: 413 once its output passes max_body_bytes, before all of it is decoded, and no vendor call", async () => {
    // Spaces as members (gzip) or frames (zstd) of 4 MiB each, which decoders read one after
    // another, made in milliseconds: 800 MiB in 0.8 MB of gzip (under the cap as sent), 2 GiB in
    // 100 KB of zstd.
    const piece = Buffer.alloc(4 * 1024 * 1024, 32);
    const bombOf = (one: Buffer, n: number) => Buffer.concat(Array.from({ length: n }, () => one));
    for (const [enc, body] of [["gzip", bombOf(zlib.gzipSync(piece), 200)], ["zstd", bombOf(zstd(piece), 512)]] as const) {
      expect(body.length).toBeLessThan(CAP);
      const before = upstream.requests.length;
      const started = performance.now();
      const res = await post("/v1/messages", body, enc);
      await expectError(res, 413, true, `decompresses to more than the limit of ${CAP} bytes`);
      // Decoding all of it takes a second or more; the cap is reached in milliseconds.
      expect(performance.now() - started).toBeLessThan(1_000);
      expect(upstream.requests.length).toBe(before);
    }
  });

  test("a body that is not what its coding says: 400, never read as plain JSON", async () => {
    const plain = JSON.stringify(ROUTES[1]!.body);
    await expectError(await post("/v1/messages", plain, "br"), 400, true, "not valid br data");
    await expectError(await post("/v1/chat/completions", plain, "gzip"), 400, false, "not valid gzip data");
    expect(upstream.requests.length).toBe(0);
  });

  test("a coding the gateway does not read: 415 in the route's shape", async () => {
    const plain = JSON.stringify(ROUTES[0]!.body);
    await expectError(await post("/v1/chat/completions", plain, "compress"), 415, false, `Content-Encoding "compress" is not one the gateway reads`);
    await expectError(await post("/v1/messages", plain, "x-custom"), 415, true, "send the body uncompressed");
  });

  test("a coding named on a request without a body refuses nothing", async () => {
    const res = await fetch(`${gw.url}/v1/responses/resp_none`, { method: "DELETE", headers: { authorization: `Bearer ${gw.key}`, "content-encoding": "compress" } });
    expect(res.status).toBe(404);
  });

  test("a compressed token count (no turn to decode it in): 415", async () => {
    const body = zlib.gzipSync(JSON.stringify({ model: OPENAI_MODEL, messages: [{ role: "user", content: "hi" }] }));
    await expectError(await post("/v1/messages/count_tokens", body, "gzip"), 415, true, "read on the model routes only");
  });
});
