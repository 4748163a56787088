import { t, type TSchema } from "elysia";
import { StrictInteger } from "../config/strict-integer.ts";
import { ResponseDeleted } from "./routes/responses.ts";

/**
 * The OpenAPI 3.1 document of `GET /openapi.json`, built once from the routes the app serves:
 * paths, path parameters, query parameters and request bodies come from the TypeBox schemas the
 * routes validate with (Elysia keeps them on each route); what a schema cannot say (summaries,
 * answers, errors, which credential) is in OPERATIONS below. docs/api.md says the same in prose.
 *
 * Generated here rather than with @elysiajs/openapi: that plugin bundles converters for other
 * schema libraries and a UI loaded from a CDN, while TypeBox schemas already are JSON Schema.
 */

/** A route as Elysia lists it (`app.routes`). */
export interface RouteInfo {
  method: string;
  path: string;
  hooks?: { body?: unknown; query?: unknown; params?: unknown } | Record<string, unknown>;
}

const open = { additionalProperties: true } as const;

const OpenAIError = t.Object({
  error: t.Object({
    message: t.String(),
    type: t.String({ description: "invalid_request_error, authentication_error, permission_error, not_found_error, insufficient_quota, rate_limit_error, upstream_error, timeout_error, server_error" }),
    // Strings when there is something to name, as OpenAI's own errors: its SDKs and agent frameworks read them.
    param: t.Union([t.String(), t.Null()], { description: "The request field at fault (`temperature`, `messages[0].role`, `stream`, `Idempotency-Key`…), else null." }),
    code: t.Union([t.String(), t.Null()], { description: "OpenAI's code where it has one (invalid_api_key, model_not_found, insufficient_quota, rate_limit_exceeded, context_length_exceeded; an upstream's own, such as invalid_value), else null." }),
  }),
}, { description: "OpenAI-shaped error (every route except /v1/messages*)." });

const AnthropicError = t.Object({
  type: t.Literal("error"),
  error: t.Object({ type: t.String({ description: "invalid_request_error, authentication_error, permission_error, not_found_error, request_too_large, billing_error, rate_limit_error, api_error, timeout_error, overloaded_error" }), message: t.String() }),
}, { description: "Anthropic-shaped error (/v1/messages and /v1/messages/count_tokens)." });

const Usage = t.Object({ prompt_tokens: StrictInteger(), completion_tokens: StrictInteger(), total_tokens: StrictInteger() }, open);

const ChatCompletion = t.Object({
  id: t.String({ description: "chatcmpl-<uuid>; the usage record is req_<uuid>." }),
  object: t.Literal("chat.completion"),
  created: StrictInteger(),
  model: t.String({ description: "The gateway's model id that answered." }),
  choices: t.Array(t.Object({
    index: StrictInteger(),
    message: t.Object({ role: t.Literal("assistant"), content: t.Union([t.String(), t.Null()]), tool_calls: t.Optional(t.Array(t.Object({}, open))) }, open),
    finish_reason: t.Union([t.String(), t.Null()]),
  }, open)),
  usage: Usage,
}, open);

const AnthropicMessage = t.Object({
  id: t.String({ description: "msg_<uuid>; the usage record is req_<uuid>." }),
  type: t.Literal("message"),
  role: t.Literal("assistant"),
  model: t.String(),
  content: t.Array(t.Object({ type: t.String() }, open)),
  stop_reason: t.Union([t.String(), t.Null()]),
  usage: t.Object({ input_tokens: StrictInteger(), output_tokens: StrictInteger() }, open),
}, open);

const OpenAIModelList = t.Object({
  object: t.Literal("list"),
  data: t.Array(t.Object({
    id: t.String(),
    object: t.Literal("model"),
    created: StrictInteger({ description: "Unix seconds: the model's `created_at` from the config, else 2025-01-01." }),
    owned_by: t.String(),
    credits_per_msg: t.Number({ description: "Cost of 1,000 tokens in and 500 out, rounded up to whole credits." }),
    model_id: t.String(),
    category: t.Union([t.Literal("text"), t.Literal("image"), t.Literal("free"), t.Literal("embedding")]),
    context_length: StrictInteger(),
    modalities: t.Object({ input: t.Array(t.String()), output: t.Array(t.String()) }),
  }, open)),
}, { ...open, description: "OpenAI's list shape (without an `anthropic-version` header)." });

/** What Anthropic's SDKs' `models.list()` parses: ids, then exact aliases, paged. */
const AnthropicModelList = t.Object({
  data: t.Array(t.Object({ type: t.Literal("model"), id: t.String(), display_name: t.String(), created_at: t.String() }, open)),
  has_more: t.Boolean(),
  first_id: t.Union([t.String(), t.Null()]),
  last_id: t.Union([t.String(), t.Null()]),
}, { ...open, description: "Anthropic's list shape (with an `anthropic-version` header)." });

// Either shape, chosen by the request's `anthropic-version` header.
const ModelList = t.Union([OpenAIModelList, AnthropicModelList]);

const EmbeddingList = t.Object({
  object: t.Literal("list"),
  data: t.Array(t.Object({
    object: t.Literal("embedding"),
    index: StrictInteger({ description: "The input's position." }),
    embedding: t.Union([t.Array(t.Number()), t.String()], { description: "Floats, or with `encoding_format: base64` the float32 values little-endian in base64." }),
  }, open)),
  model: t.String({ description: "The gateway's model id that answered." }),
  usage: t.Object({ prompt_tokens: StrictInteger(), total_tokens: StrictInteger() }, { ...open, description: "What was charged: input tokens only." }),
}, open);

