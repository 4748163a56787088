import { existsSync } from "node:fs";
import { openDatabase } from "../store/database.ts";
import { CursorError, KeyLimitError, MAX_ACCOUNT_PAGE, type AccountPatch, type AccountStore, type KeyOptions, type KeyPatch } from "../accounts/account-store.ts";
import { createAccountStore } from "../store/sqlite/sqlite-accounts.ts";
import { AdminInputError, creditsText, modelPatternsText, parseCredits, parseIdempotencyKey, parseInstant, parseMaxConcurrent, parseName, parseRateLimit, parseSpendPeriod, parseTokensPerMinute, parseTopUp, parseUsageQuery, MAX_TOKENS_PER_MINUTE } from "../accounts/admin-input.ts";
import { BalanceCapError, DebitRefusedError, IdempotencyConflictError } from "../billing/ledger.ts";
import { creditWriter, debitWriter } from "../store/sqlite/credits.ts";
import { GatewayLockError, lockDatabaseFile } from "../store/sqlite/gateway-lock.ts";
import { auditLedger } from "../store/sqlite/audit.ts";
import { loadSettings } from "../config/load-config.ts";
import { breakdownCsv, ReportTooLargeError, shapeBreakdown, type UsageBreakdown, type UsageReporter } from "../billing/usage-report.ts";
import { createUsageBreakdown, createUsageReport } from "../store/sqlite/sqlite-usage-report.ts";
import { publicUrl, sqlitePath, storeChoice, StoreConfigError } from "../config/env.ts";
import { connectPostgres } from "../store/postgres/pg-client.ts";
import { migratePostgres } from "../store/postgres/pg-migrations.ts";
import { createPostgresAccounts } from "../store/postgres/pg-accounts.ts";
import { creditAccount, debitAccount } from "../store/postgres/pg-credits.ts";
import { auditPostgres, createPostgresUsageBreakdown, createPostgresUsageReport } from "../store/postgres/pg-reports.ts";
import type { ConsoleStore } from "../console/console-store.ts";
import { issueInvite, LOGIN_PATTERN } from "../console/console-auth.ts";
import { createSqliteConsoleStore } from "../store/sqlite/sqlite-console-store.ts";
import { createPostgresConsoleStore } from "../store/postgres/pg-console-store.ts";

