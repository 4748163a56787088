import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import type { Logger } from "../../src/log/log.ts";
import { silentLogger } from "../../src/log/log.ts";
import { createApp } from "../../src/app.ts";
import { loadSettings } from "../../src/config/load-config.ts";
import { openDatabase } from "../../src/store/database.ts";
import { hashEmbedding } from "../../src/providers/simulated/hash-embedding.ts";
import { fakeEmbedding, fakeEmbeddingBase64, fakeEmbeddingTokens, FAKE_EMBEDDING_DIMENSIONS, useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, OPENAI_MODEL, post, startGateway, useGateway, type Gateway } from "../helpers/gateway.ts";
import { seededMutations } from "../helpers/seeded-mutations.ts";

/** Two embedding models on the fake OpenAI provider, priced apart so a charge says which answered. */
const EMBED = "test/embed";
const EMBED_LARGE = "test/embed-large";
const SMALL_PRICE = 20; // credits per million tokens = micro-credits per token
const LARGE_PRICE = 130;
const embeddingModels = [
  { id: EMBED, provider: "fake-openai", upstream_model: "text-embedding-3-small", category: "embedding", context_length: 8192, pricing: { input_per_mtok: SMALL_PRICE, output_per_mtok: 0 } },
  { id: EMBED_LARGE, provider: "fake-openai", upstream_model: "text-embedding-3-large", category: "embedding", context_length: 8192, pricing: { input_per_mtok: LARGE_PRICE, output_per_mtok: 0 } },
];

const lines: { message: string; fields: Record<string, unknown> }[] = [];
const capture: Logger = (_level, message, fields) => lines.push({ message, fields: JSON.parse(JSON.stringify(fields ?? {})) });

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url, extraModels: embeddingModels, retry: { max_retries: 0 }, log: capture }));
const sdk = () => new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 0 });

/** The upstream's last embeddings request body. */
const sent = () => upstream.requests.filter((r) => r.path === "/v1/embeddings").at(-1)!.body;

type UsageRecord = { model: string; provider: string; prompt_tokens: number; completion_tokens: number; estimated: number; cost_micro: number; status: string };
async function recordOf(g: Gateway, clientRequestId: string): Promise<UsageRecord | null> {
  await g.app.services.settled();
  return g.db
    .query<UsageRecord, [string]>("SELECT model, provider, prompt_tokens, completion_tokens, estimated, cost_micro, status FROM usage_records WHERE client_request_id = ?")
    .get(clientRequestId);
}

/**
 * An OpenAI embeddings body as the vendor writes it (pretty-printed), for replies the default
 * would not give; `usage: "absent"` leaves the field out.
 */
function vendorBody(data: unknown[], usage: unknown = { prompt_tokens: 3, total_tokens: 3 }): { kind: "text"; headers: Record<string, string>; body: string } {
  const body = { object: "list", data, model: "text-embedding-3-small", ...(usage === "absent" ? {} : { usage }) };
  return { kind: "text", headers: { "content-type": "application/json" }, body: JSON.stringify(body, null, 2) + "\n" };
}

