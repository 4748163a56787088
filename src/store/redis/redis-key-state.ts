import { RedisClient } from "bun";
import type { KeyState, KeyStateStore, KeyView } from "../../providers/key-pool.ts";
import type { Logger } from "../../log/log.ts";
import { createMemoryKeyState, DEFAULT_SESSION_TTL_MS } from "../memory/memory-key-state.ts";
import { evalScript, redisScript } from "./eval-script.ts";
import { answerWithin } from "./answer-within.ts";

export interface RedisKeyStateOptions {
  /** Prefix of every key written (several deployments can share one Redis); the rate limiter's default. */
  prefix?: string;
  /** Longest a read may take before this process decides on its own view. */
  timeoutMs?: number;
  /** A session unused this long is forgotten (each use restarts it). */
  sessionTtlMs?: number;
  now: () => number;
  log?: Logger;
}

/**
 * The key pools' state in Redis, so every worker and replica sees the same cooldowns, disabled
 * keys, probe claims and session bindings:
 * - `<prefix>kp:<provider>:keys`: a hash, field = the key's env name, value = its state;
 * - `<prefix>kp:<provider>:s:<session hash>`: the env name a session is bound to, expiring when
 *   unused for `sessionTtlMs` (GETEX restarts it on each read): the table's bound is that expiry;
 * - `<prefix>kp:<provider>:probe:<env>`: SET NX PX, held by the process probing that key.
 * One round trip per attempt (HGETALL and GETEX pipelined). Unlike rate limits this fails open:
 * while Redis does not answer, each process decides from its own memory (what it saw itself),
 * because refusing traffic over a key-choice hint would be worse than a cache miss.
 */
export function createRedisKeyState(url: string, o: RedisKeyStateOptions): KeyStateStore & { close(): void; ready(): Promise<boolean> } {
  const prefix = `${o.prefix ?? "switchyard:"}kp:`;
  const timeoutMs = o.timeoutMs ?? 250;
  const ttl = String(o.sessionTtlMs ?? DEFAULT_SESSION_TTL_MS);
  const log = o.log ?? (() => {});
  const client = new RedisClient(url, { connectionTimeout: 1_000, autoReconnect: true, maxRetries: 1_000_000, enableOfflineQueue: false });
  const connected = client.connect().then(() => true, () => false);
  const local = createMemoryKeyState({ now: o.now });
  // What this process's probe claims hold, so it releases its own and never another's.
  const holder = crypto.randomUUID();
  let down = false;
  const failed = (err: unknown) => {
    if (!down) log("warn", "key pools: Redis does not answer; each process chooses vendor keys from what it saw itself until it does", { error: err instanceof Error ? err.message : String(err) });
    down = true;
  };
  const answered = () => {
    if (down) log("info", "key pools: Redis answers again");
    down = false;
  };
  const bounded = <T>(promise: Promise<T>): Promise<T> => answerWithin(promise, timeoutMs, () => new Error(`no answer from Redis within ${timeoutMs} ms`));
  const keysOf = (provider: string) => `${prefix}${provider}:keys`;
  const sessionOf = (provider: string, session: string) => `${prefix}${provider}:s:${session}`;
  // Writes go to this process's memory too, so it keeps deciding sensibly while Redis is away.
  // The promise settles once Redis took the write (or failed to); the request path does not wait for it.
  const send = (command: string, args: string[]): Promise<void> => {
    if (!client.connected) return Promise.resolve(failed(new Error("not connected")));
    return bounded(client.send(command, args)).then(answered, failed);
  };

  /** Per key, the update of this process under way (update, below). */
  const updating = new Map<string, Promise<unknown>>();
  async function updateNow(provider: string, env: string, next: (current: KeyState | undefined) => KeyState | undefined): Promise<KeyState | undefined> {
    const mine = local.update(provider, env, next) as KeyState | undefined;
    if (!client.connected) {
      failed(new Error("not connected"));
      return mine;
    }
    try {
      // Compare and set: read, apply, write only if nobody wrote between (else again, on what they wrote).
      for (let tries = 0; tries < UPDATE_TRIES; tries++) {
        const raw = ((await bounded(client.send("HGET", [keysOf(provider), env]))) as string | null) ?? "";
        const after = next(raw === "" ? undefined : decode(raw));
        const written = after === undefined ? "" : encode(after);
        if (written === raw) return after;
        const done = await bounded(evalScript(client, COMPARE_AND_SET_SCRIPT, [keysOf(provider)], [env, raw, written]));
        answered();
        if (Number(done) === 1) {
          local.write(provider, env, after);
          return after;
        }
        // Another process wrote between the read and the write: again on what it wrote, a moment
        // later (two processes in step would otherwise keep getting in each other's way).
        await Bun.sleep(Math.random() * 2 * (tries + 1));
      }
      // Never this process's own view instead: written over a newer state, that is the lost update.
      log("warn", "key pools: a key's state kept changing under this process's update; the other processes' state stands", { provider, key: env });
      return mine;
    } catch (err) {
      failed(err);
      return mine;
    }
  }

  return {
    async read(provider, session): Promise<KeyView> {
      if (!client.connected) {
        failed(new Error("not connected"));
        return local.read(provider, session);
      }
      try {
        const [hash, bound] = await bounded(Promise.all([
          client.send("HGETALL", [keysOf(provider)]) as Promise<Record<string, string>>,
          session === undefined ? undefined : (client.send("GETEX", [sessionOf(provider, session), "PX", ttl]) as Promise<string | null>),
        ]));
        answered();
        const states = new Map<string, KeyState>();
        for (const env in hash) {
          const state = decode(hash[env]!);
          if (state) states.set(env, state);
        }
        return { states, bound: bound ?? undefined };
      } catch (err) {
        failed(err);
        return local.read(provider, session);
      }
    },
    write(provider, env, state) {
      local.write(provider, env, state);
      return state ? send("HSET", [keysOf(provider), env, encode(state)]) : send("HDEL", [keysOf(provider), env]);
    },
    update(provider, env, next) {
      // One at a time per key in this process (answers of a burst come together): only other
      // processes' writes can make a compare-and-set try again.
      const id = `${provider}\u0000${env}`;
      const run = (updating.get(id) ?? Promise.resolve()).then(() => updateNow(provider, env, next));
      const tail = run.catch(() => {});
      updating.set(id, tail);
      void tail.then(() => {
        if (updating.get(id) === tail) updating.delete(id);
      });
      return run;
    },
    bind(provider, session, env) {
      local.bind(provider, session, env);
      return send("SET", [sessionOf(provider, session), env, "PX", ttl]);
    },
    async claimProbe(provider, env, untilMs) {
      const ms = Math.max(1, Math.round(untilMs - o.now()));
      if (!client.connected) return local.claimProbe(provider, env, untilMs);
      try {
        const reply = await bounded(client.send("SET", [`${prefix}${provider}:probe:${env}`, holder, "NX", "PX", String(ms)]));
        answered();
        return reply === "OK";
      } catch (err) {
        failed(err);
        return local.claimProbe(provider, env, untilMs);
      }
    },
    async releaseProbe(provider, env) {
      local.releaseProbe(provider, env);
      // Deleted only while it is still ours (it may have run out and been taken by another).
      await send("EVAL", ["if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end", "1", `${prefix}${provider}:probe:${env}`, holder]);
    },
    /** Whether Redis answered within the connect timeout (the client keeps reconnecting on its own either way). */
    ready(): Promise<boolean> {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const gaveUp = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), 1_000)));
      return Promise.race([connected, gaveUp]).finally(() => clearTimeout(timer));
    },
    close() {
      client.close();
    },
  };
}

