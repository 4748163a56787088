import { describe, expect, test } from "bun:test";
import { learnTextFrame } from "../../../src/streaming/text-frame-template.ts";
import { openaiAdapter } from "../../../src/providers/openai/openai-adapter.ts";
import { anthropicAdapter } from "../../../src/providers/anthropic/anthropic-adapter.ts";
import { TemplateTextFrame, UpstreamProtocolError } from "../../../src/providers/provider.ts";
import type { SseEvent } from "../../../src/streaming/sse-parser.ts";

/** What every Anthropic stream opens with: its message, and a text block before that block's deltas. */
const MESSAGE_START = '{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[],"usage":{"input_tokens":3,"output_tokens":1}}}';
const blockStart = (index: number) => JSON.stringify({ type: "content_block_start", index, content_block: { type: "text", text: "" } });

/** OpenAI's chunk as its API writes it, `usage: null` and the random `obfuscation` padding included. */
const openaiChunk = (text: string, obfuscation = "yRkT0", extra = "") =>
  `{"id":"chatcmpl-CVFm2bQ8","object":"chat.completion.chunk","created":1761565012,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_560af6e559","choices":[{"index":0,"delta":{"content":${JSON.stringify(text)}},"logprobs":null,"finish_reason":null}]${extra},"usage":null,"obfuscation":"${obfuscation}"}`;
const anthropicDelta = (text: string, index = 0) => `{"type":"content_block_delta","index":${index},"delta":{"type":"text_delta","text":${JSON.stringify(text)}}}`;
/** Where each decoder reads a text frame's text. */
const content = (chunk: any) => chunk?.choices?.[0]?.delta?.content;
const deltaText = (data: any) => data?.delta?.text;
const sse = (data: string, event?: string): SseEvent => ({ data, event, id: undefined, retry: undefined });

/** Texts a model writes, and the escapes JSON needs for them. */
const TEXTS = ["Hello", " world", 'He said "hi"', "back\\slash", "line\nbreak\ttab", "é ü 中文 🚂", "\u0001\u001f", "}],\"usage\":{", '","obfuscation":"', " "];

describe("a text frame template", () => {
  test("reads every later OpenAI chunk's text, whatever its padding, escapes included", () => {
    const template = learnTextFrame(openaiChunk("first"), '"content"', "first", content, '"obfuscation"')!;
    expect(template).toBeDefined();
    TEXTS.forEach((text, i) => expect(template.read(openaiChunk(text, "x".repeat(i + 1)))).toBe(text));
    // A vendor that escapes what JSON.stringify writes as it is (\u00e9, \/) is read the same.
    expect(template.read(openaiChunk("é/").replace("é/", "\\u00e9\\/"))).toBe("é/");
  });

  test("refuses a chunk that means more than its text, or is written another way", () => {
    const template = learnTextFrame(openaiChunk("first"), '"content"', "first", content, '"obfuscation"')!;
    const refused = [
      openaiChunk("a").replace('"finish_reason":null', '"finish_reason":"stop"'),
      openaiChunk("a").replace('"usage":null', '"usage":{"prompt_tokens":1}'),
      openaiChunk("a").replace('"created":1761565012', '"created":1761565013'),
      openaiChunk("a", "x", ',"extra":1'),
      openaiChunk("a").replace('{"content":"a"}', '{"content":"a","tool_calls":[]}'),
      // A literal that is not one whole string: a stray quote, an unfinished escape, a raw control character.
      openaiChunk("a").replace('"content":"a"', '"content":"a"b"'),
      openaiChunk("a").replace('"content":"a"', '"content":"a\\"'),
      openaiChunk("a").replace('"content":"a"', '"content":"a\u0001"'),
      // Padding that is not a plain string.
      openaiChunk("a", 'x\\"y'),
      openaiChunk("a").replace('"obfuscation":"yRkT0"', '"obfuscation":5'),
      openaiChunk("a") + " ",
      "",
    ];
    for (const frame of refused) expect(template.read(frame)).toBeUndefined();
  });

  test("is not learnt from a frame whose key is written twice, or whose literal holds another text", () => {
    expect(learnTextFrame('{"choices":[{"delta":{"content":"a","x":{"content":"a"}}}]}', '"content"', "a", content)).toBeUndefined();
    expect(learnTextFrame(openaiChunk("a"), '"content"', "b", content, '"obfuscation"')).toBeUndefined();
    expect(learnTextFrame('{"delta":{"text":"a"}}', '"content"', "a", deltaText)).toBeUndefined();
  });

  test("is not learnt from a literal the decoder does not read: JSON keeps a key's last value, and keys can be spelt other ways", () => {
    const delta = (inner: string) => openaiChunk("Hi").replace('{"content":"Hi"}', inner);
    const notRead = [
      delta('{"content":"Hi","content" :"Hi"}'),
      delta('{"content":"Hi","\\u0063ontent":"Hi"}'),
      delta('{"content": "Hi"}').replace('"logprobs":null,"finish_reason":null}', '"logprobs":null,"finish_reason":null},{"index":1,"delta":{"content":"Hi"}}'),
      openaiChunk("Hi").replace('{"content":"Hi"}', '{"content": "Hi"}').replace('"created":', '"meta":{"content":"Hi"},"created":'),
    ];
    for (const frame of notRead) {
      expect(JSON.parse(frame).choices[0].delta.content).toBe("Hi");
      expect(learnTextFrame(frame, '"content"', "Hi", content, '"obfuscation"')).toBeUndefined();
    }
    for (const frame of [
      '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi","text" :"Hi"}}',
      '{"type":"content_block_delta","index":0,"x":{"text":"Hi"},"delta":{"type":"text_delta","text": "Hi"}}',
      '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"},"delta":{"type":"text_delta","text": "Hi"}}',
    ]) expect(learnTextFrame(frame, '"text"', "Hi", deltaText)).toBeUndefined();
  });

  test("without padding, the tail must be the same", () => {
    const template = learnTextFrame(anthropicDelta("first"), '"text"', "first", deltaText)!;
    for (const text of TEXTS) expect(template.read(anthropicDelta(text))).toBe(text);
    expect(template.read(anthropicDelta("a", 1))).toBeUndefined();
    expect(template.read(anthropicDelta("a").replace("text_delta", "thinking_delta"))).toBeUndefined();
    expect(template.read(anthropicDelta("a") + "}")).toBeUndefined();
  });
});

