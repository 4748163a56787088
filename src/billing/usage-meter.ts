import type { StreamEvent } from "../streaming/events.ts";
import type { TokenCounter } from "./token-estimate.ts";

export interface MeteredUsage {
  /** The whole prompt: fresh input plus the cache reads and writes below. */
  inputTokens: number;
  outputTokens: number;
  /**
   * The prompt's cached parts, as the upstream reported them; 0 when the prompt was estimated
   * (an estimate is priced as fresh input) and never more than the prompt (a report that says
   * more is cut down, so no class is negative).
   */
  cacheReadTokens: number;
  /** Cache writes of every lifetime; `cacheWrite1hTokens` of them are 1-hour writes. */
  cacheWriteTokens: number;
  cacheWrite1hTokens: number;
  /** True when any count came from our tokenizer rather than the upstream. */
  estimated: boolean;
  /** True when the prompt's was: the upstream reported no input count (so no cache parts either). */
  promptEstimated?: boolean;
  /** Images generated, priced apart from tokens. */
  images: number;
}

/**
 * The request's prompt for our tokenizer, asked for only when the upstream reported no input
 * count: its text, or its count when part of it arrives as tokens already (embeddings' token
 * arrays, whose count is their length).
 */
/**
 * The prompt, for an estimate of its tokens: its text (counted), or a count. `framing`: the tokens
 * a vendor adds around the text it counts (each message's role and separators), added to a count
 * of the text.
 */
export type PromptSource = (() => string | Promise<number>) | { text(): string | Promise<number>; readonly framing?: number };

/**
 * Text kept for a possible estimate. Shorter answers (8 K characters ≈ 2,000 tokens) are counted
 * exactly if they must be; past this, the kept text is the answer's sample: the rest is only
 * measured in characters and counted at the sample's rate of tokens per character. Frames relayed
 * undecoded count four times their size (FRAME_WEIGHT): a stream of them keeps ~2 KB of frames
 * (50–200 characters of text), and past that is counted at their rate (within a few per cent). Nothing is
 * tokenized until the answer ends without a reported count (rare: most upstreams report), so an
 * answer costs at most this much memory and no CPU for it, however long it runs — 2,000 open
 * streams, 16 MB.
 */
export const METER_KEEP_CHARS = 8 * 1024;

/**
 * How much an answer may relay for the answer limit it was sent with, beyond which the upstream is
 * not answering the request: 60 MB streamed against `max_tokens: 50` went to the client whole (and,
 * on the Responses API, which repeats the text in four closing events, took the gateway to 1 GB; a
 * raw-TCP probe, 2026-11-30). Three bounds, each far past what a model writes for its limit:
 * - text (answer, reasoning, tool calls) decoded from frames: 256 characters a token (no tokenizer
 *   makes a token of more than a few dozen), plus 64 Ki;
 * - frames of more than 256 characters: 4 a token, plus 1,024 (vendors send about one a token, and
 *   a few of their own; smaller ones, Anthropic's pings among them, carry too little to matter);
 * - what frames carry past 8 KiB each (a chunk with 20 `top_logprobs` is 2–4 KB): 256 characters a
 *   token, plus 64 Ki. A frame relayed as it came is counted by this one only, not by its JSON
 *   (an OpenAI chunk is ~330 characters a token, its `"usage":null`, `obfuscation` and the rest).
 * The stream stops there with an error frame (stream-answer.ts, `overrun`), charged at the limit.
 */
export const RELAY_CHARS_PER_TOKEN = 256;
export const RELAY_SLACK_CHARS = 64 * 1024;
export const RELAY_FRAMES_PER_TOKEN = 4;
export const RELAY_SLACK_FRAMES = 1_024;
export const RELAY_FRAME_ALLOWANCE = 8 * 1024;
/**
 * Frames an answer may repeat the request in, past the bounds above: OpenAI's Responses API echoes
 * the request's `instructions` and `tools` in `response.created`, `response.in_progress` (a
 * background one's `response.queued` too) and its closing event. Without this room a request of
 * 200 KB of instructions and `max_output_tokens: 16` was cut at its first frame, a 502 that cost
 * the tenant nothing while the vendor had its prompt, asked again of the pool's other key and of
 * each fallback (a hostile-tenant probe, fourteenth).
 */
export const REQUEST_ECHO_FRAMES = 4;
const RELAY_SMALL_FRAME = 256;

/** What a frame relayed undecoded weighs against METER_KEEP_CHARS, per character (see `defer`). */
const FRAME_WEIGHT = 4;
/** The largest frame kept past the budget to learn frames' text share (a chunk is ~200 characters). */
const RATE_FRAME_MAX = 4 * 1024;

