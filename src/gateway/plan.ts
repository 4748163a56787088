import type { ModelConfig } from "../config/schema.ts";
import type { Settings } from "../config/load-config.ts";
import type { WireFormat } from "../translate/wire-types.ts";
import { worstCaseMicro as mostItCosts } from "../billing/pricing.ts";
import { countTokens, promptTokenBound } from "../billing/token-estimate.ts";
import { fitCandidates, type Fitted } from "./context-fit.ts";
import { promptText, requestedMaxTokens } from "../translate/prepare-upstream.ts";
import type { EmbeddingsInputMeasure } from "../billing/embeddings-input.ts";
import type { PromptSource } from "../billing/usage-meter.ts";

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
}

/**
 * Stage 1: candidates and their limits. The model asked for and its fallbacks that can hold the
 * request (context fit: 400 with the numbers when none can), and the worst case the reservation
 * must cover. Image models make one image per request; its price is part of the worst case.
 */
export async function planRequest(
  settings: Settings,
  req: { clientFormat: WireFormat; body: Record<string, unknown>; bodyBytes: number; candidates: ModelConfig[]; embeddings?: EmbeddingsInputMeasure },
): Promise<Plan> {
  if (req.embeddings) return planEmbeddings(req.candidates, req.embeddings);
  const { body, clientFormat } = req;
  const messageCount = Array.isArray(body.messages) ? body.messages.length : 0;
  const promptBound = promptTokenBound(req.bodyBytes, messageCount);
  let text: string | undefined;
  const prompt = () => (text ??= promptText(clientFormat, body));
  const candidates = await fitCandidates(
    req.candidates,
    promptBound,
    requestedMaxTokens(clientFormat, body),
    settings.limits.max_tokens_cap,
    async () => (await countTokens(prompt())) + 4 * messageCount + 3,
  );
  const worstCaseMicro = Math.max(...candidates.map((c) => mostItCosts(c.model.pricing, promptBound, c.maxTokens, c.model.category === "image" ? 1 : 0)));
  return { ...requestIds(), candidates, worstCaseMicro, promptText: prompt };
}

/**
 * An embeddings request produces no tokens: every candidate is tried as it is (no answer limit;
 * an input over a model's window is the upstream's to refuse, with its own tokenizer's count),
 * and the worst case is the input's token bound at the dearest candidate's input price.
 */
function planEmbeddings(models: ModelConfig[], input: EmbeddingsInputMeasure): Plan {
  const worstCaseMicro = Math.max(...models.map((m) => mostItCosts(m.pricing, input.tokenBound, 0, 0)));
  return { ...requestIds(), candidates: models.map((model) => ({ model, maxTokens: 0 })), worstCaseMicro, promptText: input.prompt };
}

/**
 * Time-ordered (and hex, so the text sorts like the time): usage records append at the end of
 * their unique index instead of dirtying pages all over it.
 */
function requestIds(): { uuid: string; requestId: string } {
  const uuid = Bun.randomUUIDv7("hex");
  return { uuid, requestId: `req_${uuid}` };
}
