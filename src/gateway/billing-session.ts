import type { ModelConfig } from "../config/schema.ts";
import type { Ledger, ReserveResult } from "../billing/ledger.ts";
import type { Logger } from "../log/log.ts";
import { classesCostMicro, classesOf, NO_TOKENS, priceListOf, type TokenClasses } from "../billing/pricing.ts";
import { priceFactor } from "../config/price-rules.ts";
import { microToCredits } from "../billing/money.ts";
import { UsageMeter, type MeteredUsage, type PromptSource } from "../billing/usage-meter.ts";
import { conversationKey, promptStart, type PromptMemory } from "../billing/prompt-memory.ts";
import { GatewayError, NO_RETRY } from "../streaming/gateway-error.ts";
import type { Inflight } from "./inflight.ts";
import { imagesBounded, imagesHeld } from "./plan.ts";
import type { Tokenizer } from "../billing/token-estimate.ts";
import type { ActiveKey } from "../accounts/account-store.ts";

/** How a request ended, as its usage record says. */
export type SettleStatus = "ok" | "cancelled" | "stream_failed" | "upstream_error";

export interface BillingSession {
  readonly requestId: string;
  /** Whether the request holds credit in the ledger (a paid one): the ledger's fence cuts only these (inflight.ts). */
  readonly holds: boolean;
  /** True while a settlement has been started (it happens once). */
  readonly settling: boolean;
  /**
   * A fresh meter for the attempt about to start; the settlement charges the last one, at that
   * model's prices. `maxTokens`: the answer limit it was sent with (its output is counted up to it).
   */
  attempt(model: ModelConfig, providerId: string, maxTokens?: number): UsageMeter;
  /**
   * Once per request, whatever happened; later calls return the first one's promise. A paid
   * answer's promise resolves when its settlement is durable: the caller holds the answer's last
   * byte until then (docs/decisions.md, "Money across kill -9"). Never rejects.
   */
  settle(status: SettleStatus): Promise<void>;
}

export interface BillingDeps {
  ledger: Ledger;
  inflight: Inflight;
  log: Logger;
  tokenizer: Tokenizer;
  /** Conversations' last reported prompts (billing/prompt-memory.ts); without it a cancelled estimate is all fresh input. */
  prompts?: PromptMemory;
  now?: () => number;
}

/** Told what a settlement charged (metrics, the access log): a request's trace is one. */
export interface ChargeListener {
  /** `classes`: the prompt and answer by price class, as the usage record keeps them (the invoice's lines). */
  charged(inputTokens: number, outputTokens: number, costMicro: number, classes: TokenClasses): void;
}

/** A prompt's text, when its source is text (an embeddings input counted as tokens has none). */
function promptTextOf(source: PromptSource): string | undefined {
  // A function is an input counted on demand (embeddings): not called just to look.
  if (typeof source === "function") return undefined;
  const text = source.text();
  return typeof text === "string" ? text : undefined;
}

/** What a billing session is opened with (see openBillingSession). */
export interface BillingOpen {
  requestId: string;
  principal: ActiveKey;
  worstCaseMicro: number;
  startedAt: number;
  promptText: PromptSource;
  /** The request's x-request-id, kept with its usage record. */
  clientRequestId?: string;
  /** Told what the settlement charged (metrics, the access log). */
  charges?: ChargeListener;
  /** Gives back the key's place among its requests under way: called once, when the request ends (settled, whichever way). */
  slot?: { release(): void };
  /** The account's tokens a minute the request holds (gateway/token-hold.ts): settled with the tokens counted, once. */
  tokens?: { settle(used: number, model?: ModelConfig, cacheReads?: number): void };
  /** How many answers the model makes for this request (OpenAI's `n`; plan.ts answersAsked). */
  answers?: (model: ModelConfig) => number;
  /** The client's conversation id (gateway/session-id.ts), asked for at the settlement: see PromptMemory. */
  conversation?: () => string | undefined;
  /** The most prompt tokens a vendor may bill for the request (plan.ts, billedPromptMax): a reported prompt is counted up to it. */
  billedPromptMax?: number;
  /** The client format's field that bounds the answer (ClientFormat.lengthField), named in a 402's advice; none: not named. */
  lengthField?: string;
}