/**
 * Watches the event stream and remembers what the upstream reported. The generated text is
 * kept only so that an upstream that reports nothing can still be billed by count, and only up
 * to METER_KEEP_CHARS (see above). Once the upstream reports its output count, nothing is kept.
 *
 * A class rather than a closure: every attempt makes one, and its methods then live once on
 * the prototype instead of a dozen closures per request.
 */
export class UsageMeter {
  #input: number | undefined;
  #output: number | undefined;
  #cacheRead: number | undefined;
  #cacheWrite: number | undefined;
  #cacheWrite1h: number | undefined;
  /** What the upstream said prices the answer apart from its counts (config/price-rules.ts). */
  #serviceTier: string | undefined;
  #inferenceGeo: string | undefined;
  readonly #keepChars: number;
  #produced: string[] = [];
  /**
   * Frames relayed without decoding; decoded (by `#decodeDeferred`, the stream's one decoder) only
   * if their text must be counted. The frames themselves, not a closure each: a closure and its
   * scope per frame were ~150 bytes more of every open stream's memory for each frame kept.
   */
  #deferred: { data: string }[] = [];
  #decodeDeferred: ((frame: never) => StreamEvent[]) | undefined;
  /** What `produced` and `deferred` weigh against the budget (frames count FRAME_WEIGHT times their size). */
  #kept = 0;
  /** Characters they hold (text, and frames' raw size). */
  #keptChars = 0;
  /**
   * The budget was passed: what is held is the answer's sample, and what comes after is only
   * measured, text in characters and frames in raw characters (counted at the sample's text share).
   * Nothing is decoded or tokenized until an estimate is needed.
   */
  #sampled = false;
  #afterText = 0;
  #afterFrameChars = 0;
  #finished = false;
  #empty = true;
  #answered = false;
  #images = 0;
  #totalOnce: Promise<MeteredUsage> | undefined;
  #reasoningOnce: Promise<number | undefined> | undefined;
  /**
   * Reasoning, counted apart for clients that show its share of the output (never billed apart):
   * the upstream's count, else the text it thought, kept like the answer's sample (at most
   * `keepChars`, then only measured).
   */
  #reasoningReported: number | undefined;
  #reasoningText: string[] = [];
  #reasoningKept = 0;
  #reasoningAfter = 0;

  readonly #countTokens: TokenCounter;
  /**
   * The request is with the upstream (sent, no refusal back): a client that leaves from here is
   * charged its prompt even if nothing came back yet, as the vendor bills it (billing-session.ts).
   */
  promptSent = false;
  /** The service tier the request was sent with (OpenAI's `service_tier`), for an answer that ends before saying its own. */
  askedTier: string | undefined;
  /** The answer limit the request was sent with, and how many answers it asked for (OpenAI's `n`). */
  #perAnswer = Number.POSITIVE_INFINITY;
  #answers = 1;
  /** Text decoded from the answer's frames, the frames relayed and what they carried past RELAY_FRAME_ALLOWANCE each; and their bounds. */
  #relayed = 0;
  #frames = 0;
  #frameExcess = 0;
  #relayLimit = Number.POSITIVE_INFINITY;
  #frameLimit = Number.POSITIVE_INFINITY;
  /** What frames may carry past RELAY_FRAME_ALLOWANCE for echoing the request (`echoes`). */
  #echoRoom = 0;
  /** Every frame of the answer relayed, whatever its size and whichever answer (of `n`) it carried. */
  #framesRelayed = 0;
  /** Images the request was held for: more are not relayed (`mayRelayImages`). */
  #imageLimit = Number.POSITIVE_INFINITY;
  /** The most prompt tokens a reported count is taken for (`limitInput`). */
  #inputLimit = Number.POSITIVE_INFINITY;

  /** `count`: the gateway's tokenizer, for what the upstream did not report. */
  constructor(count: TokenCounter, keepChars = METER_KEEP_CHARS) {
    this.#countTokens = count;
    this.#keepChars = keepChars;
  }

