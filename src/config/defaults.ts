import type { Config, Pricing } from "./schema.ts";

/**
 * What the gateway serves with no config file: the simulated upstream (so a fresh clone
 * answers at once) and, when a vendor key is in the environment, that vendor's models.
 */
export function defaultConfig(env: Record<string, string | undefined>): Config {
  const config: Config = {
    providers: [
      { id: "simulated", kind: "openai", base_url: "simulated://openai/v1" },
      { id: "simulated-anthropic", kind: "anthropic", base_url: "simulated://anthropic" },
    ],
    models: [
      {
        id: "switchyard/echo",
        provider: "simulated",
        upstream_model: "echo",
        category: "free",
        context_length: 32_768,
        modalities: { input: ["text"], output: ["text"] },
        owned_by: "switchyard",
        pricing: { input_per_mtok: 0, output_per_mtok: 0 },
      },
      {
        id: "switchyard/pixel",
        provider: "simulated",
        upstream_model: "pixel",
        upstream_api: "images",
        category: "image",
        context_length: 4_000,
        modalities: { input: ["text"], output: ["image"] },
        owned_by: "switchyard",
        pricing: { input_per_mtok: 0, output_per_mtok: 0, per_image: 2 },
      },
      {
        id: "switchyard/lorem",
        provider: "simulated-anthropic",
        upstream_model: "lorem",
        category: "text",
        context_length: 200_000,
        modalities: { input: ["text"], output: ["text"] },
        owned_by: "switchyard",
        pricing: { input_per_mtok: 1_000, output_per_mtok: 5_000 },
      },
      {
        // Deterministic vectors hashed from the words of the input (providers/simulated/hash-embedding.ts).
        id: "switchyard/embed",
        provider: "simulated",
        upstream_model: "embed",
        category: "embedding",
        context_length: 8_192,
        modalities: { input: ["text"], output: ["embedding"] },
        owned_by: "switchyard",
        pricing: { input_per_mtok: 20, output_per_mtok: 0 },
      },
    ],
  };
  if (env.OPENAI_API_KEY) {
    config.providers.push({
      id: "openai",
      kind: "openai",
      base_url: "https://api.openai.com/v1",
      api_key_env: "OPENAI_API_KEY",
      max_tokens_field: "max_completion_tokens",
    });
    // OpenAI's current models (its deprecations page, 2026-11-30): GPT-6 Luna, the named replacement
    // of GPT-4o, GPT-4o mini, GPT-4.1 and GPT-4.1 mini (shut down on 14 January 2027), and GPT-6 Sol,
    // at the prices of their model pages (US$ 1 = 1,000 credits; 1.05M windows, billed 2× input and
    // 1.5× output above 272,000 prompt tokens: config/cache-prices.ts fills that in), and GPT-6.1 Sol,
    // Codex's default, through OpenAI's Responses API (`upstream_api: "responses"`): it takes tools
    // there only, and there it reasons on tool turns. `cache_write_1h_per_mtok` is the 12-hour
    // writes' price (`prompt_cache_retention: "12h"`, 2.5× input: OpenAI's prompt-caching guide). gpt-image-1 was shut down on 23 October 2026;
    // GPT Image 2.6 is the named replacement of the image models still running.
    config.models.push(
      vendorModel("openai", "gpt-6-luna", 1_050_000, { input_per_mtok: 100, output_per_mtok: 500, cache_read_per_mtok: 10, cache_write_per_mtok: 125, cache_write_1h_per_mtok: 250 }),
      vendorModel("openai", "gpt-6-sol", 1_050_000, { input_per_mtok: 2_000, output_per_mtok: 10_000, cache_read_per_mtok: 200, cache_write_per_mtok: 2_500, cache_write_1h_per_mtok: 5_000 }),
      {
        ...vendorModel("openai", "gpt-6.1-sol", 1_050_000, { input_per_mtok: 2_000, output_per_mtok: 10_000, cache_read_per_mtok: 100, cache_write_per_mtok: 2_500, cache_write_1h_per_mtok: 5_000 }),
        upstream_api: "responses",
      },
      {
        id: "openai/gpt-image-2.6-flare",
        provider: "openai",
        upstream_model: "gpt-image-2.6-flare",
        upstream_api: "images",
        category: "image",
        context_length: 32_000,
        modalities: { input: ["text"], output: ["image"] },
        owned_by: "openai",
        // Text input $5 (cached $1.25), image output tokens $30; image input ($8) is never sent.
        pricing: { input_per_mtok: 5_000, output_per_mtok: 30_000, cache_read_per_mtok: 1_250, per_image: 0 },
      },
      embeddingModel("text-embedding-3-small", 20),
      embeddingModel("text-embedding-3-large", 130),
    );
  }
  if (env.ANTHROPIC_API_KEY) {
    config.providers.push({
      id: "anthropic",
      kind: "anthropic",
      base_url: "https://api.anthropic.com",
      api_key_env: "ANTHROPIC_API_KEY",
    });
    // Anthropic's current Sonnet and Opus (1M windows billed flat) and Haiku 4.5, at the prices of
    // Anthropic's price table (2026-11-30; Sonnet 5.5's cache reads since 7 October 2026). Claude
    // Sonnet 4.5, the built-in model before, is retired on 30 November 2026.
    config.models.push(
      vendorModel("anthropic", "claude-sonnet-5-5", 1_000_000,
        { input_per_mtok: 2_000, output_per_mtok: 10_000, cache_read_per_mtok: 100, cache_write_per_mtok: 2_500, cache_write_1h_per_mtok: 4_000 }),
      vendorModel("anthropic", "claude-opus-5-5", 1_000_000,
        { input_per_mtok: 4_000, output_per_mtok: 20_000, cache_read_per_mtok: 200, cache_write_per_mtok: 5_000, cache_write_1h_per_mtok: 8_000 }),
      vendorModel("anthropic", "claude-haiku-4-5", 200_000,
        { input_per_mtok: 1_000, output_per_mtok: 5_000, cache_read_per_mtok: 100, cache_write_per_mtok: 1_250, cache_write_1h_per_mtok: 2_000 }),
    );
  }
  // Claude Code asks for its own model names (claude-sonnet-5-5, claude-opus-5-5, dated ids,
  // claude-haiku-4-5 for quick tasks, older ones a user pinned); these route them to the model of
  // their tier this config has, so `claude` works with only a base URL and a key: Anthropic's when
  // its key is set (an Opus asked for is an Opus; any other Claude the current Sonnet, retired ones
  // included, which Anthropic would refuse), else OpenAI's (an Opus to GPT-6 Sol, any other Claude
  // to GPT-6 Luna), else the free echo.
  const byId = (id: string) => config.models.find((m) => m.id === id)!;
  const aliases = new Map<string, string[]>();
  const alias = (id: string, ...names: string[]) => aliases.set(id, [...(aliases.get(id) ?? []), ...names]);
  if (env.ANTHROPIC_API_KEY) {
    alias("anthropic/claude-sonnet-5-5", "claude-*");
    alias("anthropic/claude-opus-5-5", "claude-opus-*", "claude-3-opus*");
    alias("anthropic/claude-haiku-4-5", "claude-haiku-*", "claude-3-5-haiku*", "claude-3-haiku*");
  } else if (env.OPENAI_API_KEY) {
    alias("openai/gpt-6-luna", "claude-*");
    alias("openai/gpt-6-sol", "claude-opus-*", "claude-3-opus*");
  } else alias("switchyard/echo", "claude-*");
  // The names of OpenAI models shut down (gpt-image-1, 23 October 2026) or shutting down (GPT-4o,
  // GPT-4o mini, GPT-4.1, GPT-4.1 mini, 14 January 2027), bare or as this catalogue's ids of before
  // (`openai/gpt-4o-mini`, `openai/gpt-image-1`), reach OpenAI's named replacement: a client or a
  // config that names them keeps working.
  if (env.OPENAI_API_KEY) {
    alias("openai/gpt-6-luna", "gpt-4o*", "gpt-4.1*", "openai/gpt-4o*", "openai/gpt-4.1*");
    alias("openai/gpt-image-2.6-flare", "gpt-image-1*", "openai/gpt-image-1*");
  }
  // Codex's default model name, so `codex` works with only a base URL and a key: `gpt-6.2-sol` since
  // Codex 0.171, `gpt-6.1-sol` before (a pinned Codex still asks it), dated names too. GPT-6.1 Sol
  // answers both (GPT-6.2 Sol is not built in: no price of its own is known here; the answer names
  // the model that answered), else Anthropic's current Sonnet (at its price), as Claude Code's names
  // reach OpenAI's models without Anthropic's key. Codex runs the name in code mode, its tools in an
  // additional_tools item (formats/openai-responses/responses-to-chat.ts). Other GPT names stay
  // unknown: a 404 names the model.
  const codexDefaults = ["gpt-6.2-sol*", "gpt-6.1-sol*"];
  if (env.OPENAI_API_KEY) alias("openai/gpt-6.1-sol", ...codexDefaults);
  else if (env.ANTHROPIC_API_KEY) alias("anthropic/claude-sonnet-5-5", ...codexDefaults);
  for (const [id, names] of aliases) byId(id).aliases = names;
  return config;
}

/** A vendor's text model, served by the provider of the same name. */
function vendorModel(vendor: "openai" | "anthropic", name: string, context: number, pricing: Pricing): Config["models"][number] {
  return {
    id: `${vendor}/${name}`,
    provider: vendor,
    upstream_model: name,
    category: "text",
    context_length: context,
    // Text in: image parts are refused with a 400 on every path (docs/decisions.md, "Image input"), so the catalogue does not offer them.
    modalities: { input: ["text"], output: ["text"] },
    owned_by: vendor,
    pricing,
  };
}

/** An OpenAI embedding model: 8,192 tokens per input, billed by input tokens only. */
function embeddingModel(name: string, input: number): Config["models"][number] {
  return {
    id: `openai/${name}`,
    provider: "openai",
    upstream_model: name,
    category: "embedding",
    context_length: 8_192,
    modalities: { input: ["text"], output: ["embedding"] },
    owned_by: "openai",
    pricing: { input_per_mtok: input, output_per_mtok: 0 },
  };
}
