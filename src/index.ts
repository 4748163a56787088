// First: sets what Bun reads at start (see the module), before anything else runs.
import "./config/runtime-env.ts";
import { ConfigError } from "./config/load-config.ts";
import { connectionIdleSeconds } from "./config/schema.ts";
import { DemoConfigError, EnvNumberError, healthCheckTarget, readEnvironment, sqlitePath, StoreConfigError, WorkersConfigError, type Environment } from "./config/env.ts";
import { OpsConfigError } from "./config/ops-settings.ts";
import { cannotOpenLedger, openDatabase } from "./store/database.ts";
import { closeLedger } from "./store/sqlite/file-identity.ts";
import { GatewayLockError, lockDatabaseFile } from "./store/sqlite/gateway-lock.ts";
import { startWalCheckpointer } from "./store/wal-checkpointer.ts";
import { createApp, SERVER_BODY_LIMIT } from "./app.ts";
import { jsonLogger } from "./log/log.ts";
import { issueDemoKey } from "./accounts/demo-account.ts";
import { microToCredits } from "./billing/money.ts";
import { holdTtlFor, openPostgresStores, openRedisConcurrency, openRedisLimiter, openRedisResponseStore, type SharedStores } from "./store/stores.ts";
import { superviseWorkers, type ListeningMessage } from "./supervisor.ts";
import type { Database } from "bun:sqlite";
import { healthCheck } from "./ops/health-check.ts";
import { SpillMismatchError } from "./store/spill-file.ts";
import { createRedisKeyState } from "./store/redis/redis-key-state.ts";
import { workerMetrics } from "./ops/worker-metrics.ts";

if (process.argv.includes("--health-check")) {
  let target: ReturnType<typeof healthCheckTarget>;
  try {
    target = healthCheckTarget(process.env);
  } catch (err) {
    // A PORT or timeout that cannot be used is the operator's to fix: one line, not a stack, and unhealthy.
    if (!(err instanceof EnvNumberError)) throw err;
    console.error(`switchyard: ${err.message}`);
    process.exit(1);
  }
  process.exit(await healthCheck(target));
}
// `switchyard --default-config`: the built-in config (with the vendors whose key variables are set)
// as YAML. A config file replaces it whole, so an operator who wants a key pool or one more model
// starts from this instead of writing every model, price and alias again.
if (process.argv.includes("--default-config")) {
  const { defaultConfig } = await import("./config/defaults.ts");
  await Bun.write(Bun.stdout, `# switchyard --default-config: the built-in config; save as switchyard.yaml and edit\n${Bun.YAML.stringify(defaultConfig(process.env), null, 2)}\n`);
  process.exit(0);
}
// `switchyard admin …`: the admin CLI from the binary (the Docker image has no Bun to run
// src/cli/admin.ts with), on the same store the gateway uses, also while it runs.
if (process.argv[2] === "admin") process.exit(await (await import("./cli/admin.ts")).adminMain(process.argv.slice(3), process.env));

// Every variable, once (config/env.ts): what cannot be used stops the start with one line naming it.
let env: Environment;
try {
  env = readEnvironment(process.env);
} catch (err) {
  if (!(err instanceof ConfigError) && !(err instanceof StoreConfigError) && !(err instanceof OpsConfigError) && !(err instanceof WorkersConfigError) && !(err instanceof DemoConfigError) && !(err instanceof EnvNumberError)) throw err;
  console.error(`switchyard: ${err.message}`);
  process.exit(1);
}
const { settings, stores: choice, ops, role, pgTimings, demo: demoWanted } = env;

