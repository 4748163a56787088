/**
 * The openai SDK's `err.param` for a request the upstream refused, when the client's API is not
 * the one its request reached: a Responses client whose model is served by chat completions, a
 * chat client whose model is served by the Responses API. The vendor names a field of the request
 * the gateway sent (`messages[0].content`, `input[0].content`); the client is told its own field
 * that became it, or none. Same-API requests keep the vendor's param as it was. (An SDK probe:
 * a Responses client was told `param: "messages[0].content"`, a field it never sent.)
 */
import { beforeAll, expect, test } from "bun:test";
import OpenAI from "openai";
import { useFakeUpstream, type Reply } from "../helpers/fake-upstream.ts";
import { useGateway, OPENAI_MODEL } from "../helpers/gateway.ts";

const SOL = "test/sol";
const upstream = useFakeUpstream();
const gw = useGateway(() => ({
  upstreamUrl: upstream.url,
  retry: { max_retries: 0 },
  extraModels: [{ id: SOL, provider: "fake-openai", upstream_model: "gpt-5.4", upstream_api: "responses", category: "text", context_length: 400_000, pricing: { input_per_mtok: 2000, output_per_mtok: 10000 } }],
}));
let openai: OpenAI;
beforeAll(() => {
  openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 0 });
});

/** OpenAI's 400 for a field it refuses, in its words. */
const refused = (param: string, code = "invalid_value"): Reply => ({
  kind: "json",
  status: 400,
  headers: { "x-request-id": "req_upstream" },
  body: { error: { message: `Invalid '${param}': refused.`, type: "invalid_request_error", param, code } },
});

async function paramOf(upstreamParam: string, ask: () => Promise<unknown>): Promise<{ param: unknown; code: unknown }> {
  upstream.reply(refused(upstreamParam));
  const err = (await ask().catch((e) => e)) as InstanceType<typeof OpenAI.BadRequestError>;
  expect(err).toBeInstanceOf(OpenAI.BadRequestError);
  return { param: err.param, code: err.code };
}

const responses = (extra: Record<string, unknown> = {}) => () => openai.responses.create({ model: OPENAI_MODEL, input: "hi", ...extra });
const chatOnSol = (extra: Record<string, unknown> = {}) => () => openai.chat.completions.create({ model: SOL, messages: [{ role: "user", content: "hi" }], ...extra });

test("a Responses client on a chat-completions model: the conversation's field is `input`, renamed fields by their Responses names, the code kept", async () => {
  expect(await paramOf("messages[0].content", responses())).toEqual({ param: "input", code: "invalid_value" });
  expect(await paramOf("max_completion_tokens", responses({ max_output_tokens: 100 }))).toEqual({ param: "max_output_tokens", code: "invalid_value" });
  expect(await paramOf("response_format.json_schema.schema", responses())).toEqual({ param: "text.format", code: "invalid_value" });
  expect(await paramOf("tools[2].function.parameters", responses())).toEqual({ param: "tools", code: "invalid_value" });
  expect(await paramOf("temperature", responses({ temperature: 0.5 }))).toEqual({ param: "temperature", code: "invalid_value" });
  // A field the gateway added (stream_options) is none of the client's.
  expect(await paramOf("stream_options", responses())).toEqual({ param: null, code: "invalid_value" });
});

test("a chat client on a model served by the Responses API: `messages`, and the cap it named", async () => {
  expect(await paramOf("input[0].content", chatOnSol())).toEqual({ param: "messages", code: "invalid_value" });
  expect(await paramOf("instructions", chatOnSol())).toEqual({ param: "messages", code: "invalid_value" });
  expect(await paramOf("max_output_tokens", chatOnSol({ max_completion_tokens: 50 }))).toEqual({ param: "max_completion_tokens", code: "invalid_value" });
  expect(await paramOf("max_output_tokens", chatOnSol({ max_tokens: 50 }))).toEqual({ param: "max_tokens", code: "invalid_value" });
  expect(await paramOf("text.format.schema", chatOnSol())).toEqual({ param: "response_format", code: "invalid_value" });
  expect(await paramOf("include", chatOnSol())).toEqual({ param: null, code: "invalid_value" });
});

test("the same API: the vendor's param as it wrote it", async () => {
  const chat = () => openai.chat.completions.create({ model: OPENAI_MODEL, messages: [{ role: "user", content: "hi" }] });
  expect(await paramOf("messages[0].content", chat)).toEqual({ param: "messages[0].content", code: "invalid_value" });
  expect(await paramOf("input[0].content", () => openai.responses.create({ model: SOL, input: "hi" }))).toEqual({ param: "input[0].content", code: "invalid_value" });
});
