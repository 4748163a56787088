/**
 * A Responses upstream that says in its stream, before any of the answer, that the vendor key is
 * rate limited (`response.failed` or an `error` event with `rate_limit_exceeded`): the key cools as
 * a 429 would have cooled it, another key of the pool answers, and with no other key the client is
 * told a retry is appropriate (an overload), not that the upstream failed. The client's head waits
 * for the answer's first text, so a refusal in a read after `response.created` is one too; only
 * one said after text went out is an error frame.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { startFakeUpstream, type RecordedRequest } from "../helpers/fake-upstream.ts";
import { post, startGateway, type Gateway } from "../helpers/gateway.ts";
import { answerWith, frameOf, USAGE } from "../helpers/responses-wire.ts";

const MODEL = "test/sol-resp";
const SECRETS = { RESP_KEY_A: "sk-resp-A-SECRET-aaaaaaaaaaaaaaaa", RESP_KEY_B: "sk-resp-B-SECRET-bbbbbbbbbbbbbbbb" };
const upstream = await startFakeUpstream();
const started: Gateway[] = [];
afterAll(async () => {
  for (const gw of started) await gw.stop();
  await upstream.stop();
});

const ADMIN = { authorization: "Bearer admin-token-rate-limit" };
async function gateway(keys: string[]): Promise<Gateway> {
  upstream.reset();
  const gw = await startGateway({
    upstreamUrl: upstream.url,
    adminToken: ADMIN.authorization.slice(7),
    retry: { max_retries: 0 },
    openaiKeys: keys.map((env) => ({ env })),
    vendorEnv: SECRETS,
    extraModels: [{ id: MODEL, provider: "fake-openai", upstream_model: "gpt-6-sol", upstream_api: "responses", category: "text", context_length: 1_050_000, pricing: { input_per_mtok: 2000, output_per_mtok: 10000 } }],
  });
  started.push(gw);
  return gw;
}

const keyOf = (req: RecordedRequest) => (req.headers.authorization === `Bearer ${SECRETS.RESP_KEY_A}` ? "A" : "B");
const RATE_LIMITED = [
  frameOf({ type: "response.created", sequence_number: 0, response: { id: "resp_1", status: "in_progress", output: [] } }),
  frameOf({ type: "response.failed", sequence_number: 1, response: { id: "resp_1", status: "failed", error: { code: "rate_limit_exceeded", message: "Rate limit reached for gpt-6-sol on tokens per min (TPM)." }, usage: null } }),
];
const ERROR_EVENT = [frameOf({ type: "error", sequence_number: 0, code: "rate_limit_exceeded", message: "Rate limit reached.", param: null })];

describe("a Responses upstream's rate limit said in its stream", () => {
  for (const [name, frames] of [["response.failed", RATE_LIMITED], ["an error event", ERROR_EVENT]] as const) {
    test(`${name} with rate_limit_exceeded before the answer: the key cools and the pool's other key answers`, async () => {
      const gw = await gateway(["RESP_KEY_A", "RESP_KEY_B"]);
      const answer = answerWith({ items: [{ text: "From B." }], usage: USAGE(20, 3) });
      for (let i = 0; i < 3; i++) {
        // Each request's replies (at most one to each key): queued, as the fake takes them one per call.
        for (let j = 0; j < 2; j++) upstream.reply((req) => (keyOf(req) === "A" ? { kind: "sse", chunks: [frames.join("")] } : answer(req)));
        const res = await post(gw, "/v1/chat/completions", { model: MODEL, messages: [{ role: "user", content: "hi" }], stream: true }, { "x-session-id": `s${i}` });
        expect(res.status).toBe(200);
        expect(await res.text()).toContain('"content":" B."');
      }
      // A was asked at most once: it cooled after its first refusal.
      expect(upstream.requests.filter((r) => r.method === "POST" && keyOf(r) === "A").length).toBeLessThanOrEqual(1);
    });
  }

  test("with no other key, the client is told of an overload (a retry is appropriate), and pays nothing", async () => {
    const gw = await gateway(["RESP_KEY_A"]);
    upstream.reply({ kind: "sse", chunks: [RATE_LIMITED.join("")] });
    const before = await gw.balanceMicro();
    const chat = await post(gw, "/v1/chat/completions", { model: MODEL, messages: [{ role: "user", content: "hi" }], stream: true });
    expect(chat.status).toBe(502);
    expect(((await chat.json()) as any).error.type).toBe("server_error");
    upstream.reply({ kind: "sse", chunks: [RATE_LIMITED.join("")] });
    const claude = await post(gw, "/v1/messages", { model: MODEL, max_tokens: 100, messages: [{ role: "user", content: "hi" }], stream: true });
    expect(claude.status).toBe(502);
    expect(((await claude.json()) as any).error.type).toBe("overloaded_error");
    expect(await gw.balanceMicro()).toBe(before);
  });

  test("said in a read after response.created, before any of the answer: still a 502 to retry (the head waits for the answer's first text), and nothing charged", async () => {
    const gw = await gateway(["RESP_KEY_A"]);
    const before = await gw.balanceMicro();
    upstream.reply({ kind: "sse", chunks: RATE_LIMITED, delayMs: 150 });
    const res = await post(gw, "/v1/chat/completions", { model: MODEL, messages: [{ role: "user", content: "hi there, a prompt of some length" }], stream: true });
    expect(res.status).toBe(502);
    const error = ((await res.json()) as any).error;
    expect(error.type).toBe("server_error");
    // In the gateway's words: the vendor's sentence (organisation, upstream model) is not the client's.
    expect(error.message).toContain("rate limiting the gateway");
    expect(error.message).not.toContain("gpt-6-sol");
    await gw.app.services.settled();
    expect(await gw.balanceMicro()).toBe(before);
  });

  test("a failure whose usage says the vendor made output (reasoning), before any of it reached the client: not asked of the pool's other key (it would be bought twice); a 502 that costs nothing", async () => {
    const gw = await gateway(["RESP_KEY_A", "RESP_KEY_B"]);
    const billed = [
      frameOf({ type: "response.created", sequence_number: 0, response: { id: "resp_1", status: "in_progress", output: [] } }),
      frameOf({ type: "response.failed", sequence_number: 1, response: { id: "resp_1", status: "failed", error: { code: "server_error", message: "The model failed." }, usage: { input_tokens: 2000, input_tokens_details: { cached_tokens: 0 }, output_tokens: 5000, output_tokens_details: { reasoning_tokens: 5000 }, total_tokens: 7000 } } }),
    ];
    upstream.rule((req) => (req.method === "POST" ? { kind: "sse", chunks: billed, delayMs: 30 } : undefined));
    const before = await gw.balanceMicro();
    const res = await post(gw, "/v1/chat/completions", { model: MODEL, messages: [{ role: "user", content: "think hard" }], stream: true });
    expect(res.status).toBe(502);
    await res.text();
    expect(upstream.requests.filter((r) => r.method === "POST").length).toBe(1);
    await gw.app.services.settled();
    expect(await gw.balanceMicro()).toBe(before);
  });

  test("said after the answer's first text went out: an error frame, and the text made is what is charged", async () => {
    const gw = await gateway(["RESP_KEY_A"]);
    const before = await gw.balanceMicro();
    const [created, failed] = RATE_LIMITED;
    const text = frameOf({ type: "response.output_text.delta", sequence_number: 1, item_id: "msg_1", output_index: 0, content_index: 0, delta: "Partly" });
    upstream.reply({ kind: "sse", chunks: [created! + text, failed!], delayMs: 150 });
    const res = await post(gw, "/v1/chat/completions", { model: MODEL, messages: [{ role: "user", content: "hi there, a prompt of some length" }], stream: true });
    expect(res.status).toBe(200);
    const body = await res.text();
    expect(body).toContain('"content":"Partly"');
    expect(body).toContain('"error"');
    expect(body).toContain("rate limiting the gateway");
    expect(body).not.toContain("gpt-6-sol");
    await gw.app.services.settled();
    const record = gw.db.query<{ status: string; cost_micro: number }, []>("SELECT status, cost_micro FROM usage_records ORDER BY id DESC LIMIT 1").get()!;
    expect(record.status).toBe("stream_failed");
    expect(before - (await gw.balanceMicro())).toBe(record.cost_micro);
  });

  /**
   * A hostile tenant (twelfth probe): OpenAI's tokens-a-minute refusal names the request's own size
   * ("Limit L, Used U, Requested R"). Said with a 429 status it cools no key when the request alone
   * asks for half the key's minute (attempt.ts, requestSizedLimit); said in the stream it cooled
   * the key like any rate limit, so one tenant's large requests benched every key of the pool,
   * moving other tenants' sessions (and their prompt caches) off their keys.
   */
  const failedWith = (message: string) => [
    frameOf({ type: "response.created", sequence_number: 0, response: { id: "resp_1", status: "in_progress", output: [] } }),
    frameOf({ type: "response.failed", sequence_number: 1, response: { id: "resp_1", status: "failed", error: { code: "rate_limit_exceeded", message }, usage: null } }),
  ].join("");
  const states = async (gw: Gateway) => ((await (await fetch(`${gw.url}/v1/admin/vendor-keys`, { headers: ADMIN })).json()) as { data: { key: string; state: string }[] }).data.filter((k) => k.key.startsWith("RESP_KEY")).map((k) => `${k.key}:${k.state}`);

  test("said in the stream about the request's own size (half the key's minute or more): it moves to the other key, and neither key cools", async () => {
    const gw = await gateway(["RESP_KEY_A", "RESP_KEY_B"]);
    const large = failedWith("Rate limit reached for gpt-6-sol in organization org-Zq9Operator on tokens per min (TPM): Limit 30000, Used 1000, Requested 29500. Please try again in 20s.");
    upstream.rule((req) => (req.method === "POST" ? { kind: "sse", chunks: [large] } : undefined));
    const res = await post(gw, "/v1/chat/completions", { model: MODEL, messages: [{ role: "user", content: "a large request" }], stream: true });
    expect(res.status).toBe(502);
    // The gateway's words, as for a 429 status: the vendor's name the operator's organisation.
    const { error } = (await res.json()) as { error: { message: string; type: string } };
    expect(error).toMatchObject({ type: "server_error", message: "The upstream provider is rate limiting the gateway. Retrying is appropriate." });
    // Both keys were asked (it may pass on a key whose minute is less used), and both still serve everyone else.
    expect(new Set(upstream.requests.filter((r) => r.method === "POST").map(keyOf))).toEqual(new Set(["A", "B"]));
    expect(await states(gw)).toEqual(["RESP_KEY_A:usable", "RESP_KEY_B:usable"]);
  });

  test("said in the stream for a request larger than the key's whole minute: a 413 as with a 429 status, asked of one key only, and no key cools", async () => {
    const gw = await gateway(["RESP_KEY_A", "RESP_KEY_B"]);
    const over = failedWith("Request too large for gpt-6-sol in organization org-Ab3dE5fG7hI9 on tokens per min (TPM): Limit 30000, Requested 50000. The input or output tokens must be reduced in order to run successfully.");
    upstream.rule((req) => (req.method === "POST" ? { kind: "sse", chunks: [over] } : undefined));
    const before = await gw.balanceMicro();
    const res = await post(gw, "/v1/chat/completions", { model: MODEL, messages: [{ role: "user", content: "a very large request" }], stream: true });
    expect(res.status).toBe(413);
    const { error } = (await res.json()) as { error: { message: string } };
    expect(error.message).toContain("30000 tokens a minute; this request needs 50000");
    // The vendor's sentence names the operator's organisation: not the client's to see.
    expect(error.message).not.toContain("org-Ab3dE5fG7hI9");
    expect(upstream.requests.filter((r) => r.method === "POST")).toHaveLength(1);
    expect(await states(gw)).toEqual(["RESP_KEY_A:usable", "RESP_KEY_B:usable"]);
    expect(await gw.balanceMicro()).toBe(before);
  });
});