const Health = t.Object({ status: t.Literal("ok") });
const Ready = t.Object({
  status: t.Union([t.Literal("ready"), t.Literal("not_ready")]),
  draining: t.Boolean(),
  ledger: t.Object({ writable: t.Boolean(), queued: StrictInteger(), failing_since: t.Optional(t.String({ format: "date-time" })) }),
  rate_limiter: t.Optional(t.Object({ reachable: t.Boolean() }, { description: "Only with SWITCHYARD_REDIS_URL." })),
  vendor_keys: t.Optional(t.Array(t.Object({
    id: t.String({ description: "The provider's id." }),
    usable: StrictInteger({ description: "Its keys usable now. 0 does not make the gateway not ready: every replica shares the keys' state, and the other providers still serve." }),
    keys: t.Array(t.Object({
      env: t.String({ description: "The name of the environment variable holding the key (never its value)." }),
      state: t.Union([t.Literal("cooling"), t.Literal("disabled")]),
      model: t.Optional(t.String({ description: "Cooling for this model only (the vendor's name of it): vendors limit rates per model, and the key still serves the others (it counts as usable)." })),
      until: t.Optional(t.String({ format: "date-time", description: "Cooling: when the key is usable again." })),
      since: t.Optional(t.String({ format: "date-time", description: "Disabled: when the vendor refused it (it comes back once a probe passes)." })),
    })),
  }), { description: "Only while some vendor key is cooling (429, 503, 529) or disabled (401, 403): those keys, per provider." })),
  providers_without_key: t.Optional(t.Array(t.Object({ provider: t.String(), env: t.Array(t.String({ description: "The variable's name, never its value." })) }), {
    description: "Providers whose key variables (api_key_env, keys[].env) are unset or empty: those keys are left out of the pool, and a provider with none left calls its upstream without a key. Only when there are any; the gateway stays ready for the other providers.",
  })),
});

const AccountRate = t.Union([StrictInteger(), t.Null()], { description: "The account's own limit on requests a minute for all its keys together; null: limits.account_requests_per_minute (unset: none)." });
const AccountCap = t.Union([StrictInteger(), t.Null()], { description: "The account's own cap on requests under way at once for all its keys together; null: limits.account_max_concurrent_requests (unset: none)." });
const AccountTokens = t.Union([StrictInteger(), t.Null()], { description: "The account's own limit on prompt and answer tokens a minute for all its keys together; null: limits.account_tokens_per_minute (unset: none)." });
const Account = t.Object({ id: t.String(), name: t.String(), balance: t.Number(), rate_limit_per_minute: AccountRate, max_concurrent_requests: AccountCap, tokens_per_minute: AccountTokens }, open);
const SuspendedAt = t.Union([t.String({ format: "date-time" }), t.Null()], { description: "Since when the operator has suspended the account (every request of its keys a 403 until it is resumed); null: it is not." });
const Period = t.Union([t.Literal("day"), t.Literal("week"), t.Literal("month"), t.Null()], { description: "UTC day, week from Monday, month; null: lifetime." });
const SpentInPeriod = t.Number({ description: "Charged since the current period began; for a lifetime limit, everything charged." });
const ResetsAt = t.Union([t.String({ format: "date-time" }), t.Null()], { description: "When the period's count starts again; null for a lifetime limit." });
const KeyModels = t.Union([t.Array(t.String()), t.Null()], { description: "The only models the key may use: exact model ids and `prefix*` patterns; null: every model." });
const KeySummary = t.Object({
  id: t.String(), name: t.Union([t.String(), t.Null()]), prefix: t.String(), last4: t.String(), created_at: t.String({ format: "date-time" }),
  revoked_at: t.Union([t.String(), t.Null()]), expires_at: t.Union([t.String(), t.Null()]), rate_limit_per_minute: t.Union([StrictInteger(), t.Null()]),
  spend_limit: t.Union([t.Number(), t.Null()]), spent: t.Number(),
  spend_limit_period: Period, spent_in_period: SpentInPeriod, period_resets_at: ResetsAt,
  models: KeyModels,
  max_concurrent_requests: t.Union([StrictInteger(), t.Null()], { description: "The key's own cap on requests under way at once; null: limits.max_concurrent_requests." }),
});
const AccountDescription = t.Object({
  id: t.String(), name: t.String(), balance: t.Number(), reserved: t.Number(), created_at: t.String({ format: "date-time" }),
  spend_limit: t.Union([t.Number(), t.Null()]), spend_limit_period: Period, spent_in_period: SpentInPeriod, period_resets_at: ResetsAt,
  rate_limit_per_minute: AccountRate, max_concurrent_requests: AccountCap, tokens_per_minute: AccountTokens, suspended_at: SuspendedAt,
  keys: t.Array(KeySummary),
});
const AccountList = t.Object({
  object: t.Literal("list"),
  data: t.Array(t.Object({ id: t.String(), name: t.String(), balance: t.Number(), created_at: t.String({ format: "date-time" }), spend_limit: t.Union([t.Number(), t.Null()]), spend_limit_period: Period,
    rate_limit_per_minute: AccountRate, max_concurrent_requests: AccountCap, tokens_per_minute: AccountTokens, suspended_at: SuspendedAt })),
  next_cursor: t.Union([t.String(), t.Null()], { description: "Pass as `cursor` for the next page; null on the last." }),
});
const KeyInfo = t.Object({
  account: t.Object({
    balance: t.Number(), reserved: t.Number({ description: "Held by requests still open." }),
    rate_limit_per_minute: t.Union([StrictInteger(), t.Null()], { description: "Requests a minute for all the account's keys together: its own limit, else limits.account_requests_per_minute; null: none." }),
    max_concurrent_requests: t.Union([StrictInteger(), t.Null()], { description: "Requests under way at once for all the account's keys together: its own cap, else limits.account_max_concurrent_requests; null: none." }),
    tokens_per_minute: t.Union([StrictInteger(), t.Null()], { description: "Prompt and answer tokens a minute for all the account's keys together: its own limit, else limits.account_tokens_per_minute; null: none." }),
    suspended: t.Boolean({ description: "The operator suspended the account: every other request of its keys is a 403 until it is resumed." }),
  }),
  key: t.Object({
    name: t.Union([t.String(), t.Null()]), spend_limit: t.Union([t.Number(), t.Null()]), spend_limit_period: Period,
    spent_in_period: SpentInPeriod, period_resets_at: ResetsAt,
    rate_limit_per_minute: StrictInteger({ description: "The key's own limit, else the gateway's default." }),
    expires_at: t.Union([t.String({ format: "date-time" }), t.Null()]),
    models: KeyModels,
    max_concurrent_requests: t.Union([StrictInteger(), t.Null()], { description: "Most requests under way at once (streams until they end): the key's own cap, else limits.max_concurrent_requests; null: no cap." }),
  }),
});
const IssuedKey = t.Object({ id: t.String(), key: t.String({ description: "svc-sk-…, shown this once." }), name: t.Union([t.String(), t.Null()]), created_at: t.String({ format: "date-time" }) });
/** A usage report's sums (billing/usage-report.ts, `shownSums`): tokens by price class, money in credits. */
const SUMS = {
  requests: StrictInteger(), prompt_tokens: StrictInteger(), completion_tokens: StrictInteger(),
  fresh_input_tokens: StrictInteger(), cache_read_tokens: StrictInteger(), cache_write_5m_tokens: StrictInteger(), cache_write_1h_tokens: StrictInteger(),
  reasoning_tokens: StrictInteger({ description: "The part of completion_tokens spent reasoning." }), images: StrictInteger(), cost: t.Number(),
  cache_savings: t.Number({ description: "What the cached tokens would have cost as fresh input, less what they cost." }),
  estimated_requests: StrictInteger({ description: "Of requests, those billed on the gateway's own count of their tokens: the vendor sent none." }),
};
const Totals = t.Object(SUMS);
const AccountUsage = t.Object({
  account_id: t.String(), from: t.String({ format: "date-time" }), to: t.String({ format: "date-time" }), total: Totals,
  rejected: t.Record(t.String(), StrictInteger(), { description: "Refusals before any upstream call, by status." }),
  rejected_latest: t.Record(t.String(), t.String({ format: "date-time" }), { description: "When each status's latest refusal in the range was (the start of its minute)." }),
  models: t.Array(t.Object({ model: t.String(), ...SUMS })),
});
const UsageReport = t.Object({
  object: t.Literal("usage_report"),
  from: t.String({ format: "date-time" }),
  to: t.String({ format: "date-time" }),
  granularity: t.Union([t.Literal("day"), t.Literal("hour")]),
  group_by: t.Array(t.String()),
  columns: t.Array(t.String()),
  data: t.Array(t.Object({
    period_start: t.String({ format: "date-time" }),
    account_id: t.Optional(t.String()), account_name: t.Optional(t.Union([t.String(), t.Null()])),
    key_id: t.Optional(t.String()), key_name: t.Optional(t.Union([t.String(), t.Null()])),
    model: t.Optional(t.String()),
    ...SUMS,
  })),
  total: Totals,
});

