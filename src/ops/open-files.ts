import { readdirSync, readFileSync, statSync } from "node:fs";
import type { ConnectionGuard } from "../limits/connection-guard.ts";
import type { Logger } from "../log/log.ts";

/**
 * The descriptors this process has open, or undefined where the system does not say (no /proc:
 * macOS). Linux 6.2 and later give the count as the size of /proc/self/fd (3 µs); older kernels
 * give 0 there, and the directory is listed instead (~0.4 ms a thousand descriptors).
 */
export function readOpenFiles(): number | undefined {
  try {
    const size = statSync("/proc/self/fd").size;
    if (size > 0) return size;
    // The listing's own descriptor is among those listed.
    return readdirSync("/proc/self/fd").length - 1;
  } catch {
    return undefined;
  }
}

/** This process's limit on open descriptors (RLIMIT_NOFILE's soft value, which Bun raises to the hard one), or undefined where unknown. */
export function readOpenFilesLimit(): number | undefined {
  try {
    const line = readFileSync("/proc/self/limits", "utf8").split("\n").find((l) => l.startsWith("Max open files"));
    const soft = line?.slice("Max open files".length).trim().split(/\s+/)[0];
    const value = soft === undefined ? Number.NaN : Number(soft);
    return Number.isSafeInteger(value) && value > 0 ? value : undefined;
  } catch {
    return undefined;
  }
}

/** How often the watchdog reads the count: an attacker opening connections fast fills a limit of 20,000 in a second or two. */
export const OPEN_FILES_EVERY_MS = 500;
/** The pressure's warning at most this often. */
const WARN_EVERY_MS = 60_000;

/**
 * Reads the open descriptors every OPEN_FILES_EVERY_MS for the connection guard and, when it says
 * so, closes the server's idle keep-alive connections (those between requests; a request under
 * way is never cut). Returns the stop. The timer does not keep the process alive.
 */
export function watchOpenFiles(o: { guard: ConnectionGuard; server: { closeIdleConnections(): number }; log: Logger; now: () => number; read?: () => number | undefined }): () => void {
  const read = o.read ?? readOpenFiles;
  let warnedAt = Number.NEGATIVE_INFINITY;
  let underPressure = false;
  const check = () => {
    const open = read();
    if (open === undefined) return;
    const shed = o.guard.observe(open);
    if (shed) {
      const closed = o.server.closeIdleConnections();
      o.guard.shed(closed);
      const now = o.now();
      if (!underPressure && now - warnedAt >= WARN_EVERY_MS) {
        warnedAt = now;
        o.log("warn", "open files near the limit: idle connections closed, and answers close their connections until fewer are open", { open, limit: o.guard.counts.limit, closed });
      }
    } else if (underPressure) o.log("info", "open files back below the pressure mark", { open, limit: o.guard.counts.limit });
    underPressure = shed;
  };
  check();
  const timer = setInterval(check, OPEN_FILES_EVERY_MS);
  timer.unref?.();
  return () => clearInterval(timer);
}
