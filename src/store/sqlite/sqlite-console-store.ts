import type { Database } from "bun:sqlite";
import { retryWhileBusy } from "./sqlite-errors.ts";
import { iso } from "../../accounts/account-store.ts";
import { creditEntryOf, recentRequestOf, type AcceptOutcome, type ConsoleInvite, type ConsoleSession, type ConsoleStore, type ConsoleUser, type RecentQuery, type SessionKind } from "../../console/console-store.ts";

type RecordRow = { request_id: string; client_request_id: string | null; created_at: number; account_id: string; key_id: string; model: string; status: string; latency_ms: number; prompt_tokens: number; completion_tokens: number; cost_micro: number };

/** A record with its account's and key's names (joined by their primary keys, so the record index still orders the page). */
const RECENT_COLUMNS =
  "u.request_id, u.client_request_id, u.created_at, u.account_id, a.name AS account_name, u.key_id, k.name AS key_name, u.model, u.status, u.latency_ms, u.prompt_tokens, u.cache_read_tokens, u.cache_write_5m_tokens, u.cache_write_1h_tokens, u.completion_tokens, u.estimated, u.cost_micro";
const RECENT_FROM = "usage_records u LEFT JOIN accounts a ON a.id = u.account_id LEFT JOIN api_keys k ON k.id = u.key_id";

/**
 * The ConsoleStore on the gateway's SQLite connection (synchronous, like the account store). Its
 * writes retry while another connection holds the write lock (the gateway's connection never
 * waits for it: busy_timeout 0), as the account store's do: the checkpoint thread's restart and
 * the admin CLI take it for moments.
 */