type Security = "key" | "admin" | "metrics" | "none";
interface Answer {
  description: string;
  schema?: TSchema;
  /** Other content types beside JSON (or instead of it, when `schema` is absent). */
  content?: Record<string, { schema: object }>;
  headers?: string[];
}
interface Operation {
  summary: string;
  description: string;
  tag: string;
  security: Security;
  answers: Record<string, Answer>;
  errors: number[];
  anthropic?: boolean;
  /** Query parameters of routes that read their query without a schema. */
  query?: Record<string, string>;
}

const sse = { "text/event-stream": { schema: { type: "string", description: "Server-sent events in the client's format: chat.completion.chunk frames then `data: [DONE]`; Anthropic's message_start … message_stop." } } };
const RATE = ["x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"];
const CHAT_ERRORS = [400, 401, 402, 403, 404, 408, 413, 415, 422, 429, 502, 503];

/**
 * A route's path as OpenAPI writes it: `:name` → `{name}`; a trailing `*` (model ids contain a
 * `/`, sent plain or as %2F) → `{model_id}`.
 */
export function openApiPath(path: string): string {
  return path.replace(/:([A-Za-z0-9_]+)/g, "{$1}").replace(/\/\*$/, "/{model_id}");
}

/** What schemas cannot say, per `METHOD path`. */
/** One pooled vendor key as the admin API shows it (providers/key-pools.ts, `VendorKeyStatus`). */
const VendorKeyStatus = t.Object({
  provider: t.String(),
  key: t.String({ description: "The env name the key is read from." }),
  state: t.Union([t.Literal("usable"), t.Literal("cooling"), t.Literal("disabled")]),
  until: t.Optional(t.String({ description: "Cooling: when it is back." })),
  since: t.Optional(t.String({ description: "Disabled: since when." })),
  next_probe: t.Optional(t.String({ description: "Disabled: when its next probe is due. Absent for a provider's only key, which is not probed: its requests still go to it." })),
  models_cooling: t.Optional(t.Array(t.Object({ model: t.String({ description: "The vendor's name of the model." }), until: t.String() }), { description: "Usable, but cooling for these models only (a vendor's per-model rate limit or overload, 429/503/529): the key still serves the others." })),
});

