import type { Subprocess } from "bun";
import type { Logger } from "./log/log.ts";
import { WORKER_SLOT_ENV } from "./config/env.ts";

/**
 * `SWITCHYARD_WORKERS=N`: N gateway processes on one port (SO_REUSEPORT; the kernel spreads new
 * connections over them), started and kept alive by a supervisor that serves nothing itself. One
 * worker (the default) is the plain gateway process, with no supervisor and no extra hop.
 * See docs/decisions.md, "Workers".
 */

/** A worker that lived less than this was not healthy: its replacement waits longer each time. */
export const QUICK_DEATH_MS = 10_000;
const FIRST_RESTART_MS = 200;
const MAX_RESTART_MS = 5_000;

/**
 * How long before a dead worker is started again, after `quickDeaths` deaths in a row that came
 * less than QUICK_DEATH_MS after their start: at once-ish after a worker that had been serving,
 * then doubling up to 5 s, so a worker that cannot start (its database unreachable, a broken
 * binary) costs one start every 5 s, not a busy loop, and is back within 5 s of the cause going.
 */
export function restartDelayMs(quickDeaths: number): number {
  if (quickDeaths <= 0) return 50;
  return Math.min(MAX_RESTART_MS, FIRST_RESTART_MS * 2 ** (quickDeaths - 1));
}

/**
 * The command that starts this same program again: the script under `bun` (with Bun's own flags),
 * or the compiled executable, whose entry point is inside it (`Bun.main` is then a `$bunfs` path
 * and argv[1] names it, so only the arguments after it are passed).
 */
export function workerCommand(): string[] {
  const compiled = Bun.main.startsWith("/$bunfs/") || /^[A-Za-z]:[\\/]~BUN[\\/]/.test(Bun.main);
  return compiled ? [process.execPath, ...process.argv.slice(2)] : [process.execPath, ...process.execArgv, Bun.main, ...process.argv.slice(2)];
}

/** What a worker tells the supervisor over IPC once it accepts connections. */
export interface ListeningMessage {
  type: "listening";
  port: number;
}

/**
 * `/metrics` across workers (ops/metrics-merge.ts): the scraped worker asks the supervisor
 * (`metrics-request`), which asks every listening worker for its own exposition
 * (`metrics-collect`, answered by `metrics-part`) and hands the parts back (`metrics-response`).
 * A worker that has not answered within METRICS_GATHER_MS is left out of that scrape.
 */
export type MetricsMessage =
  | { type: "metrics-request"; id: number }
  | { type: "metrics-collect"; id: number }
  | { type: "metrics-part"; id: number; text: string }
  | { type: "metrics-response"; id: number; parts: { worker: number; text: string }[] };

export const METRICS_GATHER_MS = 2_000;

export interface SupervisorOptions {
  workers: number;
  /** PORT as configured; 0 means the first worker picks one and the others join it. */
  port: number;
  log: Logger;
  /** How long workers take to drain after SIGTERM (their own grace); the supervisor waits this plus 15 s, then kills. */
  graceMs: number;
  command?: string[];
  env?: Record<string, string | undefined>;
}

interface Slot {
  index: number;
  child?: Subprocess;
  startedAt: number;
  listening: boolean;
  quickDeaths: number;
  timer?: ReturnType<typeof setTimeout>;
}

/**
 * Runs `workers` copies of the gateway and keeps them running; resolves with the exit code the
 * supervisor should end with. The first worker starts alone (it migrates the database, issues the
 * demo key and prints the banner; with PORT=0 it picks the port the others then share). SIGTERM or
 * SIGINT is passed on as SIGTERM (workers ignore a terminal's SIGINT, which reaches the whole
 * process group, so Ctrl-C drains once instead of killing), and the supervisor waits for every
 * worker to drain; a second signal makes workers stop at once, as it does a single process.
 */
