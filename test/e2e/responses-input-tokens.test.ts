/**
 * `POST /v1/responses/input_tokens`, the OpenAI SDK's `responses.inputTokens.count` (it was a 404):
 * the request counted as `POST /v1/responses` would send it, never charged. A model on an Anthropic
 * upstream is counted by Anthropic's `count_tokens` on the translated request; others by our
 * estimate. It shares count_tokens' bucket and bounds.
 */
import { expect, setDefaultTimeout, test } from "bun:test";
import OpenAI from "openai";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, OPENAI_MODEL, post, useGateway } from "../helpers/gateway.ts";

setDefaultTimeout(20_000);

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url, limits: { count_tokens_max_bytes: 64 * 1024 } }));
const sdk = () => new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 0 });

const usageRecords = () => (gw.db.query("SELECT COUNT(*) AS n FROM usage_records").get() as { n: number }).n;

test("the SDK's responses.inputTokens.count gets OpenAI's shape; a longer input counts more; nothing is charged, recorded or sent upstream for an OpenAI-kind model", async () => {
  const before = { balance: await gw.balanceMicro(), records: usageRecords(), sent: upstream.requests.length };
  const short = await sdk().responses.inputTokens.count({ model: OPENAI_MODEL, input: "Hello there" });
  expect(short.object).toBe("response.input_tokens");
  expect(Number.isInteger(short.input_tokens) && short.input_tokens > 0).toBe(true);
  const long = await sdk().responses.inputTokens.count({ model: OPENAI_MODEL, instructions: "Answer in French.", input: "Hello there ".repeat(200) });
  expect(long.input_tokens).toBeGreaterThan(short.input_tokens + 150);
  // OpenAI makes `model` optional here: counted with the gateway's tokenizer all the same.
  const anyModel = await sdk().responses.inputTokens.count({ input: "Hello there" });
  expect(anyModel.input_tokens).toBe(short.input_tokens);
  expect({ balance: await gw.balanceMicro(), records: usageRecords(), sent: upstream.requests.length }).toEqual(before);
});

test("a model on an Anthropic upstream is counted by Anthropic's count_tokens, on the request translated as it would be sent (no answer parameters)", async () => {
  const tools = [{ type: "function" as const, name: "lookup", description: "Looks a word up.", parameters: { type: "object", properties: { word: { type: "string" } }, required: ["word"] }, strict: false }];
  upstream.reply({ kind: "json", body: { input_tokens: 41 } });
  const counted = await sdk().responses.inputTokens.count({ model: ANTHROPIC_MODEL, instructions: "Be brief.", input: [{ role: "user", content: "What is a gateway?" }], tools, max_output_tokens: 500 } as never);
  expect({ object: counted.object, input_tokens: counted.input_tokens }).toEqual({ object: "response.input_tokens", input_tokens: 41 });
  const sent = upstream.requests.at(-1)!;
  expect(sent.path).toBe("/v1/messages/count_tokens");
  expect(sent.body.system).toBe("Be brief.");
  // As an answer's request would go (the cache breakpoint the translation sets included).
  expect(sent.body.messages).toMatchObject([{ role: "user", content: [{ type: "text", text: "What is a gateway?" }] }]);
  expect(sent.body.tools).toEqual([{ name: "lookup", description: "Looks a word up.", input_schema: tools[0]!.parameters }]);
  expect(Object.keys(sent.body).sort()).toEqual(["messages", "model", "system", "tools"]);
  expect(sent.body.model).not.toBe(ANTHROPIC_MODEL);
});

