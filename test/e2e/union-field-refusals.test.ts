import { describe, expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, OPENAI_MODEL, post, useGateway } from "../helpers/gateway.ts";

/**
 * A field that takes several shapes (a string or an array, an object or null) sent in none of
 * them: the 400 says which shapes it takes and what was sent, or, when the value has the shape of
 * one of them, what inside it is wrong. TypeBox's words for a union are only "Expected union
 * value", which is what a new user sending `content: 5` or `stream_options: {include_usage: "yes"}`
 * read.
 */
const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url }));

const hello = [{ role: "user", content: "hello" }];

async function refused(path: string, body: unknown): Promise<{ message: string; param?: string | null }> {
  const res = await post(gw, path, body);
  expect(res.status).toBe(400);
  expect(upstream.requests).toHaveLength(0);
  const json = (await res.json()) as { error: { message: string; param?: string | null } };
  return json.error;
}

describe("a value in none of a field's shapes is refused with the shapes and what was sent", () => {
  test("chat completions: content, stop and stream_options", async () => {
    expect((await refused("/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: 5 }] })).message)
      .toBe("Invalid request: messages.0.content: must be a string, null or an array (got a number).");
    expect((await refused("/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: { text: "hi" } }] })).message)
      .toBe("Invalid request: messages.0.content: must be a string, null or an array (got an object).");
    expect((await refused("/v1/chat/completions", { model: OPENAI_MODEL, messages: hello, stop: true })).message)
      .toBe("Invalid request: stop: must be a string, an array or null (got a boolean).");
    // An object where an object (or null) goes: what inside it is wrong.
    const options = await refused("/v1/chat/completions", { model: OPENAI_MODEL, messages: hello, stream: true, stream_options: { include_usage: "yes" } });
    expect(options.message).toBe("Invalid request: stream_options.include_usage: Expected boolean.");
    expect(options.param).toBe("stream_options");
    // An array where an array goes: its failing element.
    expect((await refused("/v1/chat/completions", { model: OPENAI_MODEL, messages: hello, stop: ["a", 5] })).message)
      .toBe("Invalid request: stop.1: Expected string.");
  });

  test("messages (Anthropic's shape): content and system", async () => {
    const res = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 10, messages: [{ role: "user", content: 5 }] });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { type: string; error: { type: string; message: string } };
    expect(body.type).toBe("error");
    expect(body.error.message).toBe("Invalid request: messages.0.content: must be a string or an array (got a number).");
    expect((await refused("/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 10, system: { text: "be brief" }, messages: hello })).message)
      .toBe("Invalid request: system: must be a string or an array (got an object).");
    // Among fixed words, the word sent: OpenAI's "tool" role is not one of Anthropic's.
    expect((await refused("/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 10, messages: [{ role: "tool", content: "x" }] })).message)
      .toBe('Invalid request: messages.0.role: must be "user", "assistant" or "system" (got "tool").');
  });

  test("responses: input", async () => {
    expect((await refused("/v1/responses", { model: OPENAI_MODEL, input: 5 })).message).toBe("Invalid request: input: must be a string or an array (got a number).");
  });
});
