import type { StreamEvent } from "../streaming/events.ts";
import { countTokens } from "./token-estimate.ts";

export interface MeteredUsage {
  inputTokens: number;
  outputTokens: number;
  /** True when any count came from our tokenizer rather than the upstream. */
  estimated: boolean;
  /** Images generated, priced apart from tokens. */
  images: number;
}

/**
 * Watches the event stream and remembers what the upstream reported; keeps the generated
 * text only so that an upstream that reports nothing can still be billed by count.
 */
export function createUsageMeter() {
  let input: number | undefined;
  let output: number | undefined;
  const produced: string[] = [];
  /** Frames relayed without decoding; decoded only if their text must be counted. */
  const deferred: (() => StreamEvent[])[] = [];
  let finished = false;
  let empty = true;
  let images = 0;
  let totalOnce: Promise<MeteredUsage> | undefined;

  return {
    /** A relayed text frame: it counts as output now, its text only if usage must be estimated. */
    defer(decode: () => StreamEvent[]): void {
      empty = false;
      deferred.push(decode);
    },
    observe(e: StreamEvent): void {
      if (e.type !== "error") empty = false;
      switch (e.type) {
        case "text":
        case "reasoning":
          produced.push(e.text);
          break;
        case "tool-call":
          if (e.name) produced.push(e.name);
          if (e.argumentsDelta) produced.push(e.argumentsDelta);
          break;
        case "usage":
          if (e.inputTokens !== undefined) input = e.inputTokens;
          if (e.outputTokens !== undefined) output = e.outputTokens;
          break;
        case "finish":
          finished = true;
          break;
        case "image":
          images += 1;
          break;
        case "start":
          if (e.inputTokens !== undefined) input ??= e.inputTokens;
          break;
      }
    },
    get finished() {
      return finished;
    },
    /** Nothing but errors seen: the upstream produced nothing to bill. */
    get empty() {
      return empty;
    },
    get reported() {
      return input !== undefined && output !== undefined;
    },
    /**
     * The answer's counts; the prompt is only tokenised when the upstream never said. Asked at
     * the end of an answer, by the stream (to tell the client) and the settlement alike: the
     * first call's result is the answer for both.
     */
    total(promptText: () => string): Promise<MeteredUsage> {
      return (totalOnce ??= count(promptText));
    },
  };

  async function count(promptText: () => string): Promise<MeteredUsage> {
    const estimated = input === undefined || output === undefined;
    if (output === undefined) {
      // Appended after the decoded text: a token count does not depend on the order of the parts.
      for (const decode of deferred.splice(0)) for (const e of decode()) if (e.type === "text" || e.type === "reasoning") produced.push(e.text);
    }
    return {
      inputTokens: input ?? (await countTokens(promptText())),
      outputTokens: output ?? (await countTokens(produced.join(""))),
      estimated,
      images,
    };
  }
}

export type UsageMeter = ReturnType<typeof createUsageMeter>;
