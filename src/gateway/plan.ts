import type { ModelConfig } from "../config/schema.ts";
import type { Settings } from "../config/load-config.ts";
import type { UpstreamKind } from "../formats/common/wire-types.ts";
import { worstCaseMicro as mostItCosts } from "../billing/pricing.ts";
import { maxPriceFactor } from "../config/price-rules.ts";
import { promptTokenBound, promptTokenCeiling, VENDOR_PROMPT_ALLOWANCE, vendorToolsAllowance } from "../billing/token-estimate.ts";
import { fitCandidates, type Fitted } from "./context-fit.ts";
import { promptText, requestedMaxTokens } from "../formats/prepare-upstream.ts";
import type { EmbeddingsInputMeasure } from "../formats/openai-embeddings/embeddings-input.ts";
import type { PromptSource } from "../billing/usage-meter.ts";
import { carriesHourMark } from "../formats/common/cache-marks.ts";

/** What the journey will try, decided before anything is reserved or sent. */
export interface Plan {
  /** Time-ordered hex; the usage record is `req_<uuid>`, the answer `chatcmpl-<uuid>`/`msg_<uuid>`. */
  uuid: string;
  requestId: string;
  /** The models to try in order, each with the answer limit it gets. */
  candidates: Fitted[];
  /** What the dearest candidate could cost: the reservation. */
  worstCaseMicro: number;
  /** All message text (or the input's count), for estimates; computed only if asked. */
  promptText: PromptSource;
  /** Output an answer may be billed beyond its answer limit: OpenAI's predicted output (see `predictedTokens`). */
  predictedTokens: number;
  /**
   * The most prompt tokens a vendor may bill for the request: what any tokenizer makes of what is
   * sent (a token a byte, 8 a message), and what the vendor adds (vendorPromptAllowance).
   */
  billedPromptMax: number;
}

/**
 * Stage 1: candidates and their limits. The model asked for and its fallbacks that can hold the
 * request (context fit: 400 with the numbers when none can), and the worst case the reservation
 * must cover. Image models make one image per request; its price is part of the worst case.
 */
export async function planRequest(
  settings: Settings,
  /** Counts a prompt near a window; it may stop once past `limit` (it then answers more than `limit`). */
  count: (text: string, limit: number) => Promise<number>,
  req: { wire: UpstreamKind; body: Record<string, unknown>; bodyBytes: number; candidates: ModelConfig[]; embeddings?: EmbeddingsInputMeasure },
): Promise<Plan> {
  if (req.embeddings) return planEmbeddings(req.candidates, req.embeddings);
  const { body, wire } = req;
  const messageCount = Array.isArray(body.messages) ? body.messages.length : 0;
  const promptBound = promptTokenBound(req.bodyBytes, messageCount);
  const prompt = new ChatPrompt(wire, body, messageCount);
  const candidates = await fitCandidates(
    req.candidates,
    promptBound,
    requestedMaxTokens(wire, body),
    settings.limits.max_tokens_cap,
    // Counted no further than the largest window: past it, nothing fits, whatever the rest holds.
    async () => {
      const framing = prompt.framing;
      let window = 0;
      for (const m of req.candidates) window = Math.max(window, m.context_length);
      return (await count(prompt.text(), Math.max(0, window - framing))) + framing;
    },
  );
  // The hold covers the most the prompt can cost (a token a byte at most, and the vendor's own
  // tools' schemas, billed past a hold of the body's bytes), capped by the model's window, which
  // it cannot bill past (or a long conversation of escaped text was held for far more than it
  // could cost). A vendor's smaller additions (VENDOR_PROMPT_ALLOWANCE) fit in the answer's room.
  const promptCeiling = promptTokenCeiling(req.bodyBytes, messageCount);
  const heldPrompt = promptCeiling + vendorToolsAllowance(body);
  const billedPromptMax = heldPrompt + VENDOR_PROMPT_ALLOWANCE;
  const predicted = predictedTokens(wire, body);
  // An OpenAI-kind upstream makes long-lived writes (12 hours, at 2.5× input) only for a request
  // that asks for them (providers/openai/openai-responses-adapter.ts): any other is held at its
  // 30-minute writes' price, not refused for twice what it can cost. Anthropic's 1-hour writes are
  // marked inside the prompt (and added by the gateway's own marks), so they are always held for;
  // so are a Claude model's behind an OpenAI-format server (OpenRouter) when a mark asks for an hour
  // (providers/openai/openai-adapter.ts): held at 1.25×, a dense prompt written for the hour was
  // charged the hold, 65 % of its price (a bill audit, thirty-sixth session).
  const longWrites = body.prompt_cache_retention === "12h" || (wire === "openai" && carriesHourMark(body));
  const worstCaseMicro = Math.max(...candidates.map((c) =>
    mostItCosts(c.model.pricing, Math.min(heldPrompt, c.model.context_length), (c.maxTokens + predicted) * answersAsked(settings, wire, body, c.model), imagesHeld(c.model), maxPriceFactor(c.model),
      longWrites || settings.providers.get(c.model.provider)?.kind !== "openai")));
  return { ...requestIds(), candidates, worstCaseMicro, promptText: prompt, predictedTokens: predicted, billedPromptMax };
}

