import { afterAll, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { runAdmin } from "../../src/cli/admin.ts";
import { writeFileSync } from "node:fs";
import { OPENAI_MODEL, post, startGateway } from "../helpers/gateway.ts";
import { startFakeUpstream } from "../helpers/fake-upstream.ts";
import { postgresMissing, useTestDatabase } from "../helpers/backends.ts";
import { startGatewayProcess } from "../helpers/gateway-process.ts";

const ROOT = resolve(import.meta.dir, "../..");
const KEY_SHAPE = /^svc-sk-[A-Za-z0-9_-]{32,}$/;

const dirs: string[] = [];
function tempDb(): string {
  const dir = mkdtempSync(join(tmpdir(), "switchyard-cli-"));
  dirs.push(dir);
  return join(dir, "admin.sqlite");
}
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** The CLI as an operator runs it: a separate process on the SQLite file. */
async function cli(dbPath: string | { db: string; env: Record<string, string> }, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const proc = Bun.spawn(["bun", "src/cli/admin.ts", ...args], {
    cwd: ROOT,
    env: { ...process.env, ...(typeof dbPath === "string" ? { SWITCHYARD_DB: dbPath } : { SWITCHYARD_DB: dbPath.db, ...dbPath.env }) },
    stdout: "pipe",
    stderr: "pipe",
  });
  const timer = setTimeout(() => proc.kill(), 15_000);
  const [code, stdout, stderr] = await Promise.all([proc.exited, new Response(proc.stdout).text(), new Response(proc.stderr).text()]);
  clearTimeout(timer);
  return { code, stdout, stderr };
}

function sha256(text: string): string {
  return createHash("sha256").update(text).digest("hex");
}

describe("runAdmin (in process)", () => {
  test("accounts create → JSON with id, name, balance", async () => {
    const db = tempDb();
    const { code, out } = await runAdmin(["accounts", "create", "acme", "25.5"], { SWITCHYARD_DB: db });
    expect(code).toBe(0);
    const account = JSON.parse(out) as { id: string; name: string; balance: number };
    expect(typeof account.id).toBe("string");
    expect(account.id.length).toBeGreaterThan(0);
    expect(account.name).toBe("acme");
    expect(account.balance).toBe(25.5);
    const sql = new Database(db, { readonly: true });
    expect(sql.query<{ b: number }, [string]>("SELECT balance_micro AS b FROM accounts WHERE id = ?").get(account.id)).toEqual({ b: 25_500_000 });
    sql.close();
  });

  test("keys create prints the key once; only its hash is stored; revoke works once", async () => {
    const db = tempDb();
    const env = { SWITCHYARD_DB: db };
    const account = JSON.parse((await runAdmin(["accounts", "create", "acme", "10"], env)).out) as { id: string };
    const created = await runAdmin(["keys", "create", account.id, "laptop"], env);
    expect(created.code).toBe(0);
    const key = JSON.parse(created.out) as { id: string; key: string; name: string; created_at: string };
    expect(key.key).toMatch(KEY_SHAPE);
    expect(key.name).toBe("laptop");
    expect(Number.isNaN(Date.parse(key.created_at))).toBe(false);

    // Later commands never show the key again.
    const list = await runAdmin(["keys", "list", account.id], env);
    expect(list.code).toBe(0);
    expect(list.out).toContain(key.id);
    expect(list.out).not.toContain(key.key);
    const show = await runAdmin(["accounts", "show", account.id], env);
    expect(show.code).toBe(0);
    expect(show.out).not.toContain(key.key);

    const sql = new Database(db, { readonly: true });
    const row = sql.query<Record<string, unknown>, [string]>("SELECT * FROM api_keys WHERE id = ?").get(key.id)!;
    expect(row.key_hash).toBe(sha256(key.key));
    for (const v of Object.values(row)) if (typeof v === "string") expect(v.includes(key.key)).toBe(false);
    expect(row.revoked_at).toBeNull();

    const revoked = await runAdmin(["keys", "revoke", key.id], env);
    expect(revoked.code).toBe(0);
    expect(JSON.parse(revoked.out)).toEqual({ id: key.id, revoked: true });
    expect(typeof sql.query<{ r: number | null }, [string]>("SELECT revoked_at AS r FROM api_keys WHERE id = ?").get(key.id)!.r).toBe("number");
    sql.close();

    const again = await runAdmin(["keys", "revoke", key.id], env);
    expect(again.code).not.toBe(0);
    expect(again.out).toContain(key.id);
  });

  test("keys create for an unknown account fails", async () => {
    const env = { SWITCHYARD_DB: tempDb() };
    expect((await runAdmin(["accounts", "create", "first", "1"], env)).code).toBe(0);
    const { code, out } = await runAdmin(["keys", "create", "acct_nope"], env);
    expect(code).not.toBe(0);
    expect(out).toContain("acct_nope");
  });

  test("on a ledger that is not there, only accounts create may start one: anything else exits 1 and leaves no file", async () => {
    const env = { SWITCHYARD_DB: tempDb() };
    for (const argv of [["keys", "create", "acct_x"], ["accounts", "topup", "acct_x", "5"], ["keys", "revoke", "key_x"], ["report"]]) {
      const { code, out } = await runAdmin(argv, env);
      expect([argv, code]).toEqual([argv, 1]);
      expect(out).toContain("no ledger at");
    }
    expect(await Bun.file(env.SWITCHYARD_DB).exists()).toBe(false);
  });

  test("bad usage → non-zero and the usage text", async () => {
    const env = { SWITCHYARD_DB: tempDb() };
    expect((await runAdmin(["accounts", "create", "first", "1"], env)).code).toBe(0);
    for (const argv of [[], ["accounts"], ["accounts", "create", "only-name"], ["keys", "create"], ["keys", "revoke"], ["keys", "frobnicate", "x"], ["nonsense"]]) {
      const { code, out } = await runAdmin(argv, env);
      if (code === 0) throw new Error(`${JSON.stringify(argv)} succeeded`);
      expect(out).toContain("usage:");
      expect(out).toContain("accounts create");
      expect(out).toContain("keys revoke");
    }
  });

  test("a misspelled or unknown flag is refused with exit 2, naming it and the flags the command takes; nothing is made", async () => {
    const env = { SWITCHYARD_DB: tempDb() };
    const cases: [string[], string, string][] = [
      [["accounts", "create", "acme", "5", "--rmp", "60"], "--rmp", "--rpm, --max-concurrent"],
      [["accounts", "create", "acme", "5", "--name=acme"], "--name", "--rpm, --max-concurrent"],
      [["keys", "create", "acct_x", "--spendlimit", "5"], "--spendlimit", "--spend-limit"],
      [["keys", "create", "acct_x", "--spend_limit", "5"], "--spend_limit", "--spend-limit"],
      [["accounts", "show", "acct_x", "--verbose", "1"], "--verbose", "it takes no flags"],
      [["report", "--group_by", "model"], "--group_by", "--group-by"],
    ];
    for (const [argv, flag, takes] of cases) {
      const { code, out } = await runAdmin(argv, env);
      expect([argv, code]).toEqual([argv, 2]);
      expect(out).toContain(`unknown flag ${flag} `);
      expect(out).toContain(takes);
    }
    // Refused before the ledger is opened: `accounts create` with a typo made no file.
    expect(await Bun.file(env.SWITCHYARD_DB).exists()).toBe(false);
    // The --flag=value form is read as --flag value.
    const made = await runAdmin(["accounts", "create", "acme", "5", "--rpm=60"], env);
    expect(made.code).toBe(0);
    expect(JSON.parse(made.out)).toMatchObject({ name: "acme", rate_limit_per_minute: 60 });
    const listed = await runAdmin(["accounts", "list", "--name=ACM"], env);
    expect(JSON.parse(listed.out).data.map((a: { name: string }) => a.name)).toEqual(["acme"]);
  });

  test("bad credits → non-zero, nothing created", async () => {
    const db = tempDb();
    for (const credits of ["-1", "abc", "1.1234567"]) {
      const { code, out } = await runAdmin(["accounts", "create", "acme", credits], { SWITCHYARD_DB: db });
      expect(code).not.toBe(0);
      expect(out).toContain("credits");
    }
    const sql = new Database(db, { readonly: true });
    expect(sql.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM accounts").get()!.n).toBe(0);
    sql.close();
  });
});

describe("bun src/cli/admin.ts (separate process)", () => {
  test("accounts create, keys create, keys revoke", async () => {
    const db = tempDb();
    const acct = await cli(db, "accounts", "create", "acme", "7");
    expect(acct.code).toBe(0);
    const account = JSON.parse(acct.stdout) as { id: string; name: string; balance: number };
    expect(account).toMatchObject({ name: "acme", balance: 7 });
    expect(typeof account.id).toBe("string");

    const made = await cli(db, "keys", "create", account.id);
    expect(made.code).toBe(0);
    const key = JSON.parse(made.stdout) as { id: string; key: string; name: string | null };
    expect(key.key).toMatch(KEY_SHAPE);
    expect(key.name).toBeNull();
    // Printed exactly once.
    expect(made.stdout.split(key.key).length - 1).toBe(1);
    expect(made.stderr).not.toContain(key.key);

    const rev = await cli(db, "keys", "revoke", key.id);
    expect(rev.code).toBe(0);
    expect(JSON.parse(rev.stdout)).toEqual({ id: key.id, revoked: true });

    const twice = await cli(db, "keys", "revoke", key.id);
    expect(twice.code).not.toBe(0);
    expect(twice.stdout).toBe("");
  });

  test("no arguments or an unknown command print the usage (exit 2) and create no ledger; help and --help print it (exit 0) with none", async () => {
    const db = tempDb();
    for (const args of [[], ["acounts", "list"], ["--rmp"]]) {
      const r = await cli(db, ...args);
      expect([args, r.code]).toEqual([args, 2]);
      expect(r.stderr).toContain("usage:");
    }
    for (const args of [["help"], ["--help"], ["accounts", "create", "--help"]]) {
      const r = await cli(db, ...args);
      expect([args, r.code]).toEqual([args, 0]);
      expect(r.stdout).toContain("usage:");
      expect(r.stdout).toContain("accounts create");
    }
    // `bun run admin` with nothing else used to leave an empty ledger at SWITCHYARD_DB.
    expect(await Bun.file(db).exists()).toBe(false);
  });

  test("bad usage → non-zero exit and usage on stderr", async () => {
    const db = tempDb();
    for (const args of [[], ["accounts", "create"], ["keys", "explode", "x"]]) {
      const r = await cli(db, ...args);
      expect(r.code).not.toBe(0);
      expect(r.stderr).toContain("usage:");
      expect(r.stdout).toBe("");
    }
  });
});

describe("CLI against a running gateway's database", () => {
  test("a key created by the CLI works at once; a CLI revoke takes effect on the next request", async () => {
    const gw = await startGateway({ upstreamUrl: "http://127.0.0.1:9" });
    try {
      const models = (key: string) => fetch(gw.url + "/v1/models", { headers: { authorization: `Bearer ${key}` } });

      const acct = await cli(gw.dbPath, "accounts", "create", "cross", "3");
      expect(acct.code).toBe(0);
      const account = JSON.parse(acct.stdout) as { id: string };
      const made = await cli(gw.dbPath, "keys", "create", account.id, "ops");
      expect(made.code).toBe(0);
      const key = JSON.parse(made.stdout) as { id: string; key: string };

      // Several requests, so the key sits in the gateway's in-memory cache.
      for (let i = 0; i < 3; i++) expect((await models(key.key)).status).toBe(200);
      // The gateway's own key is unaffected by the other process.
      expect((await models(gw.key)).status).toBe(200);

      const rev = await cli(gw.dbPath, "keys", "revoke", key.id);
      expect(rev.code).toBe(0);

      const after = await models(key.key);
      expect(after.status).toBe(401);
      const body = (await after.json()) as { error: { type: string } };
      expect(body.error.type).toBe("authentication_error");
      expect((await models(key.key)).status).toBe(401);
      // Only the revoked key is refused.
      expect((await models(gw.key)).status).toBe(200);

      // Revoking the helper's key through the in-process runAdmin (another connection) works too.
      expect((await models(gw.key)).status).toBe(200);
      expect((await runAdmin(["keys", "revoke", gw.keyId], { SWITCHYARD_DB: gw.dbPath })).code).toBe(0);
      expect((await models(gw.key)).status).toBe(401);
    } finally {
      await gw.stop();
    }
  });
});

describe("bun run admin audit", () => {
  test("clean after real traffic and a top-up; drift and uncharged answers are reported with exit 1", async () => {
    const upstream = await startFakeUpstream();
    const gw = await startGateway({ upstreamUrl: upstream.url, credits: 50 });
    const config = join(mkdtempSync(join(tmpdir(), "switchyard-audit-")), "switchyard.json");
    dirs.push(join(config, ".."));
    // The audit reads the configuration to know which models are priced.
    writeFileSync(config, JSON.stringify({ providers: [{ id: "p", kind: "openai", base_url: "http://127.0.0.1:9/v1" }], models: [{ id: OPENAI_MODEL, provider: "p", upstream_model: "m", category: "text", context_length: 1000, pricing: { input_per_mtok: 1, output_per_mtok: 1 } }] }));
    const target = { db: gw.dbPath, env: { SWITCHYARD_CONFIG: config } };
    try {
      for (let i = 0; i < 5; i++) {
        const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: "hi" }], stream: i % 2 === 0 });
        expect(res.status).toBe(200);
        await res.text();
      }
      expect((await cli(target, "accounts", "topup", gw.accountId, "7")).code).toBe(0);
      await gw.app.services.settled();
      const clean = await cli(target, "audit");
      expect(clean.code).toBe(0);
      expect(JSON.parse(clean.stdout)).toMatchObject({ clean: true, usageRecords: 5, accountDrift: [], keyDrift: [], uncharged: [] });

      const db = new Database(gw.dbPath);
      try {
        db.exec(`UPDATE accounts SET balance_micro = balance_micro + 5 WHERE id = '${gw.accountId}'`);
        db.exec(`INSERT INTO usage_records (request_id, account_id, key_id, model, provider, prompt_tokens, completion_tokens, estimated, cost_micro, status, latency_ms, created_at)
                 VALUES ('req_free_lunch', '${gw.accountId}', '${gw.keyId}', '${OPENAI_MODEL}', 'p', 10, 10, 0, 0, 'ok', 1, 1)`);
      } finally {
        db.close();
      }
      const dirty = await cli(target, "audit");
      expect(dirty.code).toBe(1);
      const report = JSON.parse(dirty.stdout);
      expect(report.clean).toBe(false);
      expect(report.accountDrift).toEqual([expect.objectContaining({ account_id: gw.accountId, drift_micro: 5 })]);
      expect(report.uncharged).toEqual([expect.objectContaining({ request_id: "req_free_lunch" })]);
    } finally {
      await gw.stop();
      await upstream.stop();
    }
  });
});

