import { expect } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Database } from "bun:sqlite";
import { createApp, type App, type AppDeps } from "../../src/app.ts";
import { resolveSettings } from "../../src/config/load-config.ts";
import { connectionIdleSeconds } from "../../src/config/schema.ts";
import { openDatabase } from "../../src/store/database.ts";
import { silentLogger, type Logger } from "../../src/log/log.ts";
import type { Transport } from "../../src/transport/transport.ts";
import { fileFixture } from "./file-fixture.ts";
import { SERVER_BODY_LIMIT } from "../../src/app.ts";
import { createTokenizer } from "../../src/billing/token-estimate.ts";

/** One tokenizer for every gateway a test file starts: its worker loads its tables once, as a gateway process does. */
const TOKENIZER = createTokenizer();
/**
 * Resolves once the shared tokenizer has loaded its tables (a second of CPU, several on a loaded
 * machine): for tests that time a settlement whose prompt is estimated (a client that leaves).
 */
export const tokenizerLoaded = (): Promise<number> => TOKENIZER.count("warm");
/** A console password hashed in ~1 ms (argon2id at 1 MiB, one pass): the suite signs in hundreds of times. */
const TEST_PASSWORD_COST = { memoryCost: 1024, timeCost: 1 };

export const OPENAI_MODEL = "test/gpt";
export const ANTHROPIC_MODEL = "test/claude";
export const FREE_MODEL = "test/free";
/** OpenAI images API behind the chat endpoints. */
export const IMAGES_API_MODEL = "test/image";
/** An OpenAI-compatible chat upstream that answers with images. */
export const IMAGE_CHAT_MODEL = "test/image-chat";
/** What the two paid text models cost (credits per million tokens), for tests that check charges. */
export const OPENAI_PRICING = { input_per_mtok: 150, output_per_mtok: 600 };
export const ANTHROPIC_PRICING = { input_per_mtok: 3000, output_per_mtok: 15000 };
export const VENDOR_OPENAI_KEY = "sk-test-openai-SECRET-0123456789";
export const VENDOR_ANTHROPIC_KEY = "sk-ant-test-SECRET-0123456789";