const USAGE = `usage: bun run admin <command>
  accounts create <name> <credits> [--rpm N] [--max-concurrent N] [--tpm N]
                                         create an account; --rpm, --max-concurrent and --tpm limit all its keys
                                         together (requests a minute, requests under way at once, prompt and
                                         answer tokens a minute)
  accounts list [--name TEXT] [--limit N] [--cursor C]
                                         accounts oldest first, 50 (at most 500) a page; --name keeps names
                                         containing TEXT (any case); --cursor is the last page's next_cursor
  accounts show <account-id>             balance, reserved credits, spend limit, keys (prefix and last 4 only)
  accounts suspend <account-id>          refuse every request of its keys (403) until resumed; answers under way
                                         finish, its credits, keys and console logins stay
  accounts resume <account-id>           its keys work again
  accounts topup <account-id> <credits> [--idempotency-key KEY]
                                         add credits (at least 0.000001); repeated with the same KEY, credits once
  accounts debit <account-id> <credits> [--idempotency-key KEY]
                                         take credits back (a top-up made by mistake), never past the balance
                                         less what requests in flight hold; on SQLite only while no gateway runs
                                         on the file (else use POST /v1/admin/accounts/:id/debits or the console)
  accounts update <account-id> [--name NAME] [--spend-limit CREDITS|none] [--period day|week|month|none]
                       [--rpm N|none] [--max-concurrent N|none] [--tpm N|none]
                                         change what is given; --period none: the limit is over the account's life;
                                         --rpm/--max-concurrent/--tpm: all its keys together (none: the config's default)
  keys create <account-id> [name] [--rpm N] [--expires ISO-DATE] [--spend-limit CREDITS] [--period day|week|month]
                       [--models ID,PREFIX*,...] [--max-concurrent N]
                                         issue a key (printed once); at most 10 active per account; --models:
                                         the only models it may use (exact ids or prefix*); --max-concurrent:
                                         most requests it may have under way at once
  keys list <account-id>                 the account's keys, never the keys themselves
  keys update <key-id> [--name NAME|none] [--spend-limit CREDITS|none] [--period day|week|month|none]
                       [--rpm N|none] [--expires ISO-DATE|none] [--models ID,PREFIX*,...|none]
                       [--max-concurrent N|none]
                                         change what is given (takes effect on the next request); none clears
  keys revoke <key-id>                   revoke a key (takes effect on the next request)
  invite <account-id> <login> [--url BASE]
                                         a one-time link (7 days) for the account's holder to set a password and
                                         sign in to the console; BASE is the gateway's address as browsers reach it
                                         (default SWITCHYARD_PUBLIC_URL, else http://localhost:8080); a login the
                                         account has already gets a link to set a new password (its sessions end);
                                         a new link replaces the login's earlier ones
  invite cancel <account-id> <login>     the account's open links for the login stop working; the login stays
  logins <account-id>                    the account's console logins and its open invites
  logins remove <account-id> <login>     the login can no longer sign in (its sessions end at once); its open
                                         invites are cancelled
  usage <account-id> [from] [to]         totals per model; from/to are ISO dates (default: all time)
  report [--from DATE] [--to DATE] [--group-by account,key,model] [--granularity day|hour]
         [--format json|csv] [--account ID] [--key ID] [--model ID]
                                         requests, tokens and credits per UTC day or hour, split by account,
                                         key and/or model (default: all three, by day, the last 30 days)
  audit                                  checks every balance against its credits and charges, every key's
                                         spent total and every spend-limit period count against its charges,
                                         the report rollups against their records, every record's cost
                                         against its prices, and that no completed answer of a priced model
                                         went uncharged nor any charge was refused (recorded without it);
                                         prints the drift and exits 1 if there is any
  help, --help                           this text
Flags are \`--flag value\` or \`--flag=value\`; a flag the command does not take is refused (exit 2).
Works on the store the gateway uses, also while it runs: the PostgreSQL database of SWITCHYARD_DATABASE_URL
when it is set, otherwise the SQLite file (SWITCHYARD_DB, default ./data/switchyard.sqlite).`;

class UsageError extends Error {}

/** Runs an admin input parser (accounts/admin-input.ts, as the admin API does); what it refuses is a usage error. */
function checked<T>(parse: () => T): T {
  try {
    return parse();
  } catch (err) {
    if (err instanceof AdminInputError) throw new UsageError(err.message);
    throw err;
  }
}

/** Credits as micro-credits; "" and non-numbers are refused (Number("") would be 0). */
function credits(value: string | undefined, field = "credits"): number {
  return checked(() => parseCredits(creditsText(value, field), field));
}

const name = (value: string | undefined, field: string) => checked(() => parseName(value, field));
const instant = (value: string, field: string) => checked(() => parseInstant(value, field));

/** `none` clears a setting (null); otherwise `parse` reads the value. */
function orNone<T>(value: string, parse: (v: string) => T): T | null {
  return value === "none" ? null : parse(value);
}

function rpm(value: string): number {
  if (!/^\d+$/.test(value)) throw new UsageError("--rpm must be a whole number from 1 to 1000000");
  return checked(() => parseRateLimit(Number(value), "--rpm"));
}

const period = (value: string) => checked(() => parseSpendPeriod(value, "--period"));
const models = (value: string) => checked(() => modelPatternsText(value, "--models"));

function tokensPerMinute(value: string): number {
  if (!/^\d+$/.test(value)) throw new UsageError(`--tpm must be a whole number from 1 to ${MAX_TOKENS_PER_MINUTE}`);
  return checked(() => parseTokensPerMinute(Number(value), "--tpm"));
}

function maxConcurrent(value: string): number {
  if (!/^\d+$/.test(value)) throw new UsageError("--max-concurrent must be a whole number from 1 to 100000");
  return checked(() => parseMaxConcurrent(Number(value), "--max-concurrent"));
}