describe("decoders read text frames on the answer's template", () => {
  test("OpenAI: the same events as a whole parse, the parsed JSON on demand", () => {
    const decode = openaiAdapter.createStreamDecoder();
    decode(sse(openaiChunk("").replace('{"content":""}', '{"role":"assistant","content":"","refusal":null}')));
    // The first text chunk is parsed and teaches the template; the rest are read on it.
    expect(decode(sse(openaiChunk("Hi"))).events).toEqual([{ type: "text", text: "Hi" }]);
    TEXTS.forEach((text, i) => {
      const frame = openaiChunk(text, "p".repeat(i + 1));
      const decoded = decode(sse(frame));
      expect(decoded).toBeInstanceOf(TemplateTextFrame);
      expect(decoded.events).toEqual([{ type: "text", text }]);
      // A relay reads `parsed`: it is the chunk's JSON, as a whole parse gives it.
      expect(decoded.parsed).toEqual(JSON.parse(frame));
    });
    // What the template does not fit is parsed and means what it says.
    const finish = decode(sse(openaiChunk("").replace('{"content":""}', "{}").replace('"finish_reason":null', '"finish_reason":"stop"')));
    expect(finish).not.toBeInstanceOf(TemplateTextFrame);
    expect(finish.events).toEqual([{ type: "finish", reason: "stop" }]);
    // An empty text means nothing, as a parsed one does.
    expect(decode(sse(openaiChunk(""))).events).toEqual([]);
  });

  test("OpenAI: a frame that fits the template's ends but is not JSON still fails the answer", () => {
    const decode = openaiAdapter.createStreamDecoder();
    decode(sse(openaiChunk("Hi")));
    expect(() => decode(sse(openaiChunk("a").replace('"content":"a"', '"content":"a"b"')))).toThrow(UpstreamProtocolError);
  });

  test("OpenAI: a server that numbers its chunks is parsed whole, and its texts are right", () => {
    const decode = openaiAdapter.createStreamDecoder();
    for (let i = 0; i < 10; i++) {
      const decoded = decode(sse(openaiChunk(`w${i}`).replace('"created":1761565012', `"created":${i}`)));
      expect(decoded.events).toEqual([{ type: "text", text: `w${i}` }]);
      expect(decoded).not.toBeInstanceOf(TemplateTextFrame);
    }
  });

  test("a decoder taught by a frame whose text is written twice reads later frames as JSON does", () => {
    const twice = (first: string) => openaiChunk("x").replace('{"content":"x"}', `{"content":${JSON.stringify(first)},"content" :"Hi"}`);
    const decode = openaiAdapter.createStreamDecoder();
    expect(decode(sse(twice("Hi"))).events).toEqual([{ type: "text", text: "Hi" }]);
    const later = decode(sse(twice("EVIL")));
    expect(later).not.toBeInstanceOf(TemplateTextFrame);
    expect(later.events).toEqual([{ type: "text", text: "Hi" }]);
    const anthropic = anthropicAdapter.createStreamDecoder();
    anthropic(sse(MESSAGE_START, "message_start"));
    anthropic(sse(blockStart(0), "content_block_start"));
    const shadowed = (first: string) => `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":${JSON.stringify(first)},"text" :"Hi"}}`;
    anthropic(sse(shadowed("Hi"), "content_block_delta"));
    expect(anthropic(sse(shadowed("EVIL"), "content_block_delta")).events).toEqual([{ type: "text", text: "Hi" }]);
  });

  test("Anthropic: text deltas of a block after a thinking one, and an error event with a text delta's data", () => {
    const decode = anthropicAdapter.createStreamDecoder();
    decode(sse(MESSAGE_START, "message_start"));
    decode(sse(blockStart(1), "content_block_start"));
    expect(decode(sse(anthropicDelta("Hi", 1), "content_block_delta")).events).toEqual([{ type: "text", text: "Hi" }]);
    for (const text of TEXTS) {
      const decoded = decode(sse(anthropicDelta(text, 1), "content_block_delta"));
      expect(decoded).toBeInstanceOf(TemplateTextFrame);
      expect(decoded.events).toEqual([{ type: "text", text }]);
    }
    // The event name is part of the frame: an `error` event is an error whatever its data.
    const failed = decode(sse(anthropicDelta("x", 1), "error"));
    expect(failed.events.map((e) => e.type)).toEqual(["error"]);
    // Another block's index is parsed (and may teach the template again).
    decode(sse(blockStart(2), "content_block_start"));
    expect(decode(sse(anthropicDelta("There", 2), "content_block_delta")).events).toEqual([{ type: "text", text: "There" }]);
  });
});
