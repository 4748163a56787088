/**
 * Claude Code's requests as recorded from the real CLI (test/fixtures/claude-code/, see its
 * README), and an upstream script that plays the model's side of its tool-using task: asked with
 * the `Write` tool and no tool result yet, it calls `Write`; given the tool result, it answers.
 */
import { readFileSync } from "node:fs";
import { vendorRefusal, type FakeUpstreamOptions, type RecordedRequest, type Reply } from "./fake-upstream.ts";

export interface RecordedCall {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: any;
}

const DIR = new URL("../fixtures/claude-code/", import.meta.url);

/** `sonnet-4-5.turn-1` and so on: one recorded request, headers scrubbed, body as sent. */
export function claudeCodeFixture(name: string): RecordedCall {
  return JSON.parse(readFileSync(new URL(`${name}.json`, DIR), "utf8"));
}

/** The ~36 count_tokens bodies one `/context` sent, with their common headers. */
export function countTokensFixture(): { headers: Record<string, string>; bodies: any[] } {
  return JSON.parse(readFileSync(new URL("count-tokens.json", DIR), "utf8"));
}

/** The three configurations: budgeted thinking, adaptive thinking with a system turn, a model id Claude Code does not know. */
export const CLAUDE_CODE_RECORDINGS = ["sonnet-4-5", "opus-5-5", "unknown-model"] as const;

export const WRITE_CONTENT = "hello from switchyard\n";
export const FINAL_TEXT = "Done: wrote hello.txt.";

const ev = (type: string, data: unknown) => `event: ${type}\ndata: ${JSON.stringify(data)}\n\n`;

/** What one turn reports, as Anthropic counts: `input` fresh, the cache counts beside it. */
export interface TurnUsage {
  input: number;
  cacheRead: number;
  cacheWrite5m: number;
  cacheWrite1h: number;
  output: number;
}

const PLAIN_TURN: TurnUsage = { input: 2000, cacheRead: 0, cacheWrite5m: 0, cacheWrite1h: 0, output: 12 };

/** Anthropic's prompt counts of a turn, as message_start (and, since 2025, message_delta) carry them. */
function promptUsage(u: TurnUsage) {
  return {
    input_tokens: u.input,
    cache_creation_input_tokens: u.cacheWrite5m + u.cacheWrite1h,
    cache_read_input_tokens: u.cacheRead,
    cache_creation: { ephemeral_5m_input_tokens: u.cacheWrite5m, ephemeral_1h_input_tokens: u.cacheWrite1h },
  };
}

function anthropicStream(blocks: ({ type: "text"; text: string } | { type: "tool_use"; id: string; name: string; input: unknown })[], stop: string, usage = PLAIN_TURN): Reply {
  const chunks = [ev("message_start", {
    type: "message_start",
    message: { id: "msg_01CcScript", type: "message", role: "assistant", model: "claude-x", content: [], stop_reason: null, stop_sequence: null, usage: { ...promptUsage(usage), output_tokens: 1 } },
  })];
  blocks.forEach((b, index) => {
    if (b.type === "text") {
      chunks.push(ev("content_block_start", { type: "content_block_start", index, content_block: { type: "text", text: "" } }));
      chunks.push(ev("content_block_delta", { type: "content_block_delta", index, delta: { type: "text_delta", text: b.text } }));
    } else {
      chunks.push(ev("content_block_start", { type: "content_block_start", index, content_block: { type: "tool_use", id: b.id, name: b.name, input: {} } }));
      const json = JSON.stringify(b.input);
      const half = Math.floor(json.length / 2);
      chunks.push(ev("content_block_delta", { type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: json.slice(0, half) } }));
      chunks.push(ev("content_block_delta", { type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: json.slice(half) } }));
    }
    chunks.push(ev("content_block_stop", { type: "content_block_stop", index }));
  });
  chunks.push(ev("message_delta", { type: "message_delta", delta: { stop_reason: stop, stop_sequence: null }, usage: usage === PLAIN_TURN ? { output_tokens: 12 } : { ...promptUsage(usage), output_tokens: usage.output } }));
  chunks.push(ev("message_stop", { type: "message_stop" }));
  return { kind: "sse", chunks };
}

function openaiStream(text: string, call: { id: string; name: string; input: unknown } | undefined): Reply {
  const base = { id: "chatcmpl-CcScript", object: "chat.completion.chunk", created: 1_700_000_000, model: "gpt-4.1" };
  const chunk = (delta: unknown, finish: string | null = null, usage?: unknown) =>
    `data: ${JSON.stringify({ ...base, choices: usage ? [] : [{ index: 0, delta, finish_reason: finish }], ...(usage ? { usage } : {}) })}\n\n`;
  const chunks = [chunk({ role: "assistant", content: "" }), chunk({ content: text })];
  if (call) {
    const json = JSON.stringify(call.input);
    chunks.push(chunk({ tool_calls: [{ index: 0, id: call.id, type: "function", function: { name: call.name, arguments: "" } }] }));
    chunks.push(chunk({ tool_calls: [{ index: 0, function: { arguments: json.slice(0, 10) } }] }));
    chunks.push(chunk({ tool_calls: [{ index: 0, function: { arguments: json.slice(10) } }] }));
  }
  chunks.push(chunk({}, call ? "tool_calls" : "stop"));
  chunks.push(chunk(undefined, null, { prompt_tokens: 2000, completion_tokens: 12, total_tokens: 2012 }));
  chunks.push("data: [DONE]\n\n");
  return { kind: "sse", chunks };
}

/** Whether the last turn carries a tool result (Anthropic `tool_result` block or OpenAI `tool` message). */
function answersTool(body: any): boolean {
  const last = body.messages.at(-1);
  if (last?.role === "tool") return true;
  return body.messages.some((m: any) => Array.isArray(m.content) && m.content.some((b: any) => b?.type === "tool_result"));
}

function offersWrite(body: any): boolean {
  return (body.tools ?? []).some((t: any) => t?.name === "Write" || t?.function?.name === "Write");
}

/**
 * The model's side of the task, in the upstream's own wire format, after the vendor's checks
 * (a request the real vendor would refuse is refused the same way).
 */
export function claudeCodeScript(filePath: string, options: FakeUpstreamOptions & { usage?: (turn: 1 | 2) => TurnUsage } = {}) {
  let calls = 0;
  return (rec: RecordedRequest): Reply => {
    const refusal = vendorRefusal(rec, options);
    if (refusal) return refusal;
    const body = rec.body;
    const openai = rec.path === "/v1/chat/completions";
    const id = openai ? `call_script${++calls}` : `toolu_script${++calls}`;
    const write = offersWrite(body) && !answersTool(body) ? { id, name: "Write", input: { file_path: filePath, content: WRITE_CONTENT } } : undefined;
    const text = write ? "Writing the file." : FINAL_TEXT;
    if (openai) return openaiStream(text, write);
    // Turn 1 asks for the file; turn 2 carries the tool's result.
    const usage = options.usage?.(answersTool(body) ? 2 : 1);
    return write ? anthropicStream([{ type: "text", text }, { type: "tool_use", ...write }], "tool_use", usage) : anthropicStream([{ type: "text", text }], "end_turn", usage);
  };
}
