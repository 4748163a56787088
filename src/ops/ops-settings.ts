import type { LogLevel } from "../log.ts";

/** Operability switches, from the environment (README, "Configuration"). */
export interface OpsSettings {
  /** `SWITCHYARD_METRICS=off` stops all counting and removes `/metrics`. */
  metrics: boolean;
  /** When set, `/metrics` needs `Authorization: Bearer <token>`. */
  metricsToken?: string;
  accessLog: AccessLogSettings;
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

export const DEFAULT_OPS: OpsSettings = { metrics: true, accessLog: { enabled: true, sample: 1, level: "info" } };

const LEVELS = new Set<LogLevel>(["debug", "info", "warn", "error"]);

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
  const level = (env.SWITCHYARD_ACCESS_LOG_LEVEL?.trim().toLowerCase() || "info") as LogLevel;
  if (!LEVELS.has(level)) throw new OpsConfigError(`SWITCHYARD_ACCESS_LOG_LEVEL must be debug, info, warn or error, not "${env.SWITCHYARD_ACCESS_LOG_LEVEL}"`);
  const logLevel = (env.LOG_LEVEL?.trim().toLowerCase() || "info") as LogLevel;
  return {
    metrics: onOff(env.SWITCHYARD_METRICS, "SWITCHYARD_METRICS", true),
    metricsToken: env.SWITCHYARD_METRICS_TOKEN || undefined,
    accessLog: { enabled: onOff(env.SWITCHYARD_ACCESS_LOG, "SWITCHYARD_ACCESS_LOG", true), sample, level, ...(LEVELS.has(logLevel) ? { logLevel } : {}) },
  };
}