export const OPERATIONS: Record<string, Operation> = {
  "POST /v1/chat/completions": {
    summary: "Chat completion (OpenAI format)",
    description: "Forwards to the model's upstream (translated when it speaks Anthropic's format), streaming or not. `models` names fallbacks tried in order. Charged after the answer, never more than reserved.",
    tag: "chat", security: "key", errors: CHAT_ERRORS,
    answers: { "200": { description: "The answer; `stream: true` gives server-sent events.", schema: ChatCompletion, content: sse, headers: RATE } },
  },
  "POST /v1/messages": {
    summary: "Messages (Anthropic format)",
    description: "Anthropic's messages API, streaming or not, to any configured model. Errors are Anthropic-shaped.",
    tag: "chat", security: "key", errors: CHAT_ERRORS, anthropic: true,
    answers: { "200": { description: "The answer; `stream: true` gives server-sent events.", schema: AnthropicMessage, content: sse, headers: RATE } },
  },
  "POST /v1/messages/count_tokens": {
    summary: "Count input tokens (Anthropic format)",
    description: "The Anthropic upstream's count, else the gateway's estimate. Never charged; its own rate bucket, 10× the key's. A model the key may not use is a 403. Free, so bounded: a prompt over `limits.count_tokens_max_bytes` of text (4 MiB) is a 413; counts made by the gateway's tokenizer take turns per key, at most `limits.count_tokens_per_key_bytes` (16 MiB) of text per key at once, each count weighing at least 64 KiB (more: 429, `retry-after: 1`), `limits.count_tokens_queue_bytes` (64 MiB) in all (more: 503) and `limits.count_tokens_timeout_ms` (10 s) each (then 503); every count takes its body's bytes from its account's `limits.count_tokens_account_bytes_per_minute` (64 MiB a minute per process; more: 429 with the wait).",
    tag: "chat", security: "key", errors: [400, 401, 403, 404, 408, 413, 415, 429, 503], anthropic: true,
    answers: { "200": { description: "The count.", schema: t.Object({ input_tokens: StrictInteger() }), headers: RATE } },
  },
  "GET /v1/models": {
    summary: "List models",
    description: "The catalogue: for a key limited to models, only those. With `anthropic-version`, Anthropic's list shape (ids and exact aliases).",
    tag: "models", security: "key", errors: [401, 429, 503],
    answers: { "200": { description: "The models.", schema: ModelList, headers: RATE } },
    query: { limit: "Anthropic list shape only: page size.", after_id: "Anthropic list shape only: page after this id.", before_id: "Anthropic list shape only: page before this id." },
  },
  "GET /v1/key": {
    summary: "This key's limits and balance",
    description: "The presented key's account balance and what open requests hold, the key's spend limit, its period, what it spent in the period and when that resets, its rate limit, expiry, the models it may use and its cap on requests at once. Free, and outside the key's rate bucket: answered with an empty bucket too.",
    tag: "models", security: "key", errors: [401, 503],
    answers: { "200": { description: "The key.", schema: KeyInfo } },
  },
  "GET /v1/models/*": {
    summary: "Retrieve a model",
    description: "One model of the catalogue, in the list's shape (Anthropic's with `anthropic-version`). The id contains a `/`: send it as it is or as `%2F`. 404 in the client's format for unknown ids, and for models the key may not use.",
    tag: "models", security: "key", errors: [401, 404, 429, 503],
    answers: { "200": { description: "The model.", schema: t.Object({ id: t.String() }, { additionalProperties: true }), headers: RATE } },
  },
  "POST /v1/responses": {
    summary: "Responses (OpenAI Responses API)",
    description: "OpenAI's Responses API on the same pipeline as chat completions: any configured model, streaming or not, tools (function, custom, namespace), reasoning (as summary parts when `reasoning.summary` asks), structured output, `models` fallbacks. Unless `store: false`, the answer is kept (in Redis when SWITCHYARD_REDIS_URL is set, shared by every gateway process; else in the process's memory; never on disk) for `responses.store_ttl_ms` after its last use, within a byte quota per account (`responses.account_max_bytes`; the account's own least recently used answers go first), so later requests can name it: `item_reference` input items and `previous_response_id`. An id not held (expired, evicted, deleted, another account's) is a 400 naming it. An input larger than `responses.answer_max_bytes` is a 400 unless `store: false`; an answer that ends up larger is delivered with `store: false` and not kept. While Redis cannot be reached, a request naming a stored answer is a 503 (`Retry-After: 5`) and answers say `store: false`.",
    tag: "chat", security: "key", errors: CHAT_ERRORS,
    answers: { "200": { description: "The response; `stream: true` gives response.* server-sent events.", schema: t.Object({ id: t.String(), object: t.Literal("response") }, { additionalProperties: true }), content: sse, headers: RATE } },
  },
  "POST /v1/embeddings": {
    summary: "Embeddings (OpenAI format)",
    description: "OpenAI's embeddings API to any model of category `embedding`: `input` as a string, strings, token ids or token-id arrays; `encoding_format` float or base64; `dimensions`; `models` fallbacks. Charged the input tokens (the upstream's count, else the gateway's estimate). A model of another category is a 400.",
    tag: "embeddings", security: "key", errors: [400, 401, 402, 403, 404, 408, 413, 415, 429, 502, 503],
    answers: { "200": { description: "One vector per input, in input order.", schema: EmbeddingList, headers: RATE } },
  },
  "POST /v1/responses/input_tokens": {
    summary: "Count input tokens (Responses API)",
    description: "The SDKs' `responses.inputTokens.count`: the request counted as `POST /v1/responses` would send it, stored items and `previous_response_id`'s chain included. A model served by an Anthropic upstream is counted by Anthropic (its `count_tokens`, on the translated request), else, and when no `model` is named, by the gateway's estimate. Never charged; bounded and rate-limited as `POST /v1/messages/count_tokens` (it shares that bucket). A model the key may not use is a 403.",
    tag: "chat", security: "key", errors: [400, 401, 403, 404, 408, 413, 415, 429, 503],
    answers: { "200": { description: "The count.", schema: t.Object({ object: t.Literal("response.input_tokens"), input_tokens: StrictInteger() }), headers: RATE } },
  },
  "GET /v1/responses/:id": {
    summary: "Retrieve a stored response",
    description: "The SDKs' `responses.retrieve`: a stored answer of the key's own account, exactly as `POST /v1/responses` returned it (a streamed one as its final `response.completed` object). Reading it counts as a use (its TTL restarts). Unknown, expired, evicted, deleted and other accounts' ids are the same 404. 503 while Redis (SWITCHYARD_REDIS_URL) cannot be reached.",
    tag: "chat", security: "key", errors: [400, 401, 404, 429, 503],
    answers: { "200": { description: "The stored Response object.", schema: t.Object({ id: t.String(), object: t.Literal("response") }, { additionalProperties: true }) } },
  },
  "GET /v1/responses/:id/input_items": {
    summary: "List a stored response's input items",
    description: "The SDKs' `responses.inputItems.list`: the input items a stored answer of the key's own account was made from (its own request's, references resolved), each with an id (its own, else one made from the answer's id), messages with their content as parts. Newest first unless `order=asc`; pages of `limit` (1–100, default 20) after the item id `after`. Unknown, expired, evicted, deleted and other accounts' ids are the same 404. 503 while Redis (SWITCHYARD_REDIS_URL) cannot be reached.",
    tag: "chat", security: "key", errors: [400, 401, 404, 429, 503],
    answers: { "200": { description: "A page of input items.", schema: t.Object({ object: t.Literal("list"), data: t.Array(t.Object({ id: t.String(), type: t.String() }, { additionalProperties: true })), first_id: t.Union([t.String(), t.Null()]), last_id: t.Union([t.String(), t.Null()]), has_more: t.Boolean() }) } },
  },
  "DELETE /v1/responses/:id": {
    summary: "Delete a stored response",
    description: "The SDKs' `responses.delete`: forgets a stored answer of the key's own account (its items can no longer be referred to, nor can it be continued). Unknown, expired, already deleted and other accounts' ids are the same 404. 503 while Redis (SWITCHYARD_REDIS_URL) cannot be reached.",
    tag: "chat", security: "key", errors: [401, 404, 429, 503],
    answers: { "200": { description: "Deleted.", schema: ResponseDeleted } },
  },
  "GET /health": {
    summary: "Liveness",
    description: "200 while the process answers. No key.",
    tag: "operations", security: "none", errors: [],
    answers: { "200": { description: "Alive.", schema: Health } },
  },
  "GET /ready": {
    summary: "Readiness",
    description: "200 when the ledger writes, the shared rate-limit store (if any) answers, every provider with vendor keys has one usable and the gateway is not draining; else 503 with the same body. No key.",
    tag: "operations", security: "none", errors: [],
    answers: { "200": { description: "Ready.", schema: Ready }, "503": { description: "Not ready: see the fields.", schema: Ready } },
  },
  "GET /metrics": {
    summary: "Prometheus metrics",
    description: "Text exposition format 0.0.4. No key; `Authorization: Bearer $SWITCHYARD_METRICS_TOKEN` when that is set. Absent (404) with SWITCHYARD_METRICS=off.",
    tag: "operations", security: "metrics", errors: [401],
    answers: { "200": { description: "The metrics.", content: { "text/plain": { schema: { type: "string" } } } } },
  },
  "GET /openapi.json": {
    summary: "This document",
    description: "OpenAPI 3.1, generated from the routes' schemas. No key.",
    tag: "operations", security: "none", errors: [],
    answers: { "200": { description: "The document.", content: { "application/json": { schema: { type: "object" } } } } },
  },
  "POST /v1/admin/accounts": {
    summary: "Create an account",
    description: "With an opening balance in credits, and optionally limits on all its keys together: `rate_limit_per_minute` (1–1e6), `max_concurrent_requests` (1–100000) and `tokens_per_minute` (1–1e9: prompt and answer tokens, as the vendors count them).",
    tag: "admin", security: "admin", errors: [400, 401, 408, 413, 415, 429, 503],
    answers: { "201": { description: "Created.", schema: Account } },
  },
  "GET /v1/admin/accounts": {
    summary: "List accounts",
    description: "Oldest first (created_at, then id), paged: `limit` (1–500, default 50), then `cursor` = the answer's `next_cursor` until it is null. `name` keeps accounts whose name contains it, ignoring the case of ASCII letters.",
    tag: "admin", security: "admin", errors: [400, 401, 429, 503],
    answers: { "200": { description: "A page of accounts.", schema: AccountList } },
  },
  "PATCH /v1/admin/accounts/:id": {
    summary: "Change an account",
    description: "`name`, `spend_limit` (credits, null for none), `spend_limit_period` (day, week, month; null for lifetime), `rate_limit_per_minute`, `max_concurrent_requests` and `tokens_per_minute` for all the account's keys together (null for the gateway's default), `suspended` (true: every request of its keys is a 403 until false resumes it; answers under way finish). Only the fields sent change; a new period recounts what was spent in it from the usage records; limits apply from the next request (within 2 s on other gateways sharing PostgreSQL).",
    tag: "admin", security: "admin", errors: [400, 401, 404, 408, 413, 415, 429, 503],
    answers: { "200": { description: "The account, as GET shows it.", schema: AccountDescription } },
  },
  "GET /v1/admin/accounts/:id": {
    summary: "Show an account",
    description: "Balance, what open requests hold (`reserved`), keys as prefix and last 4 only.",
    tag: "admin", security: "admin", errors: [401, 404, 429, 503],
    answers: { "200": { description: "The account.", schema: AccountDescription } },
  },
  "POST /v1/admin/accounts/:id/credits": {
    summary: "Top up",
    description: "Adds credits to the balance. With an `Idempotency-Key` header (1–200 printable ASCII characters) a retried top-up is made once and answered as the first was; the same key with another amount or another account is a 409 naming the key.",
    tag: "admin", security: "admin", errors: [400, 401, 404, 408, 409, 413, 415, 429, 503],
    answers: { "200": { description: "The new balance.", schema: t.Object({ id: t.String(), balance: t.Number(), reserved: t.Number() }) } },
  },
  "POST /v1/admin/accounts/:id/debits": {
    summary: "Take credits back",
    description: "Lowers the balance (a top-up made by mistake, a refund paid out elsewhere), never past what is available: the balance less what requests in flight hold (`reserved`); more is a 409 saying how much is available, and nothing is taken. Written as a credit entry of kind `debit`, so the audit and reports see it. `Idempotency-Key` as for top-ups, from the same keys: one used for a top-up is a 409 here.",
    tag: "admin", security: "admin", errors: [400, 401, 404, 408, 409, 413, 415, 429, 503],
    answers: { "200": { description: "The new balance.", schema: t.Object({ id: t.String(), balance: t.Number(), reserved: t.Number() }) } },
  },
  "GET /v1/admin/accounts/:id/keys": {
    summary: "List keys",
    description: "Summaries only; the keys themselves are never shown again.",
    tag: "admin", security: "admin", errors: [401, 404, 429, 503],
    answers: { "200": { description: "The keys.", schema: t.Object({ object: t.Literal("list"), data: t.Array(KeySummary) }) } },
  },
  "POST /v1/admin/accounts/:id/keys": {
    summary: "Issue a key",
    description: "The only time the key is shown. At most 10 active keys per account (409 past that). `models` limits the key to some models (exact ids or `prefix*`; others get 403); `max_concurrent_requests` caps its requests under way at once (more get 429).",
    tag: "admin", security: "admin", errors: [400, 401, 404, 408, 409, 413, 415, 429, 503],
    answers: { "201": { description: "The key.", schema: IssuedKey } },
  },
  "GET /v1/admin/accounts/:id/usage": {
    summary: "An account's usage totals",
    description: "Totals and per-model sums over [from, to), and refusals by status (counted per minute).",
    tag: "admin", security: "admin", errors: [400, 401, 404, 429, 503],
    answers: { "200": { description: "The totals.", schema: AccountUsage } },
    query: { from: "ISO 8601 or epoch ms (inclusive); default: the beginning.", to: "ISO 8601 or epoch ms (exclusive); default: now." },
  },
  "GET /v1/admin/usage": {
    summary: "Usage report",
    description: "Requests, tokens and credits per UTC hour or day, split by account, key and/or model, over [from, to): what a team bills its own users from. JSON or CSV (`format=csv`, with a header row). At most 50,000 rows (400 past that).",
    tag: "admin", security: "admin", errors: [400, 401, 429, 503],
    answers: { "200": { description: "The report.", schema: UsageReport, content: { "text/csv": { schema: { type: "string", description: "period_start, [account_id, account_name], [key_id, key_name], [model], requests, prompt_tokens, completion_tokens, fresh_input_tokens, cache_read_tokens, cache_write_5m_tokens, cache_write_1h_tokens, reasoning_tokens, images, cost, cache_savings, estimated_requests" } } } } },
  },
  "PATCH /v1/admin/keys/:id": {
    summary: "Change a key",
    description: "`name`, `spend_limit` (credits, null for none), `spend_limit_period` (day, week, month; null for lifetime), `rate_limit_per_minute` (1–1e6, null for the default), `expires_at` (ISO 8601, null for never), `models` (model ids and `prefix*` patterns, null for every model), `max_concurrent_requests` (1–100000, null for the default). Only the fields sent change; they apply from the next request (within 2 s on other gateways sharing PostgreSQL). 409 on PostgreSQL for a spend limit below what the key already spent and holds.",
    tag: "admin", security: "admin", errors: [400, 401, 404, 408, 409, 413, 415, 429, 503],
    answers: { "200": { description: "The key's summary.", schema: KeySummary } },
  },
  "POST /v1/admin/accounts/:id/invites": {
    summary: "Invite the account holder to the console",
    description: "A one-time link to `/console` that lasts 7 days; opening it sets the password the holder signs in with (`login`, 3 to 64 letters, digits or `. _ @ -`). The token is after `#`, so it reaches no server log. A login the account has already gets a link to set a new password (its sessions end when it is used). 409 when the login is another account's; 404 when the console is off (`SWITCHYARD_CONSOLE=off`).",
    tag: "admin", security: "admin", errors: [400, 401, 404, 408, 409, 413, 415, 429, 503],
    answers: { "201": { description: "The invite.", schema: t.Object({ url: t.String(), expires_at: t.String(), login: t.String() }) } },
  },
  "GET /v1/admin/accounts/:id/logins": {
    summary: "The account's console logins",
    description: "The logins its holders sign in to the console with, and its invites not yet used. 404 when the console is off.",
    tag: "admin", security: "admin", errors: [401, 404, 429, 503],
    answers: { "200": { description: "Logins and open invites.", schema: t.Object({
      logins: t.Array(t.Object({ login: t.String(), created_at: t.String() })),
      invites: t.Array(t.Object({ login: t.String(), created_at: t.String(), expires_at: t.String() })),
    }) } },
  },
  "DELETE /v1/admin/accounts/:id/logins/:login": {
    summary: "Remove a console login",
    description: "The login can no longer sign in; its sessions end at once and its open invites to the account are cancelled (an invite alone can be cancelled this way too). 404 when the account has neither.",
    tag: "admin", security: "admin", errors: [401, 404, 429, 503],
    answers: { "200": { description: "Removed.", schema: t.Object({ account_id: t.String(), login: t.String(), removed: t.Literal(true) }) } },
  },
  "DELETE /v1/admin/accounts/:id/invites/:login": {
    summary: "Cancel a console invite",
    description: "The account's open invite links for the login stop working; the login itself, if the account has it, keeps signing in and keeps its sessions. 404 when there was no open invite, or the console is off.",
    tag: "admin", security: "admin", errors: [401, 404, 429, 503],
    answers: { "200": { description: "Cancelled.", schema: t.Object({ account_id: t.String(), login: t.String(), cancelled: t.Literal(true) }) } },
  },
  "DELETE /v1/admin/keys/:id": {
    summary: "Revoke a key",
    description: "Takes effect on the next request (within 2 s on other gateways sharing PostgreSQL).",
    tag: "admin", security: "admin", errors: [401, 404, 429, 503],
    answers: { "200": { description: "Revoked.", schema: t.Object({ id: t.String(), revoked: t.Literal(true) }) } },
  },
  "GET /v1/admin/vendor-keys": {
    summary: "Vendor keys and their state",
    description: "Every pooled vendor key by its env name (a provider with one `api_key_env` is a pool of one), never its value: `usable`, `cooling` (until when) or `disabled` (since when, and when its next probe is due).",
    tag: "admin", security: "admin", errors: [401, 429, 503],
    answers: { "200": { description: "The keys.", schema: t.Object({ object: t.Literal("list"), data: t.Array(VendorKeyStatus) }) } },
  },
  "POST /v1/admin/vendor-keys/:provider/:key/probe": {
    summary: "Probe a vendor key now",
    description: "Runs the key's probe (the vendor's model list with that key) at once. Accepted: the key is usable from now (a cooldown ends too). Refused: a disabled key's next probe is timed as after any failed one; a usable or cooling key is left as it was. 404 for a provider or key not pooled; 409 while another probe of the key is under way.",
    tag: "admin", security: "admin", errors: [401, 404, 409, 429, 503],
    answers: { "200": { description: "The key's state after the probe.", schema: t.Composite([VendorKeyStatus, t.Object({ accepted: t.Boolean() })]) } },
  },
  "POST /v1/admin/vendor-keys/:provider/:key/enable": {
    summary: "Enable a vendor key now",
    description: "The key takes traffic at once, whatever its state, without a probe: for a key whose probe cannot pass (it may not list models), or a vendor back before the key's next probe. A key the vendor still refuses is refused again by its next request, which moves to another key. 404 for a provider or key not pooled.",
    tag: "admin", security: "admin", errors: [401, 404, 429, 503],
    answers: { "200": { description: "The key's state: usable.", schema: VendorKeyStatus } },
  },
};

