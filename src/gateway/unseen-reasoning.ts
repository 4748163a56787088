import type { ModelConfig } from "../config/schema.ts";
import { upstreamTraits } from "../formats/common/model-traits.ts";

/**
 * Whether an answer may reason where the gateway cannot count it until the vendor reports its
 * usage at the end: OpenAI's reasoning models never stream their reasoning (o-series, gpt-5,
 * gpt-oss, or any model asked for `reasoning_effort`), and Anthropic streams a summary of its
 * thinking, or nothing with `display: "omitted"`, while billing the whole of it. Such an answer
 * whose client leaves before that report is read to its end for it (attempt.ts, stream-answer.ts):
 * estimated from what was relayed, an o3 answer left after its visible text cost 0.1 % of the
 * vendor's bill (a hostile-tenant probe, 2026-11-30). `body` is what the upstream is sent.
 */
export function reasonsOutOfSight(kind: "openai" | "anthropic", model: ModelConfig, body: Record<string, unknown>): boolean {
  if (kind === "anthropic") {
    const thinking = body.thinking as { type?: unknown } | null | undefined;
    return thinking?.type === "enabled" || thinking?.type === "adaptive";
  }
  // Chat completions' field, or the Responses API's (`upstream_api: "responses"`).
  const effort = body.reasoning_effort ?? (body.reasoning as { effort?: unknown } | null | undefined)?.effort;
  if (typeof effort === "string") return effort !== "none";
  return upstreamTraits("openai", model).reasoning === "effort";
}
