import type { AccountStore } from "../accounts/account-store.ts";
import { createCachedKeyResolver, type KeyResolver } from "../accounts/key-resolver.ts";
import type { Ledger, RejectionLog } from "../billing/ledger.ts";
import type { UsageBreakdown, UsageReporter } from "../billing/usage-report.ts";
import type { Settings } from "../config/load-config.ts";
import type { RateLimitStore } from "../limits/rate-limiter.ts";
import type { Logger } from "../log.ts";
import { createPostgresAccounts } from "./postgres/pg-accounts.ts";
import { connectPostgres, type Pg, type PgOptions } from "./postgres/pg-client.ts";
import { createPostgresLedger, type PgLedgerOptions } from "./postgres/pg-ledger.ts";
import { migratePostgres } from "./postgres/pg-migrations.ts";
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
    const ledger = await createPostgresLedger(sql, { now, log: o.log, ...o.ledger });
    return {
      sql,
      accounts,
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
