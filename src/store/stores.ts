import type { AccountStore } from "../accounts/account-store.ts";
import { createCachedKeyResolver, type KeyResolver } from "../accounts/key-resolver.ts";
import type { Ledger, RejectionLog, Settlement } from "../billing/ledger.ts";
import type { AlertOutbox } from "../alerts/alert-outbox.ts";
import type { UsageBreakdown, UsageReporter } from "../billing/usage-report.ts";
import type { Settings } from "../config/load-config.ts";
import type { RateLimitStore } from "../limits/rate-limiter.ts";
import type { Logger } from "../log.ts";
import { createPostgresAccounts } from "./postgres/pg-accounts.ts";
import { createPostgresAlertOutbox } from "./postgres/pg-alert-outbox.ts";
import { connectPostgres, type Pg, type PgOptions } from "./postgres/pg-client.ts";
import { createPostgresLedger, type PgLedgerOptions } from "./postgres/pg-ledger.ts";
import { migratePostgres } from "./postgres/pg-migrations.ts";
import { createPostgresConsoleStore } from "./postgres/pg-console-store.ts";
import type { ConsoleStore } from "../console/console-store.ts";
import { createPostgresUsageBreakdown, createPostgresUsageReport } from "./postgres/pg-reports.ts";
import { createRedisRateLimiter, type RedisRateLimiterOptions } from "./redis/redis-rate-limiter.ts";

/**
 * Where money and limits live, chosen by configuration:
 * - `SWITCHYARD_DATABASE_URL=postgres://…`: PostgreSQL for accounts, keys, balances, holds and
 *   usage records (several gateway processes share it); otherwise the SQLite file
 *   (`SWITCHYARD_DB`), which app.ts builds itself, as fast as before.
 * - `SWITCHYARD_REDIS_URL=redis://host:port[/db]`: Redis for rate limits; otherwise in-process
 *   buckets (each process limits alone).
 */
export interface StoreChoice {
  databaseUrl?: string;
  redisUrl?: string;
}

export class StoreConfigError extends Error {}

export function storeChoice(env: Record<string, string | undefined>): StoreChoice {
  const databaseUrl = env.SWITCHYARD_DATABASE_URL?.trim() || undefined;
  const redisUrl = env.SWITCHYARD_REDIS_URL?.trim() || undefined;
  if (databaseUrl && !/^postgres(ql)?:\/\//.test(databaseUrl)) {
    throw new StoreConfigError("SWITCHYARD_DATABASE_URL must be a postgres:// (or postgresql://) URL");
  }
  if (redisUrl && !/^rediss?:\/\//.test(redisUrl)) throw new StoreConfigError("SWITCHYARD_REDIS_URL must be a redis:// (or rediss://) URL");
  return { databaseUrl, redisUrl };
}

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

export function openRedisLimiter(url: string, o: RedisRateLimiterOptions = {}): RateLimitStore & { close(): void; ready(): Promise<boolean>; health(): { reachable: boolean } } {
  return createRedisRateLimiter(url, o);
}

/**
 * Heartbeat and sweep timings of the PostgreSQL ledger from the environment (defaults: heartbeat
 * 2 s, a process silent 30 s is dead, sweeps every 10 s). Shorter timings release a dead
 * process's holds sooner at the price of more statements; tests shorten them.
 */
export function ledgerTimingsFrom(env: Record<string, string | undefined>): Pick<PgLedgerOptions, "heartbeatMs" | "staleAfterMs" | "sweepIntervalMs"> {
  const read = (name: string): number | undefined => {
    const raw = env[name]?.trim();
    if (!raw) return undefined;
    if (!/^\d+$/.test(raw) || Number(raw) < 10) throw new StoreConfigError(`${name} must be a whole number of milliseconds, at least 10 (got "${raw}")`);
    return Number(raw);
  };
  const timings = { heartbeatMs: read("SWITCHYARD_PG_HEARTBEAT_MS"), staleAfterMs: read("SWITCHYARD_PG_STALE_AFTER_MS"), sweepIntervalMs: read("SWITCHYARD_PG_SWEEP_MS") };
  const heartbeat = timings.heartbeatMs ?? 2_000;
  const stale = timings.staleAfterMs ?? 30_000;
  if (stale < heartbeat * 3) throw new StoreConfigError(`SWITCHYARD_PG_STALE_AFTER_MS (${stale}) must be at least three heartbeats (SWITCHYARD_PG_HEARTBEAT_MS, ${heartbeat}): a live process must never look dead`);
  return Object.fromEntries(Object.entries(timings).filter(([, v]) => v !== undefined));
}
