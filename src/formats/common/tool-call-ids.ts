/**
 * A tool call's id as the other vendor takes it. Ids travel with a conversation across vendors
 * (a fallback, a model switch, an OpenAI-compatible server's ids in the history), and each vendor
 * refuses the other's shapes: Anthropic takes `^[a-zA-Z0-9_-]+$` only (vLLM's Kimi ids read
 * `functions.get_weather:0`), OpenAI at most 40 characters. The rewrite is a pure function of the
 * id, so a call and its result, written separately, still name each other; an id the vendor takes
 * goes as it is.
 */

const ANTHROPIC_ID = /^[a-zA-Z0-9_-]+$/;
const OPENAI_MAX = 40;

/** A short fingerprint of the id: two ids that differ only in what is replaced stay apart. */
const fingerprint = (id: string) => Bun.hash(id).toString(36).slice(0, 8);

/** For Anthropic's `tool_use.id` and `tool_result.tool_use_id`. */
export function anthropicToolId(id: string): string {
  if (ANTHROPIC_ID.test(id)) return id;
  return `${id.replace(/[^a-zA-Z0-9_-]/g, "_").slice(0, 200)}_${fingerprint(id)}`;
}

/** For OpenAI's `tool_calls[].id` and a tool message's `tool_call_id`. */
export function openaiToolId(id: string): string {
  if (id.length <= OPENAI_MAX) return id;
  return `${id.slice(0, OPENAI_MAX - 9)}_${fingerprint(id)}`;
}