const ERROR_TEXT: Record<number, string> = {
  400: "Malformed request: a body that is not JSON (Content-Type other than application/json), invalid JSON, a field of the wrong type, an unsupported part, a prompt over the context window, a bad query (`stream=true` on GET /v1/responses/{id}: no background responses here).",
  401: "Missing or invalid credential (checked before the body is read).",
  402: "Insufficient credits (or the key's spend limit) for the request's worst case.",
  403: "The key may not use this model (its `models` list); the message names the models it may use. Or the key's account is suspended by the operator: every request of its keys is refused until it is resumed (GET /v1/key still answers, with `account.suspended`).",
  404: "No such model, account or key.",
  409: "The account already has 10 active keys; or (PATCH a key, PostgreSQL) a spend limit below what the key spent and holds; or (a top-up) an Idempotency-Key already used with another amount or account.",
  408: "The body did not arrive within limits.body_timeout_ms of its first read (the connection is then closed).",
  413: "The body is larger than limits.max_body_bytes, whatever its content type, chunked or not (the connection is then closed), or (compressed) decompresses to more than it; on count_tokens, also a prompt over limits.count_tokens_max_bytes of text.",
  415: "A Content-Encoding the gateway does not read (it reads gzip, deflate, br and zstd on the model routes: chat completions, messages, responses, embeddings), or a compressed body on another route (token counts among them).",
  422: "`messages` is empty.",
  429: "The key's rate limit, or its requests under way at once (`max_concurrent_requests`), or its request bodies still arriving (`limits.body_per_key_bytes`), or (model routes) its account's whole answers not yet read (`limits.answer_per_account_bytes`) or its account's tokens a minute (`tokens_per_minute`, with `x-ratelimit-*-tokens`); `retry-after` says when to retry.",
  502: "No upstream could answer (never charged).",
  503: "The ledger cannot record charges, or the rate limiter (Redis) or key store cannot be reached, or the database (the admin API, GET /v1/key) cannot be used (`retry-after: 5`); or the gateway is receiving `limits.body_total_bytes` of bodies already (`retry-after: 1`).",
};