describe("accounts list / update, keys update", () => {
  test("in process: update what is given, print what the API prints; bad values are usage errors naming the flag", async () => {
    const env = { SWITCHYARD_DB: tempDb() };
    const run = async (...argv: string[]) => runAdmin(argv, env);
    const tag = "Zq" + Math.random().toString(36).slice(2, 7);
    const a = JSON.parse((await run("accounts", "create", `${tag} one`, "5")).out) as { id: string };
    const b = JSON.parse((await run("accounts", "create", `${tag} two`, "6")).out) as { id: string };
    await run("accounts", "create", "someone else", "1");

    const updated = await run("accounts", "update", a.id, "--name", `${tag} uno`, "--spend-limit", "2.5", "--period", "week");
    expect(updated.code).toBe(0);
    expect(JSON.parse(updated.out)).toMatchObject({ id: a.id, name: `${tag} uno`, spend_limit: 2.5, spend_limit_period: "week", spent_in_period: 0, reserved: 0, keys: [] });
    expect(JSON.parse((await run("accounts", "show", a.id)).out)).toEqual(JSON.parse(updated.out));
    const cleared = JSON.parse((await run("accounts", "update", a.id, "--spend-limit", "none", "--period", "none")).out);
    expect(cleared).toMatchObject({ spend_limit: null, spend_limit_period: null, period_resets_at: null });

    const page1 = JSON.parse((await run("accounts", "list", "--name", tag.toUpperCase(), "--limit", "1")).out);
    expect(page1.data).toHaveLength(1);
    expect(typeof page1.next_cursor).toBe("string");
    const page2 = JSON.parse((await run("accounts", "list", "--name", tag, "--limit", "1", "--cursor", page1.next_cursor)).out);
    expect([...page1.data, ...page2.data].map((x: { id: string }) => x.id).sort()).toEqual([a.id, b.id].sort());
    expect(page2.next_cursor).toBeNull();
    expect(JSON.parse((await run("accounts", "list")).out).data).toHaveLength(3);

    const key = JSON.parse((await run("keys", "create", a.id, "ci", "--spend-limit", "3", "--period", "day")).out) as { id: string; key: string };
    expect(JSON.parse((await run("keys", "list", a.id)).out).data[0]).toMatchObject({ spend_limit: 3, spend_limit_period: "day", spent_in_period: 0 });
    const changed = await run("keys", "update", key.id, "--name", "renamed", "--rpm", "7", "--expires", "2031-01-31", "--period", "month", "--spend-limit", "4.5");
    expect(changed.code).toBe(0);
    const summary = JSON.parse(changed.out);
    expect(summary).toMatchObject({ id: key.id, name: "renamed", rate_limit_per_minute: 7, expires_at: "2031-01-31T00:00:00.000Z", spend_limit: 4.5, spend_limit_period: "month" });
    expect(changed.out).not.toContain(key.key);
    expect(JSON.parse((await run("keys", "list", a.id)).out).data[0]).toEqual(summary);
    const none = JSON.parse((await run("keys", "update", key.id, "--name", "none", "--rpm", "none", "--expires", "none", "--period", "none", "--spend-limit", "none")).out);
    expect(none).toMatchObject({ name: null, rate_limit_per_minute: null, expires_at: null, spend_limit: null, spend_limit_period: null });

    const bad: [string[], string][] = [
      [["keys", "update", key.id, "--rpm", "0"], "--rpm"],
      [["keys", "update", key.id, "--rpm", "1.5"], "--rpm"],
      [["keys", "update", key.id, "--rpm", "abc"], "--rpm"],
      [["keys", "update", key.id, "--expires", "2026-02-30"], "--expires"],
      [["keys", "update", key.id, "--expires", "soon"], "--expires"],
      [["keys", "update", key.id, "--period", "year"], "--period"],
      [["keys", "update", key.id, "--spend-limit", "1.1234567"], "--spend-limit"],
      [["keys", "update", key.id, "--spend-limit", "-2"], "--spend-limit"],
      [["keys", "update", key.id, "--spend-limit", ""], "--spend-limit"],
      [["keys", "create", a.id, "--period", "hour"], "--period"],
      [["accounts", "update", a.id, "--name", ""], "--name"],
      [["accounts", "update", a.id, "--period", "fortnight"], "--period"],
      [["accounts", "list", "--limit", "0"], "--limit"],
      [["accounts", "list", "--limit", "501"], "--limit"],
      [["accounts", "list", "--cursor", "nope"], "--cursor"],
    ];
    for (const [argv, flag] of bad) {
      const r = await run(...argv);
      if (r.code !== 2 || !r.out.includes(flag)) throw new Error(`${argv.join(" ")}: code ${r.code}, ${r.out}`);
    }
    expect(JSON.parse((await run("keys", "list", a.id)).out).data[0]).toEqual(none);
    const missingKey = await run("keys", "update", "key_nope", "--name", "x");
    expect(missingKey.code).toBe(1);
    expect(missingKey.out).toContain("key_nope");
    const missingAccount = await run("accounts", "update", "acct_nope", "--name", "x");
    expect(missingAccount.code).toBe(1);
    expect(missingAccount.out).toContain("acct_nope");
  });

  test("in process: --models and --max-concurrent on keys create and update, none clears, bad values are usage errors naming the flag", async () => {
    const env = { SWITCHYARD_DB: tempDb() };
    const run = async (...argv: string[]) => runAdmin(argv, env);
    const a = JSON.parse((await run("accounts", "create", "scoped", "5")).out) as { id: string };
    const created = await run("keys", "create", a.id, "ci", "--models", "anthropic/*, openai/gpt-4.1-mini", "--max-concurrent", "3");
    expect(created.code).toBe(0);
    const key = JSON.parse(created.out) as { id: string };
    expect(JSON.parse((await run("keys", "list", a.id)).out).data[0]).toMatchObject({ id: key.id, models: ["anthropic/*", "openai/gpt-4.1-mini"], max_concurrent_requests: 3 });
    const changed = JSON.parse((await run("keys", "update", key.id, "--models", "openai/*", "--max-concurrent", "10")).out);
    expect(changed).toMatchObject({ models: ["openai/*"], max_concurrent_requests: 10 });
    const cleared = JSON.parse((await run("keys", "update", key.id, "--models", "none", "--max-concurrent", "none")).out);
    expect(cleared).toMatchObject({ models: null, max_concurrent_requests: null });
    const bad: [string[], string][] = [
      [["keys", "update", key.id, "--models", ""], "--models"],
      [["keys", "update", key.id, "--models", ",,"], "--models"],
      [["keys", "update", key.id, "--models", "gpt-*-mini"], "--models"],
      [["keys", "update", key.id, "--models", "a b"], "--models"],
      [["keys", "create", a.id, "--models", "x*y"], "--models"],
      [["keys", "update", key.id, "--max-concurrent", "0"], "--max-concurrent"],
      [["keys", "update", key.id, "--max-concurrent", "-5"], "--max-concurrent"],
      [["keys", "update", key.id, "--max-concurrent", "2.5"], "--max-concurrent"],
      [["keys", "create", a.id, "--max-concurrent", "100001"], "--max-concurrent"],
    ];
    for (const [argv, flag] of bad) {
      const r = await run(...argv);
      if (r.code !== 2 || !r.out.includes(flag)) throw new Error(`${argv.join(" ")}: code ${r.code}, ${r.out}`);
    }
    // Nothing refused was stored: one key, as last cleared.
    expect(JSON.parse((await run("keys", "list", a.id)).out).data).toEqual([cleared]);
  });

  test("in process: --rpm, --max-concurrent and --tpm on accounts create and update (all its keys together), none clears, bad values are usage errors and create nothing", async () => {
    const env = { SWITCHYARD_DB: tempDb() };
    const run = async (...argv: string[]) => runAdmin(argv, env);
    const created = await run("accounts", "create", "tenant", "5", "--rpm", "120", "--max-concurrent", "4", "--tpm", "90000");
    expect(created.code).toBe(0);
    const a = JSON.parse(created.out) as { id: string };
    expect(a).toMatchObject({ name: "tenant", balance: 5, rate_limit_per_minute: 120, max_concurrent_requests: 4, tokens_per_minute: 90_000 });
    expect(JSON.parse((await run("accounts", "show", a.id)).out)).toMatchObject({ rate_limit_per_minute: 120, max_concurrent_requests: 4, tokens_per_minute: 90_000 });
    expect(JSON.parse((await run("accounts", "update", a.id, "--tpm", "none")).out)).toMatchObject({ tokens_per_minute: null, max_concurrent_requests: 4 });
    expect(JSON.parse((await run("accounts", "update", a.id, "--rpm", "30")).out)).toMatchObject({ rate_limit_per_minute: 30, max_concurrent_requests: 4 });
    expect(JSON.parse((await run("accounts", "update", a.id, "--rpm", "none", "--max-concurrent", "none")).out)).toMatchObject({ rate_limit_per_minute: null, max_concurrent_requests: null });
    expect(JSON.parse((await run("accounts", "list")).out).data[0]).toMatchObject({ id: a.id, rate_limit_per_minute: null, max_concurrent_requests: null });
    const bad: [string[], string][] = [
      [["accounts", "update", a.id, "--rpm", "0"], "--rpm"],
      [["accounts", "update", a.id, "--rpm", "1.5"], "--rpm"],
      [["accounts", "update", a.id, "--max-concurrent", "100001"], "--max-concurrent"],
      [["accounts", "create", "refused", "1", "--rpm", "-3"], "--rpm"],
      [["accounts", "create", "refused", "1", "--max-concurrent", "x"], "--max-concurrent"],
      [["accounts", "update", a.id, "--tpm", "0"], "--tpm"],
      [["accounts", "create", "refused", "1", "--tpm", "1e6"], "--tpm"],
    ];
    for (const [argv, flag] of bad) {
      const r = await run(...argv);
      if (r.code !== 2 || !r.out.includes(flag)) throw new Error(`${argv.join(" ")}: code ${r.code}, ${r.out}`);
    }
    expect(JSON.parse((await run("accounts", "list")).out).data.map((x: { name: string }) => x.name)).toEqual(["tenant"]);
  });

  test("in process: accounts suspend and resume print the account with its suspended_at; an unknown account exits 1", async () => {
    const env = { SWITCHYARD_DB: tempDb() };
    const run = async (...argv: string[]) => runAdmin(argv, env);
    const a = JSON.parse((await run("accounts", "create", "tenant", "5")).out) as { id: string };
    const suspended = await run("accounts", "suspend", a.id);
    expect(suspended.code).toBe(0);
    const since = JSON.parse(suspended.out).suspended_at as string;
    expect(Date.parse(since)).toBeGreaterThan(Date.now() - 60_000);
    // Suspended again: since the first time.
    expect(JSON.parse((await run("accounts", "suspend", a.id)).out).suspended_at).toBe(since);
    expect(JSON.parse((await run("accounts", "list")).out).data[0]).toMatchObject({ id: a.id, suspended_at: since });
    expect(JSON.parse((await run("accounts", "resume", a.id)).out)).toMatchObject({ id: a.id, suspended_at: null, balance: 5 });
    expect((await run("accounts", "suspend", "acct_missing")).code).toBe(1);
    expect((await run("accounts", "suspend", a.id, "--rpm", "5")).code).toBe(2);
  });

  test("separate process beside a running gateway: the same JSON as the API; a key update applies to the next request", async () => {
    const token = "cli-admin-token-0123456789abcdef0123456789abcdef";
    const gw = await startGateway({ upstreamUrl: "http://127.0.0.1:9", adminToken: token });
    const api = async (method: string, path: string, body?: unknown) =>
      (await fetch(gw.url + path, { method, headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) })).json();
    const models = (key: string) => fetch(gw.url + "/v1/models", { headers: { authorization: `Bearer ${key}` } });
    try {
      const account = JSON.parse((await cli(gw.dbPath, "accounts", "create", "Cli Listed", "3")).stdout) as { id: string };
      const key = JSON.parse((await cli(gw.dbPath, "keys", "create", account.id, "ops")).stdout) as { id: string; key: string };
      for (let i = 0; i < 3; i++) expect((await models(key.key)).status).toBe(200);

      const listed = await cli(gw.dbPath, "accounts", "list", "--name", "cli list");
      expect(listed.code).toBe(0);
      expect(JSON.parse(listed.stdout)).toEqual(await api("GET", "/v1/admin/accounts?name=cli%20list"));

      const updated = await cli(gw.dbPath, "keys", "update", key.id, "--rpm", "1", "--name", "throttled");
      expect(updated.code).toBe(0);
      expect(JSON.parse(updated.stdout)).toEqual(await api("PATCH", `/v1/admin/keys/${key.id}`, {}));
      expect((await models(key.key)).status).toBe(200);
      expect((await models(key.key)).status).toBe(429);

      expect((await cli(gw.dbPath, "keys", "update", key.id, "--expires", "2020-01-01")).code).toBe(0);
      expect((await models(key.key)).status).toBe(401);
      expect((await cli(gw.dbPath, "keys", "update", key.id, "--expires", "none", "--rpm", "none")).code).toBe(0);
      expect((await models(key.key)).status).toBe(200);

      const acct = await cli(gw.dbPath, "accounts", "update", account.id, "--spend-limit", "2", "--period", "day");
      expect(acct.code).toBe(0);
      expect(JSON.parse(acct.stdout)).toEqual(await api("GET", `/v1/admin/accounts/${account.id}`));

      const bad = await cli(gw.dbPath, "keys", "update", key.id, "--period", "year");
      expect(bad.code).toBe(2);
      expect(bad.stdout).toBe("");
      expect(bad.stderr).toContain("--period");
    } finally {
      await gw.stop();
    }
  });
});

