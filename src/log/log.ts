import { mayHoldSecret, scrubSecrets } from "./scrub.ts";

export type LogLevel = "debug" | "info" | "warn" | "error";

/**
 * Marks a line's fields whose strings were checked where they were made: every string that did
 * not come from the gateway itself tested with `mayHoldSecret` and found plain, the others the
 * gateway's own (ids, labels, outcomes). jsonLogger writes such fields without testing each string
 * again (the access line's eleven strings were 2 % of a non-stream request's CPU in a profile).
 */
export const CHECKED_FIELDS: unique symbol = Symbol("fields checked for secrets");
export type Logger = (level: LogLevel, message: string, fields?: Record<string, unknown>) => void;

/**
 * One JSON object per line on stderr: what log shippers and `jq` read without configuration.
 *
 * Lines of one turn of the event loop go out in one write (an access-log line each per request
 * made a write call each, ~2 µs); warnings and errors go out at once, with whatever waited
 * before them, and so does everything when the process exits.
 */
export function jsonLogger(minLevel: LogLevel = "info", out: (text: string) => void = stderrLines): Logger {
  if (out === stderrLines) guardStdio();
  const rank = { debug: 0, info: 1, warn: 2, error: 3 };
  let pending = "";
  let scheduled = false;
  const flush = () => {
    scheduled = false;
    if (pending.length === 0) return;
    const text = pending;
    pending = "";
    out(text);
  };
  process.on("exit", flush);
  // Lines of one millisecond share its timestamp (under load, dozens of access-log lines do).
  let stampedAt = -1;
  let stamp = "";
  const line = (level: LogLevel, message: string, fields: Record<string, unknown> | undefined): string => {
    const ms = Date.now();
    if (ms !== stampedAt) {
      stampedAt = ms;
      stamp = new Date(ms).toISOString();
    }
    const head = `{"time":"${stamp}","level":"${level}","message":${JSON.stringify(message)}`;
    const rest = fields ? JSON.stringify(fields) : "{}";
    // The fields' object without its opening brace: one serialisation, no merged copy.
    return rest.length > 2 ? `${head},${rest.slice(1)}\n` : `${head}}\n`;
  };
  const write = (level: LogLevel, message: string, fields?: Record<string, unknown>) => {
    // Most lines (every access-log line) hold plain values and no secret: each string is tested
    // (the scrubber's own filter) and the fields are written as they are; only a line that may
    // hold one is made from scrubbed copies. Copying the fields to scrub them cost more than the
    // rest of the line (bench/in-process.ts, 32 connections: 3.7 % of the gateway's CPU).
    const checked = fields !== undefined && (fields as { [CHECKED_FIELDS]?: true })[CHECKED_FIELDS] === true;
    const text = mayHoldSecret(message) || (!checked && !plainWithoutSecrets(fields))
      ? line(level, scrubSecrets(message), fields && (scrubValue(fields, 0) as Record<string, unknown>))
      : line(level, message, fields);
    pending += text;
    if (rank[level] >= rank.warn || pending.length >= 64 * 1024) flush();
    else if (!scheduled) {
      scheduled = true;
      setImmediate(flush);
    }
  };
  const logger: Logger = (level, message, fields) => {
    if (rank[level] >= rank[minLevel]) write(level, message, fields);
  };
  (logger as { [SCRUBS]?: true })[SCRUBS] = true;
  return logger;
}

export const silentLogger: Logger = () => {};

/** A writable destination as the process's stdio are: `write` says false when it held the text back. */
export interface LineSink {
  write(text: string): boolean;
  on(event: "drain", listener: () => void): unknown;
  on(event: "error", listener: (err: NodeJS.ErrnoException) => void): unknown;
}

/**
 * Most bytes of log lines held back by a destination that takes them slower than they come (a log
 * shipper that stopped reading its pipe): past it, lines are dropped, not kept in memory without
 * bound (a disk-fault probe, 2026-11-30), and the first line written after the destination takes
 * some again says how many were.
 */
export const LOG_BACKLOG_MAX_BYTES = 16 * 1024 * 1024;

/**
 * Lines to a destination through whatever fails there: a log file on a full disk (ENOSPC), a pipe
 * whose reader died (EPIPE), a reader that stopped reading. Without an error listener the stream's
 * error event ended the process, so a full log disk took the gateway down with it and kept it
 * from starting (a disk-fault probe, 2026-11-30). The lines of a failing write are lost, lines past
 * the backlog are dropped, and the first line that goes out again says so. `also` (stdout, where the
 * start banner goes) is guarded against errors the same way.
 */
