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
 * The request's prompt for our tokenizer, asked for only when the upstream reported no input
 * count: its text, or its count when part of it arrives as tokens already (embeddings' token
 * arrays, whose count is their length).
 */
export type PromptSource = () => string | Promise<number>;

/**
 * Text kept for a possible estimate. Shorter answers (8 K characters ≈ 2,000 tokens) are counted
 * exactly if they must be; past this, the kept text is the answer's sample: the rest is only
 * measured in characters and counted at the sample's rate of tokens per character. Nothing is
 * tokenized until the answer ends without a reported count (rare: most upstreams report), so an
 * answer costs at most this much memory and no CPU for it, however long it runs — 2,000 open
 * streams, 16 MB.
 */
export const METER_KEEP_CHARS = 8 * 1024;

/**
 * Watches the event stream and remembers what the upstream reported. The generated text is
 * kept only so that an upstream that reports nothing can still be billed by count, and only up
 * to METER_KEEP_CHARS (see above). Once the upstream reports its output count, nothing is kept.
 */
export function createUsageMeter(keepChars = METER_KEEP_CHARS) {
  let input: number | undefined;
  let output: number | undefined;
  const produced: string[] = [];
  /** Frames relayed without decoding (with their size); decoded only if their text must be counted. */
  const deferred: { decode: () => StreamEvent[]; size: number }[] = [];
  /** Characters held in `produced` and `deferred` (frames count their raw size). */
  let kept = 0;
  /** Once the budget is passed: the sample's text, and what came after it (in characters). */
  let sample: { text: string; textPerFrameChar: number } | undefined;
  let afterSample = 0;
  let finished = false;
  let empty = true;
  let images = 0;
  let totalOnce: Promise<MeteredUsage> | undefined;
  /**
   * Reasoning, counted apart for clients that show its share of the output (never billed apart):
   * the upstream's count, else the text it thought, kept like the answer's sample (at most
   * `keepChars`, then only measured).
   */
  let reasoningReported: number | undefined;
  const reasoningText: string[] = [];
  let reasoningKept = 0;
  let reasoningAfter = 0;
  const keepReasoning = (text: string) => {
    if (reasoningReported !== undefined || text.length === 0) return;
    if (reasoningKept < keepChars) {
      reasoningText.push(text);
      reasoningKept += text.length;
    } else reasoningAfter += text.length;
  };

  const keep = (text: string) => {
    if (output !== undefined) return; // reported: the text will never be counted
    if (sample) {
      afterSample += text.length;
      return;
    }
    produced.push(text);
    kept += text.length;
    if (kept > keepChars) takeSample();
  };
  /** Decodes what was deferred and keeps the text so far as the answer's sample. */
  const takeSample = () => {
    let frameChars = 0;
    let frameText = 0;
    for (const { decode, size } of deferred.splice(0)) {
      frameChars += size;
      for (const e of decode()) {
        if (e.type !== "text" && e.type !== "reasoning") continue;
        produced.push(e.text);
        frameText += e.text.length;
      }
    }
    const text = produced.join("");
    produced.length = 0;
    kept = 0;
    // Frames relayed undecoded after this are counted by their size, at the text share seen here.
    sample = { text, textPerFrameChar: frameChars > 0 ? frameText / frameChars : 1 };
  };

  return {
    /** A relayed text frame (`size` characters): it counts as output now, its text only if usage must be estimated. */
    defer(decode: () => StreamEvent[], size = 0): void {
      empty = false;
      if (output !== undefined) return;
      if (sample) {
        afterSample += size * sample.textPerFrameChar;
        return;
      }
      deferred.push({ decode, size });
      kept += size;
      if (kept > keepChars) takeSample();
    },
    observe(e: StreamEvent): void {
      if (e.type !== "error") empty = false;
      switch (e.type) {
        case "text":
          keep(e.text);
          break;
        case "reasoning":
          keep(e.text);
          keepReasoning(e.text);
          break;
        case "tool-call":
          if (e.name) keep(e.name);
          if (e.argumentsDelta) keep(e.argumentsDelta);
          break;
        case "usage":
          if (e.reasoningTokens !== undefined) {
            reasoningReported = e.reasoningTokens;
            reasoningText.length = 0;
          }
          if (e.inputTokens !== undefined) input = e.inputTokens;
          if (e.outputTokens !== undefined) {
            output = e.outputTokens;
            // The upstream said how much it produced: what was kept to count it can go.
            produced.length = 0;
            deferred.length = 0;
            sample = undefined;
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
    total(prompt: PromptSource): Promise<MeteredUsage> {
      return (totalOnce ??= count(prompt));
    },
    /** Whether the upstream said how many of its output tokens were reasoning. */
    get reasoningReported() {
      return reasoningReported !== undefined;
    },
    /**
     * Reasoning tokens: the upstream's count, else our tokenizer's count of the reasoning text
     * (an estimate: Anthropic may show a summary of what it thought), else undefined when the
     * answer had no reasoning. Part of the output tokens, never added to them.
     */
    async reasoningTokens(): Promise<number | undefined> {
      if (reasoningReported !== undefined) return reasoningReported;
      if (reasoningKept === 0) return undefined;
      const text = reasoningText.join("");
      const tokens = await countTokens(text);
      return tokens + (reasoningAfter > 0 ? Math.ceil((reasoningAfter * tokens) / text.length) : 0);
    },
  };

  async function count(prompt: PromptSource): Promise<MeteredUsage> {
    const estimated = input === undefined || output === undefined;
    let outputTokens = output;
    if (outputTokens === undefined) {
      const exact = !sample;
      if (!sample) takeSample();
      const { text } = sample!;
      const tokens = await countTokens(text);
      outputTokens = exact ? tokens : tokens + (text.length > 0 ? Math.ceil((afterSample * tokens) / text.length) : Math.ceil(afterSample / 4));
    }
    return {
      inputTokens: input ?? (await countPrompt(prompt)),
      outputTokens,
      estimated,
      images,
    };
  }
}

export type UsageMeter = ReturnType<typeof createUsageMeter>;

async function countPrompt(prompt: PromptSource): Promise<number> {
  const source = prompt();
  return typeof source === "string" ? countTokens(source) : source;
}
