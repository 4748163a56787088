import { existsSync, readFileSync } from "node:fs";
import { extname, resolve } from "node:path";
import { Value, ValueErrorType, type ValueError } from "@sinclair/typebox/value";
import { corsPolicy } from "./cors-origins.ts";
import { AlertsConfig, Config, LimitsConfig, ResponsesConfig, RetryConfig, ServerConfig, Timeouts } from "./schema.ts";
import type { Limits, ModelConfig, ProviderConfig, ProviderTimeouts, ResponsesSettings, RetrySettings, ServerSettings } from "./schema.ts";
import { defaultConfig } from "./defaults.ts";
import { withCacheDefaults } from "./cache-prices.ts";
import { hasOpenAITiers, notePriceRules } from "./price-rules.ts";

export class ConfigError extends Error {
  override name = "ConfigError";
}

export interface ResolvedProvider extends Omit<ProviderConfig, "timeouts" | "keys"> {
  /**
   * The vendor key an upstream request carries. Here: the pool's first key (read from its
   * environment variable; undefined when unset); each attempt sends the key the pool chose.
   */
  apiKey: string | undefined;
  /**
   * The pool: `keys`, or `api_key_env` as a pool of one, less the keys whose variable is unset or
   * empty (a key without a value cannot authenticate); empty when the provider takes no key.
   * Unset on providers built by hand (tests): they send `apiKey` as it is.
   */
  keys?: ResolvedVendorKey[];
  /**
   * The names of the key variables this provider was configured with but that are unset or empty
   * in the environment (never their values): its calls would go out without a key. Named at start
   * and in `/ready` (providersWithoutKeys).
   */
  unsetKeyEnvs: string[];
  timeouts: ProviderTimeouts;
}

/** A vendor key with its secret read from the environment. Only `env` may be shown anywhere. */
export interface ResolvedVendorKey {
  env: string;
  weight: number;
  secret: string | undefined;
}

export interface Settings {
  source: string;
  providers: Map<string, ResolvedProvider>;
  models: ModelConfig[];
  limits: Limits;
  retry: RetrySettings;
  server: ServerSettings;
  responses: ResponsesSettings;
  /** Spend alerts; undefined when no `alerts.webhook_url` is configured (nothing runs then). */
  alerts: AlertSettings | undefined;
}

export interface AlertSettings {
  webhook_url: string;
  /** Credits; null: no `balance.low` events. */
  low_balance: number | null;
  timeout_ms: number;
  retry_initial_ms: number;
  retry_max_ms: number;
  /** SWITCHYARD_ALERT_SECRET: when set, every delivery is signed with it (HMAC-SHA256). */
  secret: string | undefined;
}

/** Picks the config source the way the README documents: SWITCHYARD_CONFIG, ./switchyard.yaml, built-ins. */
export function loadSettings(env: Record<string, string | undefined>, cwd = process.cwd()): Settings {
  const explicit = env.SWITCHYARD_CONFIG;
  const path = explicit ? resolve(cwd, explicit) : resolve(cwd, "switchyard.yaml");
  if (explicit || existsSync(path)) {
    if (!existsSync(path)) throw new ConfigError(`config file ${path} does not exist`);
    return resolveSettings(parseConfigText(readFileSync(path, "utf8"), path), env, path);
  }
  return resolveSettings(defaultConfig(env), env, "built-in defaults");
}

export function parseConfigText(text: string, path: string): unknown {
  const ext = extname(path).toLowerCase();
  try {
    if (ext === ".json") return JSON.parse(text);
    if (ext === ".yaml" || ext === ".yml") return Bun.YAML.parse(text);
  } catch (err) {
    const line = ext === ".json" ? undefined : yamlErrorLine(text);
    throw new ConfigError(`${path}: cannot parse${line ? ` at or near line ${line}` : ""}: ${(err as Error).message}`);
  }
  throw new ConfigError(`${path}: unknown config extension "${ext}" (use .yaml, .yml or .json)`);
}

/**
 * The line a YAML syntax error is at, which Bun's parser does not say ("Unexpected token", no
 * position): the line after the longest start of the file that still parses. A start cut inside a
 * multi-line flow collection does not parse either, so the search runs from the end, where every
 * start that holds the error fails. Line 1 when no start parses. Bun gives no column either.
 */
function yamlErrorLine(text: string): number {
  const lines = text.split("\n");
  for (let n = lines.length - 1; n >= 1; n--) {
    try {
      Bun.YAML.parse(lines.slice(0, n).join("\n"));
      return n + 1;
    } catch {
      // Still holds the error: a shorter start.
    }
  }
  return 1;
}