  /**
   * A relayed text frame: it counts as output now (by its size), its text only if usage must be
   * estimated, when `decode` (the same for every frame of a stream) reads it.
   */
  defer<F extends { data: string }>(frame: F, decode: (frame: F) => StreamEvent[], textChars = 0): void {
    this.#empty = false;
    this.#answered = true;
    // Its text counts against the answer's bound as decoded text does: frames of 256 characters or
    // fewer escape the frame bounds, and relayed as they came they took 67 MB to a client that
    // asked for 50 tokens (a raw-TCP probe), while a translated answer was cut at 78,400 characters.
    this.#relayed += textChars;
    if (this.#output !== undefined) return;
    const size = frame.data.length;
    if (this.#sampled) {
      // A sample without frames (text decoded before them filled it) could not tell how much of a
      // frame is text, and counted every frame character as text (~4× too many tokens): its first
      // frame of an ordinary size joins it, so the rest are counted at that frame's share.
      if (this.#deferred.length === 0 && size <= RATE_FRAME_MAX) {
        this.#decodeDeferred = decode as (frame: never) => StreamEvent[];
        this.#deferred.push(frame);
        this.#keptChars += size;
        return;
      }
      this.#afterFrameChars += size;
      return;
    }
    this.#decodeDeferred = decode as (frame: never) => StreamEvent[];
    this.#deferred.push(frame);
    // A frame is mostly JSON around its text (~10 %): kept frames count four times their size, so
    // a stream holds at most a quarter of the budget in frames (~2 KB, six or so) rather than 8 KB,
    // every open stream's memory; the sample they give sets the rate the rest is counted at.
    this.#keptChars += size;
    this.#kept += size * FRAME_WEIGHT;
    if (this.#kept > this.#keepChars) this.#sampled = true;
  }

  observe(e: StreamEvent): void {
    if (e.type !== "error") this.#empty = false;
    switch (e.type) {
      case "text":
      case "refusal":
        this.#answered = true;
        this.#relayed += e.text.length;
        this.#keep(e.text);
        break;
      case "reasoning":
        this.#answered = true;
        this.#relayed += e.text.length;
        this.#keep(e.text);
        this.#keepReasoning(e.text);
        break;
      // Thinking the vendor encrypted (Anthropic's `redacted_thinking`) is thinking all the same:
      // the model made it and the vendor bills it, though it has no text to count.
      case "redacted-reasoning":
        this.#answered = true;
        break;
      case "tool-call":
        this.#answered = true;
        if (e.name) {
          this.#relayed += e.name.length;
          this.#keep(e.name);
        }
        if (e.argumentsDelta) {
          this.#relayed += e.argumentsDelta.length;
          this.#keep(e.argumentsDelta);
        }
        break;
      case "usage":
        if (e.reasoningTokens !== undefined) {
          this.#reasoningReported = e.reasoningTokens;
          this.#reasoningText.length = 0;
        }
        if (e.inputTokens !== undefined) this.#input = e.inputTokens;
        if (e.cacheReadTokens !== undefined) this.#cacheRead = e.cacheReadTokens;
        if (e.cacheWriteTokens !== undefined) this.#cacheWrite = e.cacheWriteTokens;
        if (e.cacheWrite1hTokens !== undefined) this.#cacheWrite1h = e.cacheWrite1hTokens;
        if (e.serviceTier !== undefined) this.#serviceTier = e.serviceTier;
        if (e.inferenceGeo !== undefined) this.#inferenceGeo = e.inferenceGeo;
        if (e.outputTokens !== undefined) {
          this.#output = e.outputTokens;
          // The upstream said how much it produced: what was kept to count it can go.
          this.#produced.length = 0;
          this.#deferred.length = 0;
          this.#kept = 0;
          this.#keptChars = 0;
        }
        break;
      case "finish":
        this.#answered = true;
        this.#finished = true;
        break;
      case "image":
        this.#answered = true;
        this.#images += 1;
        break;
      case "start":
        if (e.inputTokens !== undefined) this.#input ??= e.inputTokens;
        break;
    }
  }

  /**
   * Characters held for a possible estimate: the sample (or the text and frames before it) and
   * the reasoning text. Bounded by `keepChars` plus the piece that passed it, however long the
   * answer; 0 once the upstream reported its output count.
   */
  get keptChars(): number {
    const reasoning = this.#reasoningReported === undefined ? this.#reasoningKept : 0;
    return this.#keptChars + reasoning;
  }

  get finished(): boolean {
    return this.#finished;
  }

  /** The service tier (OpenAI) and the geography (Anthropic) the upstream reported the answer ran at. */
  get serviceTier(): string | undefined {
    // An answer that ended before its usage (a client gone, a stream cut) never said its tier: it
    // ran at the one asked for (OpenAI runs flex or refuses it, never quietly at another). One that
    // reported its counts without a tier is priced at the standard tier, as it says nothing.
    return this.#serviceTier ?? (this.reported ? undefined : this.askedTier);
  }

  get inferenceGeo(): string | undefined {
    return this.#inferenceGeo;
  }

  /** Nothing but errors seen: the upstream produced nothing to bill. */
  get empty(): boolean {
    return this.#empty;
  }

  /**
   * Something of the answer itself came (text, thinking, a tool call, an image, or its end), not
   * only counts announced ahead of it (Anthropic's `message_start`, a usage-only chunk).
   */
  get answered(): boolean {
    return this.#answered;
  }

  get reported(): boolean {
    return this.#input !== undefined && this.#output !== undefined;
  }

  /** Whether the upstream said how many tokens it produced (else the output is our estimate). */
  get outputReported(): boolean {
    return this.#output !== undefined;
  }

  /**
   * The answer's counts; the prompt is only tokenised when the upstream never said. Asked at
   * the end of an answer, by the stream (to tell the client) and the settlement alike: the
   * first call's result is the answer for both.
   */
  total(prompt: PromptSource): Promise<MeteredUsage> {
    return (this.#totalOnce ??= this.#count(prompt));
  }

  /** Whether the answer reasoned at all (a count or reasoning text seen): without it, there is nothing to count. */
  get reasoned(): boolean {
    return this.#reasoningReported !== undefined || this.#reasoningKept > 0;
  }

  /** Whether the upstream said how many of its output tokens were reasoning. */
  get reasoningReported(): boolean {
    return this.#reasoningReported !== undefined;
  }

  /**
   * Reasoning tokens: the upstream's count, else our tokenizer's count of the reasoning text
   * (an estimate: Anthropic may show a summary of what it thought), else undefined when the
   * answer had no reasoning. Part of the output tokens, never added to them.
   */
  reasoningTokens(): Promise<number | undefined> {
    // Asked by the encoder (to tell the client) and by the settlement (to record it): counted once.
    return (this.#reasoningOnce ??= this.#countReasoning());
  }

  async #countReasoning(): Promise<number | undefined> {
    if (this.#reasoningReported !== undefined) return this.#reasoningReported;
    if (this.#reasoningKept === 0) return undefined;
    const text = this.#reasoningText.join("");
    const tokens = await this.#countTokens(text);
    return tokens + (this.#reasoningAfter > 0 ? Math.ceil((this.#reasoningAfter * tokens) / text.length) : 0);
  }

  #keepReasoning(text: string): void {
    if (this.#reasoningReported !== undefined || text.length === 0) return;
    if (this.#reasoningKept < this.#keepChars) {
      this.#reasoningText.push(text);
      this.#reasoningKept += text.length;
    } else this.#reasoningAfter += text.length;
  }

  #keep(text: string): void {
    if (this.#output !== undefined) return; // reported: the text will never be counted
    if (this.#sampled) {
      this.#afterText += text.length;
      return;
    }
    this.#produced.push(text);
    this.#keptChars += text.length;
    this.#kept += text.length;
    if (this.#kept > this.#keepChars) this.#sampled = true;
  }

  /**
   * The sample's text (what was kept, its frames decoded now), and the characters of text that
   * came after it: frames after it at the text share of the sample's own frames.
   */
  #sample(): { text: string; after: number } {
    let frameChars = 0;
    let frameText = 0;
    const pieces = this.#produced;
    const decode = this.#decodeDeferred as ((frame: { data: string }) => StreamEvent[]) | undefined;
    for (const frame of this.#deferred) {
      frameChars += frame.data.length;
      for (const e of decode!(frame)) {
        if (e.type !== "text" && e.type !== "refusal" && e.type !== "reasoning") continue;
        pieces.push(e.text);
        frameText += e.text.length;
      }
    }
    this.#deferred.length = 0;
    const textPerFrameChar = frameChars > 0 ? frameText / frameChars : 1;
    return { text: pieces.join(""), after: this.#afterText + this.#afterFrameChars * textPerFrameChar };
  }

  /**
   * Output is counted up to `perAnswer` tokens an answer: a reported count covers all `answers`
   * (the upstream's sum), an estimate one answer (the settlement multiplies it).
   */
  limitOutput(perAnswer: number, answers: number): void {
    this.#perAnswer = perAnswer;
    this.#answers = answers;
    this.#relayLimit = perAnswer * answers * RELAY_CHARS_PER_TOKEN + RELAY_SLACK_CHARS;
    this.#frameLimit = perAnswer * answers * RELAY_FRAMES_PER_TOKEN + RELAY_SLACK_FRAMES;
  }

  /**
   * A reported prompt is counted up to `tokens`, its cache reads and writes within it: a prompt
   * cannot be longer than what is sent makes plus what the vendor adds (plan.ts, billedPromptMax),
   * and an upstream that says it is is not charged up to the hold.
   */
  limitInput(tokens: number): void {
    this.#inputLimit = tokens;
  }

  /**
   * The request went upstream `chars` long: the answer's frames may repeat it that many times
   * (REQUEST_ECHO_FRAMES) beyond what its limit allows them to carry.
   */
  echoes(chars: number): void {
    this.#echoRoom = REQUEST_ECHO_FRAMES * chars;
  }

  /** An image model priced per image was held for `images` images: no more go out (a hostile-tenant probe got 10 for the price of 1). */
  limitImages(images: number): void {
    this.#imageLimit = images;
  }

  /** Images that may still go out (and be charged) within what the request was held for; Infinity when not bounded. */
  get imageRoom(): number {
    return this.#imageLimit - this.#images;
  }

  /** A frame of `chars` characters was relayed (decoded or as it came): counted against the frame bounds. */
  relayedFrame(chars: number): void {
    this.#framesRelayed++;
    if (chars <= RELAY_SMALL_FRAME) return;
    this.#frames++;
    if (chars > RELAY_FRAME_ALLOWANCE) this.#frameExcess += chars - RELAY_FRAME_ALLOWANCE;
  }

  /**
   * The frames relayed, every answer's: a vendor streams a token or more in each frame that carries
   * text, so past each answer's opening and closing frames they count its tokens from below. Only
   * the first of `n` answers is decoded (the others go out as they came).
   */
  get framesRelayed(): number {
    return this.#framesRelayed;
  }

  /** The answer limit the request was sent with (Infinity when none): no answer is counted past it. */
  get perAnswer(): number {
    return this.#perAnswer;
  }

  /**
   * The longest frame this answer can have: one longer would be an overrun (its characters past
   * RELAY_FRAME_ALLOWANCE above the limit and the request's echoes) once it ended, so the SSE
   * parser gives up on it while it is still arriving instead of gathering up to
   * `limits.max_frame_bytes` (32 MiB) first: sixteen streams each stalled in a 30 MB line held
   * 1.67 GB (a hostile-upstream probe, twenty-eighth session). Unbounded (Infinity) without a limit.
   */
  get longestFrame(): number {
    return this.#relayLimit + this.#echoRoom + RELAY_FRAME_ALLOWANCE;
  }

  /** More answer has come than the limit could make (RELAY_CHARS_PER_TOKEN …): the upstream is not answering this request. */
  get overrun(): boolean {
    return this.#relayed > this.#relayLimit || this.#frameExcess > this.#relayLimit + this.#echoRoom || this.#frames > this.#frameLimit;
  }

  async #count(prompt: PromptSource): Promise<MeteredUsage> {
    const estimated = this.#input === undefined || this.#output === undefined;
    let outputTokens = this.#output;
    if (outputTokens === undefined) {
      const { text, after } = this.#sample();
      const tokens = await this.#countTokens(text);
      outputTokens = Math.min(this.#perAnswer, after === 0 ? tokens : tokens + (text.length > 0 ? Math.ceil((after * tokens) / text.length) : Math.ceil(after / 4)));
    } else outputTokens = Math.min(outputTokens, this.#perAnswer * this.#answers);
    const input = this.#input === undefined ? undefined : Math.min(this.#input, this.#inputLimit);
    if (input === undefined) {
      return { inputTokens: await countPrompt(prompt, this.#countTokens), outputTokens, cacheReadTokens: 0, cacheWriteTokens: 0, cacheWrite1hTokens: 0, estimated, promptEstimated: true, images: this.#images };
    }
    const cacheReadTokens = Math.min(this.#cacheRead ?? 0, input);
    const cacheWriteTokens = Math.min(this.#cacheWrite ?? 0, input - cacheReadTokens);
    const cacheWrite1hTokens = Math.min(this.#cacheWrite1h ?? 0, cacheWriteTokens);
    return { inputTokens: input, outputTokens, cacheReadTokens, cacheWriteTokens, cacheWrite1hTokens, estimated, images: this.#images };
  }
}

async function countPrompt(prompt: PromptSource, count: TokenCounter): Promise<number> {
  const source = typeof prompt === "function" ? prompt() : prompt.text();
  if (typeof source !== "string") return source;
  return (await count(source)) + (typeof prompt === "function" ? 0 : (prompt.framing ?? 0));
}
