import { Database } from "bun:sqlite";
import { accessSync, constants, mkdirSync } from "node:fs";
import { dirname } from "node:path";
import { dropUsageAutoincrement } from "./sqlite/rebuild-usage-records.ts";

/**
 * Migrations are append-only: a shipped version is never edited, so every database
 * in the field can be brought to the current schema by replaying what it lacks.
 */
const MIGRATIONS: (string | ((db: Database) => void))[] = [
  `CREATE TABLE accounts (
     id TEXT PRIMARY KEY,
     name TEXT NOT NULL,
     balance_micro INTEGER NOT NULL CHECK (balance_micro >= 0),
     created_at INTEGER NOT NULL
   );
   CREATE TABLE api_keys (
     id TEXT PRIMARY KEY,
     account_id TEXT NOT NULL REFERENCES accounts(id),
     name TEXT,
     key_hash TEXT NOT NULL UNIQUE,
     key_prefix TEXT NOT NULL,
     key_last4 TEXT NOT NULL,
     created_at INTEGER NOT NULL,
     revoked_at INTEGER
   );
   CREATE INDEX api_keys_account ON api_keys(account_id);
   CREATE TABLE reservations (
     id TEXT PRIMARY KEY,
     account_id TEXT NOT NULL REFERENCES accounts(id),
     amount_micro INTEGER NOT NULL CHECK (amount_micro >= 0),
     created_at INTEGER NOT NULL,
     expires_at INTEGER NOT NULL
   );
   CREATE INDEX reservations_account ON reservations(account_id);
   CREATE TABLE usage_records (
     id INTEGER PRIMARY KEY AUTOINCREMENT,
     request_id TEXT NOT NULL UNIQUE,
     account_id TEXT NOT NULL,
     key_id TEXT NOT NULL,
     model TEXT NOT NULL,
     provider TEXT NOT NULL,
     prompt_tokens INTEGER NOT NULL,
     completion_tokens INTEGER NOT NULL,
     estimated INTEGER NOT NULL,
     cost_micro INTEGER NOT NULL,
     status TEXT NOT NULL,
     latency_ms INTEGER NOT NULL,
     created_at INTEGER NOT NULL
   );
   CREATE INDEX usage_account_time ON usage_records(account_id, created_at);`,
  // Per-key limits, and reservations that know which process holds them so a restart can free a dead one's.
  `ALTER TABLE api_keys ADD COLUMN rate_limit_per_minute INTEGER;
   ALTER TABLE api_keys ADD COLUMN expires_at INTEGER;
   ALTER TABLE api_keys ADD COLUMN spend_limit_micro INTEGER;
   ALTER TABLE api_keys ADD COLUMN spent_micro INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE reservations ADD COLUMN key_id TEXT;
   ALTER TABLE reservations ADD COLUMN instance_id TEXT;
   CREATE INDEX reservations_key ON reservations(key_id);
   CREATE TABLE gateway_instances (
     id TEXT PRIMARY KEY,
     hostname TEXT NOT NULL,
     pid INTEGER NOT NULL,
     started_at INTEGER NOT NULL,
     heartbeat_at INTEGER NOT NULL
   );`,
  // Reservations moved to memory (see billing/ledger.ts): a write per request cost an fsync every few hundred.
  `DROP TABLE reservations;`,
  // Refusals are counted, not recorded one row each; credits get entries of their own, so the
  // audit can check that every balance is what was put in minus what was charged. Accounts that
  // exist already open with what they have plus what they were charged.
  `CREATE TABLE rejection_counts (
     key_id TEXT NOT NULL,
     minute INTEGER NOT NULL,
     status INTEGER NOT NULL,
     count INTEGER NOT NULL,
     PRIMARY KEY (key_id, minute, status)
   ) WITHOUT ROWID;
   CREATE TABLE credit_entries (
     id INTEGER PRIMARY KEY AUTOINCREMENT,
     account_id TEXT NOT NULL REFERENCES accounts(id),
     amount_micro INTEGER NOT NULL,
     kind TEXT NOT NULL,
     created_at INTEGER NOT NULL
   );
   CREATE INDEX credit_entries_account ON credit_entries(account_id);
   INSERT INTO credit_entries (account_id, amount_micro, kind, created_at)
     SELECT a.id, a.balance_micro + COALESCE((SELECT SUM(u.cost_micro) FROM usage_records u WHERE u.account_id = a.id), 0), 'opening', CAST(unixepoch('subsec') * 1000 AS INTEGER)
       FROM accounts a;
   CREATE TABLE ledger_probe (id INTEGER PRIMARY KEY, at INTEGER NOT NULL);`,
  // The request's x-request-id beside its record (the client's, or the gateway's own), so a
  // client's complaint about one request finds its charge.
  `ALTER TABLE usage_records ADD COLUMN client_request_id TEXT;`,
  // Spend limits that reset by period (issue 29, billing/spend-period.ts), on keys and accounts.
  // `period_spent_micro` is what was charged since `period_start` (epoch ms; 0 = all time); it
  // counts for the current window only while `period_start` is that window's start, otherwise
  // the period rolled over and nothing is spent in it yet. Existing limits are lifetime ones, so
  // their windows open at 0 with everything charged so far. No index on (key_id, created_at): it
  // would cost every usage record's insert (~5 % of a request's CPU in the bench) to serve a rare
  // admin recount, which reads the key's account's window through usage_account_time instead.
  `ALTER TABLE api_keys ADD COLUMN spend_limit_period TEXT CHECK (spend_limit_period IN ('day', 'week', 'month'));
   ALTER TABLE api_keys ADD COLUMN period_spent_micro INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE api_keys ADD COLUMN period_start INTEGER NOT NULL DEFAULT 0;
   UPDATE api_keys SET period_spent_micro = spent_micro;
   ALTER TABLE accounts ADD COLUMN spend_limit_micro INTEGER;
   ALTER TABLE accounts ADD COLUMN spend_limit_period TEXT CHECK (spend_limit_period IN ('day', 'week', 'month'));
   ALTER TABLE accounts ADD COLUMN period_spent_micro INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE accounts ADD COLUMN period_start INTEGER NOT NULL DEFAULT 0;
   UPDATE accounts SET period_spent_micro = COALESCE((SELECT SUM(u.cost_micro) FROM usage_records u WHERE u.account_id = accounts.id), 0);`,
  // Token classes and the prices charged (issue 29): each record's cost can be recomputed, and a
  // price change rewrites no history. Older records keep fresh_input_tokens NULL: their whole
  // prompt was priced as fresh input (readers take prompt_tokens), at prices nobody recorded.
  // held_micro: what the request held, written only when it capped the charge (else NULL: the
  // charge is the price book's sum), so a record carries no bytes for it. cache_savings_micro: what the
  // cached tokens would have cost as fresh input minus what they cost, summed by reports.
  `ALTER TABLE usage_records ADD COLUMN fresh_input_tokens INTEGER;
   ALTER TABLE usage_records ADD COLUMN cache_read_tokens INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE usage_records ADD COLUMN cache_write_5m_tokens INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE usage_records ADD COLUMN cache_write_1h_tokens INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE usage_records ADD COLUMN reasoning_tokens INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE usage_records ADD COLUMN images INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE usage_records ADD COLUMN price_id INTEGER;
   ALTER TABLE usage_records ADD COLUMN held_micro INTEGER;
   ALTER TABLE usage_records ADD COLUMN cache_savings_micro INTEGER NOT NULL DEFAULT 0;
   CREATE TABLE price_lists (id INTEGER PRIMARY KEY, prices TEXT NOT NULL, created_at INTEGER NOT NULL);`,
  // Spend alerts' outbox (alerts/, docs/decisions.md "Spend alerts"): an event is inserted once per
  // crossing (dedupe_key UNIQUE, insert-or-ignore) and kept until a receiver took it. `body` is the
  // exact JSON sent (and signed) at every attempt; `next_attempt_at` (epoch ms) is when it is due,
  // a lease while a process sends it, then the backoff after a failure.
  `CREATE TABLE alert_outbox (
     id INTEGER PRIMARY KEY AUTOINCREMENT,
     event_id TEXT NOT NULL UNIQUE,
     dedupe_key TEXT NOT NULL UNIQUE,
     type TEXT NOT NULL,
     body TEXT NOT NULL,
     created_at INTEGER NOT NULL,
     attempts INTEGER NOT NULL DEFAULT 0,
     next_attempt_at INTEGER NOT NULL DEFAULT 0,
     delivered_at INTEGER,
     last_error TEXT
   );
   CREATE INDEX alert_outbox_due ON alert_outbox (next_attempt_at) WHERE delivered_at IS NULL;`,
  // Idempotent top-ups (issue 32): the client's Idempotency-Key is kept with the credit entry it
  // made, unique, so a repeated top-up finds the first and credits nothing more (credits.ts).
  // Kept as long as the entry (never expired): a key is a few dozen bytes per top-up.
  `ALTER TABLE credit_entries ADD COLUMN idempotency_key TEXT;
   CREATE UNIQUE INDEX credit_entries_idempotency ON credit_entries(idempotency_key);`,
  // Client keys limited to models (issue 33): a JSON list of model ids and `prefix*` patterns,
  // NULL for every model (accounts/model-access.ts). And a key's own cap on requests at once
  // (issue 32), NULL for the gateway's default (limits.max_concurrent_requests).
  `ALTER TABLE api_keys ADD COLUMN allowed_models TEXT;
   ALTER TABLE api_keys ADD COLUMN max_concurrent_requests INTEGER;`,
  // The console (issue 34, docs/decisions.md "Console"). usage_hourly / usage_daily: the usage
  // records summed per UTC hour (day), account, key and model, kept by a trigger in the transaction
  // that writes each record, so the console's charts and usage reports over whole hours (days)
  // read a few rows per period instead of every record (billing/usage-report.ts, usageSource).
  // Backfilled from the records already written.
  // console_users / console_invites / console_sessions: account holders' logins (argon2id hashes),
  // one-time invites and signed-in sessions, stored by the SHA-256 of their secrets only; sessions
  // live here so they survive a restart and every process sees them.
  `CREATE TABLE usage_hourly (
     hour INTEGER NOT NULL,
     account_id TEXT NOT NULL,
     key_id TEXT NOT NULL,
     model TEXT NOT NULL,
     requests INTEGER NOT NULL,
     prompt_tokens INTEGER NOT NULL,
     completion_tokens INTEGER NOT NULL,
     fresh_input_tokens INTEGER NOT NULL,
     cache_read_tokens INTEGER NOT NULL,
     cache_write_5m_tokens INTEGER NOT NULL,
     cache_write_1h_tokens INTEGER NOT NULL,
     reasoning_tokens INTEGER NOT NULL,
     images INTEGER NOT NULL,
     cost_micro INTEGER NOT NULL,
     cache_savings_micro INTEGER NOT NULL,
     PRIMARY KEY (hour, account_id, key_id, model)
   ) WITHOUT ROWID;
   CREATE INDEX usage_hourly_account ON usage_hourly(account_id, hour);
   CREATE TABLE usage_daily (
     day INTEGER NOT NULL,
     account_id TEXT NOT NULL,
     key_id TEXT NOT NULL,
     model TEXT NOT NULL,
     requests INTEGER NOT NULL,
     prompt_tokens INTEGER NOT NULL,
     completion_tokens INTEGER NOT NULL,
     fresh_input_tokens INTEGER NOT NULL,
     cache_read_tokens INTEGER NOT NULL,
     cache_write_5m_tokens INTEGER NOT NULL,
     cache_write_1h_tokens INTEGER NOT NULL,
     reasoning_tokens INTEGER NOT NULL,
     images INTEGER NOT NULL,
     cost_micro INTEGER NOT NULL,
     cache_savings_micro INTEGER NOT NULL,
     PRIMARY KEY (day, account_id, key_id, model)
   ) WITHOUT ROWID;
   CREATE INDEX usage_daily_account ON usage_daily(account_id, day);
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
   CREATE TRIGGER usage_rollups_add AFTER INSERT ON usage_records BEGIN
     INSERT INTO usage_hourly VALUES ((NEW.created_at / 3600000) * 3600000, NEW.account_id, NEW.key_id, NEW.model, 1, NEW.prompt_tokens, NEW.completion_tokens,
       COALESCE(NEW.fresh_input_tokens, NEW.prompt_tokens), NEW.cache_read_tokens, NEW.cache_write_5m_tokens, NEW.cache_write_1h_tokens,
       NEW.reasoning_tokens, NEW.images, NEW.cost_micro, NEW.cache_savings_micro)
     ON CONFLICT DO UPDATE SET requests = requests + excluded.requests, prompt_tokens = prompt_tokens + excluded.prompt_tokens,
       completion_tokens = completion_tokens + excluded.completion_tokens,
       fresh_input_tokens = fresh_input_tokens + excluded.fresh_input_tokens,
       cache_read_tokens = cache_read_tokens + excluded.cache_read_tokens,
       cache_write_5m_tokens = cache_write_5m_tokens + excluded.cache_write_5m_tokens,
       cache_write_1h_tokens = cache_write_1h_tokens + excluded.cache_write_1h_tokens,
       reasoning_tokens = reasoning_tokens + excluded.reasoning_tokens, images = images + excluded.images,
       cost_micro = cost_micro + excluded.cost_micro, cache_savings_micro = cache_savings_micro + excluded.cache_savings_micro;
     INSERT INTO usage_daily VALUES ((NEW.created_at / 86400000) * 86400000, NEW.account_id, NEW.key_id, NEW.model, 1, NEW.prompt_tokens, NEW.completion_tokens,
       COALESCE(NEW.fresh_input_tokens, NEW.prompt_tokens), NEW.cache_read_tokens, NEW.cache_write_5m_tokens, NEW.cache_write_1h_tokens,
       NEW.reasoning_tokens, NEW.images, NEW.cost_micro, NEW.cache_savings_micro)
     ON CONFLICT DO UPDATE SET requests = requests + excluded.requests, prompt_tokens = prompt_tokens + excluded.prompt_tokens,
       completion_tokens = completion_tokens + excluded.completion_tokens,
       fresh_input_tokens = fresh_input_tokens + excluded.fresh_input_tokens,
       cache_read_tokens = cache_read_tokens + excluded.cache_read_tokens,
       cache_write_5m_tokens = cache_write_5m_tokens + excluded.cache_write_5m_tokens,
       cache_write_1h_tokens = cache_write_1h_tokens + excluded.cache_write_1h_tokens,
       reasoning_tokens = reasoning_tokens + excluded.reasoning_tokens, images = images + excluded.images,
       cost_micro = cost_micro + excluded.cost_micro, cache_savings_micro = cache_savings_micro + excluded.cache_savings_micro;
   END;
   CREATE TABLE console_users (
     login TEXT PRIMARY KEY,
     account_id TEXT NOT NULL REFERENCES accounts(id),
     password_hash TEXT NOT NULL,
     created_at INTEGER NOT NULL
   );
   CREATE TABLE console_invites (
     token_hash TEXT PRIMARY KEY,
     account_id TEXT NOT NULL REFERENCES accounts(id),
     login TEXT NOT NULL,
     created_at INTEGER NOT NULL,
     expires_at INTEGER NOT NULL,
     used_at INTEGER
   );
   CREATE TABLE console_sessions (
     token_hash TEXT PRIMARY KEY,
     kind TEXT NOT NULL CHECK (kind IN ('operator', 'holder')),
     account_id TEXT,
     login TEXT,
     csrf TEXT NOT NULL,
     created_at INTEGER NOT NULL,
     expires_at INTEGER NOT NULL
   );
   CREATE INDEX console_sessions_expiry ON console_sessions(expires_at);`,
  // The rollups are folded from the records behind a mark, not by a trigger per record (every
  // settlement's commit upserted two rollup rows): store/sqlite/sqlite-rollups.ts. The mark starts
  // at every record the trigger already rolled up.
  `DROP TRIGGER IF EXISTS usage_rollups_add;
   CREATE TABLE usage_rollup_mark (id INTEGER PRIMARY KEY CHECK (id = 1), record_id INTEGER NOT NULL);
   INSERT INTO usage_rollup_mark VALUES (1, COALESCE((SELECT MAX(id) FROM usage_records), 0));`,
  // usage_records without AUTOINCREMENT, where the rebuild is quick (store/sqlite/rebuild-usage-records.ts).
  dropUsageAutoincrement,
  // An account's own limits on all its keys together (docs/decisions.md, "Limits per account"):
  // requests a minute and requests under way; NULL for the gateway's defaults
  // (limits.account_requests_per_minute, limits.account_max_concurrent_requests).
  `ALTER TABLE accounts ADD COLUMN rate_limit_per_minute INTEGER;
   ALTER TABLE accounts ADD COLUMN max_concurrent_requests INTEGER;`,
  // An account the operator suspended (docs/decisions.md, "An account's on/off switch"): since when,
  // in epoch ms; NULL while it is not.
  `ALTER TABLE accounts ADD COLUMN suspended_at INTEGER;`,
  // Of each rollup row's requests, those whose counts the gateway estimated (usage_records.estimated):
  // the usage view and its CSV count them (docs/decisions.md, "Estimated requests in the usage
  // report"). The rows already folded (up to the mark) take theirs from their records; the records
  // past the mark are folded with the column. One scan of the records, at the upgrade.
  `ALTER TABLE usage_hourly ADD COLUMN estimated_requests INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE usage_daily ADD COLUMN estimated_requests INTEGER NOT NULL DEFAULT 0;
   UPDATE usage_hourly SET estimated_requests = e.n
     FROM (SELECT (created_at / 3600000) * 3600000 AS period, account_id, key_id, model, COUNT(*) AS n FROM usage_records
            WHERE estimated != 0 AND id <= (SELECT record_id FROM usage_rollup_mark) GROUP BY 1, 2, 3, 4) AS e
    WHERE usage_hourly.hour = e.period AND usage_hourly.account_id = e.account_id AND usage_hourly.key_id = e.key_id AND usage_hourly.model = e.model;
   UPDATE usage_daily SET estimated_requests = e.n
     FROM (SELECT (created_at / 86400000) * 86400000 AS period, account_id, key_id, model, COUNT(*) AS n FROM usage_records
            WHERE estimated != 0 AND id <= (SELECT record_id FROM usage_rollup_mark) GROUP BY 1, 2, 3, 4) AS e
    WHERE usage_daily.day = e.period AND usage_daily.account_id = e.account_id AND usage_daily.key_id = e.key_id AND usage_daily.model = e.model;`,
  // An account's own tokens a minute for all its keys together (limits/token-budget.ts); NULL for
  // the gateway's default (limits.account_tokens_per_minute).
  `ALTER TABLE accounts ADD COLUMN tokens_per_minute INTEGER;`,
];

