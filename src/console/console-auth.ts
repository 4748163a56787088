import type { ConsoleStore, SessionKind } from "./console-store.ts";

/**
 * The console's secrets and cookies (docs/decisions.md, "Console"). Pure: values in, values out;
 * the routes (http/console/console-api.ts) pass the clock and the store.
 */

/** An invite link lasts a week, and works once. */
export const INVITE_TTL_MS = 7 * 86_400_000;
/** A session ends 12 hours after sign-in, whatever happens in between; signing out ends it sooner. */
export const SESSION_TTL_MS = 12 * 3_600_000;
export const SESSION_COOKIE = "switchyard_console";

/** 32 random bytes, base64url: a session, invite or CSRF token. */
export function newSecret(): string {
  return Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("base64url");
}

/** Only this is stored: a database reader learns no session or invite that works. */
export function hashSecret(secret: string): string {
  return Bun.SHA256.hash(secret, "hex") as string;
}

/** argon2id, Bun's default parameters (64 MiB, 2 passes): slow for a guesser, ~50 ms for a sign-in. */
export function hashPassword(password: string): Promise<string> {
  return Bun.password.hash(password, { algorithm: "argon2id" });
}

export function verifyPassword(password: string, hash: string): Promise<boolean> {
  return Bun.password.verify(password, hash).catch(() => false);
}

/** A hash to verify against when the login does not exist, so an unknown login takes as long as a wrong password. */
let decoy: Promise<string> | undefined;
export function decoyHash(): Promise<string> {
  return (decoy ??= hashPassword(newSecret()));
}

/** Whether the browser reached us over HTTPS: directly, or through a proxy that says so. */
export function isHttps(request: Request): boolean {
  return new URL(request.url).protocol === "https:" || request.headers.get("x-forwarded-proto")?.split(",")[0]?.trim().toLowerCase() === "https";
}

/** The origin the browser used: scheme (a proxy's x-forwarded-proto counts) and the Host it sent. */
export function publicOrigin(request: Request): string {
  const url = new URL(request.url);
  const host = request.headers.get("x-forwarded-host")?.split(",")[0]?.trim() || request.headers.get("host") || url.host;
  return `${isHttps(request) ? "https" : url.protocol.replace(":", "")}://${host}`;
}

/**
 * A change must come from the console's own pages. Browsers send Origin on every POST, PATCH and
 * DELETE; one that names another site (or Sec-Fetch-Site: cross-site) is refused. A request with
 * neither (curl, a script) still needs the session's CSRF header, which no other site can read.
 */
export function sameOrigin(request: Request): boolean {
  if (request.headers.get("sec-fetch-site") === "cross-site") return false;
  const origin = request.headers.get("origin");
  if (origin === null) return true;
  return origin === publicOrigin(request);
}

/** The session cookie: HttpOnly (no script reads it), SameSite=Strict (no other site sends it), Secure over HTTPS, scoped to /console. */
export function sessionCookie(token: string, request: Request, maxAgeSeconds: number): string {
  return `${SESSION_COOKIE}=${token}; Path=/console; HttpOnly; SameSite=Strict; Max-Age=${maxAgeSeconds}${isHttps(request) ? "; Secure" : ""}`;
}

export function clearedSessionCookie(request: Request): string {
  return sessionCookie("", request, 0);
}

/** The session token from the Cookie header, if any. */
export function sessionToken(request: Request): string | undefined {
  const header = request.headers.get("cookie");
  if (!header) return undefined;
  for (const part of header.split(";")) {
    const [name, ...value] = part.trim().split("=");
    if (name === SESSION_COOKIE) return value.join("=") || undefined;
  }
  return undefined;
}

export interface NewSession {
  token: string;
  csrf: string;
  kind: SessionKind;
  accountId: string | null;
  login: string | null;
  expiresAt: number;
}

/** Starts a session: the cookie's token goes to the browser, its hash to the store. */
export async function startSession(
  store: ConsoleStore,
  who: { kind: SessionKind; accountId: string | null; login: string | null | ((tokenHash: string) => string) },
  now: number,
  ttlMs = SESSION_TTL_MS,
): Promise<NewSession> {
  const token = newSecret();
  const csrf = newSecret();
  const expiresAt = now + ttlMs;
  const tokenHash = hashSecret(token);
  // A login made from the session's own token hash (an operator's: console-api.ts, `operatorMark`).
  const login = typeof who.login === "function" ? who.login(tokenHash) : who.login;
  await store.createSession({ tokenHash, csrf, createdAt: now, expiresAt, kind: who.kind, accountId: who.accountId, login });
  return { token, csrf, expiresAt, kind: who.kind, accountId: who.accountId, login };
}

/**
 * Logins: 3 to 64 letters, digits and . _ @ - (an email address fits). One whatever their
 * capitals: made lower-case when invited (`Ana@Example.com` is `ana@example.com`: people type
 * their address with capitals, and phones capitalise its first letter), and every store lookup,
 * uniqueness check and removal compares without capitals, so a login kept with capitals before
 * this rule is the same login too (no migration rewrites them).
 */
export const LOGIN_PATTERN = "^[A-Za-z0-9._@-]{3,64}$";
export const MIN_PASSWORD = 12;
export const MAX_PASSWORD = 256;

/**
 * An invite for `login` to the account: the link carries the token after `#`, so it never reaches
 * a server log (browsers do not send fragments). Null when the login is taken.
 */
export async function issueInvite(store: ConsoleStore, o: { accountId: string; login: string; now: number; origin: string }): Promise<{ url: string; expires_at: string; login: string } | null> {
  const token = newSecret();
  const expiresAt = o.now + INVITE_TTL_MS;
  const login = canonicalLogin(o.login);
  const made = await store.createInvite({ tokenHash: hashSecret(token), accountId: o.accountId, login, createdAt: o.now, expiresAt });
  if (!made) return null;
  return { url: `${o.origin}/console/#invite=${token}`, expires_at: new Date(expiresAt).toISOString(), login };
}

/** A login as it is kept: lower-case (see LOGIN_PATTERN). */
export function canonicalLogin(login: string): string {
  return login.toLowerCase();
}
