import type { ModelConfig } from "../config/schema.ts";
import type { ResolvedProvider } from "../config/load-config.ts";
import type { ProviderAdapter } from "./provider.ts";
import type { UpstreamKind } from "../formats/common/wire-types.ts";
import { openaiAdapter } from "./openai/openai-adapter.ts";
import { openaiImagesAdapter } from "./openai/openai-images-adapter.ts";
import { openaiEmbeddingsAdapter } from "./openai/openai-embeddings-adapter.ts";
import { openaiResponsesAdapter } from "./openai/openai-responses-adapter.ts";
import { anthropicAdapter } from "./anthropic/anthropic-adapter.ts";

export const ADAPTERS: Record<UpstreamKind, ProviderAdapter> = { openai: openaiAdapter, anthropic: anthropicAdapter };

export function adapterFor(provider: ResolvedProvider, model: ModelConfig): ProviderAdapter {
  // Config validation guarantees these APIs are only named for providers of kind openai.
  if (model.category === "embedding") return openaiEmbeddingsAdapter;
  if (model.upstream_api === "images") return openaiImagesAdapter;
  return model.upstream_api === "responses" ? openaiResponsesAdapter : ADAPTERS[provider.kind];
}
