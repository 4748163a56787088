import { RedisClient, SQL } from "bun";
import { afterAll } from "bun:test";

/**
 * PostgreSQL and Redis for the tests that need them. Each test file gets a database of its own
 * (`CREATE DATABASE switchyard_test_<random>`, dropped after the file) and a Redis key prefix of
 * its own, so files run side by side and leave nothing behind. Where a service does not answer,
 * its suites are registered as one skipped test whose name says which and why, and the SQLite
 * suites run as usual; on this machine and in CI both answer (.ci/run starts them).
 */
export const PG_ADMIN_URL = process.env.SWITCHYARD_TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
export const REDIS_URL = process.env.SWITCHYARD_TEST_REDIS_URL ?? "redis://127.0.0.1:6379";

async function probe(fn: () => Promise<unknown>, ms = 1_500): Promise<string | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    await Promise.race([fn(), new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms)))]);
    return undefined;
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  } finally {
    clearTimeout(timer);
  }
}

let pgReason: Promise<string | undefined> | undefined;
/** Undefined when PostgreSQL answers at PG_ADMIN_URL, else why not. */
export function postgresMissing(): Promise<string | undefined> {
  return (pgReason ??= (async () => {
    const sql = new SQL({ url: PG_ADMIN_URL, max: 1, connectionTimeout: 1 });
    const reason = await probe(() => sql`SELECT 1`);
    await sql.close({ timeout: 0 }).catch(() => {});
    return reason ? `PostgreSQL at ${PG_ADMIN_URL} does not answer (${reason})` : undefined;
  })());
}

let redisReason: Promise<string | undefined> | undefined;
export function redisMissing(): Promise<string | undefined> {
  return (redisReason ??= (async () => {
    const client = new RedisClient(REDIS_URL, { connectionTimeout: 1_000, autoReconnect: false });
    const reason = await probe(() => client.send("PING", []));
    client.close();
    return reason ? `Redis at ${REDIS_URL} does not answer (${reason})` : undefined;
  })());
}

const suffix = () => `${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 8)}`;

/**
 * A database of this file's own on the PostgreSQL of PG_ADMIN_URL, created on first use and
 * dropped after the file (WITH (FORCE): connections a failed test left open do not stop it).
 */
export function useTestDatabase(): () => Promise<string> {
  let created: Promise<string> | undefined;
  const name = `switchyard_test_${suffix()}`;
  afterAll(async () => {
    if (!created) return;
    await created.catch(() => {});
    const admin = new SQL({ url: PG_ADMIN_URL, max: 1 });
    await admin.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => {});
    await admin.close({ timeout: 0 });
  });
  return () => (created ??= (async () => {
    const admin = new SQL({ url: PG_ADMIN_URL, max: 1 });
    try {
      await admin.unsafe(`CREATE DATABASE ${name}`);
    } finally {
      await admin.close({ timeout: 0 });
    }
    const url = new URL(PG_ADMIN_URL);
    url.pathname = `/${name}`;
    return url.toString();
  })());
}

/** A key prefix of this file's own in Redis; its keys are deleted after the file. */
export function useRedisPrefix(): string {
  const prefix = `switchyard_test:${suffix()}:`;
  afterAll(async () => {
    if (await redisMissing()) return;
    const client = new RedisClient(REDIS_URL);
    try {
      let cursor = "0";
      do {
        const [next, keys] = (await client.send("SCAN", [cursor, "MATCH", `${prefix}*`, "COUNT", "1000"])) as [string, string[]];
        cursor = next;
        if (keys.length > 0) await client.send("DEL", keys);
      } while (cursor !== "0");
    } finally {
      client.close();
    }
  });
  return prefix;
}

/** A TCP port on loopback that nothing listens on (a service that is down). */
export function closedPort(): number {
  const server = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = server.port;
  server.stop(true);
  return port;
}