const log = jsonLogger(env.logLevel);
/** How long running answers may take to finish after SIGTERM before the process exits anyway. */
const SHUTDOWN_GRACE_MS = env.shutdownGraceMs;
/** How long answers cut at the end of the grace period get to settle (one commit; the spill file after). */
const CUT_SETTLE_MS = 1_000;
/** Disk held beside the SQLite ledger for its spill file (~10,000 settlements). */
const SPILL_RESERVE_BYTES = 4 * 1024 * 1024;
/** After the cut's requests have all ended, how long their handlers get to write what they answered. */
const CUT_WRITE_MS = 25;
/** How long streams cut at the end of the grace get to write their error frames. */
const CUT_FRAMES_MS = 250;
if (role.kind === "supervisor") {
  // SWITCHYARD_WORKERS > 1: this process only starts, replaces and stops the workers (src/supervisor.ts).
  if (!choice.redisUrl) log("warn", "rate limits and max_concurrent_requests are kept per worker without SWITCHYARD_REDIS_URL: a key may get up to SWITCHYARD_WORKERS times its limits", { workers: role.workers });
  process.exit(await superviseWorkers({ workers: role.workers, port: env.port, log, graceMs: SHUTDOWN_GRACE_MS }));
}
const worker = role.kind === "worker";
// Bun reads this once at process start (config/runtime-env.ts sets it when unset). API calls use our
// own client; what still goes through fetch (image downloads, and every call when an HTTP(S)
// proxy is configured) holds these slots.
const maxUpstream = env.maxFetches;
if (maxUpstream < 1024) {
  log("warn", "at most this many fetch requests (image downloads, proxied upstream calls) run at once; more wait. BUN_CONFIG_MAX_HTTP_REQUESTS raises it (unset, the gateway uses 4096)", { maxUpstream });
}
const dbPath = env.sqlitePath;
let lock: { release(): void } | undefined;
let db: Database | undefined;
let checkpointer: ReturnType<typeof startWalCheckpointer> | undefined;
/** Whether the checkpoint thread has failed once (its return is then worth a line). */
let checkpointsFailed = false;
/** A checkpoint failure that says commits were lost, for the ledger: kept until the ledger exists. */
let lostWritesSeen: Error | undefined;
let lostWrites = (err: Error): void => {
  lostWritesSeen = err;
};
let stores: SharedStores | undefined;
if (choice.databaseUrl) {
  // PostgreSQL holds the money; SWITCHYARD_DB is ignored (nothing is written there).
  try {
    // Settlements a stop cannot write go to a spill file on this host (replayed by the next start).
    const spill = { dir: env.spillDir, database: choice.databaseUrl };
    stores = await openPostgresStores(choice.databaseUrl, { log, ledger: { holdTtlMs: holdTtlFor(settings), ...pgTimings, spill } });
  } catch (err) {
    // A spill file of another database's accounts is not a database that cannot be opened.
    if (err instanceof SpillMismatchError) console.error(`switchyard: ${err.message}`);
    else console.error(`switchyard: cannot open the PostgreSQL database of SWITCHYARD_DATABASE_URL: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  }
} else {
  try {
    // Holds live in this process's memory: a second gateway on the file would admit the same credits.
    if (dbPath !== ":memory:") lock = lockDatabaseFile(dbPath);
  } catch (err) {
    if (!(err instanceof GatewayLockError)) throw err;
    console.error(`switchyard: ${err.message}`);
    process.exit(1);
  }
  // Start-up may wait for the admin CLI's lock; once serving, the connection never waits (see sqlite-ledger.ts).
  try {
    db = openDatabase(dbPath, { mustWrite: true });
  } catch (err) {
    // A ledger that cannot be opened (a full or read-only disk, a damaged file) stops the start with
    // one line naming the file and the store's error, as the admin CLI does, not a stack trace of
    // our source (a kill -9 and disk-fault probe): an orchestrator restarts it, and its log says why.
    console.error(`switchyard: ${cannotOpenLedger(dbPath, err)}`);
    lock?.release();
    process.exit(1);
  }
  // A commit fsynced before the answer's last byte, for operators who need it to survive the OS too (env.ts).
  if (env.sqliteSync === "full") db.exec("PRAGMA synchronous = FULL");
  // Checkpoints (the one fsync in WAL mode) on a thread of their own, not inside a request's commit.
  checkpointer = startWalCheckpointer(db, dbPath, {
    onFailure: (message, code) => {
      checkpointsFailed = true;
      // A ledger file gone or damaged is checkpointed by nothing (wal-checkpointer.ts): a restart brings it back.
      if (code === "SWITCHYARD_LEDGER_FILE_GONE") log("warn", "WAL checkpoints stopped: the ledger's files were changed under the gateway; restart it", { error: message, code });
      else log("warn", "WAL checkpoints are back on the request thread until their thread starts again", { error: message, code });
    },
    // A sync that failed: commits reported done may not be on the disk, and the next ones would
    // not be either. Paid requests pause until a checkpoint syncs again (sqlite-ledger.ts).
    onLostWrites: (err) => lostWrites(err),
    onRunning: () => {
      if (checkpointsFailed) log("info", "WAL checkpoints are on their own thread again");
    },
  });
  void checkpointer.ready.then((running) => running && log("debug", "WAL checkpoints run on their own thread", { db: dbPath }));
}
// Rate limits in Redis fail closed: until it answers, requests are refused with 503.
const limiter = choice.redisUrl ? openRedisLimiter(choice.redisUrl, { log, prefix: choice.redisPrefix }) : undefined;
if (limiter && !(await limiter.ready())) log("warn", "Redis (SWITCHYARD_REDIS_URL) does not answer yet: requests are refused (503) until it does");
// Stored Responses answers are shared through the same Redis, so any worker or host can continue
// a conversation; without Redis each process keeps its own.
const responseStore = choice.redisUrl ? openRedisResponseStore(choice.redisUrl, settings, { log, prefix: choice.redisPrefix }) : undefined;
if (responseStore && !(await responseStore.ready())) log("warn", "Redis (SWITCHYARD_REDIS_URL) does not answer yet: stored Responses answers are unavailable (503 for previous_response_id) until it does");
// A key's requests under way are counted in the same Redis, so its cap holds across workers and gateways.
const concurrency = limiter ? openRedisConcurrency(limiter, { log, prefix: choice.redisPrefix }) : undefined;
// Vendor key pools' cooldowns, disabled keys, probes and session bindings: shared by every worker and replica through Redis.
const keyState = choice.redisUrl ? createRedisKeyState(choice.redisUrl, { now: Date.now, log, prefix: choice.redisPrefix }) : undefined;
// Until it answers, each process chooses keys from what it saw itself; waiting here (bounded) lets
// the first requests already share what the other processes know.
if (keyState) await keyState.ready();
// A worker's /metrics answers for every worker (they share the port: a scrape reaches any one).
const peers = role.kind === "worker" && process.send ? workerMetrics(role.slot, (m) => void process.send!(m), (handler) => void process.on("message", handler)) : undefined;
let app: ReturnType<typeof createApp>;
try {
  // Disk held for the spill file, for a disk that fills up while settlements wait (spill-file.ts).
  app = createApp({ db, stores, limiter, concurrency, settings, log, adminToken: ops.adminToken, ops, upstreamViaProxy: env.upstreamViaProxy, responseStore, keyState, gatherMetrics: peers?.gather, ledgerOptions: { spillReserveBytes: SPILL_RESERVE_BYTES } });
} catch (err) {
  // Settlements kept for a ledger that is not this one: starting would lose them (spill-file.ts).
  if (err instanceof SpillMismatchError) console.error(`switchyard: ${err.message}`);
  // A ledger that opened but cannot be read (damaged past its first pages): one line, as above.
  else if (db && /^SQLITE_/.test(String((err as { code?: unknown } | null)?.code ?? ""))) console.error(`switchyard: ${cannotOpenLedger(dbPath, err)}`);
  else throw err;
  process.exit(1);
}
peers?.serve(app.services.ownMetrics);
lostWrites = (err) => {
  app.services.ledger.storageFailed?.(err);
};
if (lostWritesSeen) lostWrites(lostWritesSeen);
// A ledger that takes no writes (a full or read-only disk) is reported by /ready; the demo key it
// cannot hold is one line, not a start that dies with a stack (a kill -9 and disk-fault probe).
const demo = demoWanted.on
  ? await issueDemoKey(app.services.accounts).catch((err: unknown) => {
      log("error", "no demo key: the ledger cannot take it now", { error: err instanceof Error ? err.message : String(err) });
      return undefined;
    })
  : undefined;
// What the account has now, not what it started with: a spent demo account says so at the next start.
const demoCredits = demo ? microToCredits((await app.services.ledger.balance(demo.accountId).catch(() => null))?.balanceMicro ?? 0) : 0;
db?.exec("PRAGMA busy_timeout = 0");
const storeName = choice.databaseUrl ? "PostgreSQL" : dbPath;

const requestedPort = env.port;
const hostname = env.hostname;
try {
  app.listen({
    port: requestedPort,
    hostname,
    // Streams lift this per request, and admin requests widen it (http/routes/admin.ts): it bounds
    // connections with nothing under way (server.connection_idle_ms).
    idleTimeout: connectionIdleSeconds(settings),
    // Bodies are refused with our JSON 413 from their Content-Length or while being read (never buffered
    // past the limit); Bun's own cut would answer without a body (see SERVER_BODY_LIMIT).
    maxRequestBodySize: SERVER_BODY_LIMIT,
    // Workers share the port; the kernel spreads new connections over them. Elysia turns reusePort on
    // unless told otherwise, which would let a second gateway on the same port take half the
    // connections unnoticed (with its own ledger), so a single process asks for the port alone.
    reusePort: worker,
  });
} catch (err) {
  // One line, no stack: the operator needs to know which port and what to change.
  const code = (err as { code?: string } | null)?.code;
  console.error(
    code === "EADDRINUSE"
      ? `switchyard: port ${requestedPort} on ${hostname} is already in use (another gateway?); set PORT to another one`
      : `switchyard: cannot listen on port ${requestedPort} on ${hostname}: ${err instanceof Error ? err.message : String(err)}`,
  );
  await stores?.close();
  lock?.release();
  process.exit(1);
}

const port = app.server!.port;
const shown = hostname === "0.0.0.0" ? "localhost" : hostname;
if (worker) process.send?.({ type: "listening", port: Number(port) } satisfies ListeningMessage);
log("info", "switchyard listening", { url: `http://${shown}:${port}`, config: settings.source, db: storeName, ...(db ? { sqliteSync: db.query<{ synchronous: number }, []>("PRAGMA synchronous").get()?.synchronous === 2 ? "full" : "normal" } : {}), rateLimits: choice.redisUrl ? "redis" : "in-process", storedResponses: choice.redisUrl ? "redis" : "in-process", models: settings.models.length });

// Workers after the first are told SWITCHYARD_DEMO=0 by the supervisor: only a single process or the first says why.
if (!demoWanted.on && !(worker && env.demoOffByEnv)) log("info", `no demo account: ${demoWanted.reason} (SWITCHYARD_DEMO=1 turns it on)`);
if (demo) {
  const model = settings.models[0]?.id ?? "switchyard/echo";
  console.log(`
Switchyard is listening on http://${shown}:${port}  (config: ${settings.source}, database: ${storeName})
Demo key (account "demo", ${demoCredits.toLocaleString("en-US", { maximumFractionDigits: 6 })} credits left; a new key is issued at each start): ${demo.key}

  curl http://${shown}:${port}/v1/chat/completions \\
    -H "Authorization: Bearer ${demo.key}" -H "content-type: application/json" \\
    -d '{"model":"${model}","messages":[{"role":"user","content":"Hello, Switchyard!"}]}'

Console (balance, usage, keys): http://${shown}:${port}/console/ — an API key does not sign in there; the demo
account's login comes from an invite link this prints (in another terminal, in the checkout):
  ${dbPath !== sqlitePath({}) ? `SWITCHYARD_DB=${dbPath} ` : ""}${adminCommand()} invite ${demo.accountId} you@example.com --url http://${shown}:${port}
`);
}

/** How this gateway's admin commands are run: the compiled binary's own `admin`, else the checkout's script as the quick start runs it. */
function adminCommand(): string {
  const compiled = Bun.main.startsWith("/$bunfs/") || /^[A-Za-z]:[\\/]~BUN[\\/]/.test(Bun.main);
  return compiled ? `${process.execPath} admin` : `npx -y bun@${Bun.version} run admin`;
}

let stopping = false;
async function shutdown(signal: string): Promise<void> {
  if (stopping) {
    // A second signal: stop now, as asked, but keep what is queued (the spill file, written
    // synchronously, or the log): paid answers already delivered must not vanish with the process.
    log("warn", "a second signal during shutdown: stopping now", { signal });
    app.services.ledger.abandon?.();
    process.exit(1);
  }
  stopping = true;
  log("info", "shutting down", { signal, inflight: app.services.inflight.count });
  // Refuse new connections, let running answers finish (up to the grace period), write every settlement, then exit.
  app.services.drain();
  const drained = Promise.all([app.server?.stop(false), app.services.inflight.idle()]);
  await Promise.race([drained, Bun.sleep(SHUTDOWN_GRACE_MS)]);
  // Answers still running when the grace ends are cut now, while the ledger still writes: each
  // settles for what it produced (a cut stream pays for what it sent), instead of ending with the
  // process and leaving no record. What settles later still goes to the spill file (settlement-queue.ts).
  if (app.services.inflight.count > 0) {
    log("warn", "answers still running at the end of the grace period are cut", { inflight: app.services.inflight.count });
    // Streams end with an error frame their clients can read (an SDK retries it) before the
    // connections close; a stream whose client reads nothing does not hold the stop longer.
    // (Requests still waiting for their upstream get a 503 instead; once every one is ended, a
    // moment more lets the handlers write what they answered before the connections close.)
    await Promise.race([app.services.inflight.cut().then(() => Bun.sleep(CUT_WRITE_MS)), Bun.sleep(CUT_FRAMES_MS)]);
    // Whole answers settling now go out before the connections close: their bodies follow their
    // commits, and a connection closed in between left a client with a reset and an answer
    // charged in full (a fault probe: 5 stops of 15 whose answer came ~90 ms after the grace).
    // Checked again after each moment to write, and closed in the same turn as the last check, so
    // an answer that ends after it finds its client gone (charged nothing, billing-session.ts).
    const delivering = Date.now() + CUT_SETTLE_MS;
    while (app.services.inflight.deliveringCount > 0 && Date.now() < delivering) {
      await Promise.race([app.services.inflight.delivered(), Bun.sleep(delivering - Date.now())]);
      await Bun.sleep(CUT_WRITE_MS);
    }
    app.services.inflight.closeConnections();
    void app.server?.stop(true);
    await Promise.race([app.services.inflight.idle(), Bun.sleep(CUT_SETTLE_MS)]);
    if (app.services.inflight.count > 0) {
      // Still not settled: an answer its upstream gave no usage for waits for its token counts,
      // and in a process just started on a busy host the tokenizer's tables were still loading
      // (a fault probe: a cut stream that had sent words had no record after the stop, 1 stop in
      // 5). They are counted by the rule of thumb now (recorded as estimated, as when the
      // tokenizer cannot run), so they settle while the ledger still writes.
      app.services.tokenizer.hurry();
      await Promise.race([app.services.inflight.idle(), Bun.sleep(CUT_SETTLE_MS)]);
      if (app.services.inflight.count > 0) log("error", "requests still not settled when the gateway stops: their charges are not recorded", { inflight: app.services.inflight.count });
    }
  }
  // The last settlements' alerts are queued while the store is open; sends under way are cut
  // (their events stay in the outbox and go at the next start).
  if (app.services.alerts) {
    await app.services.ledger.flush();
    await app.services.alerts.checked();
    await app.services.alerts.stop();
  }
  if (stores) await stores.close();
  else await app.services.ledger.close();
  // Places given back before the connection they go over closes (the limiter's).
  await concurrency?.close();
  limiter?.close();
  responseStore?.close();
  keyState?.close();
  await checkpointer?.stop();
  // The last close copies the log into the file: nothing of a log found cut or overwritten.
  if (db) closeLedger(db);
  lock?.release();
  process.exit(0);
}
if (worker) {
  // A worker takes its orders from the supervisor: a terminal's Ctrl-C reaches the whole process
  // group and the supervisor passes it on as SIGTERM. A worker whose supervisor is gone drains.
  process.on("SIGINT", () => {});
  process.on("SIGTERM", () => void shutdown("SIGTERM"));
  process.on("disconnect", () => void shutdown("supervisor gone"));
} else {
  for (const signal of ["SIGTERM", "SIGINT"] as const) process.on(signal, () => void shutdown(signal));
}