describe("POST /v1/embeddings with the openai SDK", () => {
  test("a string, encoding_format float: the upstream's vectors, the gateway's model id, the upstream's usage", async () => {
    const text = "The quick brown fox jumped over the lazy dog";
    const res = await sdk().embeddings.create({ model: EMBED, input: text, encoding_format: "float" });
    expect(res.object).toBe("list");
    expect(res.model).toBe(EMBED);
    expect(res.data).toEqual([{ object: "embedding", index: 0, embedding: fakeEmbedding(text) }]);
    expect(res.data[0]!.embedding).toHaveLength(FAKE_EMBEDDING_DIMENSIONS);
    expect(res.usage).toEqual({ prompt_tokens: fakeEmbeddingTokens(text), total_tokens: fakeEmbeddingTokens(text) });
    // The upstream got OpenAI's request with its own model name and the client's encoding.
    expect(sent()).toEqual({ model: "text-embedding-3-small", input: text, encoding_format: "float" });
    expect(upstream.requests.at(-1)!.headers.authorization).toStartWith("Bearer sk-test-openai");
  });

  test("an array, the SDK's default (it asks for base64 and decodes it): every vector exact, in input order", async () => {
    const inputs = ["first input", "second input", "第三 input — ünïcode"];
    const res = await sdk().embeddings.create({ model: EMBED, input: inputs });
    // The SDK asked base64 of us and we of the upstream: the bytes passed through and decode to its float32 values.
    expect(sent().encoding_format).toBe("base64");
    expect(res.data.map((d) => d.index)).toEqual([0, 1, 2]);
    expect(res.data.map((d) => d.embedding)).toEqual(inputs.map((t) => fakeEmbedding(t)));
    expect(res.usage.prompt_tokens).toBe(inputs.reduce((n, t) => n + fakeEmbeddingTokens(t), 0));
  });

  test("encoding_format base64: the upstream's base64 string as it sent it, little-endian float32", async () => {
    const text = "base64 please";
    const res = await sdk().embeddings.create({ model: EMBED, input: text, encoding_format: "base64" });
    const b64 = res.data[0]!.embedding as unknown as string;
    expect(b64).toBe(fakeEmbeddingBase64(fakeEmbedding(text)));
    const bytes = Buffer.from(b64, "base64");
    expect(Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4))).toEqual(fakeEmbedding(text));
  });

  test("an upstream that ignores encoding_format: the SDK's default still gets base64 (converted exactly), a float client still gets floats", async () => {
    const a = fakeEmbedding("alpha", 8);
    const b = fakeEmbedding("beta", 8);
    // Asked for base64, the upstream answers floats (some compatible servers do).
    upstream.reply(vendorBody([{ object: "embedding", index: 0, embedding: a }, { object: "embedding", index: 1, embedding: b }]));
    const res = await sdk().embeddings.create({ model: EMBED, input: ["alpha", "beta"] });
    expect(sent().encoding_format).toBe("base64");
    expect(res.data.map((d) => d.embedding)).toEqual([a, b]);
    // Asked for floats, the upstream answers base64.
    upstream.reply(vendorBody([{ object: "embedding", index: 0, embedding: fakeEmbeddingBase64(a) }]));
    const floats = await sdk().embeddings.create({ model: EMBED, input: "alpha", encoding_format: "float" });
    expect(floats.data[0]!.embedding).toEqual(a);
    // And base64 asked explicitly from an upstream that sent floats: the SDK hands the string over as it came.
    upstream.reply(vendorBody([{ object: "embedding", index: 0, embedding: b }]));
    const raw = await sdk().embeddings.create({ model: EMBED, input: "beta", encoding_format: "base64" });
    expect(raw.data[0]!.embedding as unknown as string).toBe(fakeEmbeddingBase64(b));
  });

  test("float32's extremes are numbers: the largest float32 as the shortest decimal that names it (3.4028235e38) is passed on", async () => {
    upstream.reply(vendorBody([{ object: "embedding", index: 0, embedding: [3.4028235e38, -3.4028235e38, 1.4e-45] }]));
    const res = await post(gw, "/v1/embeddings", { model: EMBED, input: "x", encoding_format: "float" });
    expect(res.status).toBe(200);
    expect(((await res.json()) as any).data[0].embedding).toEqual([3.4028235e38, -3.4028235e38, 1.4e-45]);
  });

  test("items the upstream sent out of order come back in index order", async () => {
    const [a, b] = [fakeEmbedding("one", 4), fakeEmbedding("two", 4)];
    upstream.reply(vendorBody([{ object: "embedding", index: 1, embedding: b }, { object: "embedding", index: 0, embedding: a }]));
    const res = await sdk().embeddings.create({ model: EMBED, input: ["one", "two"], encoding_format: "float" });
    expect(res.data.map((d) => [d.index, d.embedding])).toEqual([[0, a], [1, b]]);
  });

  test("dimensions and user are forwarded; the vectors have the asked length", async () => {
    const res = await sdk().embeddings.create({ model: EMBED, input: "short", dimensions: 256, user: "user-42", encoding_format: "float" });
    expect(sent()).toMatchObject({ dimensions: 256, user: "user-42" });
    expect(res.data[0]!.embedding).toEqual(fakeEmbedding("short", 256));
    // The SDK default with dimensions: decoded to 256 floats.
    const decoded = await sdk().embeddings.create({ model: EMBED, input: "short", dimensions: 256 });
    expect(decoded.data[0]!.embedding).toEqual(fakeEmbedding("short", 256));
  });

  test("token arrays: one (array of ints) or several (array of int arrays), passed as they are, billed by their length", async () => {
    const one = await sdk().embeddings.create({ model: EMBED, input: [791, 4062, 14198], encoding_format: "float" });
    expect(sent().input).toEqual([791, 4062, 14198]);
    expect(one.data).toEqual([{ object: "embedding", index: 0, embedding: fakeEmbedding([791, 4062, 14198]) }]);
    expect(one.usage.prompt_tokens).toBe(3);
    const several = await sdk().embeddings.create({ model: EMBED, input: [[1, 2], [3, 4, 5]] });
    expect(sent().input).toEqual([[1, 2], [3, 4, 5]]);
    expect(several.data.map((d) => d.embedding)).toEqual([fakeEmbedding([1, 2]), fakeEmbedding([3, 4, 5])]);
  });
});

