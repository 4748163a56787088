import { isSqliteUnavailable } from "./sqlite/sqlite-errors.ts";
import type { AccountStore } from "../accounts/account-store.ts";
import { createCachedKeyResolver, type KeyResolver } from "../accounts/key-resolver.ts";
import type { Ledger, RejectionLog, Settlement } from "../billing/ledger.ts";
import type { AlertOutbox } from "../alerts/alert-outbox.ts";
import type { UsageBreakdown, UsageReporter } from "../billing/usage-report.ts";
import type { Settings } from "../config/load-config.ts";
import type { RateLimitStore } from "../limits/rate-limiter.ts";
import type { Logger } from "../log/log.ts";
import { createPostgresAccounts } from "./postgres/pg-accounts.ts";
import { createPostgresAlertOutbox } from "./postgres/pg-alert-outbox.ts";
import { connectPostgres, isPgUnavailable, type Pg, type PgOptions } from "./postgres/pg-client.ts";
import { createPostgresLedger, type PgLedgerOptions } from "./postgres/pg-ledger.ts";
import { migratePostgres } from "./postgres/pg-migrations.ts";
import { createPostgresConsoleStore } from "./postgres/pg-console-store.ts";
import type { ConsoleStore } from "../console/console-store.ts";
import { createPostgresUsageBreakdown, createPostgresUsageReport } from "./postgres/pg-reports.ts";
import { createRedisRateLimiter, type RedisRateLimiterOptions } from "./redis/redis-rate-limiter.ts";
import { createRedisConcurrency, type RedisConcurrencyOptions } from "./redis/redis-concurrency.ts";
import type { ConcurrencyStore } from "../limits/concurrency-limiter.ts";
import type { RedisClient } from "bun";
import { createRedisResponseStore } from "./redis/redis-response-store.ts";
import type { ResponseStore } from "../formats/openai-responses/response-store.ts";

/** The shared stores app.ts takes instead of building SQLite ones. */
export interface SharedStores {
  accounts: AccountStore;
  keys: KeyResolver;
  ledger: Ledger & RejectionLog;
  usage: UsageReporter;
  breakdown: UsageBreakdown;
  /** The console's sessions, logins and invites, in the same database (console/console-store.ts). */
  console?: ConsoleStore;
  /** Spend alerts waiting for delivery, in the same database (alerts/alert-outbox.ts). */
  alertOutbox?: AlertOutbox;
  /** Sets who is told of the ledger's committed settlements (spend alerts' detection). */
  onCommitted?(listener: (settlements: Settlement[]) => void): void;
  /** Writes what is queued (within `graceMs`), then closes the pool. */
  close(graceMs?: number): Promise<void>;
}

export interface PostgresStoreOptions {
  now?: () => number;
  log?: Logger;
  pool?: PgOptions;
  ledger?: Omit<PgLedgerOptions, "now" | "log">;
  /** How long a key lookup is trusted before it is read again (a revoke elsewhere takes effect within this). */
  keyCacheMs?: number;
}

/**
 * Opens PostgreSQL, migrates it (idempotently, under an advisory lock, so several processes may
 * start at once on an empty database) and builds the ledger, accounts, key resolver and usage
 * report on one pool.
 */
export async function openPostgresStores(url: string, o: PostgresStoreOptions = {}): Promise<SharedStores & { sql: Pg }> {
  const now = o.now ?? Date.now;
  const sql = connectPostgres(url, o.pool);
  try {
    await migratePostgres(sql);
    const accounts = createPostgresAccounts(sql, now);
    let committedListener: ((settlements: Settlement[]) => void) | undefined;
    const ledger = await createPostgresLedger(sql, { now, log: o.log, ...o.ledger, onCommitted: (settlements) => committedListener?.(settlements) });
    return {
      sql,
      accounts,
      alertOutbox: createPostgresAlertOutbox(sql),
      console: createPostgresConsoleStore(sql),
      onCommitted(listener) {
        committedListener = listener;
      },
      keys: createCachedKeyResolver(accounts, now, { ttlMs: o.keyCacheMs }),
      ledger,
      usage: createPostgresUsageReport(sql),
      breakdown: createPostgresUsageBreakdown(sql),
      async close(graceMs?: number) {
        await ledger.close(graceMs);
        await sql.close({ timeout: 1 });
      },
    };
  } catch (err) {
    await sql.close({ timeout: 0 }).catch(() => {});
    throw err;
  }
}

/** Holds outlive the longest an upstream may take (any provider's total timeout) by a minute. */
export function holdTtlFor(settings: Settings): number {
  let longest = 0;
  for (const provider of settings.providers.values()) longest = Math.max(longest, provider.timeouts.total_ms);
  return longest + 60_000;
}

/** The Responses API's stored answers in Redis, bounded by the config's `responses` section. */
export function openRedisResponseStore(url: string, settings: Settings, o: { log?: Logger; prefix?: string } = {}): ResponseStore & { close(): void; ready(): Promise<boolean> } {
  const r = settings.responses;
  return createRedisResponseStore(url, { ...o, maxBytes: r.store_max_bytes, accountMaxBytes: r.account_max_bytes, answerMaxBytes: r.answer_max_bytes, ttlMs: r.store_ttl_ms, now: Date.now });
}

export function openRedisLimiter(url: string, o: RedisRateLimiterOptions = {}): RateLimitStore & { close(): void; ready(): Promise<boolean>; health(): { reachable: boolean }; client: RedisClient } {
  return createRedisRateLimiter(url, o);
}

/** Requests under way per key, shared through the rate limiter's Redis connection (one connection per process). */
export function openRedisConcurrency(limiter: { client: RedisClient }, o: RedisConcurrencyOptions = {}): ConcurrencyStore & { close(waitMs?: number): Promise<void> } {
  return createRedisConcurrency(limiter.client, o);
}

/** Bun's Redis client's codes for a connection that failed or timed out (not a command Redis refused). */
const REDIS_DOWN = /^ERR_REDIS_(CONNECTION_CLOSED|CONNECTION_TIMEOUT|IDLE_TIMEOUT|AUTHENTICATION_FAILED|TLS)/;

/**
 * Whether an error a route let through says a shared store cannot be used right now (PostgreSQL
 * unreachable, slow, read-only; Redis down): the errors plugin answers 503 with Retry-After.
 */
export function isStoreUnavailable(err: unknown): boolean {
  if (isPgUnavailable(err) || isSqliteUnavailable(err)) return true;
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" && REDIS_DOWN.test(code);
}