/** `--flag value` and `--flag=value` as options, the rest as positional arguments. */
function flags(args: string[]): { positional: string[]; options: Record<string, string> } {
  const positional: string[] = [];
  const options: Record<string, string> = {};
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    const eq = arg.indexOf("=");
    if (arg.startsWith("--") && eq > 2) options[arg.slice(2, eq)] = arg.slice(eq + 1);
    else if (arg.startsWith("--")) options[arg.slice(2)] = args[++i] ?? "";
    else positional.push(arg);
  }
  return { positional, options };
}

/**
 * Each command and the flags it reads. A flag it does not read is refused before anything is
 * opened: `--rmp 5` or `--spend_limit 10` used to be dropped without a word, so a key was made
 * without the limit its operator typed.
 */
const COMMAND_FLAGS: Record<string, readonly string[]> = {
  "accounts create": ["rpm", "max-concurrent", "tpm"],
  "accounts list": ["name", "limit", "cursor"],
  "accounts show": [],
  "accounts suspend": [],
  "accounts resume": [],
  "accounts topup": ["idempotency-key"],
  "accounts debit": ["idempotency-key"],
  "accounts update": ["name", "spend-limit", "period", "rpm", "max-concurrent", "tpm"],
  "keys create": ["rpm", "expires", "spend-limit", "period", "models", "max-concurrent"],
  "keys list": [],
  "keys update": ["name", "spend-limit", "period", "rpm", "expires", "models", "max-concurrent"],
  "keys revoke": [],
  "invite cancel": [],
  // `invite <account-id> <login>`, `logins <account-id>`, `usage <account-id>`: the second word is an id.
  invite: ["url"],
  "logins remove": [],
  logins: [],
  usage: [],
  report: ["from", "to", "group-by", "granularity", "format", "account", "key", "model"],
  audit: [],
};

/** The command `noun verb` names (a key of COMMAND_FLAGS), or undefined for none. */
function commandOf(noun: string, verb: string | undefined): string | undefined {
  const pair = `${noun} ${verb}`;
  if (Object.hasOwn(COMMAND_FLAGS, pair)) return pair;
  return noun !== "accounts" && noun !== "keys" && Object.hasOwn(COMMAND_FLAGS, noun) ? noun : undefined;
}

/** Refuses a flag the command does not read, naming it, the closest it may have meant, and the ones it takes. */
function unknownFlag(command: string, options: Record<string, string>): string | undefined {
  const known = COMMAND_FLAGS[command]!;
  const wrong = Object.keys(options).find((f) => !known.includes(f));
  if (wrong === undefined) return undefined;
  // Letters alone, in order: --spend_limit and --spendlimit are --spend-limit, --rmp is --rpm.
  const shape = (f: string) => [...f.toLowerCase().replace(/[^a-z]/g, "")].sort().join("");
  const meant = known.find((f) => shape(f) === shape(wrong));
  const takes = known.length > 0 ? `it takes ${known.map((f) => `--${f}`).join(", ")}` : "it takes no flags";
  return `unknown flag --${wrong} for \`${command}\`${meant ? ` (did you mean --${meant}?)` : ""}; ${takes}. --help prints the usage.`;
}

/** The models the configuration prices; without a readable configuration, the audit skips that check. */
function pricedModels(env: Record<string, string | undefined>): Set<string> | undefined {
  try {
    const settings = loadSettings(env);
    return new Set(settings.models.filter((m) => m.category !== "free" && m.pricing && (m.pricing.input_per_mtok > 0 || m.pricing.output_per_mtok > 0)).map((m) => m.id));
  } catch {
    return undefined;
  }
}

/** What the commands need of a store, whichever it is. */
interface AdminStore {
  accounts: AccountStore;
  topUp(accountId: string, amountMicro: number, idempotencyKey?: string): Promise<boolean>;
  debit(accountId: string, amountMicro: number, idempotencyKey?: string): Promise<boolean>;
  usage: UsageReporter;
  breakdown: UsageBreakdown;
  audit(pricedModels: Set<string> | undefined): Promise<{ clean: boolean }>;
  console: ConsoleStore;
  close(): Promise<void>;
}