describe("billing, records, limits", () => {
  test("the balance falls by exactly the priced input tokens; the usage record carries the request id, model, tokens and cost", async () => {
    const before = await gw.balanceMicro();
    const input = ["billing by the token", "and another input here"];
    const res = await post(gw, "/v1/embeddings", { model: EMBED, input }, { "x-request-id": "emb-bill-1" });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-request-id")).toBe("emb-bill-1");
    // The admission plugin's rate-limit headers, as on every authenticated answer.
    expect(res.headers.get("x-ratelimit-limit-requests")).toBe("1000000");
    expect(res.headers.get("x-ratelimit-remaining-requests")).toMatch(/^\d+$/);
    const tokens = input.reduce((n, t) => n + fakeEmbeddingTokens(t), 0);
    expect(((await res.json()) as { usage: unknown }).usage).toEqual({ prompt_tokens: tokens, total_tokens: tokens });
    expect(before - (await gw.balanceMicro())).toBe(tokens * SMALL_PRICE);
    expect(await recordOf(gw, "emb-bill-1")).toEqual({
      model: EMBED, provider: "fake-openai", prompt_tokens: tokens, completion_tokens: 0, estimated: 0, cost_micro: tokens * SMALL_PRICE, status: "ok",
    });
    // The access-log line, as for chat.
    const access = lines.find((l) => l.message === "request" && l.fields.clientRequestId === "emb-bill-1")!.fields;
    expect(access).toMatchObject({ path: "/v1/embeddings", status: 200, outcome: "complete", model: EMBED, provider: "fake-openai", promptTokens: tokens, completionTokens: 0, credits: (tokens * SMALL_PRICE) / 1e6 });
  });

  test("an upstream without usable usage is billed by the gateway's count, marked estimated, and the answer says that count", async () => {
    for (const [name, usage] of [["absent", "absent"], ["null", null], ["broken", { prompt_tokens: "n/a", total_tokens: -1 }]] as const) {
      upstream.reply(vendorBody([{ object: "embedding", index: 0, embedding: fakeEmbedding("x", 4) }], usage));
      const before = await gw.balanceMicro();
      const id = `emb-estimate-${name}`;
      const res = await post(gw, "/v1/embeddings", { model: EMBED, input: "hello hello hello hello" }, { "x-request-id": id });
      expect(res.status).toBe(200);
      const answered = ((await res.json()) as { usage: { prompt_tokens: number; total_tokens: number } }).usage;
      const record = (await recordOf(gw, id))!;
      expect(record).toMatchObject({ estimated: 1, status: "ok", completion_tokens: 0 });
      // o200k: "hello" and four " hello"s are 4 tokens; never zero, never the broken number.
      expect(record.prompt_tokens).toBe(4);
      expect(answered).toEqual({ prompt_tokens: record.prompt_tokens, total_tokens: record.prompt_tokens });
      expect(before - (await gw.balanceMicro())).toBe(record.prompt_tokens * SMALL_PRICE);
    }
  });

  test("a reported count past the input's bound is recorded and answered as the bound it is charged for, not the vendor's count nor up to 1,024 tokens more", async () => {
    for (const [name, reported] of [["1,000", 1_000], ["99,999,999", 99_999_999]] as const) {
      upstream.reply(vendorBody([{ object: "embedding", index: 0, embedding: fakeEmbedding("x", 4) }], { prompt_tokens: reported, total_tokens: reported }));
      const before = await gw.balanceMicro();
      const id = `emb-over-bound-${reported}`;
      const res = await post(gw, "/v1/embeddings", { model: EMBED, input: "hello world" }, { "x-request-id": id });
      expect(res.status).toBe(200);
      const answered = ((await res.json()) as { usage: unknown }).usage;
      const charged = before - (await gw.balanceMicro());
      const record = (await recordOf(gw, id))!;
      // The bound: 11 bytes plus 4 for markers a server may add (embeddings-input.ts).
      expect(charged, name).toBe(15 * SMALL_PRICE);
      // Without the fix the record said 1,000 and 1,039 tokens for a charge of 15.
      expect(record, name).toMatchObject({ prompt_tokens: 15, cost_micro: charged });
      const access = lines.find((l) => l.message === "request" && l.fields.clientRequestId === id)!.fields;
      expect(access, name).toMatchObject({ promptTokens: 15, credits: charged / 1e6 });
      // `usage` is what was charged (docs/api.md): it said the vendor's number.
      expect(answered, name).toEqual({ prompt_tokens: 15, total_tokens: 15 });
    }
  });

  test("token arrays without upstream usage are billed their length", async () => {
    upstream.reply(vendorBody([{ object: "embedding", index: 0, embedding: fakeEmbedding("x", 4) }, { object: "embedding", index: 1, embedding: fakeEmbedding("y", 4) }], "absent"));
    const res = await post(gw, "/v1/embeddings", { model: EMBED, input: [[1, 2, 3, 4, 5], [6, 7]] }, { "x-request-id": "emb-estimate-tokens" });
    expect(res.status).toBe(200);
    expect(await recordOf(gw, "emb-estimate-tokens")).toMatchObject({ prompt_tokens: 7, estimated: 1, cost_micro: 7 * SMALL_PRICE });
  });

  test("counted in /metrics like chat: requests by route and model, input tokens, credits", async () => {
    const scrape = async () => new Map((await (await fetch(`${gw.url}/metrics`)).text()).split("\n").filter((l) => l && !l.startsWith("#")).map((l) => [l.slice(0, l.lastIndexOf(" ")), Number(l.slice(l.lastIndexOf(" ") + 1))]));
    const key = `switchyard_requests_total{route="/v1/embeddings",model="${EMBED}",provider="fake-openai",status="200"}`;
    const before = await scrape();
    const res = await post(gw, "/v1/embeddings", { model: EMBED, input: "metered words" });
    expect(res.status).toBe(200);
    await gw.app.services.settled();
    const after = await scrape();
    const tokens = fakeEmbeddingTokens("metered words");
    expect((after.get(key) ?? 0) - (before.get(key) ?? 0)).toBe(1);
    const input = `switchyard_tokens_total{model="${EMBED}",direction="input"}`;
    expect((after.get(input) ?? 0) - (before.get(input) ?? 0)).toBe(tokens);
    const credits = `switchyard_credits_charged_total{model="${EMBED}"}`;
    expect((after.get(credits) ?? 0) - (before.get(credits) ?? 0)).toBeCloseTo((tokens * SMALL_PRICE) / 1e6, 9);
  });

  test("upstream 500 → 502 in OpenAI's shape, nothing charged, the record says upstream_error", async () => {
    upstream.reply({ kind: "json", status: 500, body: { error: { message: "The server had an error", type: "server_error" } } });
    const before = await gw.balanceMicro();
    const res = await post(gw, "/v1/embeddings", { model: EMBED, input: "will fail" }, { "x-request-id": "emb-502" });
    expect(res.status).toBe(502);
    const body = (await res.json()) as { error: { message: string; type: string } };
    expect(body.error.type).toBe("upstream_error");
    expect(body.error.message).toContain("status 500");
    expect(await gw.balanceMicro()).toBe(before);
    expect(await recordOf(gw, "emb-502")).toMatchObject({ cost_micro: 0, prompt_tokens: 0, status: "upstream_error" });
  });

  test("an answer that does not hold one vector per input is a 502, uncharged", async () => {
    const before = await gw.balanceMicro();
    const broken = [
      vendorBody([{ object: "embedding", index: 0, embedding: fakeEmbedding("a", 4) }]), // one vector for two inputs
      vendorBody([{ object: "embedding", index: 0, embedding: fakeEmbedding("a", 4) }, { object: "embedding", index: 0, embedding: fakeEmbedding("b", 4) }]), // index repeated
      vendorBody([{ object: "embedding", index: 0, embedding: "not base64!" }, { object: "embedding", index: 1, embedding: fakeEmbedding("b", 4) }]),
      vendorBody([{ object: "embedding", index: 0, embedding: fakeEmbedding("a", 4) }, { object: "embedding", index: 1, embedding: fakeEmbedding("b", 8) }]), // lengths differ
      { kind: "json" as const, body: { error: { message: "quota" } } }, // 200 with an error body
      // NaN or Infinity in base64 (JSON has neither: a float client would get null), a float past float32's range (Infinity to a base64 client).
      vendorBody([{ object: "embedding", index: 0, embedding: Buffer.from(new Float32Array([Number.NaN, 0.5]).buffer).toString("base64") }, { object: "embedding", index: 1, embedding: fakeEmbedding("b", 2) }]),
      vendorBody([{ object: "embedding", index: 0, embedding: Buffer.from(new Float32Array([Number.POSITIVE_INFINITY, 0.5]).buffer).toString("base64") }, { object: "embedding", index: 1, embedding: fakeEmbedding("b", 2) }]),
      vendorBody([{ object: "embedding", index: 0, embedding: [1e39, 0.5] }, { object: "embedding", index: 1, embedding: [0.25, 0.5] }]),
    ];
    for (const reply of broken) {
      upstream.reply(reply);
      const res = await post(gw, "/v1/embeddings", { model: EMBED, input: ["a", "b"] });
      expect(res.status).toBe(502);
      expect(((await res.json()) as { error: { message: string } }).error.message).toContain("unreadable answer");
    }
    expect(await gw.balanceMicro()).toBe(before);
  });

  test("models: a fallback list; the second answers after the first fails, charged at its own price", async () => {
    upstream.reply({ kind: "json", status: 500, body: { error: { message: "down", type: "server_error" } } });
    const before = await gw.balanceMicro();
    const res = await sdk().embeddings.create({ model: EMBED, models: [EMBED_LARGE], input: "fall back", encoding_format: "float" } as OpenAI.EmbeddingCreateParams);
    expect(res.model).toBe(EMBED_LARGE);
    const calls = upstream.requests.filter((r) => r.path === "/v1/embeddings").slice(-2);
    expect(calls.map((r) => r.body.model)).toEqual(["text-embedding-3-small", "text-embedding-3-large"]);
    // `models` is the gateway's: the upstream never sees it.
    expect(calls.every((r) => !("models" in r.body))).toBe(true);
    expect(res.data[0]!.embedding).toEqual(fakeEmbedding("fall back"));
    expect(before - (await gw.balanceMicro())).toBe(fakeEmbeddingTokens("fall back") * LARGE_PRICE);
  });

  test("the upstream's own 400 (an input over its window) reaches the client as a 400 with its words, uncharged", async () => {
    upstream.reply({ kind: "json", status: 400, body: { error: { message: "This model's maximum context length is 8192 tokens, however you requested 9000 tokens (9000 in your prompt; 0 for the completion). Please reduce your prompt; or completion length.", type: "invalid_request_error", param: null, code: null } } });
    const before = await gw.balanceMicro();
    const res = await post(gw, "/v1/embeddings", { models: [EMBED, EMBED_LARGE], input: "long" });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { message: string } }).error.message).toContain("maximum context length is 8192 tokens");
    // The client's to fix: no other model is asked.
    expect(upstream.requests.filter((r) => r.path === "/v1/embeddings")).toHaveLength(1);
    expect(await gw.balanceMicro()).toBe(before);
  });

  test("rate-limited by the key's bucket (shared with chat): 429 with Retry-After", async () => {
    const own = await startGateway({ upstreamUrl: upstream.url, extraModels: embeddingModels, requestsPerMinute: 2 });
    try {
      expect((await post(own, "/v1/embeddings", { model: EMBED, input: "one" })).status).toBe(200);
      expect((await post(own, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: "two" }] })).status).toBe(200);
      const refused = await post(own, "/v1/embeddings", { model: EMBED, input: "three" });
      expect(refused.status).toBe(429);
      expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      expect(((await refused.json()) as { error: { type: string } }).error.type).toBe("rate_limit_error");
      expect(upstream.requests.filter((r) => r.path === "/v1/embeddings")).toHaveLength(1);
    } finally {
      await own.stop();
    }
  });

  test("402 when the balance does not cover the input's worst case; nothing reaches the upstream", async () => {
    // 100 micro-credits: "hello there" may hold up to 11 + 4 tokens at 20 = 300.
    const own = await startGateway({ upstreamUrl: upstream.url, extraModels: embeddingModels, credits: 0.0001 });
    try {
      const res = await post(own, "/v1/embeddings", { model: EMBED, input: "hello there" });
      expect(res.status).toBe(402);
      const body = (await res.json()) as { error: { type: string; message: string } };
      expect(body.error.type).toBe("insufficient_quota");
      expect(body.error.message).toContain("Insufficient credits");
      expect(upstream.requests).toHaveLength(0);
      expect(await own.balanceMicro()).toBe(100);
    } finally {
      await own.stop();
    }
  });

  test("an answer over max_response_bytes is the request's to change: a 400 saying how, its prompt charged (the vendor embedded it), no fallback and no SDK retry", async () => {
    const own = await startGateway({ upstreamUrl: upstream.url, extraModels: embeddingModels, maxResponseBytes: 4096, retry: { max_retries: 2 } });
    try {
      const before = await own.balanceMicro();
      const asked = upstream.requests.length;
      // 1536 floats pretty-printed are ~35 KB. Free and a 502, such a batch was asked of every model
      // of `models` and again by each SDK retry, and the vendor embedded it every time for nothing.
      const client = new OpenAI({ baseURL: `${own.url}/v1`, apiKey: own.key, maxRetries: 2 });
      const error = await client.embeddings.create({ models: [EMBED, EMBED_LARGE], input: "a large answer, ten words of input to be charged", encoding_format: "float" } as never, { headers: { "x-request-id": "too-large-1" } }).catch((e) => e);
      expect(error).toBeInstanceOf(OpenAI.BadRequestError);
      expect(error.message).toContain("larger than the gateway relays (4096 bytes)");
      expect(error.message).toContain("base64");
      expect(upstream.requests.length).toBe(asked + 1);
      const record = await recordOf(own, "too-large-1");
      expect(record).toMatchObject({ model: EMBED, status: "cancelled", estimated: 1 });
      expect(record!.prompt_tokens).toBeGreaterThan(5);
      expect(record!.cost_micro).toBe(record!.prompt_tokens * SMALL_PRICE);
      expect(before - (await own.balanceMicro())).toBe(record!.cost_micro);
    } finally {
      await own.stop();
    }
  });

  test("an upstream past first_byte_ms is a 502, uncharged", async () => {
    const own = await startGateway({ upstreamUrl: upstream.url, extraModels: embeddingModels, firstByteMs: 300, retry: { max_retries: 0 } });
    try {
      const before = await own.balanceMicro();
      upstream.reply({ kind: "hang" });
      const slow = await post(own, "/v1/embeddings", { model: EMBED, input: "slow", dimensions: 4 });
      expect(slow.status).toBe(502);
      expect(((await slow.json()) as { error: { type: string } }).error.type).toBe("timeout_error");
      expect(await own.balanceMicro()).toBe(before);
    } finally {
      await own.stop();
    }
  });
});

