import type { Pg } from "./pg-client.ts";

/**
 * The PostgreSQL schema, append-only like SQLite's (store/database.ts): a shipped version is
 * never edited. Money is bigint micro-credits; times are epoch milliseconds (bigint), written by
 * the gateway for records and by the database's clock (`DB_NOW_MS`) for everything processes
 * compare with each other (hold expiry, heartbeats), so clock skew between hosts cannot free a
 * live hold.
 *
 * `held_micro` on accounts and keys is the sum of their open holds, kept in the same statement
 * that inserts or deletes a hold; the CHECK constraints are what make a reservation fail when
 * funds are short (see docs/decisions.md, "PostgreSQL").
 */
/** The trigger's sums of the inserted records (`added`) per period, account, key and model, in the rollups' column order. */
const ROLLUP_SELECT = (size: number) =>
  `SELECT (created_at / ${size}) * ${size} AS t, account_id, key_id, model, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens),
          SUM(COALESCE(fresh_input_tokens, prompt_tokens)), SUM(cache_read_tokens), SUM(cache_write_5m_tokens), SUM(cache_write_1h_tokens),
          SUM(reasoning_tokens), SUM(images), SUM(cost_micro), SUM(cache_savings_micro), COUNT(*) FILTER (WHERE estimated)
     FROM added GROUP BY 1, 2, 3, 4 ORDER BY t, account_id COLLATE "C", key_id COLLATE "C", model COLLATE "C"`;

/** What the trigger adds to a rollup row that is there already. */
const ROLLUP_ADD = (table: "usage_hourly" | "usage_daily") =>
  ["requests", "prompt_tokens", "completion_tokens", "fresh_input_tokens", "cache_read_tokens", "cache_write_5m_tokens", "cache_write_1h_tokens",
    "reasoning_tokens", "images", "cost_micro", "cache_savings_micro", "estimated_requests"].map((c) => `${c} = ${table}.${c} + excluded.${c}`).join(", ");

