import type { StreamEvent } from "../../streaming/events.ts";

/**
 * A forced tool that carries a JSON answer (structured output on an upstream without its own,
 * formats/common/structured-output.ts) comes back as the answer's text: the client asked for JSON in
 * the message, not for a tool call. Its arguments stream as text deltas; other tool calls are
 * renumbered from 0 without it; a finish that only the answer tool caused is a normal stop.
 * One mapper per answer (it remembers which tool-call index is the answer's).
 */
export function createAnswerToolMapper(toolName: string): (events: StreamEvent[]) => StreamEvent[] {
  /** Upstream tool-call index → ours, or "text" for the answer tool. */
  const indexes = new Map<number, number | "text">();
  let clientCalls = 0;
  /** Whether the answer tool was called, and whether any of its input came (an empty object streams none). */
  let answered = false;
  let wrote = false;
  return (events) => {
    if (!events.some((e) => e.type === "tool-call" || e.type === "finish")) return events;
    const out: StreamEvent[] = [];
    for (const e of events) {
      if (e.type === "tool-call") {
        let index = indexes.get(e.index);
        if (index === undefined) {
          index = e.name === toolName ? "text" : clientCalls++;
          indexes.set(e.index, index);
        }
        if (index === "text") {
          answered = true;
          if (e.argumentsDelta) {
            wrote = true;
            out.push({ type: "text", text: e.argumentsDelta });
          }
        } else out.push({ ...e, index });
      } else if (e.type === "finish") {
        if (answered && !wrote) out.push({ type: "text", text: "{}" });
        out.push(e.reason === "tool_calls" && clientCalls === 0 ? { ...e, reason: "stop" } : e);
      } else out.push(e);
    }
    return out;
  };
}