/** The schema version just before usage_records lost AUTOINCREMENT (tests build such a file). */
export const BEFORE_USAGE_REBUILD = MIGRATIONS.indexOf(dropUsageAutoincrement);

/**
 * Log pages after which a commit checkpoints (10 MB of 1 KB pages, 40 MB of a file made with 4 KB
 * ones; SQLite's default is 1,000 pages). A checkpoint is
 * the one fsync in WAL mode; the gateway moves them to a thread of their own (wal-checkpointer.ts)
 * and falls back to this when that thread is not running.
 */
export const WAL_AUTOCHECKPOINT_PAGES = 10_000;

/**
 * The page size of a new database file: 1 KB, not SQLite's 4 KB. A lone paid answer's commit
 * writes whole pages to the log (the record, its two indexes, the account, the key: five), so
 * with 1 KB pages it writes a quarter of the bytes. Measured on the ledger alone
 * (bench/lone-commit.ts, lone settlements): 50–53 → 40–42 µs of CPU each, a log a sixth as
 * long; in batches of 32 no different (docs/decisions.md, "Smaller pages"). A file made before
 * keeps its pages: SQLite changes them only by a VACUUM outside WAL mode, a rewrite of the whole
 * file that an upgrade's start should not wait for.
 */
export const PAGE_SIZE = 1024;