/** Validates once at start; every message names the field so a bad file is fixed in one go. */
export function resolveSettings(raw: unknown, env: Record<string, string | undefined>, source: string): Settings {
  const problems = [...Value.Errors(Config, raw)].map(describeProblem);
  if (problems.length > 0) throw new ConfigError(`${source}: invalid config\n  ${problems.slice(0, 20).join("\n  ")}`);
  const config = raw as Config;

  const providers = new Map<string, ResolvedProvider>();
  config.providers.forEach((p, i) => {
    if (providers.has(p.id)) throw new ConfigError(`${source}: /providers/${i}/id: duplicate provider id "${p.id}"`);
    if (!p.base_url.startsWith("simulated://") && !URL.canParse(p.base_url)) {
      throw new ConfigError(`${source}: /providers/${i}/base_url: not a URL`);
    }
    if (p.keys && p.api_key_env !== undefined) throw new ConfigError(`${source}: /providers/${i}/keys: set either api_key_env or keys, not both`);
    const envs = new Set<string>();
    p.keys?.forEach((k, j) => {
      if (envs.has(k.env)) throw new ConfigError(`${source}: /providers/${i}/keys/${j}/env: "${k.env}" is already a key of this provider`);
      envs.add(k.env);
    });
    const { timeouts, keys: _keys, ...rest } = p;
    const configured = (p.keys ?? (p.api_key_env ? [{ env: p.api_key_env }] : [])).map((k) => ({ env: k.env, weight: k.weight ?? 1, secret: env[k.env] || undefined }));
    const pool = configured.filter((k) => k.secret !== undefined);
    providers.set(p.id, {
      ...rest,
      base_url: p.base_url.replace(/\/+$/, ""),
      // Worked out once: whether its service tiers are OpenAI's own (config/price-rules.ts).
      openai_tiers: hasOpenAITiers(p),
      apiKey: pool[0]?.secret,
      keys: pool,
      unsetKeyEnvs: configured.filter((k) => k.secret === undefined).map((k) => k.env),
      timeouts: Value.Default(Timeouts, { ...timeouts }) as ProviderTimeouts,
    });
  });

  const seen = new Set<string>();
  config.models.forEach((m, i) => {
    if (seen.has(m.id)) throw new ConfigError(`${source}: /models/${i}/id: duplicate model id "${m.id}"`);
    seen.add(m.id);
    if (!providers.has(m.provider)) {
      throw new ConfigError(`${source}: /models/${i}/provider: unknown provider "${m.provider}"`);
    }
    if ((m.upstream_api === "images" || m.upstream_api === "responses") && providers.get(m.provider)!.kind !== "openai") {
      throw new ConfigError(`${source}: /models/${i}/upstream_api: "${m.upstream_api}" needs a provider of kind openai`);
    }
    if (m.upstream_api === "responses" && m.category !== "text" && m.category !== "free") {
      throw new ConfigError(`${source}: /models/${i}/upstream_api: "responses" serves text models (category "text" or "free"), not "${m.category}"`);
    }
    // Anthropic has no embeddings API: an embedding model is reached through an OpenAI-format one.
    if (m.category === "embedding" && providers.get(m.provider)!.kind !== "openai") {
      throw new ConfigError(`${source}: /models/${i}/provider: an embedding model needs a provider of kind openai ("${m.provider}" is ${providers.get(m.provider)!.kind}, which has no embeddings API)`);
    }
    if (m.category === "embedding" && m.upstream_api === "images") {
      throw new ConfigError(`${source}: /models/${i}/upstream_api: an embedding model is served by the embeddings API, not "images"`);
    }
    // Its hold counts an image and its output tokens are image tokens (priced by output_per_mtok,
    // never bounded by a chat answer's limit): only an image model is billed so.
    if (m.upstream_api === "images" && m.category !== "image" && m.category !== "free") {
      throw new ConfigError(`${source}: /models/${i}/category: a model served by the images API makes images: its category is "image" (or "free"), not "${m.category}"`);
    }
    const kind = providers.get(m.provider)!.kind;
    // Each style names one vendor's field; the other vendor's would never be sent.
    if (m.reasoning === "effort" && kind !== "openai") throw new ConfigError(`${source}: /models/${i}/reasoning: "effort" needs a provider of kind openai`);
    if ((m.reasoning === "budget" || m.reasoning === "adaptive") && kind !== "anthropic") {
      throw new ConfigError(`${source}: /models/${i}/reasoning: "${m.reasoning}" needs a provider of kind anthropic`);
    }
    if (m.structured_output !== undefined && kind !== "anthropic") {
      throw new ConfigError(`${source}: /models/${i}/structured_output: only Anthropic upstreams have a choice (OpenAI-compatible ones get response_format)`);
    }
    if (m.category !== "free" && !m.pricing) {
      throw new ConfigError(`${source}: /models/${i}/pricing: required for category "${m.category}"`);
    }
  });
  // An alias means one model: the same name twice, or a name that is also a model's id, would make routing depend on file order.
  const aliasOwner = new Map<string, string>();
  config.models.forEach((m, i) => {
    (m.aliases ?? []).forEach((alias, j) => {
      const where = `${source}: /models/${i}/aliases/${j}`;
      if (seen.has(alias)) throw new ConfigError(`${where}: "${alias}" is already a model id`);
      const owner = aliasOwner.get(alias);
      if (owner !== undefined) throw new ConfigError(`${where}: "${alias}" is already an alias of ${owner}`);
      aliasOwner.set(alias, m.id);
    });
  });

  // An origin that can never match what browsers send is a mistake to say now, not a silent refusal.
  try {
    corsPolicy(config.server?.cors_origins ?? []);
  } catch (err) {
    throw new ConfigError(`${source}: ${(err as Error).message}`);
  }

  return {
    source,
    alerts: alertSettings(config.alerts, env, source),
    providers,
    // Cache prices are filled in once here, so every charge and `/v1/models` read complete prices.
    models: config.models.map((m) => {
      const provider = providers.get(m.provider)!;
      const model = m.pricing ? { ...m, pricing: withCacheDefaults(m.pricing, provider.kind, m.upstream_model, m.context_length) } : m;
      // Which of the vendors' price factors (flex, US-only inference) apply to it, worked out once.
      notePriceRules(model, provider);
      return model;
    }),
    limits: Value.Default(LimitsConfig, { ...config.limits }) as Limits,
    retry: Value.Default(RetryConfig, { ...config.retry }) as RetrySettings,
    server: Value.Default(ServerConfig, { ...config.server }) as ServerSettings,
    responses: Value.Default(ResponsesConfig, { ...config.responses }) as ResponsesSettings,
  };
}

