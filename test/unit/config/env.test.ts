import { expect, test } from "bun:test";
import { typeScriptFiles } from "../../helpers/source-files.ts";
import { readFileSync } from "node:fs";
import { relative, resolve } from "node:path";
import { EnvNumberError, healthCheckTarget, readEnvironment, StoreConfigError, upstreamViaProxy, WorkersConfigError } from "../../../src/config/env.ts";
import { ConfigError } from "../../../src/config/load-config.ts";
import { OpsConfigError } from "../../../src/config/ops-settings.ts";

/** config/env.ts reads every environment variable once; each part keeps its own tests (metrics, workers, startup, deploy). */

const SRC = resolve(import.meta.dir, "../../../src");
const ADMIN = "a".repeat(32);

test("readEnvironment gathers every variable the gateway reads, each in its place", () => {
  const env = readEnvironment({
    SWITCHYARD_DATABASE_URL: "postgres://u@db/x",
    SWITCHYARD_REDIS_URL: "redis://cache:6379",
    SWITCHYARD_REDIS_PREFIX: "tenant-a:",
    SWITCHYARD_ADMIN_TOKEN: ADMIN,
    SWITCHYARD_WORKERS: "3",
    SWITCHYARD_PG_HEARTBEAT_MS: "100",
    SWITCHYARD_PG_STALE_AFTER_MS: "400",
    LOG_LEVEL: "warn",
    SWITCHYARD_SHUTDOWN_GRACE_MS: "1500",
    PORT: "9090",
    HOST: "127.0.0.1",
    SWITCHYARD_DB: "/tmp/x.sqlite",
    SWITCHYARD_SPILL_DIR: "/var/spill",
    SWITCHYARD_SQLITE_SYNC: "full",
    BUN_CONFIG_MAX_HTTP_REQUESTS: "2048",
    SWITCHYARD_DEMO: "0",
    HTTPS_PROXY: "http://proxy:3128",
  });
  expect(env.settings.source).toBe("built-in defaults");
  expect(env.stores).toEqual({ databaseUrl: "postgres://u@db/x", redisUrl: "redis://cache:6379", redisPrefix: "tenant-a:" });
  expect(env.ops.adminToken).toBe(ADMIN);
  expect(env.ops.accessLog.logLevel).toBe("warn");
  expect(env.role).toEqual({ kind: "supervisor", workers: 3 });
  expect(env.pgTimings).toEqual({ heartbeatMs: 100, staleAfterMs: 400 });
  expect(env.demo).toEqual({ on: false, reason: "SWITCHYARD_DEMO is off" });
  const { settings, stores, ops, role, pgTimings, demo, ...rest } = env;
  expect(rest).toEqual({
    logLevel: "warn",
    shutdownGraceMs: 1500,
    port: 9090,
    hostname: "127.0.0.1",
    sqlitePath: "/tmp/x.sqlite",
    sqliteSync: "full",
    spillDir: "/var/spill",
    maxFetches: 2048,
    demoOffByEnv: true,
    upstreamViaProxy: true,
  });
});

test("SWITCHYARD_SQLITE_SYNC: normal or full, any case; anything else stops the start naming it", () => {
  expect(readEnvironment({ SWITCHYARD_SQLITE_SYNC: "FULL" }).sqliteSync).toBe("full");
  expect(() => readEnvironment({ SWITCHYARD_SQLITE_SYNC: "extra" })).toThrow(/SWITCHYARD_SQLITE_SYNC must be normal or full/);
});

test("LOG_LEVEL: any case, trimmed; an unknown level stops the start naming the allowed ones (it used to drop every line)", () => {
  expect(readEnvironment({ LOG_LEVEL: "DEBUG" }).logLevel).toBe("debug");
  expect(readEnvironment({ LOG_LEVEL: " Warn " }).ops.accessLog.logLevel).toBe("warn");
  expect(readEnvironment({ LOG_LEVEL: "" }).logLevel).toBe("info");
  for (const bad of ["verbose", "warning", "trace"]) {
    expect(() => readEnvironment({ LOG_LEVEL: bad })).toThrow(OpsConfigError);
    expect(() => readEnvironment({ LOG_LEVEL: bad })).toThrow(`LOG_LEVEL must be debug, info, warn or error, not "${bad}"`);
  }
  expect(readEnvironment({ SWITCHYARD_ACCESS_LOG_LEVEL: "ERROR" }).ops.accessLog.level).toBe("error");
});

