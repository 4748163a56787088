/**
 * Messages and content parts without the fields their type needs are a 400 that names the field,
 * on both chat endpoints, before anything reaches an upstream: the schemas keep parts open so that
 * fields we do not model pass through, and these checks are what stands between a half-written
 * part and a translation that silently sends an empty string (or a vendor 400 that blames us).
 */
import { describe, expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, OPENAI_MODEL, post, useGateway } from "../helpers/gateway.ts";

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url }));

type Row = [name: string, messages: unknown[], message: string | RegExp, extra?: Record<string, unknown>];

const tool = { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "Write", input: {} }] };

const ANTHROPIC_ROWS: Row[] = [
  ["a message without content", [{ role: "user" }], /messages\.0\.content/],
  ["a text block without text", [{ role: "user", content: [{ type: "text" }] }], "messages.0.content.0.text: Field required"],
  ["a text block whose text is a number", [{ role: "user", content: [{ type: "text", text: 5 }] }], "messages.0.content.0.text: Input should be a valid string"],
  ["a tool_use without id", [{ role: "user", content: "hi" }, { role: "assistant", content: [{ type: "tool_use", name: "Write", input: {} }] }], "messages.1.content.0.id: Field required"],
  ["a tool_use without name", [{ role: "user", content: "hi" }, { role: "assistant", content: [{ type: "tool_use", id: "t1", input: {} }] }], "messages.1.content.0.name: Field required"],
  ["a tool_use without input", [{ role: "user", content: "hi" }, { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "Write" }] }], "messages.1.content.0.input: Field required"],
  ["a tool_result without tool_use_id", [{ role: "user", content: "hi" }, tool, { role: "user", content: [{ type: "tool_result", content: "ok" }] }], "messages.2.content.0.tool_use_id: Field required"],
  ["a tool_result with is_error a string", [{ role: "user", content: "hi" }, tool, { role: "user", content: [{ type: "tool_result", tool_use_id: "t1", is_error: "yes" }] }], "messages.2.content.0.is_error: Input should be a valid boolean"],
  ["a text block without text inside a tool_result", [{ role: "user", content: "hi" }, tool, { role: "user", content: [{ type: "tool_result", tool_use_id: "t1", content: [{ type: "text" }] }] }], "messages.2.content.0.content.0.text: Field required"],
  ["an image without source", [{ role: "user", content: [{ type: "image" }] }], "messages.0.content.0.source: Field required"],
  ["a thinking block without thinking", [{ role: "user", content: "hi" }, { role: "assistant", content: [{ type: "thinking", signature: "s" }] }], "messages.1.content.0.thinking: Field required"],
  ["a system text block without text", [{ role: "user", content: "hi" }], "system.0.text: Field required", { system: [{ type: "text" }] }],
];

const OPENAI_ROWS: Row[] = [
  ["a user message without content", [{ role: "user" }], "Missing required parameter: 'messages[0].content'."],
  ["a system message with content null", [{ role: "system", content: null }, { role: "user", content: "hi" }], "Missing required parameter: 'messages[0].content'."],
  ["an assistant message with neither content nor tool_calls", [{ role: "user", content: "hi" }, { role: "assistant" }], "Missing required parameter: 'messages[1].content'."],
  ["a text part without text", [{ role: "user", content: [{ type: "text" }] }], "Missing required parameter: 'messages[0].content[0].text'."],
  ["an image_url part without its url", [{ role: "user", content: [{ type: "image_url", image_url: {} }] }], "Missing required parameter: 'messages[0].content[0].image_url.url'."],
  ["an image_url part without image_url", [{ role: "user", content: [{ type: "image_url" }] }], "Missing required parameter: 'messages[0].content[0].image_url'."],
  ["a tool message without tool_call_id", [{ role: "user", content: "hi" }, { role: "tool", content: "ok" }], "Missing required parameter: 'messages[1].tool_call_id'."],
  ["a tool call without its id", [{ role: "user", content: "hi" }, { role: "assistant", tool_calls: [{ type: "function", function: { name: "f", arguments: "{}" } }] }], /messages\.1\.tool_calls\.0\.id/],
  // The Responses API's flat tool shape sent to chat completions (a new user's probe).
  ["a function tool without function", [{ role: "user", content: "hi" }], "Missing required parameter: 'tools[1].function'.",
    { tools: [{ type: "function", function: { name: "f" } }, { type: "function", name: "get_weather", parameters: { type: "object" } }] }],
];