async function openAdminStore(env: Record<string, string | undefined>): Promise<AdminStore> {
  const { databaseUrl } = storeChoice(env);
  if (databaseUrl) {
    const sql = connectPostgres(databaseUrl, { max: 2, applicationName: "switchyard-admin" });
    try {
      await migratePostgres(sql);
    } catch (err) {
      await sql.close({ timeout: 0 }).catch(() => {});
      throw err;
    }
    return {
      accounts: createPostgresAccounts(sql, Date.now),
      topUp: (accountId, amountMicro, idempotencyKey) => creditAccount(sql, accountId, amountMicro, Date.now(), idempotencyKey),
      // held_micro is on the row: every gateway's holds are seen from here.
      debit: (accountId, amountMicro, idempotencyKey) => debitAccount(sql, accountId, amountMicro, Date.now(), idempotencyKey),
      usage: createPostgresUsageReport(sql),
      breakdown: createPostgresUsageBreakdown(sql),
      audit: (priced) => auditPostgres(sql, priced),
      console: createPostgresConsoleStore(sql),
      close: () => sql.close({ timeout: 1 }),
    };
  }
  const path = sqlitePath(env);
  const db = openDatabase(path);
  const topUp = creditWriter(db, Date.now);
  // With no gateway on the file, no request holds anything; with one, its holds are in its memory.
  const debit = debitWriter(db, Date.now, () => 0);
  return {
    accounts: createAccountStore(db, Date.now),
    topUp: async (accountId, amountMicro, idempotencyKey) => topUp(accountId, amountMicro, idempotencyKey),
    debit: async (accountId, amountMicro, idempotencyKey) => {
      const lock = path === ":memory:" ? undefined : gatewayFree(path);
      try {
        return debit(accountId, amountMicro, idempotencyKey);
      } finally {
        lock?.release();
      }
    },
    usage: createUsageReport(db),
    breakdown: createUsageBreakdown(db),
    audit: async (priced) => auditLedger(db, priced),
    console: createSqliteConsoleStore(db),
    close: async () => db.close(),
  };
}

