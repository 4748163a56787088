import { iso } from "../../accounts/account-store.ts";
import { creditEntryOf, recentRequestOf, type ConsoleStore, type SessionKind } from "../../console/console-store.ts";
import { int, withTimeout, type Pg } from "./pg-client.ts";

/** What a recent request shows (store/sqlite/sqlite-console-store.ts reads the same). */
/** A record with its account's and key's names (joined by their primary keys, so the record index still orders the page). */
const RECENT_COLUMNS =
  "u.request_id, u.client_request_id, u.created_at, u.account_id, a.name AS account_name, u.key_id, k.name AS key_name, u.model, u.status, u.latency_ms, u.prompt_tokens, u.cache_read_tokens, u.cache_write_5m_tokens, u.cache_write_1h_tokens, u.completion_tokens, u.estimated, u.cost_micro";
const RECENT_FROM = "usage_records u LEFT JOIN accounts a ON a.id = u.account_id LEFT JOIN api_keys k ON k.id = u.key_id";

/**
 * Every change to a login's invites and user takes this transaction-scoped lock first, whatever its
 * capitals: one account's new link and another's, or a link and its acceptance, take turns.
 */
const lockLogin = (tx: Pg, login: string) => tx`SELECT pg_advisory_xact_lock(hashtextextended(${"console-login:" + login.toLowerCase()}, 0))`;

