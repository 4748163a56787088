import type { LogLevel } from "../log/log.ts";
import { loadSettings, type Settings } from "./load-config.ts";
import { opsSettings, type OpsSettings } from "./ops-settings.ts";

/*
 * Every environment variable the gateway reads, read here and once (README, "Configuration"):
 * index.ts calls readEnvironment(process.env) at start and hands the parts to whoever needs
 * them; the admin CLI reads the few it needs through the same functions, and `--health-check`
 * reads healthCheckTarget alone. One reading sits beside this file on purpose:
 * config/runtime-env.ts, since BUN_CONFIG_MAX_HTTP_REQUESTS must be set before Bun starts, so
 * it runs before any other module and may restart the process.
 */

// ── Numbers ──

/** A numeric variable that cannot be used (not a whole number, or out of its range). */
export class EnvNumberError extends Error {}

/** The longest wait a timer takes: a longer one (or NaN) fires at once, so a grace period would be none. */
export const MAX_TIMER_MS = 2_147_483_647;

/**
 * A whole-number variable: unset or empty is undefined (the caller's default); anything else must
 * be digits within [min, max], else the start stops naming the variable and its range. Number()
 * alone took "30s" as NaN, which made a shutdown grace period no grace at all.
 */
export function wholeNumber(
  env: Record<string, string | undefined>,
  name: string,
  range: { min: number; max?: number; unit?: string },
  Refusal: new (message: string) => Error = EnvNumberError,
): number | undefined {
  const raw = env[name]?.trim();
  if (!raw) return undefined;
  const value = Number(raw);
  if (!/^\d+$/.test(raw) || value < range.min || (range.max !== undefined && value > range.max)) {
    const bounds = range.max !== undefined ? ` from ${range.min} to ${range.max}` : `, at least ${range.min}`;
    throw new Refusal(`${name} must be a whole number${range.unit ? ` of ${range.unit}` : ""}${bounds} (got "${raw.slice(0, 40)}")`);
  }
  return value;
}

/** PORT: 0 (any free port) to 65535. */
function portFrom(env: Record<string, string | undefined>): number {
  return wholeNumber(env, "PORT", { min: 0, max: 65_535 }) ?? 8080;
}

// ── Stores ──

/**
 * Where money and limits live, chosen by configuration:
 * - `SWITCHYARD_DATABASE_URL=postgres://…`: PostgreSQL for accounts, keys, balances, holds and
 *   usage records (several gateway processes share it); otherwise the SQLite file
 *   (`SWITCHYARD_DB`), which app.ts builds itself, as fast as before.
 * - `SWITCHYARD_REDIS_URL=redis://host:port[/db]`: Redis for rate limits; otherwise in-process
 *   buckets (each process limits alone). Stored Responses answers live there too (shared by
 *   every process), under keys starting with `SWITCHYARD_REDIS_PREFIX` (default `switchyard:`),
 *   so several deployments (or test runs) can share one Redis.
 */
export interface StoreChoice {
  databaseUrl?: string;
  redisUrl?: string;
  /** Prefix of every Redis key; undefined for the default. */
  redisPrefix?: string;
}

export class StoreConfigError extends Error {}

