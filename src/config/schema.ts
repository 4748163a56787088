import { t } from "elysia";
import { StrictInteger } from "./strict-integer.ts";

/**
 * Every object in the config file is closed: a field the schema does not know (a typo such as
 * `keyz`, or a setting from a newer release) is refused at load with its path, never dropped
 * silently — a dropped `api_key_env` or limit would change what the gateway does without a word.
 */
const closed = { additionalProperties: false } as const;

/** How long a provider may take, in milliseconds. Defaults suit slow reasoning models. */
export const Timeouts = t.Object({
  /** Until the upstream's response headers arrive (connecting included), for a streamed answer. */
  first_byte_ms: StrictInteger({ minimum: 1, default: 120_000 }),
  /**
   * The same for a whole (non-stream) answer, whose head the vendors send only once the answer is
   * written: 8,000 tokens at 50 a second are 160 s, and a reasoning model thinks for minutes, so
   * `first_byte_ms` cut such answers with a 502 the vendor still billed. 10 minutes, the SDKs' own
   * default timeout.
   */
  whole_answer_ms: StrictInteger({ minimum: 1, default: 600_000 }),
  idle_ms: StrictInteger({ minimum: 1, default: 300_000 }),
  total_ms: StrictInteger({ minimum: 1, default: 1_800_000 }),
}, closed);

/**
 * One vendor key of a provider's pool: the name of the environment variable that holds it (the
 * secret never lives in the file; logs, metrics and /ready name the key by this) and its share
 * of the traffic.
 */
export const VendorKeyConfig = t.Object(
  {
    env: t.String({ minLength: 1, pattern: "^[A-Za-z_][A-Za-z0-9_]*$" }),
    weight: t.Optional(t.Number({ exclusiveMinimum: 0, default: 1 })),
  },
  { additionalProperties: false },
);
export type VendorKeyConfig = typeof VendorKeyConfig.static;

export const ProviderConfig = t.Object({
  id: t.String({ minLength: 1, pattern: "^[A-Za-z0-9_.-]+$" }),
  kind: t.Union([t.Literal("openai"), t.Literal("anthropic")]),
  base_url: t.String({ minLength: 1 }),
  /** Name of the environment variable that holds the vendor key; the key itself never lives in the file. */
  api_key_env: t.Optional(t.String({ minLength: 1 })),
  /**
   * Several vendor keys instead of `api_key_env` (which is a pool of one): requests are spread over
   * them by weight, a session stays on one key while it is healthy (prompt caches are per key), a
   * key the vendor rate-limits cools down and one it refuses is set aside until a probe passes.
   */
  keys: t.Optional(t.Array(VendorKeyConfig, { minItems: 1, maxItems: 64 })),
  /** Extra headers sent upstream (e.g. OpenRouter's HTTP-Referer); values are not secrets. */
  headers: t.Optional(t.Record(t.String(), t.String())),
  /** OpenAI's reasoning models reject `max_tokens`; most compatible servers only know it. */
  max_tokens_field: t.Optional(t.Union([t.Literal("max_tokens"), t.Literal("max_completion_tokens")])),
  timeouts: t.Optional(t.Partial(Timeouts)),
  /**
   * The upstream is OpenAI's own API (its service tiers and their prices: a request without a tier
   * is sent `service_tier: "default"`, a flex answer costs half; config/price-rules.ts). Default:
   * when `base_url`'s host is api.openai.com or one of its regions (eu.api.openai.com); set it for
   * OpenAI reached through a proxy of your own.
   */
  openai_tiers: t.Optional(t.Boolean()),
}, closed);
export type ProviderConfig = typeof ProviderConfig.static;

/**
 * Credits per million tokens of each class, and per generated image. Cache prices left out take
 * the vendor's published multiplier of `input_per_mtok` (config/cache-prices.ts, `withCacheDefaults`;
 * the README's "Prompt caching" table).
 */
/**
 * The vendor's prices once a prompt (fresh input, cache reads and writes together) is longer than
 * `above_tokens`: the whole answer is billed at them (Anthropic's Sonnet with the 1M-token context,
 * Gemini 2.5 Pro above 200,000). Cache prices left out take the same multipliers as the base ones.
 */