export interface GatewayOptions {
  /** The vendor keys the providers are configured with (default VENDOR_OPENAI_KEY, VENDOR_ANTHROPIC_KEY). */
  vendorKeys?: { openai?: string; anthropic?: string };
  /** Base of the fake upstream (http://127.0.0.1:PORT); both vendor kinds are served there. */
  upstreamUrl: string;
  credits?: number;
  adminToken?: string;
  adminAuthFailures?: AppDeps["adminAuthFailures"];
  keyAuthFailures?: AppDeps["keyAuthFailures"];
  keepaliveMs?: number;
  clientIdleMs?: number;
  idleMs?: number;
  firstByteMs?: number;
  /** A whole (non-stream) answer's wait for its head; default firstByteMs. */
  wholeAnswerMs?: number;
  idleTimeoutSeconds?: number;
  /** Default per-key rate limit; high unless a test is about rate limiting. */
  requestsPerMinute?: number;
  /** limits.max_concurrent_requests (unset: no default cap). */
  maxConcurrentRequests?: number;
  /** Requests under way per key, shared (Redis); the app's in-process count otherwise. */
  concurrency?: AppDeps["concurrency"];
  now?: () => number;
  retry?: { max_retries?: number; max_wait_ms?: number };
  maxFrameBytes?: number;
  maxImageBytes?: number;
  imageFetchTimeoutMs?: number;
  maxResponseBytes?: number;
  /** More of the config's `limits` section (max_body_bytes, count_tokens_*…). */
  limits?: Record<string, unknown>;
  /** Extra `server` settings (merged over keepalive and client idle). */
  server?: Record<string, unknown>;
  totalMs?: number;
  fetch?: Transport;
  log?: Logger;
  ledgerOptions?: AppDeps["ledgerOptions"];
  wrapLedger?: AppDeps["wrapLedger"];
  /** Shared stores (PostgreSQL) instead of the SQLite file; the test closes them. */
  stores?: AppDeps["stores"];
  limiter?: AppDeps["limiter"];
  /** More models beside the standard ones (providers "fake-openai" and "fake-anthropic"). */
  extraModels?: Record<string, unknown>[];
  /** Every upstream call through `fetch`, as with a proxy configured (the upstream client's fallback). */
  upstreamViaProxy?: boolean;
  /** More providers beside fake-openai and fake-anthropic (their keys from TEST_OPENAI_KEY / TEST_ANTHROPIC_KEY). */
  extraProviders?: Record<string, unknown>[];
  /** Metrics and access-log switches (defaults: all on). */
  ops?: AppDeps["ops"];
  /** The Responses API's stored answers (default: the app's own, in memory). */
  responseStore?: AppDeps["responseStore"];
  /** The config's `responses` section (the app's own store's bounds). */
  responses?: { store_max_bytes?: number; account_max_bytes?: number; answer_max_bytes?: number; store_ttl_ms?: number };
  /** The config's `alerts` section (spend alerts), and SWITCHYARD_ALERT_SECRET. */
  alerts?: Record<string, unknown>;
  alertSecret?: string;
  /** The SQLite file to use (a restart: a second gateway on the first one's file); the caller removes it. Default: a new one. */
  dbPath?: string;
  /** Console sign-in throttling (default: the app's). */
  consoleSignIns?: AppDeps["consoleSignIns"];
  /** argon2id's cost for console passwords: cheap here (a sign-in in ~1 ms, not ~50), "default" for the gateway's own. */
  consolePasswordCost?: AppDeps["consolePasswordCost"] | "default";
  parseTurnMaxHoldMs?: number;
  /** The "fake-openai" provider's vendor key pool instead of its one key (`TEST_OPENAI_KEY`); secrets in `vendorEnv`. */
  openaiKeys?: { env: string; weight?: number }[];
  /** The "fake-anthropic" provider's pool, likewise. */
  anthropicKeys?: { env: string; weight?: number }[];
  /** More environment variables the config reads (pooled keys' secrets). */
  vendorEnv?: Record<string, string>;
  keyState?: AppDeps["keyState"];
  keyRandom?: AppDeps["keyRandom"];
  keyProbeEveryMs?: AppDeps["keyProbeEveryMs"];
  /** Where large embeddings answers are read (default: the app's own thread, 1 MiB threshold). */
  embeddingsThread?: AppDeps["embeddingsThread"];
}

export interface Gateway {
  url: string;
  key: string;
  keyId: string;
  accountId: string;
  app: App;
  dbPath: string;
  /** The gateway's own connection (fault tests change its settings). */
  db: Database;
  /**
   * Stops the app and closes its ledger. `ledgerGraceMs`: how long the ledger keeps trying to write
   * what is queued before keeping it in the spill file (the ledger's default, 5 s, when unset). A
   * test whose store fails for good (its file deleted) and that checks nothing at the stop passes 0:
   * the default only waits 5 s for writes that cannot succeed.
   */
  stop(options?: { ledgerGraceMs?: number }): Promise<void>;
  /** Balance in micro-credits, straight from SQLite, once every request so far has settled. */
  balanceMicro(): Promise<number>;
}

/**
 * Spends a balance or a key's limit down one request at a time, each settled before the next,
 * until the gateway refuses with 402 (at most 500 requests); any other refusal fails the test.
 */
export async function spendUntilRefused(gw: Gateway, ask: () => Promise<Response>): Promise<{ answered: number; refusal: any }> {
  let answered = 0;
  let refusal: any;
  for (let i = 0; i < 500 && !refusal; i++) {
    const res = await ask();
    if (res.status === 200) answered++;
    else {
      expect(res.status).toBe(402);
      refusal = await res.json();
    }
    await gw.app.services.settled();
  }
  return { answered, refusal };
}

/** One gateway for a test file; `options` is read when it starts, after the file's upstream has. */
export function useGateway(options: () => GatewayOptions): Gateway {
  return fileFixture("the gateway", () => startGateway(options()), (gw) => gw.stop());
}

