import type { ModelConfig } from "../config/schema.ts";
import type { ResolvedProvider } from "../config/load-config.ts";
import type { ProviderAdapter } from "./provider.ts";
import type { WireFormat } from "../translate/wire-types.ts";
import { openaiAdapter } from "./openai/openai-adapter.ts";
import { openaiImagesAdapter } from "./openai/openai-images-adapter.ts";
import { openaiEmbeddingsAdapter } from "./openai/openai-embeddings-adapter.ts";
import { anthropicAdapter } from "./anthropic/anthropic-adapter.ts";

export const ADAPTERS: Record<WireFormat, ProviderAdapter> = { openai: openaiAdapter, anthropic: anthropicAdapter };

export function adapterFor(provider: ResolvedProvider, model: ModelConfig): ProviderAdapter {
  // Config validation guarantees both APIs are only named for providers of kind openai.
  if (model.category === "embedding") return openaiEmbeddingsAdapter;
  return model.upstream_api === "images" ? openaiImagesAdapter : ADAPTERS[provider.kind];
}
