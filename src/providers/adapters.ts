import type { ProviderAdapter, WireFormat } from "./provider.ts";
import { openaiAdapter } from "./openai/openai-adapter.ts";
import { anthropicAdapter } from "./anthropic/anthropic-adapter.ts";

export const ADAPTERS: Record<WireFormat, ProviderAdapter> = { openai: openaiAdapter, anthropic: anthropicAdapter };