/** The ConsoleStore on PostgreSQL: the same tables as SQLite's (pg-migrations.ts, version 9), each call one bounded round trip or one short transaction. */
export function createPostgresConsoleStore(sql: Pg, timeoutMs = 2_000): ConsoleStore {
  const bounded = <T>(promise: Promise<T>, what: string) => withTimeout(promise, timeoutMs, what);
  return {
    createInvite(i) {
      return bounded(sql.begin(async (tx) => {
        await lockLogin(tx, i.login);
        // A login is one account's: another account's user, or its link still open, speaks for it.
        const [taken] = await tx`SELECT 1 FROM console_users WHERE lower(login) = lower(${i.login}) AND account_id <> ${i.accountId}
                                 UNION ALL SELECT 1 FROM console_invites WHERE lower(login) = lower(${i.login}) AND account_id <> ${i.accountId} AND used_at IS NULL AND expires_at > ${i.createdAt} LIMIT 1`;
        if (taken) return false;
        // The new link replaces the account's earlier ones for the login (one link a login at a time).
        await tx`DELETE FROM console_invites WHERE lower(login) = lower(${i.login}) AND account_id = ${i.accountId} AND used_at IS NULL`;
        await tx`INSERT INTO console_invites (token_hash, account_id, login, created_at, expires_at) VALUES (${i.tokenHash}, ${i.accountId}, ${i.login}, ${i.createdAt}, ${i.expiresAt})`;
        return true;
      }), "console invite");
    },
    acceptInvite(tokenHash, passwordHash, now) {
      return bounded(sql.begin(async (tx) => {
        // The login's lock first, as every change to its invites takes it (no two wait on each other
        // in opposite orders); then the row lock makes a second acceptance of the same invite wait,
        // then find it used.
        const [named] = await tx`SELECT login FROM console_invites WHERE token_hash = ${tokenHash}`;
        if (!named) return { ok: false as const, reason: "invalid" as const };
        await lockLogin(tx, named.login);
        const [found] = await tx`SELECT account_id, login FROM console_invites WHERE token_hash = ${tokenHash} AND used_at IS NULL AND expires_at > ${now} FOR UPDATE`;
        if (!found) return { ok: false as const, reason: "invalid" as const };
        // A login the account has already (whatever its capitals) is a reset: its password is
        // replaced and its sessions end; another account's is taken. Locked, so a removal waits.
        const [user] = await tx`SELECT login, account_id FROM console_users WHERE lower(login) = lower(${found.login}) ORDER BY (login = ${found.login}) DESC LIMIT 1 FOR UPDATE`;
        if (user && user.account_id !== found.account_id) return { ok: false as const, reason: "login_taken" as const };
        if (user) {
          await tx`UPDATE console_users SET password_hash = ${passwordHash} WHERE login = ${user.login}`;
          await tx`DELETE FROM console_sessions WHERE kind = 'holder' AND login = ${user.login} AND account_id = ${found.account_id}`;
        } else {
          const made = await tx`INSERT INTO console_users (login, account_id, password_hash, created_at) VALUES (${found.login}, ${found.account_id}, ${passwordHash}, ${now})
                                 ON CONFLICT (login) DO NOTHING RETURNING login`;
          if (made.length === 0) return { ok: false as const, reason: "login_taken" as const };
        }
        await tx`UPDATE console_invites SET used_at = ${now} WHERE token_hash = ${tokenHash}`;
        // The login's other open links go: an older one would reset the password just set.
        await tx`DELETE FROM console_invites WHERE lower(login) = lower(${found.login}) AND token_hash <> ${tokenHash} AND used_at IS NULL`;
        return { ok: true as const, accountId: found.account_id as string, login: (user?.login ?? found.login) as string };
      }), "console invite acceptance");
    },
    async findUser(login) {
      // Whatever its capitals; of two that differ only in them (possible before logins were lower-cased), the exact one.
      const [row] = await bounded(sql`SELECT login, account_id, password_hash FROM console_users WHERE lower(login) = lower(${login}) ORDER BY (login = ${login}) DESC LIMIT 1`, "console user");
      return row ? { login: row.login, accountId: row.account_id, passwordHash: row.password_hash } : null;
    },
    async findInvite(tokenHash, now) {
      const [row] = await bounded(sql`SELECT i.login, i.expires_at, EXISTS (SELECT 1 FROM console_users u WHERE lower(u.login) = lower(i.login) AND u.account_id = i.account_id) AS reset
                                       FROM console_invites i WHERE i.token_hash = ${tokenHash} AND i.used_at IS NULL AND i.expires_at > ${now}`, "console invite");
      return row ? { login: row.login as string, expiresAt: int(row.expires_at), reset: row.reset === true } : null;
    },
    async loginTaken(login) {
      return (await bounded(sql`SELECT 1 FROM console_users WHERE lower(login) = lower(${login})`, "console user")).length > 0;
    },
    async listLogins(accountId, now) {
      const [users, invites] = await Promise.all([
        bounded(sql`SELECT login, created_at FROM console_users WHERE account_id = ${accountId} ORDER BY login`, "console logins"),
        bounded(sql`SELECT login, created_at, expires_at FROM console_invites WHERE account_id = ${accountId} AND used_at IS NULL AND expires_at > ${now} ORDER BY created_at DESC`, "console invites"),
      ]);
      return {
        logins: users.map((u: { login: string; created_at: string }) => ({ login: u.login, created_at: iso(int(u.created_at))! })),
        invites: invites.map((i: { login: string; created_at: string; expires_at: string }) => ({ login: i.login, created_at: iso(int(i.created_at))!, expires_at: iso(int(i.expires_at))! })),
      };
    },
    removeLogin(accountId, login) {
      // Invites first, then the user: the order an acceptance locks them in (its invite, then the
      // user), so the two wait for each other instead of deadlocking.
      return bounded(sql.begin(async (tx) => {
        await lockLogin(tx, login);
        const invites = await tx`DELETE FROM console_invites WHERE lower(login) = lower(${login}) AND account_id = ${accountId} AND used_at IS NULL RETURNING login`;
        const users = await tx`DELETE FROM console_users WHERE lower(login) = lower(${login}) AND account_id = ${accountId} RETURNING login`;
        await tx`DELETE FROM console_sessions WHERE kind = 'holder' AND lower(login) = lower(${login}) AND account_id = ${accountId}`;
        return users.length + invites.length > 0;
      }), "console login removal");
    },
    cancelInvites(accountId, login, now) {
      return bounded(sql.begin(async (tx) => {
        await lockLogin(tx, login);
        const rows = await tx`DELETE FROM console_invites WHERE lower(login) = lower(${login}) AND account_id = ${accountId} AND used_at IS NULL AND expires_at > ${now} RETURNING login`;
        return rows.length > 0;
      }), "console invite cancel");
    },
    async createSession(s) {
      await bounded(sql`DELETE FROM console_sessions WHERE expires_at <= ${s.createdAt}`, "console session sweep");
      await bounded(sql`INSERT INTO console_sessions (token_hash, kind, account_id, login, csrf, created_at, expires_at)
                        VALUES (${s.tokenHash}, ${s.kind}, ${s.accountId}, ${s.login}, ${s.csrf}, ${s.createdAt}, ${s.expiresAt})`, "console session");
    },
    async findSession(tokenHash, now) {
      // A holder's session lasts only while its login does (one started during the login's removal ends with it).
      const [row] = await bounded(sql`SELECT token_hash, kind, account_id, login, csrf, created_at, expires_at FROM console_sessions s WHERE token_hash = ${tokenHash} AND expires_at > ${now}
                                        AND (kind = 'operator' OR EXISTS (SELECT 1 FROM console_users u WHERE u.login = s.login AND u.account_id = s.account_id))`, "console session");
      return row
        ? { tokenHash: row.token_hash, kind: row.kind as SessionKind, accountId: row.account_id, login: row.login, csrf: row.csrf, createdAt: int(row.created_at), expiresAt: int(row.expires_at) }
        : null;
    },
    async deleteSession(tokenHash) {
      await bounded(sql`DELETE FROM console_sessions WHERE token_hash = ${tokenHash}`, "console sign-out");
    },
    async recentRequests(q) {
      const rows = q.accountId
        ? await bounded(sql.unsafe(`SELECT ${RECENT_COLUMNS} FROM ${RECENT_FROM} WHERE u.account_id = $1 ORDER BY u.created_at DESC, u.id DESC LIMIT $2`, [q.accountId, q.limit]), "recent requests")
        : await bounded(sql.unsafe(`SELECT ${RECENT_COLUMNS} FROM ${RECENT_FROM} ORDER BY u.id DESC LIMIT $1`, [q.limit]), "recent requests");
      return rows.map(recentRequestOf);
    },
    async creditEntries(accountId, limit) {
      const rows = await bounded(sql`SELECT amount_micro, kind, created_at FROM credit_entries WHERE account_id = ${accountId} ORDER BY id DESC LIMIT ${limit}`, "credit entries");
      return rows.map(creditEntryOf);
    },
  };
}
