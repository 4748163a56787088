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
    // Claude Sonnet 5 and later, Opus 5 and later, Haiku 5.5, Fable and Mythos think when no
    // `thinking` is named (Opus 5.5, Fable and Mythos always; prepare-upstream.ts sends them no
    // `disabled`), and omit its text: an Opus 5.5 answer left after its text was charged 6 tokens
    // of the vendor's 2,500 (a bill audit, 2026-11-30, third round). `between_tools` (Sonnet 5.5's
    // lowest setting) still thinks between tool calls.
    if (thinking === undefined || thinking === null) return upstreamTraits("anthropic", model).claude?.thinksByDefault !== undefined;
    return thinking.type === "enabled" || thinking.type === "adaptive" || thinking.type === "between_tools";
  }
  // Chat completions' field, or the Responses API's (`upstream_api: "responses"`).
  const effort = body.reasoning_effort ?? (body.reasoning as { effort?: unknown } | null | undefined)?.effort;
  if (typeof effort === "string") return effort !== "none";
  return upstreamTraits("openai", model).reasoning === "effort";
}