export const LongContextPricing = t.Object({
  above_tokens: StrictInteger({ minimum: 1 }),
  input_per_mtok: t.Number({ minimum: 0 }),
  output_per_mtok: t.Number({ minimum: 0 }),
  cache_read_per_mtok: t.Optional(t.Number({ minimum: 0 })),
  cache_write_per_mtok: t.Optional(t.Number({ minimum: 0 })),
  cache_write_1h_per_mtok: t.Optional(t.Number({ minimum: 0 })),
}, closed);
export type LongContextPricing = typeof LongContextPricing.static;

export const Pricing = t.Object({
  input_per_mtok: t.Number({ minimum: 0 }),
  output_per_mtok: t.Number({ minimum: 0 }),
  /** Prompt tokens read from the vendor's prompt cache. */
  cache_read_per_mtok: t.Optional(t.Number({ minimum: 0 })),
  /** Prompt tokens written to the cache for 5 minutes (Anthropic's default lifetime). */
  cache_write_per_mtok: t.Optional(t.Number({ minimum: 0 })),
  /** Prompt tokens written to the cache for 1 hour. */
  cache_write_1h_per_mtok: t.Optional(t.Number({ minimum: 0 })),
  per_image: t.Optional(t.Number({ minimum: 0 })),
  long_context: t.Optional(LongContextPricing),
}, closed);
export type Pricing = typeof Pricing.static;

export const ModelConfig = t.Object({
  id: t.String({ pattern: "^[^/\\s]+/[^\\s]+$" }),
  provider: t.String({ minLength: 1 }),
  upstream_model: t.String({ minLength: 1 }),
  /** `embedding`: served by POST /v1/embeddings only (and refused by the chat endpoints). */
  category: t.Union([t.Literal("text"), t.Literal("image"), t.Literal("free"), t.Literal("embedding")]),
  context_length: StrictInteger({ minimum: 1 }),
  modalities: t.Optional(t.Object({ input: t.Array(t.String()), output: t.Array(t.String()) }, closed)),
  owned_by: t.Optional(t.String()),
  pricing: t.Optional(Pricing),
  /**
   * Which of an OpenAI-kind provider's APIs serves the model: `chat` (POST /chat/completions, the
   * default), `images` (POST /images/generations), `responses` (POST /responses: OpenAI's
   * Responses API, where GPT-5.4 and later reason on tool turns and GPT-6 Astra and GPT-6.1 Sol
   * take tools at all; every client format reaches it, translated).
   */
  upstream_api: t.Optional(t.Union([t.Literal("chat"), t.Literal("images"), t.Literal("responses")])),
  /**
   * Other names clients may send for this model: exact names, or `prefix*` for every name that
   * starts with the prefix (the longest matching prefix wins). Lets agent clients that ask for
   * their own vendor's model names (Claude Code: `claude-sonnet-4-5`, dated ids…) reach this one.
   */
  aliases: t.Optional(t.Array(t.String({ minLength: 1, pattern: "^[^\\s*]+\\*?$" }))),
  /** This model's answer-length cap; `limits.max_tokens_cap` when unset. */
  max_tokens_cap: t.Optional(StrictInteger({ minimum: 1 })),
  /**
   * How the upstream model takes reasoning controls, for fields translated from the other format:
   * `effort` (OpenAI `reasoning_effort`), `budget` (Anthropic `thinking.budget_tokens`), `adaptive`
   * (Anthropic `thinking: {type: "adaptive"}` with `output_config.effort`), `none` (it does not
   * reason: none are sent). Inferred from `upstream_model` when unset (formats/common/model-traits.ts).
   */
  reasoning: t.Optional(t.Union([t.Literal("none"), t.Literal("effort"), t.Literal("budget"), t.Literal("adaptive")])),
  /**
   * How a JSON answer is asked of an Anthropic upstream: `native` (`output_config.format`) or `tool`
   * (a forced tool whose input is the answer, for models without structured outputs). Inferred when unset.
   */
  structured_output: t.Optional(t.Union([t.Literal("native"), t.Literal("tool")])),
  /**
   * Prompt caching for requests translated for an Anthropic upstream (OpenAI-format clients cannot
   * mark what to cache, and Anthropic caches only what is marked): `auto` (the default) marks the
   * end of the conversation and of the turn before it, so each turn reads the one before from the
   * cache; `off` marks nothing (every prompt token is fresh input).
   */
  prompt_cache: t.Optional(t.Union([t.Literal("auto"), t.Literal("off")])),
  /**
   * Image chat models priced per image: the most images one request is held for and may receive
   * (default 1). Images past it are taken out of the answer (never fetched, sent or charged), so
   * none goes out unpaid: the hold covers this many at `pricing.per_image`. The images API is
   * always asked for one.
   */
  images_per_request: t.Optional(StrictInteger({ minimum: 1, maximum: 16 })),
  /** For Anthropic-style model lists. */
  display_name: t.Optional(t.String()),
  created_at: t.Optional(t.String()),
}, closed);
export type ModelConfig = typeof ModelConfig.static;