/** The images one request of a model is held for, and may receive when priced per image (`imagesBounded`). */
export function imagesHeld(model: ModelConfig): number {
  if (model.category !== "image") return 0;
  // The images API is asked for one image (`n: 1`, formats/prepare-upstream.ts).
  return model.upstream_api === "images" ? 1 : (model.images_per_request ?? 1);
}

/**
 * Whether a model's answers bring no more images than `imagesHeld`: those priced per image, whose
 * hold counts images. One priced by its tokens is held and charged by its tokens (the vendor's
 * usage counts every image), so its images are all its own.
 */
export function imagesBounded(model: ModelConfig): boolean {
  return model.category === "image" && (model.pricing?.per_image ?? 0) > 0;
}

/**
 * OpenAI's predicted output (`prediction`): the predicted tokens the answer did not use are billed
 * as output too ("rejected_prediction_tokens"), beyond the answer limit, so the hold and the
 * output the meter takes from the vendor's count make room for them: a token a byte of the
 * prediction at most. Held at max_tokens alone, such an answer was charged no more than its hold.
 */
export function predictedTokens(wire: UpstreamKind, body: Record<string, unknown>): number {
  const prediction = wire === "openai" ? body.prediction : undefined;
  return prediction && typeof prediction === "object" ? Buffer.byteLength(JSON.stringify(prediction)) : 0;
}

/** Bytes a token of a whole chat answer is expected to take, written: its text. */
const ANSWER_TEXT_BYTES_PER_TOKEN = 4;
/** Bytes one logprobs entry of a token takes, written (`{"token":" lo","logprob":-0.0123456,"bytes":[32,108,111]},`): ~60. */
const LOGPROB_ENTRY_BYTES = 64;

/**
 * The bytes a whole (non-streamed) chat answer is expected to take once written, for the
 * account's share of answers not yet read (limits/unread-answers.ts): every answer asked (`n`) at
 * its answer limit, each token with its logprobs entries when asked (`logprobs`, `top_logprobs`
 * up to 20: ~1.3 KB a token), and an image model's images at `limits.max_image_bytes` each (in
 * base64), the dearest candidate's, never more than an upstream may send
 * (`limits.max_response_bytes`). 0 for a stream (read from its upstream only as its client
 * reads; the images API's answer to one is whole, and counts) and for an answer expected to be no
 * larger than `pacedFrom`, which is handed over whole and holds nothing. Expecting nothing of
 * chat answers, 60 requests with 20 `top_logprobs` at once (~10 MB answers for ~4 credits each)
 * were all admitted while the share was empty and held ~590 MB unread, the gateway at 2.6 GB; 40
 * image requests of 8 MB PNGs took it to 1.66 GB (a hostile-tenant probe, twenty-fourth session).
 */
