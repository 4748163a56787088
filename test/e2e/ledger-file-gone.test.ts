/**
 * The ledger's file deleted while the gateway runs (an operator's `rm`, a restore that replaced
 * it): the store is marked failing within a second, as a full disk would be (paid requests 503,
 * free ones served, `/ready` 503), instead of billing into an unlinked file nobody reads again.
 * And the admin CLI's audit of a missing ledger says so, rather than making an empty one and
 * calling it clean (a disk-fault probe, 2026-11-30).
 */
import { expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runAdmin } from "../../src/cli/admin.ts";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { FREE_MODEL, OPENAI_MODEL, post, startGateway } from "../helpers/gateway.ts";
import { until } from "../helpers/until.ts";

const upstream = useFakeUpstream();
const ask = async (url: string, key: string, model: string) => {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }] }),
  });
  await res.arrayBuffer();
  return res.status;
};

test("a deleted ledger file: paid requests are paused (503) and /ready says 503 within seconds; free requests are served", async () => {
  const dir = mkdtempSync(join(tmpdir(), "switchyard-ledger-gone-"));
  const dbPath = join(dir, "gateway.sqlite");
  const ADMIN = "admin-ledger-gone-0123456789abcdef0123456789ab";
  const gw = await startGateway({ upstreamUrl: upstream.url, dbPath, adminToken: ADMIN });
  try {
    expect(await ask(gw.url, gw.key, OPENAI_MODEL)).toBe(200);
    await gw.app.services.settled();
    for (const file of [dbPath, `${dbPath}-wal`, `${dbPath}-shm`]) rmSync(file, { force: true });
    // Paid traffic finds it at its next commit (checked at most once a second), an idle gateway at its next probe.
    await until("paid requests paused", 10_000, async () => (await ask(gw.url, gw.key, OPENAI_MODEL)) === 503 || (await Bun.sleep(100), false));
    expect((await fetch(`${gw.url}/ready`)).status).toBe(503);
    expect(await ask(gw.url, gw.key, FREE_MODEL)).toBe(200);
    const refused = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: "hi" }] });
    expect(refused.status).toBe(503);
    expect(refused.headers.get("retry-after")).toBe("5");
    // Nor do top-ups, accounts or keys go into the file that is gone: a 503, nothing written.
    const admin = (path: string, body: unknown) => fetch(`${gw.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: JSON.stringify(body) });
    expect((await admin(`/v1/admin/accounts/${gw.accountId}/credits`, { amount: 5 })).status).toBe(503);
    expect((await admin("/v1/admin/accounts", { name: "after", credits: 1 })).status).toBe(503);
    expect((await admin(`/v1/admin/accounts/${gw.accountId}/keys`, { name: "after" })).status).toBe(503);
  } finally {
    // The store cannot write again: what is queued goes to the spill file at once, not after 5 s of retries.
    await gw.stop({ ledgerGraceMs: 0 }).catch(() => {});
    rmSync(dir, { recursive: true, force: true });
  }
}, 30_000);

test("its shared-memory index (-shm) deleted alone: the store is failing too (a CLI's commits made beside a new index were reported done and then overwritten; a disk-fault probe)", async () => {
  const dir = mkdtempSync(join(tmpdir(), "switchyard-shm-gone-"));
  const dbPath = join(dir, "gateway.sqlite");
  const ADMIN = "admin-shm-gone-0123456789abcdef0123456789abcd";
  const gw = await startGateway({ upstreamUrl: upstream.url, dbPath, adminToken: ADMIN });
  try {
    expect(await ask(gw.url, gw.key, OPENAI_MODEL)).toBe(200);
    await gw.app.services.settled();
    rmSync(`${dbPath}-shm`, { force: true });
    await until("paid requests paused", 10_000, async () => (await ask(gw.url, gw.key, OPENAI_MODEL)) === 503 || (await Bun.sleep(100), false));
    expect((await fetch(`${gw.url}/ready`)).status).toBe(503);
    const topUp = await fetch(`${gw.url}/v1/admin/accounts/${gw.accountId}/credits`, { method: "POST", headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: JSON.stringify({ amount: 5 }) });
    expect(topUp.status).toBe(503);
  } finally {
    // The store cannot write again: what is queued goes to the spill file at once, not after 5 s of retries.
    await gw.stop({ ledgerGraceMs: 0 }).catch(() => {});
    rmSync(dir, { recursive: true, force: true });
  }
}, 30_000);

test("the admin CLI's audit, usage and lists of a ledger that is not there: exit 1 saying so, and no empty file made", async () => {
  const dir = mkdtempSync(join(tmpdir(), "switchyard-ledger-gone-"));
  const env = { SWITCHYARD_DB: join(dir, "nothing.sqlite") };
  try {
    for (const argv of [["audit"], ["accounts", "list"], ["usage"]]) {
      const { code, out } = await runAdmin(argv, env);
      expect([argv, code]).toEqual([argv, 1]);
      expect(out).toContain(`no ledger at ${env.SWITCHYARD_DB}`);
    }
    expect(await Bun.file(env.SWITCHYARD_DB).exists()).toBe(false);
    // Making something may start a new ledger, as before.
    expect((await runAdmin(["accounts", "create", "first", "1"], env)).code).toBe(0);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

/** A ledger made by the admin CLI, broken by `breakIt`, then audited: what the CLI answers. */
async function auditOfBrokenLedger(breakIt: (path: string) => Promise<void> | void): Promise<{ code: number; out: string }> {
  const dir = mkdtempSync(join(tmpdir(), "switchyard-ledger-broken-"));
  const env = { SWITCHYARD_DB: join(dir, "gw.sqlite") };
  try {
    expect((await runAdmin(["accounts", "create", "first", "1"], env)).code).toBe(0);
    await breakIt(env.SWITCHYARD_DB);
    return await runAdmin(["audit"], env);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test("the admin CLI on a corrupt ledger: exit 1 with one line naming the store's error, no stack trace", async () => {
  const { code, out } = await auditOfBrokenLedger(async (path) => {
    // Pages past the header overwritten: SQLite finds the file malformed when it reads them.
    const bytes = new Uint8Array(await Bun.file(path).arrayBuffer());
    bytes.fill(0x5a, 2048);
    await Bun.write(path, bytes);
  });
  expect(code).toBe(1);
  expect(out).toMatch(/malformed|SQLITE_CORRUPT|SQLITE_NOTADB/);
  expect(out).not.toContain("    at ");
});

test("the admin CLI whose store fails under a command (a table gone from the ledger): exit 1 with one line naming the store's error", async () => {
  const { code, out } = await auditOfBrokenLedger((path) => {
    const db = new Database(path);
    db.exec("DROP TABLE price_lists");
    db.close();
  });
  expect(code).toBe(1);
  expect(out).toStartWith("the store failed: SQLITE_ERROR");
  expect(out).not.toContain("    at ");
});