/**
 * Stage 2: reserve once, settle once. The only caller of the Ledger port on the request path.
 * Opening the session reserves the worst case (402 when it is not there, 503 when the ledger
 * cannot record charges); from then on the request counts as in flight until it is settled.
 */
export async function openBillingSession(deps: BillingDeps, o: BillingOpen): Promise<BillingSession> {
  const { ledger, log } = deps;
  const { requestId, principal } = o;
  let reserved = false;
  if (o.worstCaseMicro > 0) {
    const held = await ledger
      .reserve({ requestId, accountId: principal.accountId, keyId: principal.keyId, amountMicro: o.worstCaseMicro })
      .catch((err: unknown) => {
        log("error", "ledger reserve failed", { requestId, error: String(err) });
        return { ok: false as const, reason: "unavailable" as const, message: String(err) };
      });
    if (!held.ok) {
      if (held.reason === "unavailable") throw ledgerUnavailable();
      // Not worth a client's automatic retry (Codex retried a 402 five times): the same request meets
      // the same balance until someone tops it up. The header both official SDKs obey.
      throw new GatewayError(402, "insufficient_credits", refusalMessage(held, o.worstCaseMicro, o.lengthField), NO_RETRY);
    }
    reserved = true;
  } else if (!ledger.admits(false)) {
    // Free answers need no credit, but their usage records need room in the ledger's queue.
    throw ledgerUnavailable();
  }
  deps.inflight.begin();
  return new OpenSession(deps, o, reserved);
}

/**
 * A class, not an object of closures: a request keeps its session from the reservation to the
 * settlement, the whole time it waits for its upstream, and every young collection meanwhile
 * visits (and promotes) what it holds. Methods on the prototype cost it no functions or scopes
 * of its own (docs/decisions.md, "What a request keeps while it waits").
 */
class OpenSession implements BillingSession {
  readonly requestId: string;
  #model: ModelConfig | undefined;
  #providerId = "";
  /** Made by each attempt; none yet means nothing was produced. */
  #meter: UsageMeter | undefined;
  #settled: Promise<void> | undefined;

  constructor(
    private readonly deps: BillingDeps,
    private readonly o: BillingOpen,
    private readonly reserved: boolean,
  ) {
    this.requestId = o.requestId;
  }

  get holds(): boolean {
    return this.reserved;
  }

  get settling(): boolean {
    return this.#settled !== undefined;
  }

