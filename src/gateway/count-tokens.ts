import type { Catalogue } from "../catalogue/catalogue.ts";
import { countTokens } from "../billing/token-estimate.ts";
import { anthropicAdapter } from "../providers/anthropic/anthropic-adapter.ts";
import { checkAnthropicContent } from "./check-content.ts";
import type { ForwardDeps } from "./forward.ts";
import { GatewayError } from "../streaming/gateway-error.ts";
import { promptText } from "../translate/prepare-upstream.ts";
import { upstreamStatusError } from "../providers/upstream-errors.ts";

/** Longest wait for an upstream's count before the gateway answers with its own estimate. */
const UPSTREAM_COUNT_MS = 10_000;

/**
 * `POST /v1/messages/count_tokens` (Claude Code calls it dozens of times for `/context` and to
 * decide when to compact). An Anthropic upstream counts with its own tokenizer; every other
 * upstream, or an Anthropic one that cannot answer, gets the gateway's estimate (the tokenizer
 * used for usage, plus the per-message framing `forward` reserves for). Nothing is reserved or
 * charged, and no usage record is written: a count produces no answer.
 */
export async function countMessageTokens(
  deps: Pick<ForwardDeps, "settings" | "fetch" | "log"> & { catalogue: Catalogue },
  body: Record<string, unknown>,
  headers: Headers,
  signal: AbortSignal,
): Promise<Response> {
  const name = String(body.model);
  const model = deps.catalogue.get(name);
  if (!model) throw new GatewayError(404, "not_found", `The model "${name.slice(0, 200)}" does not exist. GET /v1/models lists the available ids.`);
  if (model.category === "embedding") throw new GatewayError(400, "invalid_request", `The model "${model.id}" is an embedding model: it takes no messages.`);
  checkAnthropicContent(body);

  const provider = deps.settings.providers.get(model.provider)!;
  if (provider.kind === "anthropic" && model.upstream_api !== "images") {
    const upstreamBody: Record<string, unknown> = { ...body, model: model.upstream_model };
    delete upstreamBody.models;
    const call = anthropicAdapter.buildRequest(provider, upstreamBody, headers);
    const clientRequestId = headers.get("x-request-id") ?? undefined;
    if (clientRequestId) call.headers["x-request-id"] = clientRequestId;
    try {
      const res = await deps.fetch(`${call.url}/count_tokens`, {
        method: "POST",
        headers: call.headers,
        body: call.body,
        signal: AbortSignal.any([signal, AbortSignal.timeout(Math.min(UPSTREAM_COUNT_MS, provider.timeouts.first_byte_ms))]),
      });
      const json = (await res.json().catch(() => undefined)) as { input_tokens?: unknown } | undefined;
      if (res.ok && typeof json?.input_tokens === "number") return Response.json({ input_tokens: json.input_tokens });
      // A request the vendor finds malformed is the client's to fix; anything else (no such
      // endpoint on a compatible server, an outage, our key) still deserves a count.
      if (res.status === 400 || res.status === 422) throw upstreamStatusError(res.status, anthropicAdapter.errorMessage(json));
      deps.log("warn", "upstream token count failed; answering with an estimate", { provider: provider.id, status: res.status, clientRequestId });
    } catch (err) {
      if (err instanceof GatewayError) throw err;
      if (signal.aborted) throw new GatewayError(499, "invalid_request", "The client closed the request.");
      deps.log("warn", "upstream token count failed; answering with an estimate", { provider: provider.id, error: String(err), clientRequestId });
    }
  }
  const messages = (body.messages as unknown[]).length;
  const estimate = (await countTokens(promptText("anthropic", body))) + 4 * messages + 3;
  return Response.json({ input_tokens: estimate });
}
