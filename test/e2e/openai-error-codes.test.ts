/**
 * OpenAI-format errors carry OpenAI's `code` and `param` where OpenAI has them: SDKs expose them
 * (`err.code`), and agent frameworks act on them (a context overflow compacts the conversation).
 */
import { describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { useGateway, post, OPENAI_MODEL, ANTHROPIC_MODEL } from "../helpers/gateway.ts";

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url, retry: { max_retries: 0 } }));
const question = [{ role: "user", content: "Hello" }];

describe("OpenAI error codes", () => {
  test("an unknown model: 404 model_not_found, as the SDK's NotFoundError", async () => {
    const sdk = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 0 });
    const err = await sdk.chat.completions.create({ model: "no/such-model", messages: [{ role: "user", content: "x" }] }).catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect(err.code).toBe("model_not_found");
    const models = await fetch(`${gw.url}/v1/models/no%2Fsuch-model`, { headers: { authorization: `Bearer ${gw.key}` } });
    expect(models.status).toBe(404);
    expect(((await models.json()) as any).error.code).toBe("model_not_found");
  });

  test("a wrong key: 401 invalid_api_key", async () => {
    const res = await fetch(`${gw.url}/v1/chat/completions`, { method: "POST", headers: { authorization: "Bearer svc-sk-wrong", "content-type": "application/json" }, body: JSON.stringify({ model: OPENAI_MODEL, messages: question }) });
    expect(res.status).toBe(401);
    expect(((await res.json()) as any).error).toMatchObject({ type: "authentication_error", code: "invalid_api_key", param: null });
  });

  test("the vendor's code and field of a request it refused reach OpenAI clients; free text in them does not", async () => {
    upstream.reply({ kind: "json", status: 400, body: { error: { message: "Invalid value for 'temperature'.", type: "invalid_request_error", param: "temperature", code: "invalid_value" } } });
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
    expect(res.status).toBe(400);
    expect(((await res.json()) as any).error).toMatchObject({ type: "invalid_request_error", code: "invalid_value", param: "temperature" });

    upstream.reply({ kind: "json", status: 400, body: { error: { message: "bad", type: "invalid_request_error", param: "see https://internal.example/x y", code: "has spaces and words" } } });
    const odd = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
    expect(((await odd.json()) as any).error).toMatchObject({ code: null, param: null });
  });

  test("a context overflow the vendor reported: context_length_exceeded in OpenAI's words on the chat API, param input on the Responses API", async () => {
    const overflow = { error: { message: "This model's maximum context length is 128000 tokens. However, your messages resulted in 130001 tokens. Please reduce the length of the messages.", type: "invalid_request_error", param: "messages", code: "context_length_exceeded" } };
    upstream.reply({ kind: "json", status: 400, body: overflow });
    const chat = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
    expect(chat.status).toBe(400);
    expect(((await chat.json()) as any).error).toEqual({
      message: "This model's maximum context length is 128000 tokens. However, your messages resulted in 130001 tokens. Please reduce the length of the messages.",
      type: "invalid_request_error", param: "messages", code: "context_length_exceeded",
    });
    upstream.reply({ kind: "json", status: 400, body: overflow });
    const responses = await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: "Hello" });
    expect(responses.status).toBe(400);
    expect(((await responses.json()) as any).error).toMatchObject({ param: "input", code: "context_length_exceeded" });
    // An Anthropic client of the same refusal still gets Anthropic's wording, without OpenAI's fields.
    upstream.reply({ kind: "json", status: 400, body: overflow });
    const messages = await post(gw, "/v1/messages", { model: OPENAI_MODEL, max_tokens: 10, messages: question });
    expect(((await messages.json()) as any).error).toEqual({ type: "invalid_request_error", message: "prompt is too long: 130001 tokens > 128000 maximum" });
  });

  test("an Anthropic upstream's overflow reaches OpenAI clients as context_length_exceeded too", async () => {
    upstream.reply({ kind: "json", status: 400, body: { type: "error", error: { type: "invalid_request_error", message: "prompt is too long: 210000 tokens > 200000 maximum" } } });
    const res = await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, messages: question });
    expect(res.status).toBe(400);
    expect(((await res.json()) as any).error).toMatchObject({ code: "context_length_exceeded", param: "messages", message: expect.stringMatching(/^This model's maximum context length is 200000 tokens\. However, your messages resulted in 210000 tokens\./) });
  });
});