/** Providers configured with a key variable that is unset or empty: `{ provider, env }` per variable, no values. */
export function providersWithoutKeys(settings: Pick<Settings, "providers">): { provider: string; env: string[] }[] {
  return [...settings.providers.values()].filter((p) => p.unsetKeyEnvs.length > 0).map((p) => ({ provider: p.id, env: p.unsetKeyEnvs }));
}

/**
 * One schema complaint as a line. An unknown field is named by its path as it reads in the file
 * (`providers[1].keyz`), with the fields that object takes, so a typo is found at once.
 */
function describeProblem(e: ValueError): string {
  if (e.type === ValueErrorType.ObjectAdditionalProperties) {
    const known = Object.keys((e.schema as { properties?: Record<string, unknown> }).properties ?? {});
    return `${fieldPath(e.path)}: unknown field${known.length > 0 ? ` (this object takes: ${known.join(", ")})` : ""}`;
  }
  // A choice of words (a provider's kind, a model's category): TypeBox says only "Expected union
  // value", so the operator had to read the source to learn what the field takes.
  const choices = (e.schema as { anyOf?: { const?: unknown }[] }).anyOf;
  if (e.type === ValueErrorType.Union && choices?.every((c) => typeof c.const === "string")) {
    const got = typeof e.value === "string" ? `"${e.value.slice(0, 60)}"` : JSON.stringify(e.value)?.slice(0, 60);
    return `${e.path || "/"}: must be one of ${choices.map((c) => c.const).join(", ")} (got ${got})`;
  }
  return `${e.path || "/"}: ${e.message}`;
}

/** A JSON pointer (`/providers/1/keyz`) as a path in the file (`providers[1].keyz`). */
export function fieldPath(pointer: string): string {
  let out = "";
  for (const raw of pointer.split("/").slice(1)) {
    const part = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    out += /^\d+$/.test(part) ? `[${part}]` : out === "" ? part : `.${part}`;
  }
  return out || "(top level)";
}

/** The `alerts` section: active only with a webhook URL, which must be http(s). */
function alertSettings(raw: Partial<AlertsConfig> | undefined, env: Record<string, string | undefined>, source: string): AlertSettings | undefined {
  if (!raw) return undefined;
  if (raw.webhook_url === undefined) {
    if (raw.low_balance !== undefined) throw new ConfigError(`${source}: /alerts/webhook_url: required when /alerts/low_balance is set (alerts need somewhere to go)`);
    return undefined;
  }
  const url = URL.canParse(raw.webhook_url) ? new URL(raw.webhook_url) : undefined;
  if (!url || (url.protocol !== "http:" && url.protocol !== "https:")) throw new ConfigError(`${source}: /alerts/webhook_url: not an http(s) URL`);
  const o = Value.Default(AlertsConfig, { ...raw }) as AlertsConfig;
  if (o.retry_max_ms < o.retry_initial_ms) throw new ConfigError(`${source}: /alerts/retry_max_ms: must be at least retry_initial_ms (${o.retry_initial_ms})`);
  return {
    webhook_url: raw.webhook_url,
    low_balance: raw.low_balance ?? null,
    timeout_ms: o.timeout_ms,
    retry_initial_ms: o.retry_initial_ms,
    retry_max_ms: o.retry_max_ms,
    secret: env.SWITCHYARD_ALERT_SECRET || undefined,
  };
}
