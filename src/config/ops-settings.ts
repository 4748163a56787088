import type { LogLevel } from "../log/log.ts";

/** Operability switches, from the environment (README, "Configuration"; read with the rest in config/env.ts). */
export interface OpsSettings {
  /** `SWITCHYARD_METRICS=off` stops all counting and removes `/metrics`. */
  metrics: boolean;
  /** When set, `/metrics` needs `Authorization: Bearer <token>`. */
  metricsToken?: string;
  /** SWITCHYARD_ADMIN_TOKEN: the admin API exists only when it is set. */
  adminToken?: string;
  accessLog: AccessLogSettings;
  /** `SWITCHYARD_CONSOLE=off` removes the web console (`/console`) and the invite route. */
  console?: boolean;
}

export interface AccessLogSettings {
  /** LOG_LEVEL: lines below it are never written, so they are not built either. */
  logLevel?: LogLevel;
  enabled: boolean;
  /** Share of successful requests logged, 0–1; errors are always logged. */
  sample: number;
  /** Level of the lines for answered and refused requests; 5xx lines are `warn`. */
  level: LogLevel;
}

export class OpsConfigError extends Error {}

export const DEFAULT_OPS: OpsSettings = { metrics: true, accessLog: { enabled: true, sample: 1, level: "info" }, console: true };

const LEVELS = new Set<LogLevel>(["debug", "info", "warn", "error"]);

/**
 * A log level from the environment, in any case (`DEBUG` is `debug`); unset or empty is `info`.
 * Anything else stops the start naming the variable: an unknown level used to rank below none,
 * so every line was dropped without a word.
 */
export function logLevelFrom(env: Record<string, string | undefined>, name: "LOG_LEVEL" | "SWITCHYARD_ACCESS_LOG_LEVEL"): LogLevel {
  const level = (env[name]?.trim().toLowerCase() || "info") as LogLevel;
  if (!LEVELS.has(level)) throw new OpsConfigError(`${name} must be debug, info, warn or error, not "${env[name]}"`);
  return level;
}

/**
 * The shortest admin or metrics token accepted. The admin token moves money; 32 random characters
 * cannot be guessed through any throttle, while a word like "change-me" can be guessed through all of them.
 */
export const MIN_TOKEN_LENGTH = 32;

/** A bearer token from the environment: unset (or empty) is none; set, it must be long enough. */
function bearerToken(env: Record<string, string | undefined>, name: string): string | undefined {
  const value = env[name];
  if (!value) return undefined;
  // The message names the variable and the rule, never the value: start-up errors end up in logs.
  if (value.length < MIN_TOKEN_LENGTH) {
    throw new OpsConfigError(`${name} must be at least ${MIN_TOKEN_LENGTH} characters long; generate one with: openssl rand -hex 32`);
  }
  return value;
}

function onOff(value: string | undefined, name: string, fallback: boolean): boolean {
  const v = value?.trim().toLowerCase();
  if (!v) return fallback;
  if (["on", "1", "true", "yes"].includes(v)) return true;
  if (["off", "0", "false", "no"].includes(v)) return false;
  throw new OpsConfigError(`${name} must be on or off, not "${value}"`);
}

export function opsSettings(env: Record<string, string | undefined>): OpsSettings {
  const sampleText = env.SWITCHYARD_ACCESS_LOG_SAMPLE?.trim();
  const sample = sampleText ? Number(sampleText) : 1;
  if (!Number.isFinite(sample) || sample < 0 || sample > 1) throw new OpsConfigError(`SWITCHYARD_ACCESS_LOG_SAMPLE must be a number from 0 to 1, not "${sampleText}"`);
  const level = logLevelFrom(env, "SWITCHYARD_ACCESS_LOG_LEVEL");
  const logLevel = logLevelFrom(env, "LOG_LEVEL");
  return {
    metrics: onOff(env.SWITCHYARD_METRICS, "SWITCHYARD_METRICS", true),
    metricsToken: bearerToken(env, "SWITCHYARD_METRICS_TOKEN"),
    adminToken: bearerToken(env, "SWITCHYARD_ADMIN_TOKEN"),
    accessLog: { enabled: onOff(env.SWITCHYARD_ACCESS_LOG, "SWITCHYARD_ACCESS_LOG", true), sample, level, logLevel },
    console: onOff(env.SWITCHYARD_CONSOLE, "SWITCHYARD_CONSOLE", true),
  };
}