/**
 * What this process's log lost, for /metrics (gateway-metrics.ts): lines dropped past the backlog,
 * and writes its destination refused (their lines are lost too, how many is not told). Said only
 * in the log before, the one place that was failing (a disk-fault probe, nineteenth session).
 */
export interface LogLosses {
  dropped: number;
  failedWrites: number;
}
export const LOG_LOSSES: LogLosses = { dropped: 0, failedWrites: 0 };

export function guardedLines(sink: LineSink, also: { on(event: "error", listener: (err: NodeJS.ErrnoException) => void): unknown }[] = [], maxBacklog = LOG_BACKLOG_MAX_BYTES, losses: LogLosses = LOG_LOSSES): (text: string) => void {
  /** Why lines were lost since the last write that went out (a code: ENOSPC, EPIPE), if any were. */
  let lostTo: string | undefined;
  let dropped = 0;
  /** Bytes written while the destination held them back, since it last took some. */
  let backlog = 0;
  for (const stream of [sink, ...also]) {
    stream.on("error", (err) => {
      losses.failedWrites++;
      lostTo ??= err.code ?? "error";
    });
  }
  sink.on("drain", () => void (backlog = 0));
  return (text) => {
    if (backlog > maxBacklog) {
      const lines = text.split("\n").length - 1;
      dropped += lines;
      losses.dropped += lines;
      return;
    }
    if (lostTo !== undefined || dropped > 0) {
      const why = dropped > 0 ? `"dropped":${dropped}${lostTo ? `,"error":${JSON.stringify(lostTo)}` : ""}` : `"error":${JSON.stringify(lostTo)}`;
      text = `{"time":"${new Date().toISOString()}","level":"warn","message":"log lines were lost: the log's destination refused them or fell behind",${why}}\n` + text;
      lostTo = undefined;
      dropped = 0;
    }
    if (!sink.write(text)) backlog += text.length;
  };
}

let stdio: ((text: string) => void) | undefined;

/** The process's stderr, guarded (see guardedLines); stdout's errors are listened for too. */
export function stderrLines(text: string): void {
  guardStdio()(text);
}

function guardStdio(): (text: string) => void {
  return (stdio ??= guardedLines(process.stderr, [process.stdout]));
}

/**
 * Every string that reaches `log`, in the message or any field (nested ones and errors too),
 * passes through the secret scrubber first: error texts echo vendor keys, tokens and URLs with
 * credentials, and log lines are read by more people than keys should be.
 */
export function withoutSecrets(log: Logger): Logger {
  // A logger that scrubs already (jsonLogger, or one wrapped here) is not wrapped twice: the app
  // wraps whatever logger it is given, and every access line was scrubbed twice (both passes
  // showed in a profile of the gateway at info, 1.6 % and 2.3 % of its CPU).
  if ((log as { [SCRUBS]?: true })[SCRUBS]) return log;
  const scrubbing: Logger = (level, message, fields) => log(level, scrubSecrets(message), fields && (scrubValue(fields, 0) as Record<string, unknown>));
  (scrubbing as { [SCRUBS]?: true })[SCRUBS] = true;
  return scrubbing;
}

/** Marks a logger whose lines are scrubbed before they are written. */
const SCRUBS = Symbol("scrubs secrets");

/**
 * A plain object (an object literal: no class, so no `toJSON` of its own to write something else)
 * of strings, numbers, booleans or nothing, none of whose strings may hold a secret: written as it is.
 */
function plainWithoutSecrets(fields: Record<string, unknown> | undefined): boolean {
  if (fields === undefined) return true;
  const proto = Object.getPrototypeOf(fields);
  if (proto !== Object.prototype && proto !== null) return false;
  for (const k in fields) {
    const v = fields[k];
    if (typeof v === "string") {
      if (mayHoldSecret(v)) return false;
    } else if (v !== null && typeof v === "object") return false;
  }
  return true;
}

function scrubValue(value: unknown, depth: number): unknown {
  if (typeof value === "string") return scrubSecrets(value);
  if (value instanceof Error) return scrubSecrets(value.stack ?? String(value));
  if (value === null || typeof value !== "object") return value;
  if (depth > 4) return scrubSecrets(JSON.stringify(value) ?? "");
  if (Array.isArray(value)) return value.map((v) => scrubValue(v, depth + 1));
  // for…in, not Object.entries: an access-log line's fields took more time to list than to scrub.
  const out: Record<string, unknown> = {};
  for (const k in value) {
    if (Object.hasOwn(value, k)) out[k] = scrubValue((value as Record<string, unknown>)[k], depth + 1);
  }
  return out;
}