/** The admin API's operations for a shell, without a running gateway or an admin token. */
export async function runAdmin(argv: string[], env: Record<string, string | undefined>): Promise<{ code: number; out: string; stdout?: boolean; exact?: boolean }> {
  // Asked for, the usage is the answer (stdout, exit 0), with or without a ledger.
  if (argv[0] === "help" || argv.includes("--help") || argv.includes("-h")) return { code: 0, out: USAGE, stdout: true };
  const noun = argv[0];
  const { positional, options } = flags(argv.slice(1));
  const [verb, ...args] = positional;
  // Checked before any store is opened: no command (or a misspelled one) used to open, and so
  // create, the ledger file of SWITCHYARD_DB before printing the usage.
  const command = noun === undefined || noun.startsWith("-") ? undefined : commandOf(noun, verb);
  if (command === undefined) return { code: 2, out: USAGE };
  const refused = unknownFlag(command, options);
  if (refused) return { code: 2, out: refused };
  const has = (name: string) => Object.hasOwn(options, name);
  let store: AdminStore;
  try {
    // A command on a ledger that is not there would make an empty one and work on it: an audit of a
    // deleted file said `clean` with 0 accounts (a disk-fault probe, 2026-11-30), and a mistyped
    // SWITCHYARD_DB left an empty file the next gateway start would use. Only `accounts create`
    // (setting up before the first start) may start a new file.
    const makesLedger = command === "accounts create";
    if (!makesLedger && !storeChoice(env).databaseUrl && sqliteMissing(sqlitePath(env))) {
      return { code: 1, out: `no ledger at ${sqlitePath(env)} (SWITCHYARD_DB): nothing to work on. The gateway makes it at its first start; \`accounts create\` may too.` };
    }
    store = await openAdminStore(env);
  } catch (err) {
    if (err instanceof StoreConfigError) return { code: 2, out: err.message };
    return { code: 1, out: `cannot open the store: ${err instanceof Error ? err.message : String(err)}` };
  }
  const json = (value: unknown) => ({ code: 0, out: JSON.stringify(value, null, 2) });
  try {
    const { accounts } = store;
    if (noun === "accounts" && verb === "create" && args.length === 2) {
      const limits: AccountPatch = {};
      if (has("rpm")) limits.rateLimitPerMinute = rpm(options.rpm!);
      if (has("max-concurrent")) limits.maxConcurrentRequests = maxConcurrent(options["max-concurrent"]!);
      if (has("tpm")) limits.tokensPerMinute = tokensPerMinute(options.tpm!);
      const account = await accounts.createAccount(name(args[0], "name"), credits(args[1]), limits);
      return json({ id: account.id, name: account.name, balance: account.balance, rate_limit_per_minute: limits.rateLimitPerMinute ?? null, max_concurrent_requests: limits.maxConcurrentRequests ?? null, tokens_per_minute: limits.tokensPerMinute ?? null });
    }
    if (noun === "accounts" && verb === "list" && args.length === 0) {
      const limit = options.limit === undefined ? 50 : Number(options.limit);
      if (!/^\d+$/.test(options.limit ?? "50") || limit < 1 || limit > MAX_ACCOUNT_PAGE) throw new UsageError(`--limit must be a whole number from 1 to ${MAX_ACCOUNT_PAGE}`);
      try {
        return json(await accounts.listAccounts({ limit, cursor: options.cursor || null, name: options.name || null }));
      } catch (err) {
        if (err instanceof CursorError) throw new UsageError(`--cursor: ${err.message}`);
        throw err;
      }
    }
    if (noun === "accounts" && verb === "update" && args.length === 1) {
      const patch: AccountPatch = {};
      if (has("name")) patch.name = name(options.name, "--name");
      if (has("spend-limit")) patch.spendLimitMicro = orNone(options["spend-limit"]!, (v) => credits(v, "--spend-limit"));
      if (has("period")) patch.spendLimitPeriod = orNone(options.period!, period);
      if (has("rpm")) patch.rateLimitPerMinute = orNone(options.rpm!, rpm);
      if (has("max-concurrent")) patch.maxConcurrentRequests = orNone(options["max-concurrent"]!, maxConcurrent);
      if (has("tpm")) patch.tokensPerMinute = orNone(options.tpm!, tokensPerMinute);
      if (!(await accounts.updateAccount(args[0]!, patch))) return { code: 1, out: `no account ${args[0]}` };
      return json(await accounts.describeAccount(args[0]!));
    }
    if (noun === "accounts" && (verb === "suspend" || verb === "resume") && args.length === 1) {
      if (!(await accounts.updateAccount(args[0]!, { suspended: verb === "suspend" }))) return { code: 1, out: `no account ${args[0]}` };
      return json(await accounts.describeAccount(args[0]!));
    }
    if (noun === "accounts" && verb === "show" && args.length === 1) {
      const account = await accounts.describeAccount(args[0]!);
      return account ? json(account) : { code: 1, out: `no account ${args[0]}` };
    }
    if (noun === "accounts" && (verb === "topup" || verb === "debit") && args.length === 2) {
      const amount = checked(() => parseTopUp(creditsText(args[1], "credits"), "credits"));
      const key = has("idempotency-key") ? checked(() => parseIdempotencyKey(options["idempotency-key"], "--idempotency-key")) : undefined;
      if (!(await (verb === "topup" ? store.topUp : store.debit)(args[0]!, amount, key))) return { code: 1, out: `no account ${args[0]}` };
      // What POST /v1/admin/accounts/:id/credits (or …/debits) answers.
      const after = (await accounts.describeAccount(args[0]!))!;
      return json({ id: after.id, balance: after.balance, reserved: after.reserved });
    }
    if (noun === "keys" && verb === "create" && args.length >= 1) {
      if (args.length > 2) throw new UsageError(USAGE);
      // has(), not truthiness: `--rpm ""` is a mistake to report, not a flag to skip.
      const opts: KeyOptions = { name: args[1] === undefined ? null : name(args[1], "name") };
      if (has("rpm")) opts.rateLimitPerMinute = rpm(options.rpm!);
      if (has("expires")) opts.expiresAt = instant(options.expires!, "--expires");
      if (has("spend-limit")) opts.spendLimitMicro = credits(options["spend-limit"], "--spend-limit");
      if (has("period")) opts.spendLimitPeriod = period(options.period!);
      if (has("models")) opts.models = models(options.models!);
      if (has("max-concurrent")) opts.maxConcurrentRequests = maxConcurrent(options["max-concurrent"]!);
      const key = await accounts.createKey(args[0]!, opts);
      return key ? json(key) : { code: 1, out: `no account ${args[0]}` };
    }
    if (noun === "keys" && verb === "list" && args.length === 1) {
      // What GET /v1/admin/accounts/:id/keys answers.
      const account = await accounts.describeAccount(args[0]!);
      return account ? json({ object: "list", data: account.keys }) : { code: 1, out: `no account ${args[0]}` };
    }
    if (noun === "keys" && verb === "update" && args.length === 1) {
      const patch: KeyPatch = {};
      if (has("name")) patch.name = orNone(options.name!, (v) => name(v, "--name"));
      if (has("spend-limit")) patch.spendLimitMicro = orNone(options["spend-limit"]!, (v) => credits(v, "--spend-limit"));
      if (has("period")) patch.spendLimitPeriod = orNone(options.period!, period);
      if (has("rpm")) patch.rateLimitPerMinute = orNone(options.rpm!, rpm);
      if (has("expires")) patch.expiresAt = orNone(options.expires!, (v) => instant(v, "--expires"));
      if (has("models")) patch.models = orNone(options.models!, models);
      if (has("max-concurrent")) patch.maxConcurrentRequests = orNone(options["max-concurrent"]!, maxConcurrent);
      const key = await accounts.updateKey(args[0]!, patch);
      return key ? json(key) : { code: 1, out: `no key ${args[0]}` };
    }
    if (noun === "keys" && verb === "revoke" && args.length === 1) {
      return (await accounts.revokeKey(args[0]!)) ? json({ id: args[0], revoked: true }) : { code: 1, out: `no active key ${args[0]}` };
    }
    if (noun === "invite" && verb === "cancel" && args.length === 2) {
      const [accountId, login] = args as [string, string];
      if (!(await accounts.getAccount(accountId))) return { code: 1, out: `no account ${accountId}` };
      return (await store.console.cancelInvites(accountId, login, Date.now())) ? json({ account_id: accountId, login, cancelled: true }) : { code: 1, out: `account ${accountId} has no open invite for ${login}` };
    }
    if (noun === "invite" && verb !== undefined && args.length === 1) {
      const login = args[0]!;
      if (!new RegExp(LOGIN_PATTERN).test(login)) throw new UsageError("login must be 3 to 64 letters, digits or . _ @ -");
      const base = (options.url ?? publicUrl(env)).replace(/\/+$/, "");
      if (!/^https?:\/\/[^/\s]+$/.test(base)) throw new UsageError("--url must be the gateway's address, like https://gateway.example.com");
      if (!(await accounts.getAccount(verb))) return { code: 1, out: `no account ${verb}` };
      const invite = await issueInvite(store.console, { accountId: verb, login, now: Date.now(), origin: base });
      return invite ? { ...json(invite), stdout: true } : { code: 1, out: `the login ${login} is another account's, or another account has an open invite for it` };
    }
    if (noun === "logins" && verb !== undefined && args.length === 0) {
      if (!(await accounts.getAccount(verb))) return { code: 1, out: `no account ${verb}` };
      return json(await store.console.listLogins(verb, Date.now()));
    }
    if (noun === "logins" && verb === "remove" && args.length === 2) {
      const [accountId, login] = args as [string, string];
      if (!(await accounts.getAccount(accountId))) return { code: 1, out: `no account ${accountId}` };
      return (await store.console.removeLogin(accountId, login)) ? json({ account_id: accountId, login, removed: true }) : { code: 1, out: `account ${accountId} has no login or invite ${login}` };
    }
    if (noun === "usage" && verb !== undefined) {
      const from = args[0] ? instant(args[0], "from") : 0;
      const to = args[1] ? instant(args[1], "to") : Date.now() + 1;
      if (!(await accounts.getAccount(verb))) return { code: 1, out: `no account ${verb}` };
      return json(await store.usage(verb, from, to));
    }
    if (noun === "report") {
      // `report` takes flags only (no verb).
      if (positional.length > 0) throw new UsageError(USAGE);
      const format = options.format ?? "json";
      if (format !== "json" && format !== "csv") throw new UsageError("--format is json or csv");
      let q;
      try {
        q = parseUsageQuery({ from: options.from, to: options.to, group_by: options["group-by"], granularity: options.granularity, account_id: options.account, key_id: options.key, model: options.model }, Date.now());
      } catch (err) {
        throw new UsageError((err as Error).message);
      }
      let rows;
      try {
        rows = await store.breakdown(q);
      } catch (err) {
        if (err instanceof ReportTooLargeError) return { code: 1, out: err.message };
        throw err;
      }
      // The API's bytes: CRLF line ends (RFC 4180), the last line's included, nothing added.
      if (format === "csv") return { code: 0, out: breakdownCsv(q, rows), stdout: true, exact: true };
      return { ...json(shapeBreakdown(q, rows)), stdout: true };
    }
    if (noun === "audit" && verb === undefined) {
      const report = await store.audit(pricedModels(env));
      // The report is the command's output whatever it finds: stdout, for a script to read.
      return { code: report.clean ? 0 : 1, out: JSON.stringify(report, null, 2), stdout: true };
    }
    return { code: 2, out: USAGE };
  } catch (err) {
    if (err instanceof UsageError) return { code: 2, out: err.message };
    if (err instanceof KeyLimitError || err instanceof IdempotencyConflictError || err instanceof BalanceCapError || err instanceof DebitRefusedError || err instanceof GatewayRunningError) return { code: 1, out: err.message };
    // The store failed under the command (a corrupt or unreadable ledger: SQLITE_CORRUPT,
    // SQLITE_IOERR): one line that says so, not a stack trace (a disk-fault probe's audit).
    const code = (err as { code?: unknown })?.code;
    if (typeof code === "string" && /^(SQLITE_|ERR_POSTGRES)/.test(code)) return { code: 1, out: `the store failed: ${code}: ${(err as Error).message}` };
    throw err;
  } finally {
    await store.close();
  }
}

