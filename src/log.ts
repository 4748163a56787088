export type LogLevel = "debug" | "info" | "warn" | "error";
export type Logger = (level: LogLevel, message: string, fields?: Record<string, unknown>) => void;

/** One JSON object per line on stderr: what log shippers and `jq` read without configuration. */
export function jsonLogger(minLevel: LogLevel = "info"): Logger {
  const rank = { debug: 0, info: 1, warn: 2, error: 3 };
  return (level, message, fields) => {
    if (rank[level] < rank[minLevel]) return;
    process.stderr.write(JSON.stringify({ time: new Date().toISOString(), level, message, ...fields }) + "\n");
  };
}

export const silentLogger: Logger = () => {};