describe("bad requests", () => {
  const refused = async (body: unknown, status = 400) => {
    const res = await post(gw, "/v1/embeddings", body);
    expect(res.status).toBe(status);
    const json = (await res.json()) as { error: { message: string; type: string } };
    expect(json.error.type).toBe(status === 404 ? "not_found_error" : "invalid_request_error");
    return json.error.message;
  };

  test("missing, empty or malformed input → 400 naming input and what it must be; nothing sent upstream", async () => {
    expect(await refused({ model: EMBED })).toBe("Invalid request: input: Expected required property.");
    const rule = "must be a non-empty string, or an array of 1 to 2048 non-empty strings";
    for (const input of ["", [], [""], ["ok", ""], [[]], [1, "a"], [-1], [1.5], 42, { text: "x" }, Array(2049).fill("x")]) {
      const message = await refused({ model: EMBED, input });
      expect([input, message.startsWith(`Invalid request: input: ${rule}`)]).toEqual([input, true]);
    }
    expect(await refused({ model: EMBED, input: "x", encoding_format: "float16" })).toBe('Invalid request: encoding_format: must be "float" or "base64".');
    expect(await refused({ model: EMBED, input: "x", dimensions: 0 })).toBe("Invalid request: dimensions: must be a whole number ≥ 1.");
    expect(await refused({ model: EMBED, input: "x", stream: true })).toContain("stream is not supported");
    expect(await refused({ input: "x" })).toBe("model is required (or a models list).");
    expect(upstream.requests).toHaveLength(0);
  });

  test("a model that is not an embedding model → 400 naming it and its category; an unknown one → 404", async () => {
    const message = await refused({ model: OPENAI_MODEL, input: "x" });
    expect(message).toContain(`"${OPENAI_MODEL}" is a text model, not an embedding model`);
    // Also as a fallback: every candidate is checked before anything is sent.
    expect(await refused({ model: EMBED, models: [ANTHROPIC_MODEL], input: "x" })).toContain(`"${ANTHROPIC_MODEL}" is a text model`);
    expect(await refused({ model: "no/such-embedder", input: "x" }, 404)).toContain("does not exist");
    // The SDK sees a BadRequestError.
    expect(await sdk().embeddings.create({ model: OPENAI_MODEL, input: "x" }).catch((e) => e)).toBeInstanceOf(OpenAI.BadRequestError);
    expect(upstream.requests).toHaveLength(0);
  });

  test("an embedding model on the chat endpoints → 400 in each format's shape; nothing sent upstream", async () => {
    const chat = await post(gw, "/v1/chat/completions", { model: EMBED, messages: [{ role: "user", content: "hi" }] });
    expect(chat.status).toBe(400);
    expect(((await chat.json()) as { error: { message: string } }).error.message).toContain(`"${EMBED}" is an embedding model`);
    const messages = await post(gw, "/v1/messages", { model: EMBED, max_tokens: 10, messages: [{ role: "user", content: "hi" }] }, { "anthropic-version": "2023-06-01" });
    expect(messages.status).toBe(400);
    expect(await messages.json()).toMatchObject({ type: "error", error: { type: "invalid_request_error", message: expect.stringContaining("is an embedding model") } });
    const responses = await post(gw, "/v1/responses", { model: EMBED, input: "hi" });
    expect(responses.status).toBe(400);
    const count = await post(gw, "/v1/messages/count_tokens", { model: EMBED, messages: [{ role: "user", content: "hi" }] });
    expect(count.status).toBe(400);
    // A chat fallback list with an embedding model in it is refused too.
    expect((await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, models: [EMBED], messages: [{ role: "user", content: "hi" }] })).status).toBe(400);
    expect(upstream.requests).toHaveLength(0);
  });

  test("listed with its category: GET /v1/models and /v1/models/{id}", async () => {
    const headers = { authorization: `Bearer ${gw.key}` };
    const list = (await (await fetch(`${gw.url}/v1/models`, { headers })).json()) as { data: { id: string; category: string }[] };
    expect(list.data.find((m) => m.id === EMBED)).toMatchObject({ category: "embedding", modalities: { input: ["text"], output: ["embedding"] } });
    expect(await sdk().models.retrieve(EMBED)).toMatchObject({ id: EMBED, object: "model", category: "embedding", context_length: 8192 });
  });
});