const MIGRATIONS: string[] = [
  `CREATE TABLE accounts (
     id text PRIMARY KEY,
     name text NOT NULL,
     balance_micro bigint NOT NULL CONSTRAINT accounts_balance_nonnegative CHECK (balance_micro >= 0),
     held_micro bigint NOT NULL DEFAULT 0 CONSTRAINT accounts_held_nonnegative CHECK (held_micro >= 0),
     created_at bigint NOT NULL,
     CONSTRAINT accounts_holds_covered CHECK (balance_micro - held_micro >= 0)
   );
   CREATE INDEX accounts_name ON accounts (name, created_at);
   CREATE TABLE api_keys (
     id text PRIMARY KEY,
     account_id text NOT NULL REFERENCES accounts (id),
     name text,
     key_hash text NOT NULL UNIQUE,
     key_prefix text NOT NULL,
     key_last4 text NOT NULL,
     created_at bigint NOT NULL,
     revoked_at bigint,
     rate_limit_per_minute integer,
     expires_at bigint,
     spend_limit_micro bigint,
     spent_micro bigint NOT NULL DEFAULT 0,
     held_micro bigint NOT NULL DEFAULT 0 CONSTRAINT api_keys_held_nonnegative CHECK (held_micro >= 0),
     CONSTRAINT api_keys_holds_within_limit CHECK (spend_limit_micro IS NULL OR spent_micro + held_micro <= spend_limit_micro)
   );
   CREATE INDEX api_keys_account ON api_keys (account_id);
   CREATE TABLE gateway_instances (
     id text PRIMARY KEY,
     hostname text NOT NULL,
     pid integer NOT NULL,
     started_at bigint NOT NULL,
     heartbeat_at bigint NOT NULL
   );
   CREATE TABLE holds (
     request_id text PRIMARY KEY,
     account_id text NOT NULL REFERENCES accounts (id),
     key_id text NOT NULL,
     amount_micro bigint NOT NULL CHECK (amount_micro >= 0),
     instance_id text NOT NULL,
     created_at bigint NOT NULL,
     expires_at bigint NOT NULL
   );
   CREATE INDEX holds_account ON holds (account_id);
   CREATE INDEX holds_instance ON holds (instance_id);
   CREATE INDEX holds_expiry ON holds (expires_at);
   CREATE TABLE usage_records (
     id bigserial PRIMARY KEY,
     request_id text NOT NULL UNIQUE,
     account_id text NOT NULL,
     key_id text NOT NULL,
     model text NOT NULL,
     provider text NOT NULL,
     prompt_tokens bigint NOT NULL,
     completion_tokens bigint NOT NULL,
     estimated boolean NOT NULL,
     cost_micro bigint NOT NULL,
     status text NOT NULL,
     latency_ms integer NOT NULL,
     created_at bigint NOT NULL
   );
   CREATE INDEX usage_account_time ON usage_records (account_id, created_at);
   CREATE TABLE rejection_counts (
     key_id text NOT NULL,
     minute bigint NOT NULL,
     status integer NOT NULL,
     count bigint NOT NULL,
     PRIMARY KEY (key_id, minute, status)
   );
   CREATE TABLE credit_entries (
     id bigserial PRIMARY KEY,
     account_id text NOT NULL REFERENCES accounts (id),
     amount_micro bigint NOT NULL,
     kind text NOT NULL,
     created_at bigint NOT NULL
   );
   CREATE INDEX credit_entries_account ON credit_entries (account_id);`,
  // The request's x-request-id beside its record (store/database.ts has the same column).
  `ALTER TABLE usage_records ADD COLUMN client_request_id text;`,
  // Spend limits that reset by period (store/database.ts has the same columns and says what they mean).
  `ALTER TABLE api_keys
     ADD COLUMN spend_limit_period text CONSTRAINT api_keys_spend_limit_period CHECK (spend_limit_period IN ('day', 'week', 'month')),
     ADD COLUMN period_spent_micro bigint NOT NULL DEFAULT 0,
     ADD COLUMN period_start bigint NOT NULL DEFAULT 0;
   UPDATE api_keys SET period_spent_micro = spent_micro;
   ALTER TABLE accounts
     ADD COLUMN spend_limit_micro bigint,
     ADD COLUMN spend_limit_period text CONSTRAINT accounts_spend_limit_period CHECK (spend_limit_period IN ('day', 'week', 'month')),
     ADD COLUMN period_spent_micro bigint NOT NULL DEFAULT 0,
     ADD COLUMN period_start bigint NOT NULL DEFAULT 0;
   UPDATE accounts a SET period_spent_micro = COALESCE((SELECT SUM(u.cost_micro) FROM usage_records u WHERE u.account_id = a.id), 0);`,
  // Token classes and the prices charged (store/database.ts has the same columns and says why).
  `ALTER TABLE usage_records ADD COLUMN fresh_input_tokens bigint;
   ALTER TABLE usage_records ADD COLUMN cache_read_tokens bigint NOT NULL DEFAULT 0;
   ALTER TABLE usage_records ADD COLUMN cache_write_5m_tokens bigint NOT NULL DEFAULT 0;
   ALTER TABLE usage_records ADD COLUMN cache_write_1h_tokens bigint NOT NULL DEFAULT 0;
   ALTER TABLE usage_records ADD COLUMN reasoning_tokens bigint NOT NULL DEFAULT 0;
   ALTER TABLE usage_records ADD COLUMN images integer NOT NULL DEFAULT 0;
   ALTER TABLE usage_records ADD COLUMN price_id bigint;
   ALTER TABLE usage_records ADD COLUMN held_micro bigint;
   ALTER TABLE usage_records ADD COLUMN cache_savings_micro bigint NOT NULL DEFAULT 0;
   CREATE TABLE price_lists (id bigint PRIMARY KEY, prices text NOT NULL, created_at bigint NOT NULL);`,
  // Spend limits count a period's charges now, and an operator may lower a limit below what was
  // spent: a CHECK on lifetime spending fits neither. Reservations test the period's room under
  // the row lock instead (pg-ledger.ts, RESERVE_MANY).
  `ALTER TABLE api_keys DROP CONSTRAINT api_keys_holds_within_limit;`,
  // Spend alerts' outbox (store/database.ts has the same table and says what it means).
  // next_attempt_at is on the database's clock (DB_NOW_MS): leases are compared across processes.
  `CREATE TABLE alert_outbox (
     id bigserial PRIMARY KEY,
     event_id text NOT NULL UNIQUE,
     dedupe_key text NOT NULL UNIQUE,
     type text NOT NULL,
     body text NOT NULL,
     created_at bigint NOT NULL,
     attempts integer NOT NULL DEFAULT 0,
     next_attempt_at bigint NOT NULL DEFAULT 0,
     delivered_at bigint,
     last_error text
   );
   CREATE INDEX alert_outbox_due ON alert_outbox (next_attempt_at) WHERE delivered_at IS NULL;`,
  // Idempotent top-ups (store/database.ts has the same column and says why). A plain unique index
  // (NULLs are distinct): INSERT … ON CONFLICT (idempotency_key) needs one without a predicate.
  `ALTER TABLE credit_entries ADD COLUMN idempotency_key text;
   CREATE UNIQUE INDEX credit_entries_idempotency ON credit_entries (idempotency_key);`,
  // Client keys limited to models, and a key's cap on requests at once (store/database.ts has the
  // same columns and says what they mean). The list is JSON text, read by the same code as SQLite's.
  `ALTER TABLE api_keys ADD COLUMN allowed_models text;
   ALTER TABLE api_keys ADD COLUMN max_concurrent_requests integer;`,
  // The console (store/database.ts has the same tables and says why). The hourly and daily sums are
  // kept by a statement-level trigger: one upsert per (period, account, key, model) a batch of
  // settlements touches, in key order, so two processes' batches never take those rows' locks in
  // opposite orders (a row-level trigger could deadlock them).
  `CREATE TABLE usage_hourly (
     hour bigint NOT NULL,
     account_id text NOT NULL,
     key_id text NOT NULL,
     model text NOT NULL,
     requests bigint NOT NULL,
     prompt_tokens bigint NOT NULL,
     completion_tokens bigint NOT NULL,
     fresh_input_tokens bigint NOT NULL,
     cache_read_tokens bigint NOT NULL,
     cache_write_5m_tokens bigint NOT NULL,
     cache_write_1h_tokens bigint NOT NULL,
     reasoning_tokens bigint NOT NULL,
     images bigint NOT NULL,
     cost_micro bigint NOT NULL,
     cache_savings_micro bigint NOT NULL,
     PRIMARY KEY (hour, account_id, key_id, model)
   );
   CREATE INDEX usage_hourly_account ON usage_hourly (account_id, hour);
   CREATE TABLE usage_daily (
     day bigint NOT NULL,
     account_id text NOT NULL,
     key_id text NOT NULL,
     model text NOT NULL,
     requests bigint NOT NULL,
     prompt_tokens bigint NOT NULL,
     completion_tokens bigint NOT NULL,
     fresh_input_tokens bigint NOT NULL,
     cache_read_tokens bigint NOT NULL,
     cache_write_5m_tokens bigint NOT NULL,
     cache_write_1h_tokens bigint NOT NULL,
     reasoning_tokens bigint NOT NULL,
     images bigint NOT NULL,
     cost_micro bigint NOT NULL,
     cache_savings_micro bigint NOT NULL,
     PRIMARY KEY (day, account_id, key_id, model)
   );
   CREATE INDEX usage_daily_account ON usage_daily (account_id, day);
   INSERT INTO usage_hourly
     SELECT (created_at / 3600000) * 3600000, account_id, key_id, model, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens),
            SUM(COALESCE(fresh_input_tokens, prompt_tokens)), SUM(cache_read_tokens), SUM(cache_write_5m_tokens), SUM(cache_write_1h_tokens),
            SUM(reasoning_tokens), SUM(images), SUM(cost_micro), SUM(cache_savings_micro)
       FROM usage_records GROUP BY 1, 2, 3, 4;
   INSERT INTO usage_daily
     SELECT (created_at / 86400000) * 86400000, account_id, key_id, model, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens),
            SUM(COALESCE(fresh_input_tokens, prompt_tokens)), SUM(cache_read_tokens), SUM(cache_write_5m_tokens), SUM(cache_write_1h_tokens),
            SUM(reasoning_tokens), SUM(images), SUM(cost_micro), SUM(cache_savings_micro)
       FROM usage_records GROUP BY 1, 2, 3, 4;
   CREATE FUNCTION usage_rollups_add() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     INSERT INTO usage_hourly
       SELECT (created_at / 3600000) * 3600000 AS t, account_id, key_id, model, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), SUM(COALESCE(fresh_input_tokens, prompt_tokens)), SUM(cache_read_tokens), SUM(cache_write_5m_tokens), SUM(cache_write_1h_tokens), SUM(reasoning_tokens), SUM(images), SUM(cost_micro), SUM(cache_savings_micro)
         FROM added GROUP BY 1, 2, 3, 4 ORDER BY t, account_id COLLATE "C", key_id COLLATE "C", model COLLATE "C"
     ON CONFLICT (hour, account_id, key_id, model) DO UPDATE SET requests = usage_hourly.requests + excluded.requests, prompt_tokens = usage_hourly.prompt_tokens + excluded.prompt_tokens,
       completion_tokens = usage_hourly.completion_tokens + excluded.completion_tokens,
       fresh_input_tokens = usage_hourly.fresh_input_tokens + excluded.fresh_input_tokens,
       cache_read_tokens = usage_hourly.cache_read_tokens + excluded.cache_read_tokens,
       cache_write_5m_tokens = usage_hourly.cache_write_5m_tokens + excluded.cache_write_5m_tokens,
       cache_write_1h_tokens = usage_hourly.cache_write_1h_tokens + excluded.cache_write_1h_tokens,
       reasoning_tokens = usage_hourly.reasoning_tokens + excluded.reasoning_tokens, images = usage_hourly.images + excluded.images,
       cost_micro = usage_hourly.cost_micro + excluded.cost_micro,
       cache_savings_micro = usage_hourly.cache_savings_micro + excluded.cache_savings_micro;
     INSERT INTO usage_daily
       SELECT (created_at / 86400000) * 86400000 AS t, account_id, key_id, model, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), SUM(COALESCE(fresh_input_tokens, prompt_tokens)), SUM(cache_read_tokens), SUM(cache_write_5m_tokens), SUM(cache_write_1h_tokens), SUM(reasoning_tokens), SUM(images), SUM(cost_micro), SUM(cache_savings_micro)
         FROM added GROUP BY 1, 2, 3, 4 ORDER BY t, account_id COLLATE "C", key_id COLLATE "C", model COLLATE "C"
     ON CONFLICT (day, account_id, key_id, model) DO UPDATE SET requests = usage_daily.requests + excluded.requests, prompt_tokens = usage_daily.prompt_tokens + excluded.prompt_tokens,
       completion_tokens = usage_daily.completion_tokens + excluded.completion_tokens,
       fresh_input_tokens = usage_daily.fresh_input_tokens + excluded.fresh_input_tokens,
       cache_read_tokens = usage_daily.cache_read_tokens + excluded.cache_read_tokens,
       cache_write_5m_tokens = usage_daily.cache_write_5m_tokens + excluded.cache_write_5m_tokens,
       cache_write_1h_tokens = usage_daily.cache_write_1h_tokens + excluded.cache_write_1h_tokens,
       reasoning_tokens = usage_daily.reasoning_tokens + excluded.reasoning_tokens, images = usage_daily.images + excluded.images,
       cost_micro = usage_daily.cost_micro + excluded.cost_micro,
       cache_savings_micro = usage_daily.cache_savings_micro + excluded.cache_savings_micro;
     RETURN NULL;
   END $$;
   CREATE TRIGGER usage_rollups_add AFTER INSERT ON usage_records REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION usage_rollups_add();
   CREATE TABLE console_users (
     login text PRIMARY KEY,
     account_id text NOT NULL REFERENCES accounts (id),
     password_hash text NOT NULL,
     created_at bigint NOT NULL
   );
   CREATE TABLE console_invites (
     token_hash text PRIMARY KEY,
     account_id text NOT NULL REFERENCES accounts (id),
     login text NOT NULL,
     created_at bigint NOT NULL,
     expires_at bigint NOT NULL,
     used_at bigint
   );
   CREATE TABLE console_sessions (
     token_hash text PRIMARY KEY,
     kind text NOT NULL CHECK (kind IN ('operator', 'holder')),
     account_id text,
     login text,
     csrf text NOT NULL,
     created_at bigint NOT NULL,
     expires_at bigint NOT NULL
   );
   CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);`,
  // An account's own limits on all its keys together (store/database.ts has the same columns).
  `ALTER TABLE accounts ADD COLUMN rate_limit_per_minute integer;
   ALTER TABLE accounts ADD COLUMN max_concurrent_requests integer;`,
  // An account the operator suspended, since when (epoch ms); NULL while it is not (as store/database.ts).
  `ALTER TABLE accounts ADD COLUMN suspended_at bigint;`,
  // Of each rollup row's requests, those whose counts the gateway estimated (as store/database.ts):
  // the trigger holds every record, so every record's flag is counted in, and the trigger counts
  // them from now on. Records are held still first (SHARE: inserts wait, reads do not): a record
  // another process's INSERT had under way would otherwise be missed by the backfill (not committed
  // yet) and rolled up by the old function (already running, waiting for usage_hourly), with no
  // estimated count: a drift for good (a review; contract/estimated-rollups-migration-race.test.ts).
  `LOCK TABLE usage_records IN SHARE MODE;
   ALTER TABLE usage_hourly ADD COLUMN estimated_requests bigint NOT NULL DEFAULT 0;
   ALTER TABLE usage_daily ADD COLUMN estimated_requests bigint NOT NULL DEFAULT 0;
   UPDATE usage_hourly h SET estimated_requests = e.n
     FROM (SELECT (created_at / 3600000) * 3600000 AS period, account_id, key_id, model, COUNT(*) AS n FROM usage_records WHERE estimated GROUP BY 1, 2, 3, 4) e
    WHERE h.hour = e.period AND h.account_id = e.account_id AND h.key_id = e.key_id AND h.model = e.model;
   UPDATE usage_daily d SET estimated_requests = e.n
     FROM (SELECT (created_at / 86400000) * 86400000 AS period, account_id, key_id, model, COUNT(*) AS n FROM usage_records WHERE estimated GROUP BY 1, 2, 3, 4) e
    WHERE d.day = e.period AND d.account_id = e.account_id AND d.key_id = e.key_id AND d.model = e.model;
   CREATE OR REPLACE FUNCTION usage_rollups_add() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     INSERT INTO usage_hourly
       ${ROLLUP_SELECT(3_600_000)}
     ON CONFLICT (hour, account_id, key_id, model) DO UPDATE SET ${ROLLUP_ADD("usage_hourly")};
     INSERT INTO usage_daily
       ${ROLLUP_SELECT(86_400_000)}
     ON CONFLICT (day, account_id, key_id, model) DO UPDATE SET ${ROLLUP_ADD("usage_daily")};
     RETURN NULL;
   END $$;`,
  // The database's own name for itself, made once: spill files are named after it (pg-spill.ts),
  // so every process of this database finds them whatever its URL says (another host name, a
  // password rotated, a pooler in between); named after the URL's text, they were never replayed.
  `CREATE TABLE database_identity (one boolean PRIMARY KEY DEFAULT true CHECK (one), id text NOT NULL);
   INSERT INTO database_identity (id) VALUES (md5(random()::text || clock_timestamp()::text || pg_backend_pid()::text));`,
  // An account's own tokens a minute (as store/database.ts).
  `ALTER TABLE accounts ADD COLUMN tokens_per_minute bigint;`,
];