export function storeChoice(env: Record<string, string | undefined>): StoreChoice {
  const databaseUrl = env.SWITCHYARD_DATABASE_URL?.trim() || undefined;
  const redisUrl = env.SWITCHYARD_REDIS_URL?.trim() || undefined;
  if (databaseUrl && !/^postgres(ql)?:\/\//.test(databaseUrl)) {
    throw new StoreConfigError("SWITCHYARD_DATABASE_URL must be a postgres:// (or postgresql://) URL");
  }
  if (redisUrl && !/^rediss?:\/\//.test(redisUrl)) throw new StoreConfigError("SWITCHYARD_REDIS_URL must be a redis:// (or rediss://) URL");
  const redisPrefix = env.SWITCHYARD_REDIS_PREFIX?.trim() || undefined;
  if (redisPrefix && !/^[\w:.-]{1,64}$/.test(redisPrefix)) throw new StoreConfigError("SWITCHYARD_REDIS_PREFIX must be 1 to 64 letters, digits or _ : . -");
  return { databaseUrl, redisUrl, ...(redisPrefix ? { redisPrefix } : {}) };
}

/** The PostgreSQL ledger's heartbeat and sweep timings (store/postgres/pg-ledger.ts); unset ones take its defaults. */
export interface LedgerTimings {
  heartbeatMs?: number;
  staleAfterMs?: number;
  sweepIntervalMs?: number;
}

/**
 * Heartbeat and sweep timings of the PostgreSQL ledger from the environment (defaults: heartbeat
 * 2 s, a process silent 30 s is dead, sweeps every 10 s). Shorter timings release a dead
 * process's holds sooner at the price of more statements; tests shorten them.
 */
export function ledgerTimingsFrom(env: Record<string, string | undefined>): LedgerTimings {
  const read = (name: string): number | undefined => wholeNumber(env, name, { min: 10, max: MAX_TIMER_MS, unit: "milliseconds" }, StoreConfigError);
  const timings = { heartbeatMs: read("SWITCHYARD_PG_HEARTBEAT_MS"), staleAfterMs: read("SWITCHYARD_PG_STALE_AFTER_MS"), sweepIntervalMs: read("SWITCHYARD_PG_SWEEP_MS") };
  const heartbeat = timings.heartbeatMs ?? 2_000;
  const stale = timings.staleAfterMs ?? 30_000;
  if (stale < heartbeat * 3) throw new StoreConfigError(`SWITCHYARD_PG_STALE_AFTER_MS (${stale}) must be at least three heartbeats (SWITCHYARD_PG_HEARTBEAT_MS, ${heartbeat}): a live process must never look dead`);
  return Object.fromEntries(Object.entries(timings).filter(([, v]) => v !== undefined));
}

/** The gateway's address as browsers reach it, for console invite links made without a request (the CLI's): SWITCHYARD_PUBLIC_URL. */
export function publicUrl(env: Record<string, string | undefined>): string {
  return env.SWITCHYARD_PUBLIC_URL?.trim() || "http://localhost:8080";
}

/** The SQLite file when no PostgreSQL URL is set (SWITCHYARD_DB; ":memory:" for none). */
export function sqlitePath(env: Record<string, string | undefined>): string {
  return env.SWITCHYARD_DB ?? "./data/switchyard.sqlite";
}

// ── Processes (supervisor.ts) ──

/** Set by the supervisor in each worker's environment: which slot (1..N) the process fills. */
export const WORKER_SLOT_ENV = "SWITCHYARD_WORKER_SLOT";
const MAX_WORKERS = 64;

export class WorkersConfigError extends Error {}

export type ProcessRole = { kind: "single" } | { kind: "supervisor"; workers: number } | { kind: "worker"; slot: number };

/** What this process is, from the environment; refuses what cannot be run safely. */
export function processRole(env: Record<string, string | undefined>, store: { databaseUrl?: string }): ProcessRole {
  const slot = env[WORKER_SLOT_ENV];
  if (slot) return { kind: "worker", slot: Number(slot) };
  const workers = wholeNumber(env, "SWITCHYARD_WORKERS", { min: 1, max: MAX_WORKERS }, WorkersConfigError) ?? 1;
  if (workers === 1) return { kind: "single" };
  if (!store.databaseUrl) {
    throw new WorkersConfigError(
      `SWITCHYARD_WORKERS=${workers} needs PostgreSQL (SWITCHYARD_DATABASE_URL): the SQLite ledger holds reservations in one process's memory, ` +
        `so ${workers} workers on one SQLite file would spend the same credits. Run one worker on SQLite (SWITCHYARD_WORKERS=1), or set SWITCHYARD_DATABASE_URL.`,
    );
  }
  return { kind: "supervisor", workers };
}

// ── The demo account (accounts/demo-account.ts) ──

export class DemoConfigError extends Error {}

/** Whether this start issues a demo key, and why not when it does not (for the operator's log). */
export type DemoChoice = { on: true } | { on: false; reason: string };

/**
 * The demo key is for the quick start, a fresh clone with nothing set. Anything that says the
 * gateway serves real tenants turns it off unless SWITCHYARD_DEMO=1 asks for it: an admin token
 * (accounts are managed), a shared database (every replica's start would revoke the others' key),
 * or the container image (SWITCHYARD_CONTAINER, set by the Dockerfile).
 */
export function demoChoice(env: Record<string, string | undefined>): DemoChoice {
  const raw = env.SWITCHYARD_DEMO?.trim().toLowerCase();
  if (raw) {
    if (["1", "on", "true", "yes"].includes(raw)) return { on: true };
    if (["0", "off", "false", "no"].includes(raw)) return { on: false, reason: "SWITCHYARD_DEMO is off" };
    throw new DemoConfigError(`SWITCHYARD_DEMO must be 1 or 0 (on or off), not "${env.SWITCHYARD_DEMO}"`);
  }
  if (env.SWITCHYARD_ADMIN_TOKEN) return { on: false, reason: "SWITCHYARD_ADMIN_TOKEN is set" };
  if (env.SWITCHYARD_DATABASE_URL) return { on: false, reason: "SWITCHYARD_DATABASE_URL is set" };
  if (env.SWITCHYARD_CONTAINER) return { on: false, reason: "running in the container image (SWITCHYARD_CONTAINER)" };
  return { on: true };
}

// ── Upstream calls ──

const PROXY_VARS = ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"];

/** An HTTP(S) proxy is configured: fetch (which honours it) carries every upstream call, not our own client. */
export function upstreamViaProxy(env: Record<string, string | undefined>): boolean {
  return PROXY_VARS.some((name) => env[name]);
}

// ── `--health-check` (ops/health-check.ts) ──

/** Where the health check asks, and how long it waits: PORT, HOST, SWITCHYARD_HEALTH_CHECK_TIMEOUT_MS. */
export function healthCheckTarget(env: Record<string, string | undefined>): { url: string; timeoutMs: number } {
  const port = portFrom(env);
  const host = !env.HOST || env.HOST === "0.0.0.0" || env.HOST === "::" ? "127.0.0.1" : env.HOST;
  const timeoutMs = wholeNumber(env, "SWITCHYARD_HEALTH_CHECK_TIMEOUT_MS", { min: 1, max: MAX_TIMER_MS, unit: "milliseconds" }) ?? 3_000;
  return { url: `http://${host.includes(":") ? `[${host}]` : host}:${port}/ready`, timeoutMs };
}

// ── All of it ──

/** What a gateway process takes from its environment, read once at start. */
export interface Environment {
  settings: Settings;
  stores: StoreChoice;
  ops: OpsSettings;
  role: ProcessRole;
  pgTimings: LedgerTimings;
  demo: DemoChoice;
  /** LOG_LEVEL, for the process's own log lines. */
  logLevel: LogLevel;
  /** How long running answers may take to finish after SIGTERM before the process exits anyway. */
  shutdownGraceMs: number;
  /** PORT (0: any free port) and HOST. */
  port: number;
  hostname: string;
  sqlitePath: string;
  /**
   * SWITCHYARD_SQLITE_SYNC: `normal` (the default: a commit survives the process, not the
   * operating system) or `full` (each commit is fsynced before the answer's last byte, so it
   * survives a power cut or a filesystem that fails too, for a disk flush per group commit).
   */
  sqliteSync: "normal" | "full";
  /** Where settlements a stop cannot write go (SWITCHYARD_SPILL_DIR). */
  spillDir: string;
  /** BUN_CONFIG_MAX_HTTP_REQUESTS as Bun read it at start (config/runtime-env.ts sets it when unset). */
  maxFetches: number;
  /** SWITCHYARD_DEMO=0 exactly: how the supervisor tells workers after the first that the demo is not theirs. */
  demoOffByEnv: boolean;
  upstreamViaProxy: boolean;
}

/** Throws a ConfigError (or one of the errors above) naming the variable when a value cannot be used. */
export function readEnvironment(env: Record<string, string | undefined>): Environment {
  // In this order, so the first error met is the one a start has always reported.
  const settings = loadSettings(env);
  const stores = storeChoice(env);
  const ops = opsSettings(env);
  const role = processRole(env, stores);
  const pgTimings = ledgerTimingsFrom(env);
  const demo = demoChoice(env);
  return {
    settings,
    stores,
    ops,
    role,
    pgTimings,
    demo,
    // Checked (any case) with the other switches in ops-settings.ts.
    logLevel: ops.accessLog.logLevel ?? "info",
    shutdownGraceMs: wholeNumber(env, "SWITCHYARD_SHUTDOWN_GRACE_MS", { min: 0, max: MAX_TIMER_MS, unit: "milliseconds" }) ?? 30_000,
    port: portFrom(env),
    hostname: env.HOST ?? "0.0.0.0",
    sqlitePath: sqlitePath(env),
    sqliteSync: sqliteSync(env.SWITCHYARD_SQLITE_SYNC),
    spillDir: env.SWITCHYARD_SPILL_DIR || "./data",
    // Bun itself takes 1 to 65535 and, given anything else, says so on a line of its own and keeps 256.
    maxFetches: wholeNumber(env, "BUN_CONFIG_MAX_HTTP_REQUESTS", { min: 1, max: 65_535 }) ?? 256,
    demoOffByEnv: env.SWITCHYARD_DEMO === "0",
    upstreamViaProxy: upstreamViaProxy(env),
  };
}

function sqliteSync(value: string | undefined): "normal" | "full" {
  const v = (value ?? "").trim().toLowerCase();
  if (v === "" || v === "normal") return "normal";
  if (v === "full") return "full";
  throw new StoreConfigError(`SWITCHYARD_SQLITE_SYNC must be normal or full, not "${v.slice(0, 40)}"`);
}