/*
 * The CLI's error answers as an operator meets them, in a process of its own: GatewayRunningError
 * was declared below the top-level `await adminMain(...)`, so in `bun run admin` (not in process)
 * every error that reached its `instanceof` (a debit beside a running gateway, as the usage text
 * says to avoid; a store that fails) was "ReferenceError: Cannot access 'GatewayRunningError'
 * before initialization" with a stack, not the line meant for it (a disk-fault probe, twenty-fourth session).
 */
describe("the CLI's refusals in a process of its own", () => {
  test("a debit beside a running gateway: exit 1 and the one line that says so", async () => {
    const db = tempDb();
    const account = JSON.parse((await cli(db, "accounts", "create", "Debited", "3")).stdout) as { id: string };
    const gw = await startGatewayProcess({ SWITCHYARD_DB: db });
    try {
      const debit = await cli(db, "accounts", "debit", account.id, "1");
      expect(debit.stderr).not.toContain("ReferenceError");
      expect(debit.code).toBe(1);
      expect(debit.stderr.trim().split("\n")).toHaveLength(1);
      expect(debit.stderr).toContain("gateway");
    } finally {
      gw.child.kill("SIGTERM");
      await gw.child.exited;
    }
    // Nothing was taken.
    expect(JSON.parse((await cli(db, "accounts", "show", account.id)).stdout).balance).toBe(3);
  }, 30_000);
});

