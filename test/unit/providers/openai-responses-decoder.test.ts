import { describe, expect, test } from "bun:test";
import { openaiResponsesAdapter } from "../../../src/providers/openai/openai-responses-adapter.ts";
import { UpstreamProtocolError } from "../../../src/providers/provider.ts";
import { createSseParser, type SseEvent } from "../../../src/streaming/sse-parser.ts";
import type { StreamEvent } from "../../../src/streaming/events.ts";
import { openaiEncryptedReasoning, openaiReasoningSignature } from "../../../src/formats/common/carried-thinking.ts";
import { frameOf, responsesBody, responsesFrames, splitEvery, USAGE, type Script } from "../../helpers/responses-wire.ts";

/** The upstream's bytes, in the given pieces, through the SSE parser and one decoder: every event, and whether the vendor's end was read. */
function decode(chunks: (string | Uint8Array)[]): { events: StreamEvent[]; last: boolean } {
  const decoder = openaiResponsesAdapter.createStreamDecoder();
  const events: StreamEvent[] = [];
  let last = false;
  const parser = createSseParser({
    onEvent(frame: SseEvent) {
      const decoded = decoder(frame);
      events.push(...decoded.events);
      if (decoded.last) last = true;
    },
  });
  for (const chunk of chunks) parser.feed(chunk);
  parser.end();
  return { events, last };
}

const text = (events: StreamEvent[], type: "text" | "reasoning" | "refusal" = "text") => events.filter((e) => e.type === type).map((e) => (e as { text: string }).text).join("");
const args = (events: StreamEvent[], index: number) => events.filter((e) => e.type === "tool-call" && e.index === index).map((e) => (e as { argumentsDelta: string }).argumentsDelta).join("");

const AGENT_TURN: Script = {
  items: [
    { reasoning: ["**Reading the file**\n\nThe user wants the weather.", "**Calling the tool**"], encrypted: "gAAAAABencrypted-blob==" },
    { text: "Let me look that up — ünïcødé 🌦 included." },
    { call: { name: "get_weather", arguments: '{"city":"Paris","unit":"c"}', callId: "call_abc" } },
    { call: { name: "get_time", arguments: '{"zone":"Europe/Paris"}', callId: "call_def" } },
  ],
  usage: USAGE(1200, 340, 1024, 200),
};