/** The schema version this code brings a database to. */
export const POSTGRES_SCHEMA_VERSION = MIGRATIONS.length;

/** The version a migration whose text has `marker` brings a database to (for tests of one migration). */
export function versionOf(marker: string): number {
  const at = MIGRATIONS.findIndex((m) => m.includes(marker));
  if (at < 0) throw new Error(`no migration has ${marker}`);
  return at + 1;
}

/** The database's clock in epoch milliseconds, for values several processes compare. */
export const DB_NOW_MS = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/** Any fixed number: the advisory lock every starting process takes while it migrates. */
const MIGRATION_LOCK = 0x5377_7964; // "Swyd"

/**
 * Brings the database to the current schema. Several gateways (and the admin CLI) may start at
 * once on an empty database: each takes the same transaction-scoped advisory lock first, so one
 * migrates while the others wait, then find nothing left to do. DDL is transactional in
 * PostgreSQL, so a migration that fails leaves nothing half-applied. `upTo`: stop at that version
 * (tests build a database as an older release left it).
 */
export async function migratePostgres(sql: Pg, upTo = MIGRATIONS.length): Promise<number> {
  return sql.begin(async (tx) => {
    await tx`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK})`;
    await tx`CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, applied_at bigint NOT NULL)`;
    const [row] = await tx`SELECT COALESCE(MAX(version), 0) AS v FROM schema_migrations`;
    let version = Number(row.v);
    while (version < upTo) {
      await tx.unsafe(MIGRATIONS[version]!);
      version++;
      await tx`INSERT INTO schema_migrations (version, applied_at) VALUES (${version}, ${Date.now()})`;
    }
    return version;
  });
}