describe("the CLI prints what the API returns", () => {
  test("separate process beside a running gateway: topup, keys list, usage and the report (JSON, and CSV byte for byte) as the admin API answers them", async () => {
    const token = "cli-admin-token-0123456789abcdef0123456789abcdef";
    const upstream = await startFakeUpstream();
    const gw = await startGateway({ upstreamUrl: upstream.url, adminToken: token });
    const api = (method: string, path: string, body?: unknown) =>
      fetch(gw.url + path, { method, headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
    try {
      // Traffic, so usage and the report have rows.
      for (let i = 0; i < 2; i++) expect((await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: "hi" }] })).status).toBe(200);
      await gw.app.services.settled();
      const id = gw.accountId;

      const viaApi = (await (await api("POST", `/v1/admin/accounts/${id}/credits`, { amount: 1 })).json()) as { id: string; balance: number; reserved: number };
      expect(Object.keys(viaApi).sort()).toEqual(["balance", "id", "reserved"]);
      const topup = await cli(gw.dbPath, "accounts", "topup", id, "1");
      expect(topup.code).toBe(0);
      expect(JSON.parse(topup.stdout)).toEqual({ ...viaApi, balance: viaApi.balance + 1 });

      const keys = await cli(gw.dbPath, "keys", "list", id);
      expect(keys.code).toBe(0);
      expect(JSON.parse(keys.stdout)).toEqual(await (await api("GET", `/v1/admin/accounts/${id}/keys`)).json());

      const from = "2020-01-01";
      const to = "2100-01-01";
      const usage = await cli(gw.dbPath, "usage", id, from, to);
      expect(usage.code).toBe(0);
      expect(JSON.parse(usage.stdout)).toEqual(await (await api("GET", `/v1/admin/accounts/${id}/usage?from=${from}&to=${to}`)).json());

      const report = await cli(gw.dbPath, "report", "--from", from, "--to", to, "--group-by", "account,model");
      expect(report.code).toBe(0);
      expect(JSON.parse(report.stdout)).toEqual(await (await api("GET", `/v1/admin/usage?from=${from}&to=${to}&group_by=account,model`)).json());

      const csv = await cli(gw.dbPath, "report", "--from", from, "--to", to, "--group-by", "account,model", "--format", "csv");
      expect(csv.code).toBe(0);
      const csvApi = await (await api("GET", `/v1/admin/usage?from=${from}&to=${to}&group_by=account,model&format=csv`)).text();
      expect(csvApi.split("\r\n")).toHaveLength(3);
      expect(csv.stdout).toBe(csvApi);
    } finally {
      await gw.stop();
      await upstream.stop();
    }
  });
});