/** The log's size left on disk after it is started over (a burst's log is cut back to this). */
export const WAL_SIZE_LIMIT_BYTES = 64 * 1024 * 1024;

export interface OpenOptions {
  /**
   * How long a statement may wait, blocking its thread, for another connection's write lock.
   * The admin CLI waits (5 s); the gateway passes 0 after migrating: its event loop serves every
   * request, so its writes retry on a timer instead (see store/sqlite/sqlite-errors.ts).
   */
  busyTimeoutMs?: number;
  /**
   * The gateway's start: a file it may only read stops it (mustBeWritable). The admin CLI reads
   * without it: its reports and audits work on a copy or as a user who may only read (a review).
   */
  mustWrite?: boolean;
}

export function openDatabase(path: string, options: OpenOptions = {}): Database {
  if (path !== ":memory:") {
    mkdirSync(dirname(path), { recursive: true });
    if (options.mustWrite) mustBeWritable(path);
  }
  const db = new Database(path, { create: true, strict: true });
  // Only a new file takes it (before its first write); an existing file keeps its own.
  db.exec(`PRAGMA page_size = ${PAGE_SIZE};`);
  // WAL lets the admin CLI read and write while the gateway runs. synchronous = NORMAL: a commit
  // is in the OS's page cache when it returns, so it survives the process (kill -9); a power cut,
  // a kernel crash or a filesystem that fails (ext4 remounted read-only after an error) can take
  // the last commits, and the WAL fsyncs at every checkpoint. SWITCHYARD_SQLITE_SYNC=full makes
  // the gateway's commits fsync too (index.ts).
  db.exec("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 5000;");
  db.exec(`PRAGMA wal_autocheckpoint = ${WAL_AUTOCHECKPOINT_PAGES}; PRAGMA journal_size_limit = ${WAL_SIZE_LIMIT_BYTES};`);
  // Several processes may start on one file at once (the CLI beside a gateway): migrations wait.
  migrate(db);
  if (options.busyTimeoutMs !== undefined) db.exec(`PRAGMA busy_timeout = ${Math.max(0, Math.floor(options.busyTimeoutMs))};`);
  return db;
}