export function expectedAnswerBytes(settings: Settings, wire: UpstreamKind, body: Record<string, unknown>, candidates: readonly Fitted[], pacedFrom: number): number {
  const streamed = body.stream === true;
  let logprobsPerToken = 0;
  if (wire === "openai" && body.logprobs === true) {
    const top = typeof body.top_logprobs === "number" && body.top_logprobs > 0 ? Math.min(20, Math.floor(body.top_logprobs)) : 0;
    logprobsPerToken = (1 + top) * LOGPROB_ENTRY_BYTES;
  }
  let most = 0;
  for (const c of candidates) {
    if (streamed && c.model.upstream_api !== "images") continue;
    // Logprobs reach OpenAI's chat API only (the Responses API and Anthropic's are not asked for them).
    const logprobs = logprobsPerToken > 0 && settings.providers.get(c.model.provider)?.kind === "openai" && (c.model.upstream_api ?? "chat") === "chat" ? logprobsPerToken : 0;
    const text = c.maxTokens > 0 ? c.maxTokens * answersAsked(settings, wire, body, c.model) * (ANSWER_TEXT_BYTES_PER_TOKEN + logprobs) : 0;
    const images = imagesHeld(c.model) * Math.ceil((settings.limits.max_image_bytes * 4) / 3);
    most = Math.max(most, text + images);
  }
  return most <= pacedFrom ? 0 : Math.min(most, settings.limits.max_response_bytes);
}

/**
 * A chat request's message text, made when first asked for (an estimate, a context check) and
 * kept. An object, not a closure: the request keeps it until its settlement.
 */
class ChatPrompt {
  #text: string | undefined;
  /**
   * What vendors add around the messages' text (OpenAI: a role and separators a message, and the
   * answer's priming): in the window's fit and in an estimated prompt's count alike. Estimates had
   * left it out: "hello world" alone was billed 2 prompt tokens where OpenAI counts 9 (a bill audit).
   */
  readonly framing: number;
  constructor(
    private readonly wire: UpstreamKind,
    private readonly body: Record<string, unknown>,
    messageCount: number,
  ) {
    this.framing = 4 * messageCount + 3;
  }

  text(): string {
    return (this.#text ??= promptText(this.wire, this.body));
  }
}

/**
 * OpenAI's `n`: how many answers a chat completions request gets from `model`, each up to its
 * max_tokens. An OpenAI-kind chat API makes them all and reports their tokens together, so the
 * hold must cover all of them (held for one, the charge, capped by the hold, would bill n answers
 * as one); a request translated for an Anthropic upstream, or sent to the images API, asks for one.
 */
export function answersAsked(settings: Settings, wire: UpstreamKind, body: Record<string, unknown>, model: ModelConfig): number {
  const n = wire === "openai" ? body.n : undefined;
  if (typeof n !== "number" || !Number.isInteger(n) || n <= 1) return 1;
  // The Responses API (`upstream_api: "responses"`) makes one answer, as the images API does.
  const openaiChat = settings.providers.get(model.provider)?.kind === "openai" && model.upstream_api !== "images" && model.upstream_api !== "responses" && model.category !== "embedding" && model.category !== "image";
  return openaiChat ? n : 1;
}

/**
 * An embeddings request produces no tokens: every candidate is tried as it is (no answer limit;
 * an input over a model's window is the upstream's to refuse, with its own tokenizer's count),
 * and the worst case is the input's token bound at the dearest candidate's input price.
 * A reported count is billed at most that bound, which already holds what servers add to each
 * input: no vendor allowance beside it (no system prompt, no tools). With one, a count past the
 * bound was recorded up to 1,024 tokens over what the charge, capped at the hold, was for: 1,039
 * tokens recorded (and logged, and in the metrics) for "hello world" charged as 15 (a raw-TCP
 * probe, twenty-first session).
 */
function planEmbeddings(models: ModelConfig[], input: EmbeddingsInputMeasure): Plan {
  const worstCaseMicro = Math.max(...models.map((m) => mostItCosts(m.pricing, input.tokenBound, 0, 0)));
  return { ...requestIds(), candidates: models.map((model) => ({ model, maxTokens: 0 })), worstCaseMicro, promptText: input.prompt, predictedTokens: 0, billedPromptMax: input.tokenBound };
}

/**
 * Time-ordered (and hex, so the text sorts like the time): usage records append at the end of
 * their unique index instead of dirtying pages all over it.
 */
function requestIds(): { uuid: string; requestId: string } {
  const uuid = Bun.randomUUIDv7("hex");
  return { uuid, requestId: `req_${uuid}` };
}