describe("hostile bodies", () => {
  test("300 seeded mutations of valid embeddings bodies: only 2xx/4xx, errors in OpenAI's shape without internals", async () => {
    const valid = [
      { model: EMBED, input: "hello", encoding_format: "float", dimensions: 8 },
      { model: EMBED, input: ["a", "b"], encoding_format: "base64", user: "u" },
      { model: EMBED, input: [[1, 2], [3]], dimensions: 4 },
      { models: [EMBED, EMBED_LARGE], input: [5, 6, 7] },
    ];
    const garbage = [null, -1, 0, 0.5, 1e308, "", "x".repeat(300), [], {}, [[]], [""], [null], true, { nested: [1, { x: null }] }];
    const { random, pick, mutate } = seededMutations(0xe3bed, garbage, 3);
    const statuses: number[] = [];
    for (let batch = 0; batch < 15; batch++) {
      await Promise.all(Array.from({ length: 20 }, async () => {
        let body = JSON.stringify(mutate(pick(valid)));
        if (random() < 0.2) body = body.slice(0, Math.floor(random() * body.length));
        const res = await post(gw, "/v1/embeddings", body);
        const text = await res.text();
        statuses.push(res.status);
        if (res.status >= 400) {
          const parsed = JSON.parse(text);
          expect([typeof parsed.error.message, typeof parsed.error.type]).toEqual(["string", "string"]);
          expect(text).not.toMatch(/ at \/|\.ts:\d|node_modules/);
        }
      }));
    }
    for (const status of statuses) expect([status, status < 300 || (status >= 400 && status < 500)]).toEqual([status, true]);
    expect(statuses.filter((s) => s === 200).length).toBeGreaterThan(10);
    expect(statuses.filter((s) => s >= 400).length).toBeGreaterThan(10);
  }, 30_000);
});