export const LimitsConfig = t.Object({
  requests_per_minute: StrictInteger({ minimum: 1, default: 60 }),
  /** The spec's hard cap on answer length; also the default when a request names none. */
  max_tokens_cap: StrictInteger({ minimum: 1, default: 8192 }),
  max_body_bytes: StrictInteger({ minimum: 1024, default: 10 * 1024 * 1024 }),
  /** Largest single SSE frame accepted from an upstream (image data URIs make frames large). */
  max_frame_bytes: StrictInteger({ minimum: 1024, default: 32 * 1024 * 1024 }),
  /** Largest image (decoded) the gateway inlines into an answer. */
  max_image_bytes: StrictInteger({ minimum: 1024, default: 8 * 1024 * 1024 }),
  /** Longest download of an image an upstream answered with a URL (redirects and body included). */
  image_fetch_timeout_ms: StrictInteger({ minimum: 10, default: 30_000 }),
  /**
   * Largest upstream answer body, counted after decompression, streamed or not (a whole SSE
   * stream counts as one answer). Sized for image answers: base64 images of several MiB each.
   */
  max_response_bytes: StrictInteger({ minimum: 1024, default: 64 * 1024 * 1024 }),
  /**
   * Most requests one key may have under way at once (a stream counts until it ends), for keys
   * without their own `max_concurrent_requests`; more get 429. Unset: no cap by default.
   */
  max_concurrent_requests: t.Optional(StrictInteger({ minimum: 1, maximum: 100_000 })),
  /**
   * An account's keys together (docs/decisions.md, "Limits per account"), for accounts without
   * their own: requests a minute (a token bucket beside each key's), and requests under way at
   * once; more get 429. Unset: no limit beyond each key's. An account holding several keys
   * otherwise gets each key's limits once per key.
   */
  account_requests_per_minute: t.Optional(StrictInteger({ minimum: 1, maximum: 1_000_000 })),
  account_max_concurrent_requests: t.Optional(StrictInteger({ minimum: 1, maximum: 100_000 })),
  /**
   * An account's prompt and answer tokens a minute, all its keys together (limits/token-budget.ts),
   * for accounts without their own `tokens_per_minute`: the vendors' keys are shared, and so are
   * their tokens a minute. Unset: no limit.
   */
  account_tokens_per_minute: t.Optional(StrictInteger({ minimum: 1, maximum: 1_000_000_000 })),
  /**
   * Free counting (`/v1/messages/count_tokens`, docs/decisions.md "Bodies and free counting"): the
   * most prompt text (UTF-8 bytes) one count takes, else 413; the text one key may have waiting for
   * or in the gateway's tokenizer, each count weighing at least 64 KiB (more: 429); all keys'
   * together (more: 503); and how long a count may take from its arrival (then 503).
   */
  count_tokens_max_bytes: StrictInteger({ minimum: 1024, default: 4 * 1024 * 1024 }),
  count_tokens_per_key_bytes: StrictInteger({ minimum: 65_536, default: 16 * 1024 * 1024 }),
  count_tokens_queue_bytes: StrictInteger({ minimum: 65_536, default: 64 * 1024 * 1024 }),
  count_tokens_timeout_ms: StrictInteger({ minimum: 10, default: 10_000 }),
  /**
   * Free counts' body bytes a minute per account, per process (limits/count-bytes.ts): a bucket
   * of this size refilling over a minute; a count past it gets 429 with the wait before its body
   * is read. Never below `max_body_bytes`, so a largest body still passes.
   */
  count_tokens_account_bytes_per_minute: StrictInteger({ minimum: 65_536, default: 64 * 1024 * 1024 }),
  /**
   * Request bodies still arriving (limits/body-budget.ts), per gateway process: the bytes one key's
   * bodies may hold at once (their declared lengths; more get 429; never less than
   * `max_body_bytes`), one account's keys' together (more get 429; never less than a key's), the
   * bytes of everyone's (more get 503; never less than an account's; requests without a key, the
   * console's, count per client address in a small pool of their own), and how long a body may
   * take to arrive from its first read (then 408).
   */
  body_per_key_bytes: StrictInteger({ minimum: 1024, default: 64 * 1024 * 1024 }),
  body_per_account_bytes: StrictInteger({ minimum: 1024, default: 128 * 1024 * 1024 }),
  body_total_bytes: StrictInteger({ minimum: 1024, default: 512 * 1024 * 1024 }),
  body_timeout_ms: StrictInteger({ minimum: 10, default: 60_000 }),
  /**
   * Whole (non-streamed) answers one account's requests may hold in a gateway process at once
   * (limits/unread-answers.ts): those written and not yet read by their clients, and the expected
   * size of embeddings lists still being made, and its streams while they wait for clients slower
   * than their upstream (gateway/stream-answer.ts, STALLED_STREAM_BYTES and the write waited on).
   * A request that finds its account's share full gets
   * 429 before it holds anything; one answer larger than the share alone always fits. A large
   * answer goes out as fast as its client reads, and a client that reads nothing for
   * `server.client_idle_ms` is given up.
   */
  answer_per_account_bytes: StrictInteger({ minimum: 1024, default: 128 * 1024 * 1024 }),
}, closed);

