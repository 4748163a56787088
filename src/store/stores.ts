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
import { connectPostgres, type Pg, type PgOptions } from "./postgres/pg-client.ts";
import { createPostgresLedger, type PgLedgerOptions } from "./postgres/pg-ledger.ts";
import { migratePostgres } from "./postgres/pg-migrations.ts";
import { createPostgresUsageBreakdown, createPostgresUsageReport } from "./postgres/pg-reports.ts";
import { createRedisRateLimiter, type RedisRateLimiterOptions } from "./redis/redis-rate-limiter.ts";

/** The shared stores app.ts takes instead of building SQLite ones. */
export interface SharedStores {
  accounts: AccountStore;
  keys: KeyResolver;
  ledger: Ledger & RejectionLog;
  usage: UsageReporter;
  breakdown: UsageBreakdown;
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