test("numeric variables: digits within their range, else the start stops naming the variable (NaN grace was no grace)", () => {
  const refused: [string, string, RegExp][] = [
    ["SWITCHYARD_SHUTDOWN_GRACE_MS", "30s", /SWITCHYARD_SHUTDOWN_GRACE_MS must be a whole number of milliseconds from 0 to 2147483647 \(got "30s"\)/],
    ["SWITCHYARD_SHUTDOWN_GRACE_MS", "-1", /SWITCHYARD_SHUTDOWN_GRACE_MS/],
    ["SWITCHYARD_SHUTDOWN_GRACE_MS", "99999999999", /SWITCHYARD_SHUTDOWN_GRACE_MS/],
    ["SWITCHYARD_SHUTDOWN_GRACE_MS", "1.5", /SWITCHYARD_SHUTDOWN_GRACE_MS/],
    ["PORT", "http", /PORT must be a whole number from 0 to 65535 \(got "http"\)/],
    ["PORT", "70000", /PORT must be a whole number from 0 to 65535/],
    ["BUN_CONFIG_MAX_HTTP_REQUESTS", "lots", /BUN_CONFIG_MAX_HTTP_REQUESTS must be a whole number from 1 to 65535/],
    ["BUN_CONFIG_MAX_HTTP_REQUESTS", "0", /BUN_CONFIG_MAX_HTTP_REQUESTS/],
  ];
  for (const [name, value, message] of refused) {
    expect(() => readEnvironment({ [name]: value })).toThrow(EnvNumberError);
    expect(() => readEnvironment({ [name]: value })).toThrow(message);
  }
  expect(() => readEnvironment({ SWITCHYARD_WORKERS: "two" })).toThrow(WorkersConfigError);
  expect(() => readEnvironment({ SWITCHYARD_WORKERS: "two" })).toThrow('SWITCHYARD_WORKERS must be a whole number from 1 to 64 (got "two")');
  expect(() => readEnvironment({ SWITCHYARD_PG_SWEEP_MS: "5" })).toThrow('SWITCHYARD_PG_SWEEP_MS must be a whole number of milliseconds from 10 to 2147483647 (got "5")');
  // Past a timer's longest wait Bun fires every millisecond: sweeps and heartbeats a thousand times a second (a review).
  for (const name of ["SWITCHYARD_PG_SWEEP_MS", "SWITCHYARD_PG_HEARTBEAT_MS", "SWITCHYARD_PG_STALE_AFTER_MS"]) {
    expect(() => readEnvironment({ [name]: "3000000000" })).toThrow(StoreConfigError);
  }
  // Zero is a value: no grace, any free port. Empty is unset.
  const env = readEnvironment({ SWITCHYARD_SHUTDOWN_GRACE_MS: "0", PORT: " 0 ", BUN_CONFIG_MAX_HTTP_REQUESTS: "" });
  expect([env.shutdownGraceMs, env.port, env.maxFetches]).toEqual([0, 0, 256]);
  for (const [name, value] of [["SWITCHYARD_HEALTH_CHECK_TIMEOUT_MS", "3s"], ["SWITCHYARD_HEALTH_CHECK_TIMEOUT_MS", "0"], ["PORT", "eighty"]]) {
    expect(() => healthCheckTarget({ [name!]: value })).toThrow(new RegExp(`^${name} must be a whole number`));
  }
});

test("SWITCHYARD_REDIS_PREFIX: letters, digits and _ : . - only, at most 64; anything else stops the start naming it", () => {
  for (const bad of ["has space", "a*b", "x".repeat(65)]) expect(() => readEnvironment({ SWITCHYARD_REDIS_PREFIX: bad })).toThrow(/SWITCHYARD_REDIS_PREFIX/);
  expect(() => readEnvironment({ SWITCHYARD_REDIS_PREFIX: "bad prefix" })).toThrow(StoreConfigError);
});

test("with nothing set, readEnvironment gives the documented defaults", () => {
  const { settings, stores, ops, role, pgTimings, demo, ...rest } = readEnvironment({});
  expect(stores).toEqual({ databaseUrl: undefined, redisUrl: undefined });
  expect(role).toEqual({ kind: "single" });
  expect(pgTimings).toEqual({});
  expect(demo).toEqual({ on: true });
  expect(rest).toEqual({
    logLevel: "info",
    shutdownGraceMs: 30_000,
    port: 8080,
    hostname: "0.0.0.0",
    sqlitePath: "./data/switchyard.sqlite",
    sqliteSync: "normal",
    spillDir: "./data",
    maxFetches: 256,
    demoOffByEnv: false,
    upstreamViaProxy: false,
  });
});

test("the first unusable variable stops the start, in the order a start has always met them", () => {
  const both = { SWITCHYARD_CONFIG: "/nonexistent/switchyard.yaml", SWITCHYARD_DATABASE_URL: "mysql://x" };
  expect(() => readEnvironment(both)).toThrow(ConfigError);
  expect(() => readEnvironment({ SWITCHYARD_DATABASE_URL: "mysql://x" })).toThrow(StoreConfigError);
});

test("each proxy variable routes upstream calls through fetch; none does not", () => {
  for (const name of ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"]) {
    expect([name, upstreamViaProxy({ [name]: "http://proxy:3128" })]).toEqual([name, true]);
  }
  expect(upstreamViaProxy({ HTTPS_PROXY: "" })).toBe(false);
  expect(upstreamViaProxy({})).toBe(false);
});

test("the health check asks this host's gateway on PORT, bracketing IPv6 hosts", () => {
  expect(healthCheckTarget({})).toEqual({ url: "http://127.0.0.1:8080/ready", timeoutMs: 3_000 });
  expect(healthCheckTarget({ PORT: "9000", HOST: "::", SWITCHYARD_HEALTH_CHECK_TIMEOUT_MS: "500" })).toEqual({ url: "http://127.0.0.1:9000/ready", timeoutMs: 500 });
  expect(healthCheckTarget({ HOST: "::1" })).toEqual({ url: "http://[::1]:8080/ready", timeoutMs: 3_000 });
});

test("outside config/, no module reads an environment variable: they only hand process.env on", () => {
  const files = typeScriptFiles(SRC);
  const reads: string[] = [];
  const handsOn: string[] = [];
  for (const file of files) {
    const rel = relative(SRC, file);
    if (rel.startsWith("config/")) continue;
    const code = readFileSync(file, "utf8").replace(/\/\*[\s\S]*?\*\/|\/\/.*$/gm, "");
    if (/\benv\.[A-Z][A-Z0-9_]*|\benv\[|process\.env\.|process\.env\[|Bun\.env/.test(code)) reads.push(rel);
    if (/process\.env\b/.test(code)) handsOn.push(rel);
  }
  expect(reads).toEqual([]);
  expect(handsOn.sort()).toEqual(["cli/admin.ts", "index.ts", "supervisor.ts"]);
});