export function createSqliteConsoleStore(db: Database): ConsoleStore {
  const insertInvite = db.query("INSERT INTO console_invites (token_hash, account_id, login, created_at, expires_at) VALUES (?, ?, ?, ?, ?)");
  // Logins are one whatever their capitals (console-auth.ts, LOGIN_PATTERN; ASCII only, which NOCASE
  // folds). Logins kept with capitals before they were lower-cased are found too; should two differ
  // only in capitals (possible before), the one written exactly as asked comes first.
  const userByLogin = db.query<{ login: string; account_id: string; password_hash: string }, [string, string]>(
    "SELECT login, account_id, password_hash FROM console_users WHERE login = ? COLLATE NOCASE ORDER BY login = ? DESC LIMIT 1",
  );
  const userOf = (login: string) => userByLogin.get(login, login);
  const openInvite = db.query<{ account_id: string; login: string }, [string, number]>("SELECT account_id, login FROM console_invites WHERE token_hash = ? AND used_at IS NULL AND expires_at > ?");
  const inviteInfo = db.query<{ login: string; expires_at: number; reset: number }, [string, number]>(
    "SELECT i.login, i.expires_at, EXISTS (SELECT 1 FROM console_users u WHERE u.login = i.login COLLATE NOCASE AND u.account_id = i.account_id) AS reset FROM console_invites i WHERE i.token_hash = ? AND i.used_at IS NULL AND i.expires_at > ?",
  );
  const useInvite = db.query("UPDATE console_invites SET used_at = ? WHERE token_hash = ?");
  const insertUser = db.query("INSERT INTO console_users (login, account_id, password_hash, created_at) VALUES (?, ?, ?, ?)");
  const sweep = db.query("DELETE FROM console_sessions WHERE expires_at <= ?");
  const insertSession = db.query("INSERT INTO console_sessions (token_hash, kind, account_id, login, csrf, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)");
  const selectSession = db.query<{ token_hash: string; kind: SessionKind; account_id: string | null; login: string | null; csrf: string; created_at: number; expires_at: number }, [string, number]>(
    // A holder's session lasts only while its login does: one started while the login was being
    // removed (its password checked just before) ends with it.
    "SELECT token_hash, kind, account_id, login, csrf, created_at, expires_at FROM console_sessions s WHERE token_hash = ? AND expires_at > ?"
      + " AND (kind = 'operator' OR EXISTS (SELECT 1 FROM console_users u WHERE u.login = s.login COLLATE NOCASE AND u.account_id = s.account_id))",
  );
  const removeSession = db.query("DELETE FROM console_sessions WHERE token_hash = ?");
  const setPassword = db.query("UPDATE console_users SET password_hash = ? WHERE login = ?");
  const endSessionsOf = db.query("DELETE FROM console_sessions WHERE kind = 'holder' AND login = ? COLLATE NOCASE AND account_id = ?");
  const usersOf = db.query<{ login: string; created_at: number }, [string]>("SELECT login, created_at FROM console_users WHERE account_id = ? ORDER BY login");
  const invitesOf = db.query<{ login: string; created_at: number; expires_at: number }, [string, number]>(
    "SELECT login, created_at, expires_at FROM console_invites WHERE account_id = ? AND used_at IS NULL AND expires_at > ? ORDER BY created_at DESC",
  );
  const removeUser = db.query("DELETE FROM console_users WHERE login = ? COLLATE NOCASE AND account_id = ?");
  const cancelInvites = db.query("DELETE FROM console_invites WHERE login = ? COLLATE NOCASE AND account_id = ? AND used_at IS NULL");
  const invitedElsewhere = db.query<{ one: number }, [string, string, number]>(
    "SELECT 1 AS one FROM console_invites WHERE login = ? COLLATE NOCASE AND account_id <> ? AND used_at IS NULL AND expires_at > ? LIMIT 1",
  );
  const cancelOpenInvites = db.query("DELETE FROM console_invites WHERE login = ? COLLATE NOCASE AND account_id = ? AND used_at IS NULL AND expires_at > ?");
  const cancelOtherInvites = db.query("DELETE FROM console_invites WHERE login = ? COLLATE NOCASE AND token_hash <> ? AND used_at IS NULL");
  // Newest first by the primary key (all accounts) or the (account_id, created_at) index (one account).
  const credits = db.query<{ amount_micro: number; kind: string; created_at: number }, [string, number]>("SELECT amount_micro, kind, created_at FROM credit_entries WHERE account_id = ? ORDER BY id DESC LIMIT ?");
  const recentAll = db.query<RecordRow, [number]>(`SELECT ${RECENT_COLUMNS} FROM ${RECENT_FROM} ORDER BY u.id DESC LIMIT ?`);
  const recentOne = db.query<RecordRow, [string, number]>(`SELECT ${RECENT_COLUMNS} FROM ${RECENT_FROM} WHERE u.account_id = ? ORDER BY u.created_at DESC, u.id DESC LIMIT ?`);

  const invite = db.transaction((i: ConsoleInvite): boolean => {
    const user = userOf(i.login);
    if (user && user.account_id !== i.accountId) return false;
    // A login is one account's: while another account's link for it is open, it is spoken for.
    if (invitedElsewhere.get(i.login, i.accountId, i.createdAt)) return false;
    // The new link replaces the account's earlier ones for the login: a link made again because the
    // first was mistyped or leaked must not stay a way to set the password for its 7 days.
    cancelInvites.run(i.login, i.accountId);
    insertInvite.run(i.tokenHash, i.accountId, i.login, i.createdAt, i.expiresAt);
    return true;
  });
  const accept = db.transaction((tokenHash: string, passwordHash: string, now: number): AcceptOutcome => {
    const found = openInvite.get(tokenHash, now);
    if (!found) return { ok: false, reason: "invalid" };
    const user = userOf(found.login);
    if (user && user.account_id !== found.account_id) return { ok: false, reason: "login_taken" };
    useInvite.run(now, tokenHash);
    // Once a link is used, the login's other open links go: an older one of the same account would
    // otherwise reset the password just set, and another account's can only fail.
    cancelOtherInvites.run(found.login, tokenHash);
    if (user) {
      // A reset: the new password, and whoever was signed in with the old one is signed out.
      setPassword.run(passwordHash, user.login);
      endSessionsOf.run(user.login, found.account_id);
      return { ok: true, accountId: found.account_id, login: user.login };
    }
    insertUser.run(found.login, found.account_id, passwordHash, now);
    return { ok: true, accountId: found.account_id, login: found.login };
  });
  const remove = db.transaction((accountId: string, login: string): boolean => {
    const users = removeUser.run(login, accountId).changes;
    endSessionsOf.run(login, accountId);
    return users + cancelInvites.run(login, accountId).changes > 0;
  });

  return {
    createInvite: (i) => retryWhileBusy(() => invite.immediate(i)),
    acceptInvite: (tokenHash, passwordHash, now) => retryWhileBusy(() => accept.immediate(tokenHash, passwordHash, now)),
    findUser(login): ConsoleUser | null {
      const row = userOf(login);
      return row ? { login: row.login, accountId: row.account_id, passwordHash: row.password_hash } : null;
    },
    loginTaken: (login) => userOf(login) !== null,
    findInvite(tokenHash, now) {
      const row = inviteInfo.get(tokenHash, now);
      return row ? { login: row.login, expiresAt: row.expires_at, reset: row.reset === 1 } : null;
    },
    listLogins: (accountId, now) => ({
      logins: usersOf.all(accountId).map((u) => ({ login: u.login, created_at: iso(u.created_at)! })),
      invites: invitesOf.all(accountId, now).map((i) => ({ login: i.login, created_at: iso(i.created_at)!, expires_at: iso(i.expires_at)! })),
    }),
    removeLogin: (accountId, login) => retryWhileBusy(() => remove.immediate(accountId, login)),
    cancelInvites: (accountId, login, now) => retryWhileBusy(() => cancelOpenInvites.run(login, accountId, now).changes > 0),
    createSession: (s: ConsoleSession) =>
      retryWhileBusy(() => {
        sweep.run(s.createdAt);
        insertSession.run(s.tokenHash, s.kind, s.accountId, s.login, s.csrf, s.createdAt, s.expiresAt);
      }),
    findSession(tokenHash, now) {
      const row = selectSession.get(tokenHash, now);
      return row ? { tokenHash: row.token_hash, kind: row.kind, accountId: row.account_id, login: row.login, csrf: row.csrf, createdAt: row.created_at, expiresAt: row.expires_at } : null;
    },
    deleteSession: (tokenHash) => retryWhileBusy(() => void removeSession.run(tokenHash)),
    recentRequests(q: RecentQuery) {
      const rows = q.accountId ? recentOne.all(q.accountId, q.limit) : recentAll.all(q.limit);
      return rows.map(recentRequestOf);
    },
    creditEntries(accountId, limit) {
      return credits.all(accountId, limit).map(creditEntryOf);
    },
  };
}