/** The real app on a loopback port, in front of the fake upstream, with one funded account. */
export async function startGateway(o: GatewayOptions): Promise<Gateway> {
  const dir = o.dbPath ? undefined : mkdtempSync(join(tmpdir(), "switchyard-test-"));
  const dbPath = o.dbPath ?? join(dir!, "gateway.sqlite");
  const db = openDatabase(dbPath, { busyTimeoutMs: 0 });
  const timeouts = { first_byte_ms: o.firstByteMs ?? 10_000, whole_answer_ms: o.wholeAnswerMs ?? o.firstByteMs ?? 10_000, idle_ms: o.idleMs ?? 30_000, total_ms: o.totalMs ?? 600_000 };
  const settings = resolveSettings(
    {
      providers: [
        { id: "fake-openai", kind: "openai", base_url: `${o.upstreamUrl}/v1`, ...(o.openaiKeys ? { keys: o.openaiKeys } : { api_key_env: "TEST_OPENAI_KEY" }), timeouts },
        { id: "fake-anthropic", kind: "anthropic", base_url: o.upstreamUrl, ...(o.anthropicKeys ? { keys: o.anthropicKeys } : { api_key_env: "TEST_ANTHROPIC_KEY" }), timeouts },
        ...(o.extraProviders ?? []),
      ],
      models: [
        { id: OPENAI_MODEL, provider: "fake-openai", upstream_model: "gpt-4o-mini", category: "text", context_length: 128_000, owned_by: "openai", pricing: OPENAI_PRICING },
        { id: ANTHROPIC_MODEL, provider: "fake-anthropic", upstream_model: "claude-sonnet-4-5", category: "text", context_length: 200_000, owned_by: "anthropic", pricing: ANTHROPIC_PRICING },
        { id: FREE_MODEL, provider: "fake-openai", upstream_model: "free-model", category: "free", context_length: 8192 },
        { id: IMAGES_API_MODEL, provider: "fake-openai", upstream_model: "dall-e-3", upstream_api: "images", category: "image", context_length: 4000, pricing: { input_per_mtok: 0, output_per_mtok: 0, per_image: 0.5 } },
        { id: IMAGE_CHAT_MODEL, provider: "fake-openai", upstream_model: "flux-chat", category: "image", context_length: 32000, pricing: { input_per_mtok: 100, output_per_mtok: 100, per_image: 0.25 } },
        ...(o.extraModels ?? []),
      ],
      server: { keepalive_ms: o.keepaliveMs ?? 15_000, ...(o.clientIdleMs ? { client_idle_ms: o.clientIdleMs } : {}), connection_idle_ms: (o.idleTimeoutSeconds ?? 10) * 1000, ...o.server },
      limits: { requests_per_minute: o.requestsPerMinute ?? 1_000_000, ...(o.maxFrameBytes ? { max_frame_bytes: o.maxFrameBytes } : {}), ...(o.maxImageBytes ? { max_image_bytes: o.maxImageBytes } : {}), ...(o.imageFetchTimeoutMs ? { image_fetch_timeout_ms: o.imageFetchTimeoutMs } : {}), ...(o.maxResponseBytes ? { max_response_bytes: o.maxResponseBytes } : {}), ...(o.maxConcurrentRequests ? { max_concurrent_requests: o.maxConcurrentRequests } : {}), ...o.limits },
      retry: o.retry ?? {},
      ...(o.responses ? { responses: o.responses } : {}),
      ...(o.alerts ? { alerts: o.alerts } : {}),
    },
    { TEST_OPENAI_KEY: o.vendorKeys?.openai ?? VENDOR_OPENAI_KEY, TEST_ANTHROPIC_KEY: o.vendorKeys?.anthropic ?? VENDOR_ANTHROPIC_KEY, SWITCHYARD_ALERT_SECRET: o.alertSecret, ...o.vendorEnv },
    "test",
  );
  const app = createApp({ db, settings, log: o.log ?? silentLogger, adminToken: o.adminToken, adminAuthFailures: o.adminAuthFailures, keyAuthFailures: o.keyAuthFailures, fetch: o.fetch, now: o.now, ledgerOptions: o.ledgerOptions, wrapLedger: o.wrapLedger, stores: o.stores, limiter: o.limiter, concurrency: o.concurrency, ops: o.ops, responseStore: o.responseStore, alertPollMs: o.alerts ? 100 : undefined, tokenizer: TOKENIZER, keyState: o.keyState, keyRandom: o.keyRandom, keyProbeEveryMs: o.keyProbeEveryMs, consoleSignIns: o.consoleSignIns, consolePasswordCost: o.consolePasswordCost === "default" ? undefined : (o.consolePasswordCost ?? TEST_PASSWORD_COST), embeddingsThread: o.embeddingsThread, upstreamViaProxy: o.upstreamViaProxy, parseTurnMaxHoldMs: o.parseTurnMaxHoldMs });
  const account = await app.services.accounts.createAccount("test", Math.round((o.credits ?? 1000) * 1e6));
  const key = (await app.services.accounts.createKey(account.id, "test"))!;
  app.listen({ port: 0, hostname: "127.0.0.1", idleTimeout: connectionIdleSeconds(settings), maxRequestBodySize: SERVER_BODY_LIMIT });
  const server = app.server!;
  return {
    url: `http://127.0.0.1:${server.port}`,
    key: key.key,
    keyId: key.id,
    accountId: account.id,
    app,
    dbPath,
    db,
    async balanceMicro() {
      await app.services.settled();
      if (o.stores) return (await app.services.ledger.balance(account.id))!.balanceMicro;
      return db.query<{ b: number }, [string]>("SELECT balance_micro AS b FROM accounts WHERE id = ?").get(account.id)!.b;
    },
    async stop(options = {}) {
      await app.stop(true);
      await app.services.settled();
      await app.services.alerts?.checked();
      await app.services.alerts?.stop();
      await app.services.ledger.close(options.ledgerGraceMs);
      db.close();
      if (dir) rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** POST JSON with the gateway key. */
export function post(gw: Gateway, path: string, body: unknown, headers: Record<string, string> = {}, signal?: AbortSignal): Promise<Response> {
  return fetch(gw.url + path, {
    method: "POST",
    headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
    signal,
  });
}

/**
 * A client that reads a streamed answer until `seen` is in it, then leaves (aborts and cancels
 * its read); resolves once the gateway has let the request go and settled it.
 */
export async function leaveAfter(gw: Gateway, res: Response, leave: AbortController, seen: string): Promise<void> {
  const reader = res.body!.getReader();
  let text = "";
  while (!text.includes(seen)) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`the answer ended unread: ${text.slice(-300)}`);
    text += new TextDecoder().decode(value);
  }
  leave.abort();
  await reader.cancel().catch(() => {});
  for (const until = Date.now() + 5_000; gw.app.services.inflight.count > 0 && Date.now() < until; ) await Bun.sleep(10);
  await gw.app.services.settled();
}

/** Splits an SSE body into {event, data} frames, for assertions (not the parser under test). */
export function sseFrames(text: string): { event?: string; data: string }[] {
  return text
    .split(/\r?\n\r?\n/)
    .filter((block) => block.trim() !== "" && !block.startsWith(":"))
    .map((block) => {
      const lines = block.split(/\r?\n/);
      const event = lines.find((l) => l.startsWith("event: "))?.slice(7);
      const data = lines.filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
      return { event, data };
    });
}

/**
 * What one request cost: the balance it took (after `send`'s answer is read whole) and the prices
 * its usage record names; the record's cost is checked against the balance's move.
 */
export async function chargeOf(gw: Gateway, send: () => Promise<Response>): Promise<{ micro: number; prices: Record<string, number> }> {
  const before = await gw.balanceMicro();
  const res = await send();
  if (res.status !== 200) throw new Error(`expected 200, got ${res.status}: ${await res.text()}`);
  await res.arrayBuffer();
  const micro = before - (await gw.balanceMicro());
  const db = new Database(gw.dbPath, { readonly: true });
  try {
    const row = db.query<{ cost_micro: number; prices: string }, []>("SELECT u.cost_micro, p.prices FROM usage_records u JOIN price_lists p ON p.id = u.price_id ORDER BY u.id DESC LIMIT 1").get()!;
    if (row.cost_micro !== micro) throw new Error(`the record says ${row.cost_micro} micro-credits, the balance moved ${micro}`);
    return { micro, prices: JSON.parse(row.prices) };
  } finally {
    db.close();
  }
}