/** Retries of the same model after 429/503/529; a longer wait moves on to the next fallback model. */
export const RetryConfig = t.Object({
  max_retries: StrictInteger({ minimum: 0, maximum: 10, default: 2 }),
  max_wait_ms: StrictInteger({ minimum: 0, default: 10_000 }),
}, closed);

export const ServerConfig = t.Object({
  /** Comment/ping frames are sent to the client when the upstream has been quiet this long. */
  keepalive_ms: StrictInteger({ minimum: 10, default: 15_000 }),
  /**
   * A streaming client that takes no bytes for this long is given up (its upstream request is
   * aborted and it pays for what was produced); meanwhile the upstream is not read.
   */
  client_idle_ms: StrictInteger({ minimum: 10, default: 120_000 }),
  /**
   * A connection with nothing under way (a keep-alive one between requests, a new one that sent
   * nothing yet) is closed after this long: Bun's `idleTimeout`, in whole seconds (at most 255).
   * It was 120 s: a client with no key held the gateway's every file descriptor with idle
   * keep-alive connections, and no tenant could connect (a hostile-tenant probe). A chat or
   * embeddings request waiting for its upstream is not cut by it (Bun does not time out a request
   * whose body it read), streams lift it until they end, and an operator's admin request takes
   * `ADMIN_IDLE_SECONDS` (its reports may run 30 s).
   */
  connection_idle_ms: StrictInteger({ minimum: 1_000, maximum: 255_000, default: 15_000 }),
  /**
   * Connections one client address (an IPv6 /64 as one) may keep open between requests once the
   * process holds a quarter of its descriptor limit (limits/connection-guard.ts): an answer on one
   * more closes its connection (`Connection: close`; served, never refused). 0: no cap. At 80 % of
   * the limit every idle connection is closed at once, whatever this is.
   */
  max_connections_per_address: StrictInteger({ minimum: 0, default: 1_000 }),
  /**
   * Origins whose pages may call the model API (`/v1/…` but the admin routes) from a browser, as
   * OpenAI's and Anthropic's APIs allow: `["*"]` (the default) any, a list of `scheme://host[:port]`
   * only those, `[]` none (no CORS headers). http/cors.ts.
   */
  cors_origins: t.Array(t.String({ minLength: 1, maxLength: 2048 }), { maxItems: 1000, default: ["*"] }),
}, closed);

