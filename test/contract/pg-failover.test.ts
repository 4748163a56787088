/**
 * A failover that leaves the pool's sessions on a server that no longer takes writes (read-only:
 * 25006), while new connections reach one that does: the ledger notices, replaces its connections,
 * and takes writes again within seconds, without a restart (pg-client.ts, recycleIfStale). Before,
 * the heartbeat kept the stale sessions from ever idling out and paid traffic stayed at 503.
 */
import { SQL } from "bun";
import { afterAll, expect, test } from "bun:test";
import { openPostgresStores } from "../../src/store/stores.ts";
import { PG_ADMIN_URL, postgresMissing, useTestDatabase } from "../helpers/backends.ts";
import { until } from "../helpers/until.ts";

const database = useTestDatabase();
const missing = await postgresMissing();
const admin = missing ? undefined : new SQL({ url: PG_ADMIN_URL, max: 1 });
afterAll(async () => {
  await admin?.close({ timeout: 0 });
});

test.skipIf(missing !== undefined)(`the ledger takes writes again once new sessions can write, without a restart${missing ? ` (${missing})` : ""}`, async () => {
  const url = await database();
  const name = new URL(url).pathname.slice(1);
  const stores = await openPostgresStores(url, { pool: { applicationName: "switchyard-failover-test" }, ledger: { heartbeatMs: 100, busyLimitMs: 100, retryMaxMs: 100 } });
  try {
    const account = await stores.accounts.createAccount("failover", 100_000_000);
    const key = (await stores.accounts.createKey(account.id, "k"))!;
    let n = 0;
    /** A hold and its release: whether the ledger takes writes now. */
    const writes = async () => {
      const requestId = `req_failover_${n++}`;
      const held = await stores.ledger.reserve({ requestId, accountId: account.id, keyId: key.id, amountMicro: 1_000 });
      if (held.ok) await stores.ledger.release(requestId);
      return held.ok;
    };
    expect(await writes()).toBe(true);

    // The failover: every session from now on is read-only, and the pool's connections are cut
    // (the pool reconnects at once, to read-only sessions).
    await admin!.unsafe(`ALTER DATABASE ${name} SET default_transaction_read_only = on`);
    await admin!`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'switchyard-failover-test'`;
    await until("the ledger says it cannot write", 5_000, () => !stores.ledger.health().writable);
    expect(await writes()).toBe(false);

    // The new primary takes writes; the sessions opened during the failover still cannot.
    await admin!.unsafe(`ALTER DATABASE ${name} RESET default_transaction_read_only`);
    await until("the ledger takes writes again", 8_000, async () => stores.ledger.health().writable && (await writes()));
  } finally {
    await admin!.unsafe(`ALTER DATABASE ${name} RESET default_transaction_read_only`).catch(() => {});
    await stores.close(100);
  }
}, 30_000);