  attempt(model: ModelConfig, providerId: string, maxTokens?: number): UsageMeter {
    this.#model = model;
    this.#providerId = providerId;
    const meter = new UsageMeter(this.deps.tokenizer.count);
    // An answer cannot be longer than the limit it was sent with (reasoning included, with both
    // vendors): a vendor reporting more (800 tokens for "Hello" under max_tokens 50, a raw-TCP
    // probe) is counted at the limit, not charged up to the hold. Image tokens are not bounded by it.
    if (maxTokens !== undefined && maxTokens > 0 && model.category !== "image" && model.upstream_api !== "images") meter.limitOutput(maxTokens, this.o.answers ? this.o.answers(model) : 1);
    if (this.o.billedPromptMax !== undefined) meter.limitInput(this.o.billedPromptMax);
    // An answer priced per image brings no more images than the hold paid for (plan.ts, imagesHeld).
    if (imagesBounded(model)) meter.limitImages(imagesHeld(model));
    return (this.#meter = meter);
  }

  settle(status: SettleStatus): Promise<void> {
    return (this.#settled ??= this.#settleOnce(status));
  }

  /**
   * A reported prompt is remembered for its conversation; the estimated prompt of an answer cut
   * short (its client left, or the stream failed after some of it went out) takes the
   * conversation's last reported prompt as read from the vendor's cache (billing/prompt-memory.ts).
   * A failed stream is charged what it had sent, its prompt among it: priced all fresh, a Codex
   * turn cut by an upstream error after a 38,000-token cached turn paid 2.3× what the same prompt
   * cancelled by its client would (a bill audit, fourth round). So does an answer whose stream
   * ended whole but without its usage (cut after OpenAI's finish chunk, before the usage chunk):
   * recorded `ok`, it paid its prompt all fresh, 120.03 credits where the same turn cut a frame
   * earlier paid 51.6 and the vendor billed 25.2 (a bill audit, fifth round). An upstream that
   * never reports usage has nothing remembered, so its estimates are unchanged.
   */
  #withRememberedPrompt(prompts: PromptMemory, usage: MeteredUsage, modelId: string, status: SettleStatus): MeteredUsage {
    // A prompt reported for an answer cut short is not remembered (the next turn's is the better mark).
    if (!usage.promptEstimated && status !== "ok") return usage;
    // Vendors cache no prompt shorter than this: nothing to remember or recall (and no lookup for most short requests).
    if (usage.inputTokens < MIN_CACHED_PROMPT) return usage;
    const id = this.o.conversation!();
    if (id === undefined) return usage;
    const accountId = this.o.principal.accountId;
    const key = conversationKey(modelId, id);
    const at = this.deps.now ? this.deps.now() : Date.now();
    if (!usage.promptEstimated) {
      // What the vendor said it holds of this conversation's prompt (read, or written now): its next
      // turn starts with it. Not the whole prompt: the vendor caches no more than that (Anthropic
      // only up to the last breakpoint), and a conversation it caches nothing of gets nothing.
      const cached = usage.cacheReadTokens + usage.cacheWriteTokens;
      const text = cached > 0 ? promptTextOf(this.o.promptText) : undefined;
      prompts.remember(accountId, key, cached, at, text === undefined ? undefined : promptStart(text, cached, usage.inputTokens));
      return usage;
    }
    const read = Math.min(prompts.recall(accountId, key, at, promptTextOf(this.o.promptText)) ?? 0, usage.inputTokens);
    return read > 0 ? { ...usage, cacheReadTokens: read } : usage;
  }

  async #settleOnce(status: SettleStatus): Promise<void> {
    const { deps, o } = this;
    const meter = this.#meter;
    const model = this.#model;
    /** Prompt and answer tokens counted (what the vendor's tokens a minute count too); none when nothing was produced. */
    let used = 0;
    try {
      // Nothing produced, nothing charged: an upstream that failed before answering costs nothing,
      // and so does a stream the upstream broke before its first token (Anthropic's message_start
      // announces the prompt's tokens, then `overloaded_error`: the answer failed, nothing came).
      // A client that leaves once the upstream has its request pays for the prompt, answer or not:
      // the vendor processes (and bills) it, and leaving before the first byte was free prompt
      // processing on the operator's bill (a bill audit, 2026-11-30).
      // Not when the gateway cut it (shutdown past its grace): the client left nothing, it was left
      // with a reset and no answer, and paid its prompt for it (a kill -9 and disk-fault probe).
      // What a cut stream had sent is still charged, as for any stream cut short; a whole answer
      // read after its client's connection was reset is not (it goes out after its settlement, so
      // nothing of it went out; a reviewer's finding).
      const cut = status === "cancelled" && deps.inflight.cutting;
      const abandoned = status === "cancelled" && meter !== undefined && meter.promptSent && !cut;
      const produced = status !== "upstream_error" && meter !== undefined && (!meter.empty || abandoned) && (status !== "stream_failed" || meter.answered) && !(cut && meter.framesRelayed === 0);
      // What the answer cost. A throw anywhere in it (a frame the meter cannot read, a count that
      // fails) still writes the record, uncharged (the error log names it), so the hold lifts.
      // Thrown past here, the record was never written and the hold stayed until a restart (a
      // billing probe).
      const bill = async () => {
        const counted = produced ? await meter!.total(o.promptText) : undefined;
        // n answers whose tokens the upstream did not report: the meter reads the first answer's
        // text, and the others are taken to be as long, or as long as their frames say, whichever is
        // more (a token a frame past each answer's opening and closing frames, the usage and the end): a first answer of
        // "Ok" beside seven long ones was charged 8 tokens for 5,600 (a probe). The hold caps it at n
        // answers' worst case.
        const answers = counted && !meter!.outputReported && model && o.answers ? o.answers(model) : 1;
        let usage = counted && answers > 1
          ? { ...counted, outputTokens: Math.min(meter!.perAnswer * answers, Math.max(counted.outputTokens * answers, meter!.framesRelayed - 2 * answers - 2)) }
          : counted;
        if (usage && model && deps.prompts && o.conversation) usage = this.#withRememberedPrompt(deps.prompts, usage, model.id, status);
        const classes = usage ? classesOf(usage, meter!.reasoned ? ((await meter!.reasoningTokens()) ?? 0) : 0) : NO_TOKENS;
        const prices = priceListOf(model?.pricing, usage?.inputTokens ?? 0, model && meter ? priceFactor(model, meter) : 1);
        return { usage, classes, prices, costMicro: produced && model ? classesCostMicro(classes, prices) : 0 };
      };
      let billed: Awaited<ReturnType<typeof bill>>;
      try {
        billed = await bill();
      } catch (err) {
        deps.log("error", "settlement could not count the answer: recorded without a charge", { requestId: o.requestId, error: String(err) });
        billed = { usage: undefined, classes: NO_TOKENS, prices: priceListOf(model?.pricing, 0, 1), costMicro: 0 };
      }
      const { usage, classes, prices, costMicro } = billed;
      const inputTokens = usage?.inputTokens ?? 0;
      const outputTokens = usage?.outputTokens ?? 0;
      used = inputTokens + outputTokens;
      const durable = deps.ledger.settle({
        requestId: o.requestId,
        accountId: o.principal.accountId,
        keyId: o.principal.keyId,
        model: model?.id ?? "",
        provider: this.#providerId,
        promptTokens: inputTokens,
        completionTokens: outputTokens,
        estimated: usage?.estimated ?? false,
        costMicro,
        classes,
        prices,
        status,
        latencyMs: Math.round(performance.now() - o.startedAt),
        clientRequestId: o.clientRequestId,
      });
      // What the ledger posts: at most the hold (the meter already counts no more output than the
      // answer's limit and no more prompt than billedPromptMax), nothing without one. Metrics and
      // the access log say the same.
      o.charges?.charged(inputTokens, outputTokens, this.reserved ? Math.min(costMicro, o.worstCaseMicro) : 0, classes);
      // Before the answer's last byte waits for its durable record: the client's next request meets the count.
      o.tokens?.settle(used, model, usage?.cacheReadTokens ?? 0);
      // A free answer's record may trail it: nothing billed, nothing to lose.
      if (this.reserved && costMicro > 0) await durable;
    } catch (err) {
      deps.log("error", "settlement failed", { requestId: o.requestId, error: String(err) });
    } finally {
      deps.inflight.end();
      o.slot?.release();
      // Once (a no-op when settled above): what nothing was counted of gives its tokens back.
      o.tokens?.settle(used);
    }
  }
}