/** The connection's idle timeout between requests (`server.connection_idle_ms`) as Bun's `idleTimeout`: whole seconds, 1–255. */
export function connectionIdleSeconds(settings: { server: { connection_idle_ms: number } }): number {
  return Math.min(255, Math.max(1, Math.ceil(settings.server.connection_idle_ms / 1000)));
}

/**
 * The Responses API's stored answers (item_reference, previous_response_id, GET and DELETE
 * /v1/responses/{id}): in the process's memory, or in Redis when SWITCHYARD_REDIS_URL is set,
 * bounded per account, in total and per answer, and by time since last use (docs/decisions.md,
 * "Responses API" and "Stored answers per account").
 */
export const ResponsesConfig = t.Object({
  /**
   * Most bytes of stored answers (their JSON) of all accounts together: per gateway process in
   * memory, for all of them in Redis; 0 stores nothing. A safety net, reached only when more
   * than `store_max_bytes / account_max_bytes` accounts are full at once.
   */
  store_max_bytes: StrictInteger({ minimum: 0, default: 256 * 1024 * 1024 }),
  /** Most bytes one account's stored answers take; past it the account's own least recently used go first. */
  account_max_bytes: StrictInteger({ minimum: 1_024, default: 32 * 1024 * 1024 }),
  /** Largest single answer stored (its input items and the Response object); a larger input is refused with a 400. */
  answer_max_bytes: StrictInteger({ minimum: 1_024, default: 16 * 1024 * 1024 }),
  /** A stored answer not used (stored or referred to) for this long is gone. */
  store_ttl_ms: StrictInteger({ minimum: 1_000, default: 3_600_000 }),
}, closed);

/**
 * Spend alerts (alerts/): events POSTed to `webhook_url` when a key or an account crosses 50, 80
 * and 100 % of its spend limit, and when an account's balance falls below `low_balance` credits.
 * Without `webhook_url` nothing is detected or sent. Deliveries that fail are retried from
 * `retry_initial_ms`, doubling up to `retry_max_ms`.
 */
export const AlertsConfig = t.Object({
  webhook_url: t.Optional(t.String({ minLength: 1 })),
  /** Credits: an account's balance falling below this sends `balance.low` (once per crossing). */
  low_balance: t.Optional(t.Number({ minimum: 0 })),
  /** How long one delivery may take before it counts as failed. */
  timeout_ms: StrictInteger({ minimum: 10, default: 5_000 }),
  retry_initial_ms: StrictInteger({ minimum: 10, default: 1_000 }),
  retry_max_ms: StrictInteger({ minimum: 10, default: 60_000 }),
}, closed);

export const Config = t.Object({
  providers: t.Array(ProviderConfig),
  models: t.Array(ModelConfig),
  limits: t.Optional(t.Partial(LimitsConfig)),
  retry: t.Optional(t.Partial(RetryConfig)),
  server: t.Optional(t.Partial(ServerConfig)),
  responses: t.Optional(t.Partial(ResponsesConfig)),
  alerts: t.Optional(t.Partial(AlertsConfig)),
}, closed);
export type Config = typeof Config.static;

export type Limits = typeof LimitsConfig.static;
export type ServerSettings = typeof ServerConfig.static;
export type RetrySettings = typeof RetryConfig.static;
export type ResponsesSettings = typeof ResponsesConfig.static;
export type AlertsConfig = typeof AlertsConfig.static;
export type ProviderTimeouts = typeof Timeouts.static;