/** Runs a command as the shell asked it and prints its answer: the exit code. `bun run admin …`, and the binary's `switchyard admin …` (index.ts). */
export async function adminMain(argv: string[], env: Record<string, string | undefined>): Promise<number> {
  const { code, out, stdout, exact } = await runAdmin(argv, env);
  // `exact`: written as it is (a CSV file's bytes), without a line end added.
  if (exact) await Bun.write(Bun.stdout, out);
  else (code === 0 || stdout ? console.log : console.error)(out);
  return code;
}

class GatewayRunningError extends Error {}

/**
 * The gateway lock of a SQLite file, held by this command while it debits: a gateway running on
 * the file keeps its requests' holds in its memory, where this process cannot see them, so a
 * debit from here could leave one uncovered. Refused then, with where to debit instead.
 */
function gatewayFree(path: string): { release(): void } {
  try {
    return lockDatabaseFile(path);
  } catch (err) {
    if (err instanceof GatewayLockError && err.busy) {
      throw new GatewayRunningError(
        `a gateway is running on ${path}: it holds its requests' credits in its memory, where this command cannot see them. ` +
          "Debit through it (POST /v1/admin/accounts/:id/debits, or the console), or stop it first.",
      );
    }
    throw err;
  }
}

/** Whether a SQLite ledger file is missing (":memory:" never is). */
function sqliteMissing(path: string): boolean {
  return path !== ":memory:" && !existsSync(path);
}

// Last in the file: a class declared below this line is not yet initialized while it runs (the
// `instanceof GatewayRunningError` of every refusal was a ReferenceError in `bun run admin`).
if (import.meta.main) process.exit(await adminMain(process.argv.slice(2), process.env));