const PERIOD_WORD = { day: "daily", week: "weekly", month: "monthly" } as const;

/** The shortest prompt OpenAI and Anthropic cache (1,024 tokens; Anthropic's Haiku, 2,048). */
const MIN_CACHED_PROMPT = 1_024;

/**
 * A 402's words: which ceiling the request hit (the balance, or a key's or the account's spend
 * limit with its period and when it resets), what the request may cost, and what to do. The
 * advice names the field the client's format bounds its answer with (`lengthField`): a Responses
 * API client told to lower `max_tokens` looks for a field its API does not have, and an embeddings
 * request has none to lower.
 */
export function refusalMessage(refused: Exclude<ReserveResult, { ok: true } | { reason: "unavailable" }>, worstCaseMicro: number, lengthField?: string): string {
  const cost = `this request may cost up to ${microToCredits(worstCaseMicro)} credits`;
  if (refused.reason === "balance") {
    const advice = lengthField ? `Lower ${lengthField} or top up the account.` : "Top up the account.";
    return `Insufficient credits: ${cost} and the account has ${microToCredits(refused.availableMicro)} available. ${advice}`;
  }
  const whose = refused.reason === "key_spend_limit" ? "this key's" : "the account's";
  const kind = refused.period === null ? "lifetime" : PERIOD_WORD[refused.period];
  const resets = refused.resetsAt === null ? "it does not reset" : `it resets at ${new Date(refused.resetsAt).toISOString()}`;
  const advice = lengthField ? `Lower ${lengthField}, wait for the reset, or ask for a higher limit.` : "Wait for the reset, or ask for a higher limit.";
  return `Spend limit reached: ${whose} ${kind} spend limit of ${microToCredits(refused.limitMicro)} credits has ${microToCredits(refused.availableMicro)} left (${resets}), and ${cost}. ${advice}`;
}

export function ledgerUnavailable(): GatewayError {
  return new GatewayError(503, "overloaded", "The gateway cannot record charges right now, so paid requests are paused. Retry in a few seconds.", { "retry-after": "5" });
}
