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
 * Text kept for a possible estimate before it is counted and dropped. Most answers are far
 * shorter (8,192 tokens ≈ 32 KB); a longer one costs a count in the tokenizer's thread per
 * this much, never memory that grows with the answer.
 */
export const METER_KEEP_CHARS = 256 * 1024;

/**
 * Watches the event stream and remembers what the upstream reported. The generated text is
 * kept only so that an upstream that reports nothing can still be billed by count, and only up
 * to METER_KEEP_CHARS: past that it is handed to the tokenizer and dropped, its count kept.
 */
export function createUsageMeter(keepChars = METER_KEEP_CHARS) {
  let input: number | undefined;
  let output: number | undefined;
  const produced: string[] = [];
  /** Frames relayed without decoding; decoded only if their text must be counted. */
  const deferred: (() => StreamEvent[])[] = [];
  /** Characters held in `produced` and `deferred` (frames count their raw size). */
  let kept = 0;
  /** Counts of text already handed to the tokenizer and dropped. */
  const counted: Promise<number>[] = [];
  let finished = false;
  let empty = true;
  let images = 0;
  let totalOnce: Promise<MeteredUsage> | undefined;

  const keep = (text: string) => {
    if (output !== undefined) return; // reported: the text will never be counted
    produced.push(text);
    kept += text.length;
    if (kept > keepChars) spill();
  };
  /** Decodes what was deferred, hands all kept text to the tokenizer, and lets go of it. */
  const spill = () => {
    for (const decode of deferred.splice(0)) for (const e of decode()) if (e.type === "text" || e.type === "reasoning") produced.push(e.text);
    const text = produced.join("");
    produced.length = 0;
    kept = 0;
    if (text.length > 0) counted.push(countTokens(text));
  };

  return {
    /** A relayed text frame (`size` characters): it counts as output now, its text only if usage must be estimated. */
    defer(decode: () => StreamEvent[], size = 0): void {
      empty = false;
      if (output !== undefined) return;
      deferred.push(decode);
      kept += size;
      if (kept > keepChars) spill();
    },
    observe(e: StreamEvent): void {
      if (e.type !== "error") empty = false;
      switch (e.type) {
        case "text":
        case "reasoning":
          keep(e.text);
          break;
        case "tool-call":
          if (e.name) keep(e.name);
          if (e.argumentsDelta) keep(e.argumentsDelta);
          break;
        case "usage":
          if (e.inputTokens !== undefined) input = e.inputTokens;
          if (e.outputTokens !== undefined) {
            output = e.outputTokens;
            // The upstream said how much it produced: what was kept to count it can go.
            produced.length = 0;
            deferred.length = 0;
            counted.length = 0;
            kept = 0;
          }
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
    let outputTokens = output;
    if (outputTokens === undefined) {
      spill();
      outputTokens = 0;
      for (const part of await Promise.all(counted)) outputTokens += part;
    }
    return {
      inputTokens: input ?? (await countTokens(promptText())),
      outputTokens,
      estimated,
      images,
    };
  }
}

export type UsageMeter = ReturnType<typeof createUsageMeter>;