/** Tries of a compare-and-set before this process gives its change up (each lost try means another process just wrote). */
const UPDATE_TRIES = 20;

/** KEYS[1]: the pool's hash; ARGV: the key's env name, the value read ("" for none), the value to write ("": none). 1 when written, 0 when it had changed. */
const COMPARE_AND_SET = `
local current = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if current ~= ARGV[2] then return 0 end
if ARGV[3] == '' then redis.call('HDEL', KEYS[1], ARGV[1]) else redis.call('HSET', KEYS[1], ARGV[1], ARGV[3]) end
return 1`;
const COMPARE_AND_SET_SCRIPT = redisScript(COMPARE_AND_SET);

function encode(s: KeyState): string {
  return `${s.coolUntil}:${s.strikes}:${s.disabledAt}:${s.probeAt}:${s.probeFailures}:${s.cooledAt}${s.fp ? `:${s.fp}` : ""}`;
}

/**
 * Five numbers were written before `cooledAt` (an older gateway sharing the Redis): read as 0;
 * the key's fingerprint follows when there is one. Fields after those are ignored, so a later
 * release's additions stay readable here during a rolling deploy. (Releases before this rule read
 * exactly five, or five or six, numbers: while one still runs beside this, it takes this one's
 * states for healthy keys. Upgrade every replica, or accept a few requests on a cooling key.)
 */
function decode(text: string): KeyState | undefined {
  const fields = text.split(":");
  if (fields.length < 5) return undefined;
  const numbers = fields.slice(0, 5).map(Number);
  const cooledAt = fields.length > 5 ? Number(fields[5]) : 0;
  const fp = fields[6];
  if (!numbers.every(Number.isFinite) || !Number.isFinite(cooledAt) || (fp !== undefined && !/^[0-9a-f]{1,64}$/.test(fp))) return undefined;
  const [coolUntil, strikes, disabledAt, probeAt, probeFailures] = numbers as [number, number, number, number, number];
  return fp === undefined ? { coolUntil, cooledAt, strikes, disabledAt, probeAt, probeFailures } : { coolUntil, cooledAt, strikes, disabledAt, probeAt, probeFailures, fp };
}
