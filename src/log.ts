import { scrubSecrets } from "./ops/scrub.ts";

export type LogLevel = "debug" | "info" | "warn" | "error";
export type Logger = (level: LogLevel, message: string, fields?: Record<string, unknown>) => void;

/** One JSON object per line on stderr: what log shippers and `jq` read without configuration. */
export function jsonLogger(minLevel: LogLevel = "info"): Logger {
  const rank = { debug: 0, info: 1, warn: 2, error: 3 };
  const write = withoutSecrets((level, message, fields) => {
    process.stderr.write(JSON.stringify({ time: new Date().toISOString(), level, message, ...fields }) + "\n");
  });
  return (level, message, fields) => {
    if (rank[level] >= rank[minLevel]) write(level, message, fields);
  };
}

export const silentLogger: Logger = () => {};

/**
 * Every string that reaches `log`, in the message or any field (nested ones and errors too),
 * passes through the secret scrubber first: error texts echo vendor keys, tokens and URLs with
 * credentials, and log lines are read by more people than keys should be.
 */
export function withoutSecrets(log: Logger): Logger {
  return (level, message, fields) => log(level, scrubSecrets(message), fields && (scrubValue(fields, 0) as Record<string, unknown>));
}

function scrubValue(value: unknown, depth: number): unknown {
  if (typeof value === "string") return scrubSecrets(value);
  if (value instanceof Error) return scrubSecrets(value.stack ?? String(value));
  if (value === null || typeof value !== "object") return value;
  if (depth > 4) return scrubSecrets(JSON.stringify(value) ?? "");
  if (Array.isArray(value)) return value.map((v) => scrubValue(v, depth + 1));
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) out[k] = scrubValue(v, depth + 1);
  return out;
}