/**
 * SQLite opens a file it may read but not write read-only, without a word, and nothing at the
 * start writes when there is nothing to migrate: a gateway started on a ledger owned by another
 * user (root, after a first run or an admin command as root) said ready, served paid answers whose
 * charges it could not write, and refused the rest with 503 for good, its connection read-only
 * even once the file was writable again (a disk-fault probe, twenty-eighth session). The file and
 * the -wal and -shm files beside it, where they exist, are checked as SQLite's own open would find
 * them (access(2): permissions, a read-only mount), so the start stops in one line (index.ts).
 * Not a write: another connection's lock (the admin CLI's) must not stop a start.
 */
export function mustBeWritable(path: string, access: (file: string, mode: number) => void = accessSync): void {
  for (const file of [path, `${path}-wal`, `${path}-shm`]) {
    try {
      access(file, constants.W_OK);
    } catch (err) {
      if ((err as { code?: string }).code === "ENOENT") continue;
      throw err;
    }
  }
}

/**
 * Why a ledger could not be opened, in one line for the operator: the file, the store's error,
 * and what usually causes it (the gateway's start and the admin CLI print it instead of a stack).
 */
export function cannotOpenLedger(path: string, err: unknown): string {
  const code = typeof (err as { code?: unknown } | null)?.code === "string" ? (err as { code: string }).code : "";
  const message = err instanceof Error ? err.message : String(err);
  const what = code ? `${code}: ${message}` : message;
  let hint = "";
  if (/^SQLITE_(CORRUPT|NOTADB)/.test(code)) hint = " The file is damaged: restore the ledger from a backup (without its old -wal and -shm files), keeping any .spill file beside it.";
  else if (/^SQLITE_(FULL|IOERR)/.test(code) || code === "ENOSPC" || code === "EDQUOT") hint = " Is its disk full or failing? SQLite needs room beside it for its -wal and -shm files.";
  else if (/^SQLITE_(READONLY|CANTOPEN|PERM)/.test(code) || code === "EROFS" || code === "EACCES" || code === "EPERM" || code === "ENOTDIR") {
    hint = " Can the gateway write the file and its folder? SQLite makes -wal and -shm files beside it.";
  }
  return `cannot open the SQLite ledger ${path} (SWITCHYARD_DB): ${what}.${hint}`;
}

/** The schema version `migrate` brings a file to. */
export const SCHEMA_VERSION = MIGRATIONS.length;

/** The version a migration whose text has `marker` brings a file to (for tests of one migration), as pg-migrations.ts's versionOf. */
export function sqliteVersionOf(marker: string): number {
  const at = MIGRATIONS.findIndex((m) => typeof m === "string" && m.includes(marker));
  if (at < 0) throw new Error(`no migration has ${marker}`);
  return at + 1;
}

/** `upTo`: stop at that version (tests build a database as an older release left it). */
export function migrate(db: Database, upTo = MIGRATIONS.length): void {
  db.exec("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)");
  const latest = db.query<{ v: number | null }, []>("SELECT MAX(version) AS v FROM schema_migrations");
  // The version is read again under the write lock: another process starting on the same file
  // may have applied it in between.
  const step = db.transaction((): boolean => {
    const current = latest.get()?.v ?? 0;
    if (current >= upTo) return false;
    const migration = MIGRATIONS[current]!;
    if (typeof migration === "string") db.exec(migration);
    else migration(db);
    db.query("INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)").run(current + 1, Date.now());
    return true;
  });
  while ((latest.get()?.v ?? 0) < upTo && step.immediate()) {}
}
