import { imageMarkdown, type FinishReason, type StreamEvent } from "../../streaming/events.ts";

export interface CollectedAnswer {
  text: string;
  /** What the model said instead of an answer (OpenAI's `refusal`), apart from `text`. */
  refusal: string;
  reasoning: string;
  tools: { id: string | undefined; name: string; arguments: string }[];
  finish: FinishReason | undefined;
  stopSequence: string | undefined;
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens: number | undefined;
  cacheWriteTokens: number | undefined;
  cacheWrite1hTokens: number | undefined;
  /** Reasoning's share of the output tokens, when the upstream (or the gateway's estimate) said. */
  reasoningTokens: number | undefined;
  /**
   * Order in which text, tool calls and reasoning first appeared, for formats that keep blocks
   * in order. A signature ends its reasoning block (Anthropic seals each one).
   */
  order: AnswerPart[];
}

export type AnswerPart =
  | { kind: "text"; text: string }
  | { kind: "refusal"; text: string }
  | { kind: "tool"; index: number }
  | { kind: "reasoning"; text: string; signature?: string }
  | { kind: "redacted-reasoning"; data: string };

/** Folds a whole answer's events into one value, for non-streaming bodies. */
export function collectAnswer(events: StreamEvent[]): CollectedAnswer {
  const answer: CollectedAnswer = {
    text: "",
    refusal: "",
    reasoning: "",
    tools: [],
    finish: undefined,
    stopSequence: undefined,
    inputTokens: 0,
    outputTokens: 0,
    cacheReadTokens: undefined,
    cacheWriteTokens: undefined,
    cacheWrite1hTokens: undefined,
    reasoningTokens: undefined,
    order: [],
  };
  let lastText: { kind: "text" | "refusal"; text: string } | undefined;
  let lastReasoning: { kind: "reasoning"; text: string; signature?: string } | undefined;
  for (const event of events) {
    const e: StreamEvent = event.type === "image" ? { type: "text", text: imageMarkdown(event.url, answer.text.length > 0) } : event;
    switch (e.type) {
      case "text":
      case "refusal":
        if (e.type === "text") answer.text += e.text;
        else answer.refusal += e.text;
        // A refusal after text (or text after a refusal) is a part of its own, as OpenAI's content parts are.
        if (lastText?.kind !== e.type) {
          lastText = { kind: e.type, text: "" };
          answer.order.push(lastText);
        }
        lastText.text += e.text;
        lastReasoning = undefined;
        break;
      case "reasoning":
        answer.reasoning += e.text;
        if (!lastReasoning) {
          lastReasoning = { kind: "reasoning", text: "" };
          answer.order.push(lastReasoning);
          lastText = undefined;
        }
        lastReasoning.text += e.text;
        if (e.signature !== undefined) {
          lastReasoning.signature = e.signature;
          lastReasoning = undefined;
        }
        break;
      case "redacted-reasoning":
        answer.order.push({ kind: "redacted-reasoning", data: e.data });
        lastText = undefined;
        lastReasoning = undefined;
        break;
      case "tool-call": {
        let tool = answer.tools[e.index];
        if (!tool) {
          tool = answer.tools[e.index] = { id: e.id, name: e.name ?? "", arguments: "" };
          answer.order.push({ kind: "tool", index: e.index });
          lastText = undefined;
          lastReasoning = undefined;
        }
        tool.arguments += e.argumentsDelta;
        break;
      }
      case "usage":
        if (e.inputTokens !== undefined) answer.inputTokens = e.inputTokens;
        if (e.outputTokens !== undefined) answer.outputTokens = e.outputTokens;
        if (e.cacheReadTokens !== undefined) answer.cacheReadTokens = e.cacheReadTokens;
        if (e.cacheWriteTokens !== undefined) answer.cacheWriteTokens = e.cacheWriteTokens;
        if (e.cacheWrite1hTokens !== undefined) answer.cacheWrite1hTokens = e.cacheWrite1hTokens;
        if (e.reasoningTokens !== undefined) answer.reasoningTokens = e.reasoningTokens;
        break;
      case "finish":
        answer.finish = e.reason;
        answer.stopSequence = e.stopSequence;
        break;
    }
  }
  answer.tools = answer.tools.filter(Boolean);
  return answer;
}
