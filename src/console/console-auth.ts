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

/**
 * argon2id's cost: Bun's defaults (64 MiB, 2 passes) unless a test passes a cheaper one
 * (AppDeps.consolePasswordCost), as Django's test settings swap in a fast hasher: the suite signs
 * in hundreds of times, and a verify is read back at whatever cost its hash says.
 */
export interface PasswordCost {
  /** KiB. */
  memoryCost: number;
  timeCost: number;
}

/** Hashes and checks console passwords at one cost; slow for a guesser, ~50 ms a sign-in at the default. */
export interface PasswordHasher {
  hash(password: string): Promise<string>;
  verify(password: string, hash: string): Promise<boolean>;
  /** A hash to verify against when the login does not exist, so an unknown login takes as long as a wrong password. */
  decoy(): Promise<string>;
}

/** Too many password checks at once in this process: the sign-in is refused (429), nothing was checked. */
export class PasswordsBusyError extends Error {}

/**
 * Password checks at once, and waiting, per process. Each is argon2id over 64 MiB (~50–170 ms of
 * a core): sign-ins from a thousand addresses, a new login each (so no per-login or per-address
 * throttle stops them), ran the gateway at 188 % CPU on two cores (a hostile-tenant probe,
 * twenty-eighth session). Past these, a sign-in is refused at once with 429: the console's
 * sign-in waits, the API's tenants do not.
 */
export const PASSWORD_CHECKS_AT_ONCE = 2;
export const PASSWORD_CHECKS_WAITING = 32;