describe("the quick start: switchyard/embed on the simulated upstream", () => {
  const dir = mkdtempSync(join(tmpdir(), "switchyard-embed-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  test("the built-in config serves deterministic unit vectors of the asked size, billed at its price", async () => {
    const db = openDatabase(join(dir, "gateway.sqlite"), { busyTimeoutMs: 0 });
    const app = createApp({ db, settings: loadSettings({}, dir), log: silentLogger });
    const account = await app.services.accounts.createAccount("demo", 100_000_000);
    const key = (await app.services.accounts.createKey(account.id, "demo"))!;
    app.listen({ port: 0, hostname: "127.0.0.1" });
    try {
      const client = new OpenAI({ baseURL: `http://127.0.0.1:${app.server!.port}/v1`, apiKey: key.key, maxRetries: 0 });
      const texts = ["a cat sat on the mat", "the cat sat on a mat", "stock prices fell sharply"];
      const res = await client.embeddings.create({ model: "switchyard/embed", input: texts });
      expect(res.model).toBe("switchyard/embed");
      const vectors = res.data.map((d) => d.embedding);
      expect(vectors).toEqual(texts.map((t) => Array.from(hashEmbedding(t))));
      expect(vectors[0]).toHaveLength(256);
      const dot = (a: number[], b: number[]) => a.reduce((s, x, i) => s + x * b[i]!, 0);
      expect(dot(vectors[0]!, vectors[0]!)).toBeCloseTo(1, 5);
      // Same words, same direction; other words, another.
      expect(dot(vectors[0]!, vectors[1]!)).toBeCloseTo(1, 5);
      expect(dot(vectors[0]!, vectors[2]!)).toBeLessThan(0.5);
      const floats = await client.embeddings.create({ model: "switchyard/embed", input: "a cat", dimensions: 32, encoding_format: "float" });
      expect(floats.data[0]!.embedding).toEqual(Array.from(hashEmbedding("a cat", 32)));
      await app.services.settled();
      const charged = 100_000_000 - (await app.services.ledger.balance(account.id))!.balanceMicro;
      expect(charged).toBe((res.usage.prompt_tokens + floats.usage.prompt_tokens) * 20);
      expect(charged).toBeGreaterThan(0);
    } finally {
      await app.stop(true);
      await app.services.settled();
      await app.services.ledger.close();
      db.close();
    }
  });
});