describe.each([
  ["/v1/messages", ANTHROPIC_MODEL, ANTHROPIC_ROWS],
  ["/v1/chat/completions", OPENAI_MODEL, OPENAI_ROWS],
] as const)("%s", (path, model, rows) => {
  test.each(rows as Row[])("%s → 400 naming the field", async (...[, messages, message, extra]: Row) => {
    const res = await post(gw, path, { model, max_tokens: 10, messages, ...extra });
    expect(res.status).toBe(400);
    const body: any = await res.json();
    expect(body.error.type).toBe("invalid_request_error");
    if (path === "/v1/messages") expect(body.type).toBe("error");
    if (typeof message === "string") expect(body.error.message).toBe(message);
    else expect(body.error.message).toMatch(message);
    expect(upstream.requests).toHaveLength(0);
  });

  test("an assistant turn of only tool calls, and block types the gateway does not model, still pass", async () => {
    const messages = path === "/v1/messages"
      ? [{ role: "user", content: "hi" }, { role: "assistant", content: [{ type: "server_tool_use", id: "s1", name: "web_search", input: {} }, { type: "web_search_tool_result", tool_use_id: "s1", content: [] }] }, { role: "user", content: "thanks" }]
      : [{ role: "user", content: "hi" }, { role: "assistant", tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: "{}" } }] }, { role: "tool", tool_call_id: "c1", content: "ok" }];
    const res = await post(gw, path, { model, max_tokens: 10, messages });
    expect(res.status, await res.text()).toBe(200);
  });
});

test("a function tool in the Responses API's flat shape is refused on the way to an Anthropic upstream too, not dropped", async () => {
  // Translated, it was filtered out and tool_choice "required" with it: a text answer, no call.
  const res = await post(gw, "/v1/chat/completions", {
    model: ANTHROPIC_MODEL, max_tokens: 10, tool_choice: "required", messages: [{ role: "user", content: "weather in Paris?" }],
    tools: [{ type: "function", name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } }],
  });
  expect(res.status).toBe(400);
  expect(((await res.json()) as { error: { message: string } }).error.message).toBe("Missing required parameter: 'tools[0].function'.");
  expect(upstream.requests).toHaveLength(0);
});

describe("an OpenAI assistant refusal sent back as history", () => {
  const messages = [
    { role: "user", content: "a" },
    { role: "assistant", content: [{ type: "refusal", refusal: "I can't help with that." }] },
    { role: "user", content: "b" },
  ];

  test("passes to an OpenAI upstream as it came", async () => {
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages });
    expect(res.status, await res.text()).toBe(200);
    expect(upstream.requests.at(-1)!.body.messages[1]).toEqual(messages[1]);
  });

  test("as the openai SDK returns it (content null, refusal beside it), reaches an Anthropic upstream as what the assistant said", async () => {
    const history = [{ role: "user", content: "a" }, { role: "assistant", content: null, refusal: "I can't help with that." }, { role: "user", content: "b" }];
    const res = await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, messages: history });
    expect(res.status, await res.text()).toBe(200);
    const sent = upstream.requests.at(-1)!.body.messages;
    expect(sent.map((m: { role: string }) => m.role)).toEqual(["user", "assistant", "user"]);
    expect(JSON.stringify(sent[1].content)).toContain("I can't help with that.");
  });

  test("reaches an Anthropic upstream as what the assistant said", async () => {
    const res = await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, messages });
    expect(res.status, await res.text()).toBe(200);
    const sent = upstream.requests.at(-1)!.body.messages;
    expect(sent[1].role).toBe("assistant");
    expect(JSON.stringify(sent[1].content)).toContain("I can't help with that.");
  });
});