test("previous_response_id's chain is counted with the new input, as the answer would be sent; an id not held is a 400", async () => {
  upstream.reply({ kind: "json", body: { id: "chatcmpl-1", object: "chat.completion", created: 1, model: "gpt", choices: [{ index: 0, message: { role: "assistant", content: "A stored answer. ".repeat(100) }, finish_reason: "stop" }], usage: { prompt_tokens: 5, completion_tokens: 300, total_tokens: 305 } } });
  const first = await sdk().responses.create({ model: OPENAI_MODEL, input: "Tell me something long." });
  const alone = await sdk().responses.inputTokens.count({ model: OPENAI_MODEL, input: "And then?" });
  const chained = await sdk().responses.inputTokens.count({ model: OPENAI_MODEL, input: "And then?", previous_response_id: first.id });
  expect(chained.input_tokens).toBeGreaterThan(alone.input_tokens + 300);

  const missing = await post(gw, "/v1/responses/input_tokens", { model: OPENAI_MODEL, input: "x", previous_response_id: "resp_nothing" });
  expect(missing.status).toBe(400);
  const body = (await missing.json()) as { error: { type: string; message: string } };
  expect(body.error.type).toBe("invalid_request_error");
  expect(body.error.message).toContain("resp_nothing");
});

test("refusals as a request for the model would get them, OpenAI-shaped: unknown model 404, the key's models 403, embedding 400, too large 413", async () => {
  const unknown = await post(gw, "/v1/responses/input_tokens", { model: "no/such-model", input: "x" });
  expect(unknown.status).toBe(404);
  expect(((await unknown.json()) as any).error.type).toBe("not_found_error");

  const scoped = (await gw.app.services.accounts.createKey(gw.accountId, { name: "scoped", models: [ANTHROPIC_MODEL] }))!.key;
  const refused = await fetch(`${gw.url}/v1/responses/input_tokens`, { method: "POST", headers: { authorization: `Bearer ${scoped}`, "content-type": "application/json" }, body: JSON.stringify({ model: OPENAI_MODEL, input: "x" }) });
  expect(refused.status).toBe(403);
  expect(((await refused.json()) as any).error.type).toBe("permission_error");

  const large = await post(gw, "/v1/responses/input_tokens", { model: OPENAI_MODEL, input: "y".repeat(64 * 1024 + 1) });
  expect(large.status).toBe(413);
  expect(((await large.json()) as any).error.message).toContain("too large to count");
});

test("counts take count_tokens' own bucket: a key whose chat bucket is empty still counts", async () => {
  const key = (await gw.app.services.accounts.createKey(gw.accountId, { name: "slow", rateLimitPerMinute: 1 }))!.key;
  const call = (path: string, body: unknown) => fetch(`${gw.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify(body) });
  expect((await call("/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: "hi" }] })).status).toBe(200);
  expect((await call("/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: "hi" }] })).status).toBe(429);
  const statuses: number[] = [];
  for (let i = 0; i < 3; i++) statuses.push((await call("/v1/responses/input_tokens", { model: OPENAI_MODEL, input: "hi" })).status);
  expect(statuses).toEqual([200, 200, 200]);
});

test("a previous_response_id chain is weighed before it is parsed: past what a count may count, a count is refused at once (an 80-byte count made the gateway parse 28 MB of stored answers; a hostile-tenant probe)", async () => {
  // A stored answer whose input carries a field nothing reads: cheap to have kept, costly to parse.
  const padded = { role: "user", content: "hi", padding: "0".repeat(100_000) };
  const first = await sdk().responses.create({ model: OPENAI_MODEL, input: [padded] as never });
  const counted = await post(gw, "/v1/responses/input_tokens", { model: OPENAI_MODEL, input: "x", previous_response_id: first.id });
  expect(counted.status).toBe(400);
  expect(((await counted.json()) as any).error.message).toContain(`more than ${64 * 1024} bytes`);
  // A paid request continues it (a body's worth, 10 MiB by default, may be brought in).
  const next = await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: "and then?", previous_response_id: first.id, store: false });
  expect(next.status).toBe(200);
  // item_reference the same: the answer is weighed before it is read.
  const item = (first.output[0] as { id: string }).id;
  const referenced = await post(gw, "/v1/responses/input_tokens", { model: OPENAI_MODEL, input: [{ type: "item_reference", id: item }] });
  expect(referenced.status).toBe(400);
});