export async function superviseWorkers(o: SupervisorOptions): Promise<number> {
  const command = o.command ?? workerCommand();
  const env = o.env ?? process.env;
  const log = o.log;
  let port = o.port;
  let stopping = false;
  let announced = false;
  let settle!: (code: number) => void;
  const finished = new Promise<number>((resolve) => (settle = resolve));
  let firstListening: ((ok: boolean) => void) | undefined;
  const slots: Slot[] = Array.from({ length: o.workers }, (_, i) => ({ index: i + 1, startedAt: 0, listening: false, quickDeaths: 0 }));

  /** Scrapes being gathered: each worker's part as it comes, and who asked. */
  let gatherId = 0;
  const gathering = new Map<number, { parts: { worker: number; text: string }[]; waiting: Set<Subprocess>; done: () => void }>();
  const gather = (asker: Subprocess, askerId: number) => {
    const id = ++gatherId;
    const children = slots.filter((s) => s.listening && s.child).map((s) => s.child!);
    const parts: { worker: number; text: string }[] = [];
    const done = () => {
      if (!gathering.delete(id)) return;
      clearTimeout(timer);
      parts.sort((a, b) => a.worker - b.worker);
      try {
        asker.send({ type: "metrics-response", id: askerId, parts } satisfies MetricsMessage);
      } catch {
        // The asker is gone: nobody is waiting.
      }
    };
    const timer = setTimeout(done, METRICS_GATHER_MS);
    gathering.set(id, { parts, waiting: new Set(children), done });
    for (const child of children) {
      try {
        child.send({ type: "metrics-collect", id } satisfies MetricsMessage);
      } catch {
        gathering.get(id)?.waiting.delete(child);
      }
    }
    if (gathering.get(id)?.waiting.size === 0) done();
  };

  const start = (slot: Slot, first: boolean) => {
    slot.timer = undefined;
    slot.listening = false;
    slot.startedAt = performance.now();
    const child = Bun.spawn(command, {
      // Only the first worker of the first start issues the demo key: issuing one revokes the last.
      env: { ...env, PORT: String(port), [WORKER_SLOT_ENV]: String(slot.index), ...(first ? {} : { SWITCHYARD_DEMO: "0" }) },
      stdio: ["ignore", "inherit", "inherit"],
      ipc(message: unknown) {
        const metrics = message as MetricsMessage | null;
        if (metrics?.type === "metrics-request") return gather(child, metrics.id);
        if (metrics?.type === "metrics-part") {
          const g = gathering.get(metrics.id);
          if (!g || !g.waiting.delete(child)) return;
          g.parts.push({ worker: slot.index, text: metrics.text });
          if (g.waiting.size === 0) g.done();
          return;
        }
        const m = message as Partial<ListeningMessage> | null;
        if (m?.type !== "listening" || typeof m.port !== "number") return;
        slot.listening = true;
        port = m.port;
        log("info", "worker listening", { worker: slot.index, pid: child.pid, port });
        if (slot.index === 1 && firstListening) firstListening(true);
        if (!announced && slots.every((s) => s.listening)) {
          announced = true;
          log("info", "workers listening", { workers: o.workers, port, pids: slots.map((s) => s.child?.pid) });
        }
      },
    });
    slot.child = child;
    log("info", "worker started", { worker: slot.index, pid: child.pid });
    void child.exited.then((code) => onExit(slot, child, code));
  };

  const onExit = (slot: Slot, child: Subprocess, code: number) => {
    if (slot.child !== child) return;
    slot.child = undefined;
    const wasListening = slot.listening;
    slot.listening = false;
    if (stopping) {
      // A worker still starting when the stop came has no handler yet and ends by the SIGTERM we
      // sent it: stopped as asked, not a failure (exit 1 from a clean stop; a fault probe).
      exitCodes.push(child.signalCode === "SIGTERM" && !wasListening ? 0 : code);
      firstListening?.(false);
      if (slots.every((s) => !s.child)) settle(exitCodes.every((c) => c === 0) ? 0 : 1);
      return;
    }
    if (slot.index === 1 && firstListening) {
      // The first worker could not start (an unreachable database, a port in use): fail as a single process would.
      firstExit = code || 1;
      firstListening(false);
      return;
    }
    const lived = performance.now() - slot.startedAt;
    slot.quickDeaths = lived < QUICK_DEATH_MS || !wasListening ? slot.quickDeaths + 1 : 0;
    const delay = restartDelayMs(slot.quickDeaths);
    log("warn", "worker exited; starting a new one", { worker: slot.index, pid: child.pid, code, signal: child.signalCode ?? undefined, livedMs: Math.round(lived), restartInMs: delay });
    slot.timer = setTimeout(() => start(slot, false), delay);
  };

  const exitCodes: number[] = [];
  let firstExit = 1;
  const stop = (signal: string) => {
    if (stopping) {
      // Second signal: workers stop at once (their own second-signal rule), and so do we.
      for (const s of slots) s.child?.kill("SIGTERM");
      settle(1);
      return;
    }
    stopping = true;
    log("info", "stopping workers", { signal, workers: slots.filter((s) => s.child).length });
    for (const s of slots) {
      if (s.timer) clearTimeout(s.timer);
      s.timer = undefined;
      const child = s.child;
      child?.kill("SIGTERM");
    }
    if (slots.every((s) => !s.child)) settle(0);
    const killer = setTimeout(() => {
      const left = slots.filter((s) => s.child);
      log("error", "workers did not stop in time; killing them", { pids: left.map((s) => s.child!.pid) });
      for (const s of left) s.child!.kill("SIGKILL");
    }, o.graceMs + 15_000);
    killer.unref();
  };
  process.on("SIGTERM", () => stop("SIGTERM"));
  process.on("SIGINT", () => stop("SIGINT"));

  log("info", "starting workers", { workers: o.workers });
  const started = new Promise<boolean>((resolve) => (firstListening = resolve));
  start(slots[0]!, true);
  const ok = await started;
  firstListening = undefined;
  if (!ok) {
    if (stopping) return finished;
    log("error", "the first worker exited before it listened; stopping", {});
    stopping = true;
    return firstExit;
  }
  if (!stopping) for (const slot of slots.slice(1)) start(slot, false);
  return finished;
}