const pgMissing = await postgresMissing();
const pgDatabase = useTestDatabase();
if (pgMissing) {
  test.skip(`admin CLI updates on PostgreSQL — skipped: ${pgMissing}`, () => {});
} else {
  test("on PostgreSQL: accounts list / update and keys update, as on SQLite", async () => {
    const env = { SWITCHYARD_DATABASE_URL: await pgDatabase() };
    const run = async (...argv: string[]) => runAdmin(argv, env);
    const a = JSON.parse((await run("accounts", "create", "Pg Cli", "5")).out) as { id: string };
    const updated = JSON.parse((await run("accounts", "update", a.id, "--name", "Pg Renamed", "--spend-limit", "2", "--period", "month", "--rpm", "50", "--max-concurrent", "6")).out);
    expect(updated).toMatchObject({ id: a.id, name: "Pg Renamed", spend_limit: 2, spend_limit_period: "month", spent_in_period: 0, rate_limit_per_minute: 50, max_concurrent_requests: 6, keys: [] });
    const listed = JSON.parse((await run("accounts", "list", "--name", "pg ren")).out);
    expect(listed.data).toEqual([{ id: a.id, name: "Pg Renamed", balance: 5, created_at: updated.created_at, spend_limit: 2, spend_limit_period: "month", rate_limit_per_minute: 50, max_concurrent_requests: 6, tokens_per_minute: null, suspended_at: null }]);
    const suspended = JSON.parse((await run("accounts", "suspend", a.id)).out);
    expect(suspended.suspended_at).toBeString();
    expect(JSON.parse((await run("accounts", "resume", a.id)).out)).toMatchObject({ suspended_at: null });
    const key = JSON.parse((await run("keys", "create", a.id, "k", "--period", "week", "--spend-limit", "1")).out) as { id: string };
    const changed = JSON.parse((await run("keys", "update", key.id, "--rpm", "9", "--period", "day", "--expires", "2031-01-01T10:00:00Z")).out);
    expect(changed).toMatchObject({ id: key.id, rate_limit_per_minute: 9, spend_limit: 1, spend_limit_period: "day", expires_at: "2031-01-01T10:00:00.000Z" });
    expect((await run("keys", "update", "key_nope", "--rpm", "3")).code).toBe(1);
    expect((await run("keys", "update", key.id, "--rpm", "0")).code).toBe(2);
    const scoped = JSON.parse((await run("keys", "update", key.id, "--models", "anthropic/*", "--max-concurrent", "2")).out);
    expect(scoped).toMatchObject({ models: ["anthropic/*"], max_concurrent_requests: 2 });
    expect(JSON.parse((await run("keys", "list", a.id)).out).data[0]).toEqual(scoped);
  });
}
