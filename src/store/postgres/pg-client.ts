import { SQL } from "bun";

/**
 * One pool of Bun.SQL connections to the database `SWITCHYARD_DATABASE_URL` names, and what a
 * failed statement means. Every statement the gateway sends is bounded twice: by PostgreSQL
 * (`statement_timeout`, `lock_timeout`, sent as connection parameters) and by a timer here, so a
 * server that stops answering (a partition, a stuck failover) costs a request its timeout, never
 * a hang.
 */
export interface PgOptions {
  /** Connections in the pool (Bun.SQL pipelines statements on each). */
  max?: number;
  /** Longest any one statement may take, on the server and on our side. */
  statementTimeoutMs?: number;
  /** Longest to wait for a connection. */
  connectTimeoutMs?: number;
  /** Shown in pg_stat_activity, so an operator can tell gateways from other clients. */
  applicationName?: string;
}

export type Pg = SQL;

export function connectPostgres(url: string, o: PgOptions = {}): Pg {
  const statementTimeoutMs = o.statementTimeoutMs ?? 5_000;
  const max = o.max ?? 8;
  const sql = new SQL({
    url,
    max,
    idleTimeout: 60,
    // No connection lives forever: one a failover left on the wrong server is gone within this
    // even if nothing else notices (recycleIfStale does when a statement says so).
    maxLifetime: MAX_LIFETIME_SECONDS,
    connectionTimeout: Math.max(1, Math.ceil((o.connectTimeoutMs ?? 2_000) / 1_000)),
    connection: {
      application_name: o.applicationName ?? "switchyard",
      statement_timeout: statementTimeoutMs,
      // A row lock held elsewhere is waited for only this long (less than the ledger's own 2 s
      // bound, so a hot account reads as a lock conflict to retry, not as a database gone).
      lock_timeout: Math.min(1_000, Math.max(100, Math.floor(statementTimeoutMs / 2))),
      idle_in_transaction_session_timeout: statementTimeoutMs * 2,
    },
  });
  let recycling = false;
  RECYCLERS.set(sql, () => {
    if (recycling) return;
    recycling = true;
    void (async () => {
      try {
        // Each connection the pool hands out is closed; the pool opens new ones as statements need them.
        for (let i = 0; i < max; i++) {
          const connection = await sql.reserve({ signal: AbortSignal.timeout(1_000) });
          await connection.close({ timeout: 0 });
        }
      } catch {
        // Closed, or every connection busy: the next stale answer tries again.
      } finally {
        recycling = false;
      }
    })();
  });
  return sql;
}

const MAX_LIFETIME_SECONDS = 15 * 60;
const RECYCLERS = new WeakMap<Pg, () => void>();

/**
 * A statement refused because its connection's session can no longer write (25006: a failover
 * left it on a server that became read-only, or a standby) or its server is going away (57P0x):
 * the pool's connections are closed and opened again, since each keeps its session's state until
 * it is closed. Without this, after a failover whose new primary is reached only by new
 * connections, every write kept failing on the old ones (the heartbeat keeps them from idling out)
 * and paid traffic stayed at 503 until a restart (a scale-out probe, 2026-11-30).
 */
export function recycleIfStale(sql: Pg, err: unknown): void {
  const state = sqlState(err);
  if (state === "25006" || state.startsWith("57P")) RECYCLERS.get(sql)?.();
}

export class PgTimeoutError extends Error {
  readonly code = "ERR_SWITCHYARD_PG_TIMEOUT";
}

/** Rejects when `ms` pass first; the statement may still run (the server's own timeout ends it). */
export function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new PgTimeoutError(`${what}: no answer from PostgreSQL within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/**
 * What a failed statement means for the data it carried (the same three kinds as SQLite's,
 * store/sqlite/sqlite-errors.ts):
 * - `busy`: a serialization failure, a deadlock, a lock wait that timed out — the same
 *   statement will succeed if sent again;
 * - `storage`: PostgreSQL cannot be reached or cannot take writes (connection refused or lost,
 *   shutting down, read-only, disk full, our own timeout) — keep the data, retry with backoff;
 * - `data`: this statement can never succeed as it is (a constraint, a bad value) — split the
 *   batch to find the one record.
 */
export type PgFailure = "busy" | "storage" | "data";

export function sqlState(err: unknown): string {
  const errno = (err as { errno?: unknown })?.errno;
  return typeof errno === "string" && /^[0-9A-Z]{5}$/.test(errno) ? errno : "";
}

export function classifyPgFailure(err: unknown): PgFailure {
  const state = sqlState(err);
  if (state === "40001" || state === "40P01" || state === "55P03") return "busy";
  if (state.startsWith("23") || state.startsWith("22")) return "data";
  // Connection errors (08), shutdown (57P0x), resources (53), read-only (25006), our timeout,
  // and anything from the driver itself: nothing says the data is at fault, so keep it.
  return "storage";
}

export function describePgFailure(err: unknown): string {
  const state = sqlState(err);
  const code = (err as { code?: unknown })?.code;
  const message = err instanceof Error ? err.message : String(err);
  return [typeof code === "string" ? code : "", state, message].filter(Boolean).join(": ");
}

/** int8 columns arrive as strings (Bun.SQL's default); money fits a double exactly below 2^53. */
export const int = (value: unknown): number => (value === null || value === undefined ? 0 : Number(value));

/** Bun.SQL's codes for a connection that failed (not a statement the server refused). */
const CONNECTION_CODES = new Set(["ERR_POSTGRES_CONNECTION_CLOSED", "ERR_POSTGRES_CONNECTION_REFUSED", "ERR_POSTGRES_CONNECTION_TIMEOUT", "ERR_POSTGRES_IDLE_TIMEOUT", "ERR_POSTGRES_LIFETIME_TIMEOUT", "ERR_POSTGRES_QUERY_CANCELLED", "ERR_SWITCHYARD_PG_TIMEOUT"]);

/**
 * Whether an error says PostgreSQL cannot be used right now (unreachable, too slow, read-only,
 * shutting down, out of resources, a lock held elsewhere), not that the statement was wrong: what
 * failed may work in a few seconds, and the client is told so (503), not that the gateway broke.
 */
export function isPgUnavailable(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code === "string" && CONNECTION_CODES.has(code)) return true;
  const state = sqlState(err);
  // Connection (08), resources (53), shutdown (57), read-only (25006), or a lock conflict (classifyPgFailure's "busy").
  return /^(?:08|53|57)/.test(state) || state === "25006" || (state !== "" && classifyPgFailure(err) === "busy");
}