describe("the Responses API upstream's stream decoder", () => {
  test("a reasoning, text and two-call turn decodes into the union, whatever the bytes' pieces", () => {
    const whole = responsesFrames(AGENT_TURN).join("");
    const cuts: [string, (string | Uint8Array)[]][] = [
      ["one frame a chunk", responsesFrames(AGENT_TURN)],
      ["three bytes a chunk", splitEvery(whole, 3)],
      ["one byte a chunk, as bytes (code points split)", [...new TextEncoder().encode(whole)].map((b) => new Uint8Array([b]))],
      ["CRLF and keep-alive comments", splitEvery(responsesFrames(AGENT_TURN, { crlf: true, keepAliveEvery: 2 }).join(""), 5)],
    ];
    for (const [, chunks] of cuts) {
      const { events, last } = decode(chunks);
      expect(last).toBe(true);
      expect(events[0]).toEqual({ type: "start" });
      expect(text(events, "reasoning")).toBe("**Reading the file**\n\nThe user wants the weather.\n\n**Calling the tool**");
      // The seal comes once, after the item's text, carrying OpenAI's encrypted content.
      const seals = events.filter((e) => e.type === "reasoning" && e.signature !== undefined) as { signature: string }[];
      expect(seals.length).toBe(1);
      expect(openaiEncryptedReasoning(seals[0]!.signature)).toBe("gAAAAABencrypted-blob==");
      expect(text(events)).toBe("Let me look that up — ünïcødé 🌦 included.");
      const starts = events.filter((e) => e.type === "tool-call" && e.name !== undefined);
      expect(starts).toEqual([
        { type: "tool-call", index: 0, id: "call_abc", name: "get_weather", argumentsDelta: "" },
        { type: "tool-call", index: 1, id: "call_def", name: "get_time", argumentsDelta: "" },
      ]);
      expect(args(events, 0)).toBe('{"city":"Paris","unit":"c"}');
      expect(args(events, 1)).toBe('{"zone":"Europe/Paris"}');
      expect(events.filter((e) => e.type === "finish")).toEqual([{ type: "finish", reason: "tool_calls" }]);
      expect(events.filter((e) => e.type === "usage")).toEqual([
        { type: "usage", inputTokens: 1200, outputTokens: 340, cacheReadTokens: 1024, reasoningTokens: 200, serviceTier: "default" },
      ]);
    }
  });

  test("a text answer finishes with stop; a refusal is its own kind", () => {
    const { events } = decode(responsesFrames({ items: [{ text: "Hello there." }] }));
    expect(text(events)).toBe("Hello there.");
    expect(events.find((e) => e.type === "finish")).toEqual({ type: "finish", reason: "stop" });
    const refused = decode(responsesFrames({ items: [{ refusal: "I can't help with that." }] })).events;
    expect(text(refused, "refusal")).toBe("I can't help with that.");
    expect(text(refused)).toBe("");
  });

  test("an incomplete answer says why: the token limit, or the content filter", () => {
    const cut = decode(responsesFrames({ items: [{ text: "Once upon" }], status: "incomplete", incompleteReason: "max_output_tokens", usage: USAGE(5, 16) })).events;
    expect(cut.find((e) => e.type === "finish")).toEqual({ type: "finish", reason: "length" });
    expect(cut.find((e) => e.type === "usage")).toMatchObject({ inputTokens: 5, outputTokens: 16 });
    const filtered = decode(responsesFrames({ items: [{ text: "Well" }], status: "incomplete", incompleteReason: "content_filter" })).events;
    expect(filtered.find((e) => e.type === "finish")).toEqual({ type: "finish", reason: "content_filter" });
  });

  test("response.failed is an error after what came, with the usage the vendor reports, and ends the answer", () => {
    const { events, last } = decode(responsesFrames({ items: [{ text: "Partial" }], status: "failed", error: { code: "server_error", message: "The model had an internal error." }, usage: USAGE(40, 3) }));
    expect(last).toBe(true);
    expect(text(events)).toBe("Partial");
    const tail = events.slice(-2);
    expect(tail[0]).toMatchObject({ type: "usage", inputTokens: 40, outputTokens: 3 });
    expect(tail[1]).toMatchObject({ type: "error", errorType: "upstream" });
    expect((tail[1] as { message: string }).message).toContain("The model had an internal error.");
    expect(events.some((e) => e.type === "finish")).toBe(false);
  });

  test("a mid-stream error event is an error (in either place servers put its words), and the answer is not over", () => {
    const frames = responsesFrames({ items: [{ text: "Some text that goes on" }] });
    const cut = frames.slice(0, 6);
    cut.push(frameOf({ type: "error", sequence_number: 6, code: "server_error", message: "upstream broke", param: null }));
    const { events, last } = decode(cut);
    expect(last).toBe(false);
    const error = events.find((e) => e.type === "error") as { message: string };
    expect(error.message).toContain("upstream broke");
    // The error field some servers nest.
    const nested = decode([`data: ${JSON.stringify({ type: "error", error: { message: "nested words" } })}\n\n`]).events;
    expect((nested[0] as { message: string }).message).toContain("nested words");
  });

  test("frames named only by their event line, frames of unknown kinds, and ones that are not objects pass without events", () => {
    const { events } = decode([
      `event: response.output_text.delta\ndata: {"item_id":"m1","output_index":0,"delta":"by the event line"}\n\n`,
      `event: response.web_search_call.searching\ndata: {"type":"response.web_search_call.searching","item_id":"ws1"}\n\n`,
      `data: 42\n\n`,
      `data: null\n\n`,
      `data: {"type":"response.something_new","x":{"y":[1,2,3]}}\n\n`,
    ]);
    expect(events).toEqual([{ type: "start" }, { type: "text", text: "by the event line" }]);
  });

  test("hostile values: numbers where text is, objects where arguments are, absurd counts are dropped, never shown", () => {
    const { events } = decode([
      frameOf({ type: "response.output_item.added", output_index: 0, item: { id: "m", type: "message", content: [] } }),
      frameOf({ type: "response.output_text.delta", item_id: "m", output_index: 0, delta: 12345 }),
      frameOf({ type: "response.output_text.delta", item_id: "m", output_index: 0, delta: { evil: true } }),
      frameOf({ type: "response.output_item.added", output_index: 1, item: { id: "f", type: "function_call", call_id: 7, name: ["x"], arguments: { a: 1 } } }),
      frameOf({ type: "response.function_call_arguments.delta", item_id: "f", output_index: 1, delta: null }),
      frameOf({ type: "response.completed", response: { status: "completed", usage: { input_tokens: -5, output_tokens: 1.5, input_tokens_details: { cached_tokens: 9e15 }, output_tokens_details: { reasoning_tokens: "lots" } } } }),
    ]);
    expect(text(events)).toBe("");
    expect(events.find((e) => e.type === "tool-call")).toEqual({ type: "tool-call", index: 0, id: undefined, name: "", argumentsDelta: "" });
    // Nothing usable: the meter estimates.
    expect(events.find((e) => e.type === "usage")).toEqual({ type: "usage", inputTokens: undefined, outputTokens: undefined, cacheReadTokens: undefined });
  });

  test("cached and written counts past the prompt are cut to it", () => {
    const { events } = decode([frameOf({ type: "response.completed", response: { status: "completed", usage: { input_tokens: 100, output_tokens: 2, input_tokens_details: { cached_tokens: 80, cache_write_tokens: 50 } } } })]);
    expect(events.find((e) => e.type === "usage")).toMatchObject({ inputTokens: 100, cacheReadTokens: 80, cacheWriteTokens: 20 });
  });

  test("an answer without usage leaves the counting to the meter", () => {
    const { events } = decode(responsesFrames({ items: [{ text: "hi" }], usage: null }));
    expect(events.some((e) => e.type === "usage")).toBe(false);
    expect(events.find((e) => e.type === "finish")).toEqual({ type: "finish", reason: "stop" });
  });

  test("invalid JSON and frames nested too deep are protocol errors", () => {
    expect(() => decode([`event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"x"\n\n`])).toThrow(UpstreamProtocolError);
    expect(() => decode([`data: ${"[".repeat(500)}${"]".repeat(500)}\n\n`])).toThrow(UpstreamProtocolError);
  });

  test("items a server gives only when done (no deltas) still reach the client, once", () => {
    const { events } = decode([
      frameOf({ type: "response.output_item.done", output_index: 0, item: { id: "rs", type: "reasoning", summary: [{ type: "summary_text", text: "thought" }], encrypted_content: "enc" } }),
      frameOf({ type: "response.output_item.done", output_index: 1, item: { id: "m", type: "message", content: [{ type: "output_text", text: "whole text" }] } }),
      frameOf({ type: "response.output_item.done", output_index: 2, item: { id: "f", type: "function_call", call_id: "c1", name: "f", arguments: '{"a":1}' } }),
      frameOf({ type: "response.output_item.done", output_index: 3, item: { id: "ct", type: "custom_tool_call", call_id: "c2", name: "apply_patch", input: "*** Begin Patch" } }),
      frameOf({ type: "response.completed", response: { status: "completed" } }),
    ]);
    expect(events).toEqual([
      { type: "start" },
      { type: "reasoning", text: "thought", signature: openaiReasoningSignature("enc") },
      { type: "text", text: "whole text" },
      { type: "tool-call", index: 0, id: "c1", name: "f", argumentsDelta: '{"a":1}' },
      { type: "tool-call", index: 1, id: "c2", name: "apply_patch", argumentsDelta: '{"input":"*** Begin Patch"}' },
      { type: "finish", reason: "tool_calls" },
    ]);
  });

  test("a call whose arguments come only in its done event gets the rest there; streamed ones are not repeated", () => {
    const { events } = decode([
      frameOf({ type: "response.output_item.added", output_index: 0, item: { id: "f", type: "function_call", call_id: "c", name: "f", arguments: "" } }),
      frameOf({ type: "response.function_call_arguments.delta", item_id: "f", output_index: 0, delta: '{"a":' }),
      frameOf({ type: "response.output_item.done", output_index: 0, item: { id: "f", type: "function_call", call_id: "c", name: "f", arguments: '{"a":1}' } }),
    ]);
    expect(args(events, 0)).toBe('{"a":1}');
    expect(events.filter((e) => e.type === "tool-call").length).toBe(3);
  });

  test("deltas without item ids are placed by output_index; open models' reasoning text streams too", () => {
    const { events } = decode([
      frameOf({ type: "response.output_item.added", output_index: 0, item: { type: "function_call", call_id: "c", name: "f" } }),
      frameOf({ type: "response.function_call_arguments.delta", output_index: 0, delta: "{}" }),
      frameOf({ type: "response.reasoning_text.delta", item_id: "r", output_index: 1, content_index: 0, delta: "raw thinking" }),
      // Its summary too (a server that sends both): not shown twice.
      frameOf({ type: "response.reasoning_summary_text.delta", item_id: "r", output_index: 1, summary_index: 0, delta: "summary" }),
    ]);
    expect(args(events, 0)).toBe("{}");
    expect(text(events, "reasoning")).toBe("raw thinking");
  });

  test("[DONE] from a compatible server ends the answer", () => {
    expect(decode(["data: [DONE]\n\n"]).last).toBe(true);
  });
});

