/**
 * An OpenAI-kind model's tool call whose arguments are not JSON (a small model's `{"city": Paris}`,
 * Python's `True`, OpenAI's two objects run together), streamed to an Anthropic client. The
 * Anthropic SDK parses `input_json_delta`s as they come (`messages.stream()`, `finalMessage()`,
 * Claude Code); relayed as they came, they made it throw `JSON Parse error` and the whole answer
 * was lost, where the same answer whole carried the call as `{_raw}` (an SDK probe, seventeenth
 * session). The stream now stays JSON: what went out is closed into an object that keeps the
 * upstream's text as `_raw`, and the text before the call, the call and the stop reason arrive.
 */
import { beforeAll, describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { OPENAI_MODEL, useGateway } from "../helpers/gateway.ts";
import { openaiBody, openaiStream } from "../helpers/scripted-answers.ts";

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url, retry: { max_retries: 0 } }));
let anthropic: Anthropic;
beforeAll(() => {
  anthropic = new Anthropic({ baseURL: gw.url, apiKey: gw.key, maxRetries: 0 });
});

const tools: Anthropic.Tool[] = [{ name: "get_weather", input_schema: { type: "object", properties: { city: { type: "string" } } } }];
const ask = { model: OPENAI_MODEL, max_tokens: 200, tools, messages: [{ role: "user" as const, content: "Weather in Paris?" }] };

describe("messages.stream() of a call whose arguments are not JSON", () => {
  for (const [what, args, input] of [
    ["an unquoted value", '{"city": Paris}', { city: null, _raw: '{"city": Paris}' }],
    ["Python's True", '{"city": "Paris", "metric": True}', { city: "Paris", metric: null, _raw: '{"city": "Paris", "metric": True}' }],
    ["not JSON at all", "city=Paris", { _raw: "city=Paris" }],
    ["two objects run together", '{"city":"Paris"}{"city":"Rome"}', { city: "Paris" }],
  ] as const) {
    test(`${what}: finalMessage has the text, the call with its input as an object, and the stop reason`, async () => {
      upstream.reply(openaiStream({ text: "Let me check.", calls: [{ id: "call_B4dJs0n", name: "get_weather", arguments: args }] }));
      const stream = anthropic.messages.stream(ask);
      const deltas: string[] = [];
      stream.on("inputJson", (delta) => deltas.push(delta));
      const message = await stream.finalMessage();
      expect(message.stop_reason).toBe("tool_use");
      expect(message.content as unknown[]).toEqual([
        { type: "text", text: "Let me check." },
        { type: "tool_use", id: "call_B4dJs0n", name: "get_weather", input },
      ]);
      expect(deltas.length).toBeGreaterThan(0);
    });
  }

  test("the same answer whole keeps the upstream's text as _raw, as before", async () => {
    upstream.reply(openaiBody({ text: "Let me check.", calls: [{ id: "call_B4dJs0n", name: "get_weather", arguments: '{"city": Paris}' }] }));
    const message = await anthropic.messages.create(ask);
    expect(message.content.at(-1) as unknown).toEqual({ type: "tool_use", id: "call_B4dJs0n", name: "get_weather", input: { _raw: '{"city": Paris}' } });
  });

  test("valid arguments stream as they came, in pieces", async () => {
    upstream.reply(openaiStream({ calls: [{ id: "call_G00d", name: "get_weather", arguments: '{"city":"Paris"}' }] }));
    const stream = anthropic.messages.stream(ask);
    const deltas: string[] = [];
    stream.on("inputJson", (delta) => deltas.push(delta));
    const message = await stream.finalMessage();
    expect(deltas.join("")).toBe('{"city":"Paris"}');
    expect(deltas.length).toBeGreaterThan(1);
    expect(message.content as unknown[]).toEqual([{ type: "tool_use", id: "call_G00d", name: "get_weather", input: { city: "Paris" } }]);
  });
});