const SUSPENDED_TEXT = "The key's account is suspended by the operator: every request of its keys is refused until it is resumed (GET /v1/key still answers, with `account.suspended`).";

/** Turns TypeBox schemas (objects with symbol keys) into plain JSON Schema. */
function plain(schema: unknown): Record<string, unknown> {
  return JSON.parse(JSON.stringify(schema)) as Record<string, unknown>;
}

const OPTIONAL = Symbol.for("TypeBox.Optional");

export function buildOpenApiDocument(routes: readonly RouteInfo[], version: string): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  const seen = new Set<string>();
  for (const route of routes) {
    const method = route.method.toLowerCase();
    if (!["get", "post", "put", "patch", "delete"].includes(method)) continue;
    const key = `${route.method.toUpperCase()} ${route.path}`;
    // The console's page and its JSON routes are the console's own, behind a cookie session and
    // CSRF token, not an API for clients (docs/decisions.md, "Console"): not in the document.
    if (route.path === "/console" || route.path.startsWith("/console/")) continue;
    if (seen.has(key)) continue;
    seen.add(key);
    const op = OPERATIONS[key];
    const hooks = (route.hooks ?? {}) as { body?: unknown; query?: unknown };
    const path = openApiPath(route.path);
    const parameters: Record<string, unknown>[] = [...path.matchAll(/\{([A-Za-z0-9_]+)\}/g)].map((m) => ({ name: m[1], in: "path", required: true, schema: { type: "string" } }));
    const query = hooks.query ? plain(hooks.query) : undefined;
    const requiredQuery = new Set((query?.required as string[] | undefined) ?? []);
    for (const [name, schema] of Object.entries((query?.properties as Record<string, Record<string, unknown>> | undefined) ?? {})) {
      const { description, ...rest } = schema;
      parameters.push({ name, in: "query", required: requiredQuery.has(name), ...(description ? { description } : {}), schema: rest });
    }
    for (const [name, description] of Object.entries(op?.query ?? {})) parameters.push({ name, in: "query", required: false, description, schema: { type: "string" } });
    parameters.push({ $ref: "#/components/parameters/RequestId" });

    const error = op?.anthropic ? "#/components/schemas/AnthropicError" : "#/components/schemas/OpenAIError";
    const responses: Record<string, unknown> = {};
    for (const [status, answer] of Object.entries(op?.answers ?? { "200": { description: "OK" } })) {
      const content: Record<string, unknown> = { ...(answer.schema ? { "application/json": { schema: plain(answer.schema) } } : {}), ...answer.content };
      responses[status] = {
        description: answer.description,
        headers: Object.fromEntries(["x-request-id", ...(answer.headers ?? [])].map((h) => [h, { $ref: `#/components/headers/${h}` }])),
        ...(Object.keys(content).length ? { content } : {}),
      };
    }
    // A suspended account's keys get a 403 on every key route but GET /v1/key (admission refuses
    // them before the route runs), whether or not the route has a 403 of its own.
    const errors = op?.errors ?? [400];
    const suspendable = op?.security === "key" && key !== "GET /v1/key" && !errors.includes(403);
    for (const status of suspendable ? [...errors, 403].sort((a, b) => a - b) : errors) {
      responses[String(status)] = {
        description: suspendable && status === 403 ? SUSPENDED_TEXT : ERROR_TEXT[status] ?? "Error.",
        headers: { "x-request-id": { $ref: "#/components/headers/x-request-id" } },
        content: { "application/json": { schema: { $ref: error } } },
      };
    }
    const security = op?.security ?? "none";
    const operation: Record<string, unknown> = {
      operationId: `${method}${path.replace(/[{}]/g, "").replace(/[^A-Za-z0-9]+(.)?/g, (_, c: string | undefined) => (c ?? "").toUpperCase())}`,
      summary: op?.summary ?? key,
      description: op?.description ?? "Not described yet (src/http/openapi.ts).",
      tags: [op?.tag ?? "other"],
      parameters,
      responses,
      security: security === "key" ? [{ bearerKey: [] }, { apiKeyHeader: [] }] : security === "admin" ? [{ adminToken: [] }] : security === "metrics" ? [{}, { metricsToken: [] }] : [],
    };
    if (hooks.body) {
      const body = hooks.body as Record<string | symbol, unknown>;
      operation.requestBody = { required: !(OPTIONAL in body), content: { "application/json": { schema: plain(body) } } };
    }
    (paths[path] ??= {})[method] = operation;
  }

  return {
    openapi: "3.1.0",
    info: {
      title: "Switchyard",
      version,
      description: "A gateway for language and image models: OpenAI chat completions and Anthropic messages over one pipeline, with accounts, keys and credits. Prose reference: docs/api.md.",
    },
    tags: [
      { name: "chat", description: "Answers from the configured models." },
      { name: "embeddings", description: "Vectors from the configured embedding models." },
      { name: "models", description: "The catalogue." },
      { name: "operations", description: "Probes, metrics, this document." },
      { name: "admin", description: "Accounts, keys, credits, usage. Only when SWITCHYARD_ADMIN_TOKEN is set (404 otherwise)." },
    ],
    paths,
    components: {
      securitySchemes: {
        bearerKey: { type: "http", scheme: "bearer", description: "An API key (svc-sk-…) as `Authorization: Bearer`." },
        apiKeyHeader: { type: "apiKey", in: "header", name: "x-api-key", description: "An API key (svc-sk-…) as Anthropic's header." },
        adminToken: { type: "http", scheme: "bearer", description: "SWITCHYARD_ADMIN_TOKEN." },
        metricsToken: { type: "http", scheme: "bearer", description: "SWITCHYARD_METRICS_TOKEN, when set." },
      },
      parameters: {
        RequestId: { name: "x-request-id", in: "header", required: false, description: "Kept when 1–128 of [A-Za-z0-9._:-], else replaced by a new UUID; echoed on the answer, sent upstream, stored with the usage record.", schema: { type: "string", pattern: "^[A-Za-z0-9._:-]{1,128}$" } },
      },
      headers: {
        "x-request-id": { description: "The request's id: the client's, or the one the gateway made.", schema: { type: "string" } },
        "x-ratelimit-limit-requests": { description: "The key's requests per minute.", schema: { type: "string" } },
        "x-ratelimit-remaining-requests": { description: "Requests left in the bucket.", schema: { type: "string" } },
        "x-ratelimit-reset-requests": { description: "Until the bucket is full again, e.g. `1s`, `6m0s`.", schema: { type: "string" } },
      },
      schemas: { OpenAIError: plain(OpenAIError), AnthropicError: plain(AnthropicError) },
    },
  };
}