export function passwordHasher(cost?: PasswordCost, o: { atOnce?: number; waiting?: number } = {}): PasswordHasher {
  const atOnce = o.atOnce ?? PASSWORD_CHECKS_AT_ONCE;
  const maxWaiting = o.waiting ?? PASSWORD_CHECKS_WAITING;
  let running = 0;
  const waiting: (() => void)[] = [];
  const gated = async <T>(work: () => Promise<T>): Promise<T> => {
    if (running >= atOnce) {
      if (waiting.length >= maxWaiting) throw new PasswordsBusyError("Too many sign-ins at once: retry in a second.");
      await new Promise<void>((resolve) => waiting.push(resolve));
    } else running++;
    try {
      return await work();
    } finally {
      // The slot goes to the next waiter as it is (running unchanged), or is given back.
      const next = waiting.shift();
      if (next) next();
      else running--;
    }
  };
  const rawHash = (password: string) => Bun.password.hash(password, cost ? { algorithm: "argon2id", ...cost } : { algorithm: "argon2id" });
  let decoy: Promise<string> | undefined;
  return {
    hash: (password) => gated(() => rawHash(password)),
    verify: (password, stored) => gated(() => Bun.password.verify(password, stored).catch(() => false)),
    decoy: () => (decoy ??= rawHash(newSecret())),
  };
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

/**
 * Over HTTPS the cookie is `__Host-` prefixed: a browser takes such a cookie only from this very
 * host over HTTPS, for Path=/ and without a Domain, so a page on a sibling subdomain or on a plain
 * HTTP port of this host cannot plant one beside ours (a security probe planted its own session
 * from another port and the operator's console ran in it).
 */
export const SECURE_SESSION_COOKIE = `__Host-${SESSION_COOKIE}`;

/** The session cookie: HttpOnly (no script reads it), SameSite=Strict (no other site sends it); over HTTPS Secure and `__Host-`, else scoped to /console. */
export function sessionCookie(token: string, request: Request, maxAgeSeconds: number): string {
  if (isHttps(request)) return `${SECURE_SESSION_COOKIE}=${token}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${maxAgeSeconds}; Secure`;
  return `${SESSION_COOKIE}=${token}; Path=/console; HttpOnly; SameSite=Strict; Max-Age=${maxAgeSeconds}`;
}

export function clearedSessionCookie(request: Request): string {
  return sessionCookie("", request, 0);
}

/**
 * Most session cookies of our name read from one request: a browser holds one of ours; the rest
 * were planted. Enough for one at every path a console request's URL has, host-only and under a
 * parent domain: four planted at longer paths had kept ours from being read (a review).
 */
const MAX_SESSION_COOKIES = 16;
/** A token as `newSecret` makes them (32 bytes, base64url): anything else is not looked up. */
const TOKEN_SHAPE = /^[A-Za-z0-9_-]{43}$/;

/**
 * The session tokens the Cookie header carries under this request's cookie name, distinct, at
 * most a few. A browser holds one cookie of ours, but cookies ignore ports and a sibling subdomain
 * may set them for the parent domain: a page elsewhere on this host can add one (for a longer
 * Path it is even sent first). Every one is read (console-api.ts): a junk one planted beside ours
 * must not lock the user out, and two live sessions are refused rather than one guessed.
 */
export function sessionTokens(request: Request): string[] {
  const header = request.headers.get("cookie");
  if (!header) return [];
  const tokens: string[] = [];
  for (const value of cookieValues(header, isHttps(request) ? SECURE_SESSION_COOKIE : SESSION_COOKIE)) {
    if (TOKEN_SHAPE.test(value) && !tokens.includes(value)) tokens.push(value);
    if (tokens.length === MAX_SESSION_COOKIES) break;
  }
  return tokens;
}

/** The values a Cookie header gives the cookie `name`, in its order (a browser sends longer paths first). */
function cookieValues(header: string, name: string): string[] {
  const values: string[] = [];
  for (const part of header.split(";")) {
    const at = part.indexOf("=");
    if (at >= 0 && part.slice(0, at).trim() === name) values.push(part.slice(at + 1).trim());
  }
  return values;
}

/**
 * When a request carries more than one cookie of our name (plain HTTP only: a `__Host-` one cannot
 * be planted), cookies that end the planted ones: our name at every path the browser could have
 * sent it for on this request other than our own (`/console`, host-only), and for a named host
 * the same under each parent domain (a sibling subdomain's `Domain=` cookie). Ours stays.
 */
export function plantedCookieClears(request: Request): string[] {
  if (isHttps(request)) return [];
  const header = request.headers.get("cookie");
  if (!header || cookieValues(header, SESSION_COOKIE).length < 2) return [];
  const url = new URL(request.url);
  // The request path's first segments only, and a host that is a DNS name's only: a Host of
  // thousands of labels made a 16 KB request a 431 MiB answer (a hostile-tenant probe).
  const parts = url.pathname.split("/").filter((p) => p !== "").slice(0, MAX_PATH_DEPTH);
  const paths = new Set<string>(["/"]);
  for (let i = 1; i <= parts.length; i++) {
    const path = `/${parts.slice(0, i).join("/")}`;
    paths.add(path);
    paths.add(`${path}/`);
  }
  const clear = (path: string, domain?: string) => `${SESSION_COOKIE}=; Path=${path.slice(0, 200)}${domain ? `; Domain=${domain}` : ""}; Max-Age=0`;
  const out = [...paths].filter((p) => p !== "/console").map((p) => clear(p));
  const host = (request.headers.get("host") ?? url.host).replace(/:\d+$/, "").toLowerCase();
  // An address has no parent domains (and a Domain= cookie for it is the host's own).
  if (DNS_NAME.test(host) && !/^[\d.]+$/.test(host)) {
    const labels = host.split(".");
    for (let i = Math.max(0, labels.length - 1 - MAX_PARENT_DOMAINS); i < labels.length - 1; i++) for (const p of paths) out.push(clear(p, labels.slice(i).join(".")));
  }
  return out;
}

/** Path segments and parent domains a clearing covers: a console URL has four, a host a few. */
const MAX_PATH_DEPTH = 4;
const MAX_PARENT_DOMAINS = 4;
/** A host name as DNS has them: at most 253 characters, labels of 1 to 63. */
const DNS_NAME = /^(?=.{1,253}$)(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$/;


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

/** Passwords of 12 characters or more that lists of leaked passwords start with. */
const COMMON_PASSWORDS = new Set([
  "123456789012", "1234567890123", "12345678901234", "123456123456", "111111111111", "000000000000",
  "password1234", "password12345", "password123456", "passwordpassword", "qwertyuiop12", "qwertyuiopasdf",
  "qwerty123456", "1q2w3e4r5t6y", "abcdefghijkl", "abcd1234abcd", "iloveyou1234", "letmein12345", "welcome12345",
  "administrator", "changeme1234", "switchyard12", "switchyard123", "switchyard1234",
]);

/**
 * Why a password of the right length is still one a guesser tries first (NIST SP 800-63B asks for
 * a check against common and context-specific words, not composition rules), else undefined:
 * blank or nearly one character repeated, the login itself (or its part before `@`), or a common one.
 */
export function weakPassword(password: string, login: string): string | undefined {
  const lower = password.toLowerCase();
  if (new Set(lower.replace(/\s/g, "")).size < 4) return "it repeats too few different characters.";
  const name = login.toLowerCase();
  const local = name.split("@")[0]!.replace(/[^a-z0-9]/g, "");
  // The login, or its name before `@` dressed in capitals, marks and a year ("FrankWeak-2026!").
  const bare = lower.replace(/[^a-z0-9]/g, "").replace(/^\d+|\d+$/g, "");
  if (lower.includes(name) || (local !== "" && bare === local.replace(/^\d+|\d+$/g, ""))) return "it is the login.";
  if (COMMON_PASSWORDS.has(lower)) return "it is one of the most common passwords.";
  return undefined;
}

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