describe("the Responses API upstream's whole answers", () => {
  test("a whole answer decodes in output order, with its usage and finish", () => {
    const events = openaiResponsesAdapter.decodeBody(responsesBody(AGENT_TURN));
    expect(events).toEqual([
      { type: "reasoning", text: "**Reading the file**\n\nThe user wants the weather.\n\n**Calling the tool**", signature: openaiReasoningSignature("gAAAAABencrypted-blob==") },
      { type: "text", text: "Let me look that up — ünïcødé 🌦 included." },
      { type: "tool-call", index: 0, id: "call_abc", name: "get_weather", argumentsDelta: '{"city":"Paris","unit":"c"}' },
      { type: "tool-call", index: 1, id: "call_def", name: "get_time", argumentsDelta: '{"zone":"Europe/Paris"}' },
      { type: "finish", reason: "tool_calls" },
      { type: "usage", inputTokens: 1200, outputTokens: 340, cacheReadTokens: 1024, reasoningTokens: 200, serviceTier: "default" },
    ]);
  });

  test("an incomplete whole answer finishes with length", () => {
    const events = openaiResponsesAdapter.decodeBody(responsesBody({ items: [{ text: "cut" }], status: "incomplete" }));
    expect(events.find((e) => e.type === "finish")).toEqual({ type: "finish", reason: "length" });
  });

  test("failed responses, error bodies, unfinished ones and non-answers are protocol errors (a 502, charged nothing)", () => {
    for (const body of [
      responsesBody({ items: [], status: "failed" }),
      { error: { message: "proxy said no" } },
      { ...responsesBody({ items: [{ text: "x" }] }), status: "in_progress" },
      { object: "response", status: "completed" },
      null,
      [],
      "text",
    ]) {
      expect(() => openaiResponsesAdapter.decodeBody(body)).toThrow(UpstreamProtocolError);
    }
  });

  test("requests go to /responses with the provider's key; a dearer tier is asked as the standard one", () => {
    const provider = { id: "p", kind: "openai", base_url: "https://api.example/v1", apiKey: "sk-x", headers: {}, openai_tiers: true } as never;
    const call = openaiResponsesAdapter.buildRequest(provider, { model: "gpt-6-sol", input: [], service_tier: "priority" }, new Headers());
    expect(call.url).toBe("https://api.example/v1/responses");
    expect(call.headers.authorization).toBe("Bearer sk-x");
    expect(JSON.parse(call.body).service_tier).toBe("default");
  });
});

describe("the Responses API upstream's rate limits said in the stream", () => {
  test("rate_limit_exceeded or server_is_overloaded (response.failed or an error event) is an overload; other codes are failures", () => {
    const failed = (code: string) => decode([frameOf({ type: "response.failed", response: { status: "failed", error: { code, message: "m" } } })]).events.find((e) => e.type === "error");
    const errorEvent = (code: string) => decode([frameOf({ type: "error", code, message: "m", param: null })]).events.find((e) => e.type === "error");
    const nested = (code: string) => decode([`data: ${JSON.stringify({ type: "error", error: { code, message: "m" } })}\n\n`]).events.find((e) => e.type === "error");
    for (const read of [failed, errorEvent, nested]) {
      expect(read("rate_limit_exceeded")).toMatchObject({ errorType: "overloaded" });
      expect(read("server_is_overloaded")).toMatchObject({ errorType: "overloaded" });
      expect(read("server_error")).toMatchObject({ errorType: "upstream" });
    }
  });
});
