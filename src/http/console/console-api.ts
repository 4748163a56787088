import { Elysia, t } from "elysia";
import { addressBlock } from "../../limits/address-block.ts";
import { timingSafeEqual } from "node:crypto";
import type { ModelConfig } from "../../config/schema.ts";
import { HOLDER_KEY_WINDOW_MS, HOLDER_KEYS_PER_DAY, holderKeyCeiling, holderKeyWait } from "../../accounts/holder-keys.ts";
import { canonicalLogin, LOGIN_PATTERN, weakPassword, clearedSessionCookie, hashSecret, issueInvite, publicOrigin, sameOrigin, plantedCookieClears, sessionCookie, sessionTokens, startSession, type NewSession, type PasswordHasher, PasswordsBusyError } from "../../console/console-auth.ts";
import { CREDIT_ENTRIES_SHOWN, MAX_RECENT, type ConsoleSession, type ConsoleStore } from "../../console/console-store.ts";
import { rangeOf } from "../../console/usage-range.ts";
import { chartPeriods, MAX_CHART_PERIODS, summarizeUsage, TABLE_GROUPS } from "../../console/usage-summary.ts";
import type { SignInAttempts } from "../../limits/sign-in-attempts.ts";
import { createAuthFailures } from "../../limits/auth-failures.ts";
import { retryAfterSeconds, type BucketDecision } from "../../limits/token-bucket.ts";
import type { Logger } from "../../log/log.ts";
import type { ModelHealth } from "../../ops/model-health.ts";
import type { VendorKeyStatus } from "../../providers/key-pools.ts";
import { GatewayError } from "../../streaming/gateway-error.ts";
import { errorResponse } from "../plugins/errors.ts";
import { unreadBodyHeaders } from "../plugins/json-body.ts";
import { CreateAccount, CreateInvite, CreateKey, LOGIN_TAKEN, PatchAccount, PatchKey, TopUp } from "../routes/admin.ts";
import type { AdminOperations } from "../routes/admin-operations.ts";
import { AcceptInvite, CheckInvite, ConsoleQuery, SignIn, type ConsoleSessionInfo } from "./console-schemas.ts";

export interface ConsoleApiDeps {
  ops: AdminOperations;
  store: ConsoleStore;
  /** SWITCHYARD_ADMIN_TOKEN: operators sign in with it; without it only account holders can. */
  adminToken: string | undefined;
  models: readonly ModelConfig[];
  health: () => ModelHealth[];
  /** The pooled vendor keys' states, as the admin API lists them (by env name, never a value). */
  vendorKeys: () => Promise<VendorKeyStatus[]>;
  /** An operator's "check it now" of one pooled key (key-pools.ts, probeNow): undefined when not pooled, "busy" when a check is under way. */
  probeVendorKey: (provider: string, key: string) => Promise<(VendorKeyStatus & { accepted: boolean }) | "busy" | undefined>;
  signIns: SignInAttempts;
  passwords: PasswordHasher;
  now: () => number;
  log: Logger;
  /** Which account a key belongs to (null: no such key). */
  keyAccount: (keyId: string) => Promise<string | null>;
  /** The gateway's limits for keys and accounts that set none (config `limits`): an account's view shows them as numbers. */
  defaultLimits: DefaultLimits;
  /**
   * A token from the bucket of a holder's account for each of its console requests; unset: none.
   * A holder flooding `/console/api/requests` (32 at once, 900 a second, each a store read of 200
   * rows and a flush) took another tenant's paid requests from p50 46 to 95 ms, p99 57 to 190 ms.
   */
  holderRate?: (accountId: string) => BucketDecision | Promise<BucketDecision>;
  /** Session tokens that name no session, per address (createSessionChecks); unset: not counted. */
  sessionChecks?: SessionChecks;
}

/**
 * Invite links looked up in vain from one address (block) a minute; past them its invite checks
 * and accepts are 429 before any read. Anyone may post a made-up link, and each was a read of the
 * shared store, as made-up session cookies were (createSessionChecks); a holder mistypes one a few times.
 */
export const INVITE_FAILURES_PER_MINUTE = 60;
/** Session tokens looked up in vain from one address a minute; past them its unknown tokens are 429, not read. */
export const SESSION_FAILURES_PER_MINUTE = 300;
export type SessionChecks = ReturnType<typeof createSessionChecks>;
const SESSIONLESS = /^\/console\/api\/(sign-in|invites\/(check|accept))$/;

/**
 * Console session tokens that named no session, counted per client address (block). Each token a
 * request carries (up to 16) is a read of the shared store, before any session is known: a flood of
 * made-up cookies from one address (16 a request, 64 connections) took the PostgreSQL pool from the
 * tenants on every replica (a hostile-tenant probe: another tenant's p50 48 → 144 ms, p99 119 →
 * 649 ms). Past the limit, an address's requests carrying no session this process has found are
 * refused before any read (429), and those carrying one have only such tokens read: a holder or
 * operator already signed in behind the flooder's address keeps working.
 */
export function createSessionChecks(now: () => number, limit = SESSION_FAILURES_PER_MINUTE) {
  const failures = createAuthFailures({ now, limit });
  /** Token hashes this process found live (newest last), at most 10,000. */
  const known = new Set<string>();
  const blocks = new WeakMap<Request, string>();
  const throttled = (request: Request) => { const block = blocks.get(request); return block !== undefined && failures.throttled(block); };
  return {
    /** In the admission hook: the request's address, and the refusal of a throttled address's unknown sessions. */
    gate(request: Request, server: { requestIP(r: Request): { address: string } | null } | null): Response | undefined {
      const tokens = sessionTokens(request);
      if (tokens.length === 0) return undefined;
      blocks.set(request, addressBlock(server?.requestIP(request)?.address ?? "unknown"));
      // A sign-in and an invite read no session: an old cookie sent along must not keep its browser out.
      if (!throttled(request) || SESSIONLESS.test(new URL(request.url).pathname) || tokens.some((token) => known.has(hashSecret(token)))) return undefined;
      return errorResponse(false, 429, "rate_limit", "Too many console requests with sessions that do not exist from this address: sign in again in a minute.", { "retry-after": "60", ...unreadBodyHeaders(request) });
    },
    /** The hashes of the tokens to read: only those found before while the address is throttled. */
    toRead: (request: Request, hashes: string[]) => (throttled(request) ? hashes.filter((h) => known.has(h)) : hashes),
    found(hash: string) {
      known.delete(hash);
      if (known.size >= 10_000) known.delete(known.values().next().value!);
      known.add(hash);
    },
    missed(request: Request, count: number) {
      const block = blocks.get(request);
      if (block !== undefined) for (let i = 0; i < count; i++) failures.failed(block);
    },
  };
}

/** The limits a key or account without its own has (null: none). */
export interface DefaultLimits {
  key_requests_per_minute: number;
  key_max_concurrent_requests: number | null;
  account_requests_per_minute: number | null;
  account_max_concurrent_requests: number | null;
  account_tokens_per_minute: number | null;
}

const equal = (a: string, b: string) => {
  const x = Buffer.from(a), y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
};

const info = (s: Pick<ConsoleSession, "kind" | "login" | "accountId" | "csrf" | "expiresAt">): ConsoleSessionInfo =>
  ({ kind: s.kind, login: s.kind === "operator" ? null : s.login, account_id: s.accountId, csrf: s.csrf, expires_at: new Date(s.expiresAt).toISOString() });

/**
 * What an operator session keeps of the admin token it was opened with (in its `login`, which
 * operators have no other use for; the `:` keeps it out of every holder login's form): a changed
 * or removed token ends the sessions opened with the old one, as it ends the old token's access to
 * the admin API (a console probe, 2026-11-30: a session outlived the token for its 12 hours, top-ups
 * included). A truncated SHA-256 of the token salted with the session's own token hash, so no two
 * sessions keep the same value and none is a hash of the token alone; never shown.
 */
const operatorMark = (adminToken: string, tokenHash: string) => `operator:${hashSecret(`${tokenHash}:${adminToken}`).slice(0, 32)}`;

/**
 * Run by the admission plugin when a `/console/api/` request arrives, before its body is read: a
 * change (anything but GET and HEAD) from another site's page, or in a form's encoding, is refused
 * here as such (403, 415), whatever its body. The routes check the session and its CSRF token.
 */
export function consoleGate(request: Request): Response | undefined {
  if (request.method === "GET" || request.method === "HEAD") return undefined;
  const refused = crossSiteRefusal(request);
  if (refused) return errorResponse(false, refused.status, refused.kind, refused.message, unreadBodyHeaders(request));
  // The console's bodies are a few hundred bytes: a larger one is refused as such (413), before
  // it takes any of the pool that bodies without a key share (app.ts).
  // A body without a length (chunked) would be read to the gateway's own limit: the console's pages always send one.
  const declared = request.headers.get("content-length");
  if (declared === null && request.headers.get("transfer-encoding") !== null) {
    return errorResponse(false, 411, "invalid_request", "Send the body with a Content-Length: the console's requests take at most 64 KiB.", { connection: "close" });
  }
  const length = Number(declared ?? 0);
  if (length > CONSOLE_MAX_BODY_BYTES) {
    return errorResponse(false, 413, "request_too_large", `The request body is ${length} bytes; the console's requests take at most ${CONSOLE_MAX_BODY_BYTES}.`, { connection: "close" });
  }
  return undefined;
}

/** The refusal, ending the cookies of ours planted beside the browser's own (console-auth.ts): a refusal's answer has no after-handle hook to add them. */
function withPlantedCleared(error: GatewayError, request: Request): GatewayError {
  const clears = plantedCookieClears(request);
  if (clears.length > 0) error.cookies = clears;
  return error;
}

/** How many revoked and expired keys an account's view reads at first, and at each "Show more". */
export const FIRST_KEYS_PAGE = 50;

/** The largest body a console request may declare: far above any of its forms (a key's model list, an account's name). */
export const CONSOLE_MAX_BODY_BYTES = 64 * 1024;

/** A password check refused for the checks already under way (console-auth.ts): 429, retry in a second. */
function busyAs429(err: unknown): unknown {
  return err instanceof PasswordsBusyError ? new GatewayError(429, "rate_limit", err.message, { "retry-after": "1" }) : err;
}

/**
 * A browser on the console's own page whose Origin is not the address the gateway sees is nearly
 * always a reverse proxy that does not pass the browser's Host: every sign-in was refused with
 * "Cross-site requests are refused." and nothing to go on (a console probe, twenty-eighth
 * session). The Origin is the client's own; the address the gateway sees is not echoed (behind a
 * proxy it may be an internal name).
 */
function crossSiteMessage(request: Request): string {
  const origin = request.headers.get("origin");
  if (origin === null || request.headers.get("sec-fetch-site") === "cross-site") return "Cross-site requests are refused.";
  return `Cross-site requests are refused: the Origin ${JSON.stringify(origin.slice(0, 200))} is not this gateway's address as it sees it (its Host and X-Forwarded-Proto). Behind a reverse proxy, pass the browser's Host header on (nginx: proxy_set_header Host $host) or set X-Forwarded-Host.`;
}

/** Why a change could have come from another site's page: not this Origin (403), or a form's encoding (415). */
function crossSiteRefusal(request: Request): { status: number; kind: "permission" | "invalid_request"; message: string } | undefined {
  if (!sameOrigin(request)) return { status: 403, kind: "permission", message: crossSiteMessage(request) };
  const type = request.headers.get("content-type");
  if (request.headers.get("content-length") !== "0" && type !== null && !type.toLowerCase().startsWith("application/json")) {
    return { status: 415, kind: "invalid_request", message: "Send JSON (content-type: application/json)." };
  }
  return undefined;
}

/** Said when the page's session is no longer the browser's (409): the client reads who is signed in now. */
export const SESSION_REPLACED = "Another sign-in in this browser replaced this page's session: reload the console.";
/**
 * The 409 a page follows (it shows who is signed in now), told apart from the API's other 409s
 * (a login taken, ten keys, a limit below what was spent) by its code: following those had sent
 * an operator to another view saying their session was replaced (a review).
 */
export const SESSION_REPLACED_CODE = "session_replaced";
const sessionReplaced = () => new GatewayError(409, "invalid_request", SESSION_REPLACED, undefined, { code: SESSION_REPLACED_CODE });

/** The form every login has (invites require it): anything else names no one. */
const LOGIN_FORM = new RegExp(LOGIN_PATTERN);

/** What an account holder may set on their own keys: names and spend limits, never a rate limit (the operator's to give). */
const HOLDER_KEY_FIELDS = new Set(["name", "spend_limit", "spend_limit_period", "expires_at"]);

/**
 * The console's JSON routes (`/console/api/*`): the admin operations (http/routes/admin-operations.ts)
 * behind a cookie session instead of the admin token. Operators see everything; an account holder
 * sees only their own account, and any other id answers 404, as if it did not exist.
 * Every change (POST, PATCH, DELETE) needs a JSON body or none, an Origin of this site (when
 * the browser sends one) and, once signed in, the session's CSRF token in `x-csrf-token`: a form
 * posted from another site has neither (docs/decisions.md, "Console").
 */
export function consoleApiRoutes(deps: ConsoleApiDeps) {
  /** An account as its view reads it: with the gateway's limits, which its unset ones mean. */
  const withDefaults = <A extends object>(account: A) => ({ ...account, default_limits: deps.defaultLimits });
  const { ops, store } = deps;
  /**
   * An account as its view reads it: its facts, its keys in use, and the first page of its revoked
   * and expired keys (newest first); `keys_page` says how many of each there are and where the
   * next page of the revoked and expired starts (`GET /accounts/:id/keys?state=inactive&offset=`).
   * Every key was read before: 10,000 revoked keys were a 3.5 MB answer on each view and after
   * each change (a console probe). The admin API's account answer, which scripts read, lists all.
   */
  /**
   * `holder`: the page is a holder's, and says what a key they make may reach (new_key): the form
   * hid it, and a holder with a key for every model made one limited to one (a console probe).
   */
  const accountWithKeys = async (id: string, holder = false) => {
    const facts = await ops.accountFacts(id);
    // The requests refused before any upstream call in the last 24 hours, by status: a holder
    // whose every request got 402 saw a balance and nothing about it (a console probe). Whole
    // hours, as Usage's "Last 24 hours" (the same count there), read from the hourly rollups.
    const lastDay = rangeOf("24h", deps.now());
    const [active, inactive, usage, limits, credits] = await Promise.all([
      ops.keyPage(id, { state: "active", limit: "100" }),
      ops.keyPage(id, { state: "inactive", limit: String(FIRST_KEYS_PAGE) }),
      ops.accountUsage(id, { from: String(lastDay.from), to: String(lastDay.to) }),
      holder ? ops.keyLimits(id, deps.now() - HOLDER_KEY_WINDOW_MS) : undefined,
      store.creditEntries(id, CREDIT_ENTRIES_SHOWN),
    ]);
    return {
      ...withDefaults(facts), keys: [...active.data, ...inactive.data], keys_page: { active: active.total, inactive: inactive.total, next_offset: inactive.next_offset },
      refused_last_24h: usage.rejected,
      refused_latest: usage.rejected_latest,
      // What was added and taken back, newest first: the balance's moves that are not charges.
      credit_history: credits,
      ...(limits ? { new_key: holderKeyCeiling(limits) } : {}),
    };
  };

  const adminToken = deps.adminToken;
  const currentSession = async (request: Request): Promise<ConsoleSession> => {
    // Every cookie of our name is read (console-auth.ts, sessionTokens): a junk one planted beside
    // ours is passed over; two live ones are refused, never one guessed (the answer that follows
    // ends the planted ones: plantedCookieClears, below).
    const checks = deps.sessionChecks;
    const hashes = sessionTokens(request).map(hashSecret);
    const read = checks ? checks.toRead(request, hashes) : hashes;
    const now = deps.now();
    const live = (await Promise.all(read.map((hash) => store.findSession(hash, now)))).filter((s): s is ConsoleSession => s !== null);
    for (const s of live) checks?.found(s.tokenHash);
    checks?.missed(request, read.length - live.length);
    if (live.length > 1) {
      deps.log("warn", "console request with two live sessions (a cookie planted by another site on this host?)", { path: new URL(request.url).pathname });
      throw withPlantedCleared(new GatewayError(401, "authentication", "This browser sent two console sessions, one of them set by another site on this host: sign in again."), request);
    }
    const found = live[0];
    if (!found) throw withPlantedCleared(new GatewayError(401, "authentication", "Not signed in, or the session ended: sign in again."), request);
    if (found.kind === "holder" && deps.holderRate) {
      const decision = await deps.holderRate(found.accountId!);
      if (decision.unavailable) throw new GatewayError(503, "overloaded", "The console's rate limits cannot be checked now. Retry in a few seconds.", { "retry-after": "5" });
      if (!decision.allowed) {
        const wait = retryAfterSeconds(decision);
        throw new GatewayError(429, "rate_limit", `Too many console requests for this account. Retry after ${wait} s.`, { "retry-after": String(wait) });
      }
    }
    if (found.kind === "operator" && (adminToken === undefined || found.login !== operatorMark(adminToken, found.tokenHash))) {
      await store.deleteSession(found.tokenHash);
      throw new GatewayError(401, "authentication", "The admin token changed since this session began: sign in again.");
    }
    return found;
  };
  /** A read: the page says whose view it shows (its session's token), when it sends one. */
  const session = async (request: Request): Promise<ConsoleSession> => {
    const found = await currentSession(request);
    // Another sign-in in this browser replaced the cookie meanwhile: answered, the page would show
    // that session's data under its own name.
    const expected = request.headers.get("x-csrf-token");
    if (expected !== null && !equal(expected, found.csrf)) throw sessionReplaced();
    return found;
  };
  /** Refuses what another site could have made a browser send. */
  const sameSite = (request: Request) => {
    const refused = crossSiteRefusal(request);
    if (refused) throw new GatewayError(refused.status, refused.kind, refused.message);
  };
  /** A change by a signed-in user: same site, and the session's CSRF token. */
  const changer = async (request: Request): Promise<ConsoleSession> => {
    sameSite(request);
    const s = await currentSession(request);
    const given = request.headers.get("x-csrf-token") ?? "";
    // A page that names another session (this browser signed in again meanwhile) is told so, as a
    // read is (409); its change is refused either way. Without a token it is a forgery's: 403.
    if (given !== "" && !equal(given, s.csrf)) throw sessionReplaced();
    if (!equal(given, s.csrf)) throw new GatewayError(403, "permission", "Missing or wrong x-csrf-token: reload the console.");
    return s;
  };
  const operator = (s: ConsoleSession) => {
    if (s.kind !== "operator") throw new GatewayError(403, "permission", "Only operators may do this.");
  };
  /** The account a holder may see is their own; another id is a 404, as an unknown one is. */
  const scopeAccount = (s: ConsoleSession, id: string) => {
    if (s.kind === "holder" && id !== s.accountId) throw new GatewayError(404, "not_found", "No such account.");
  };
  const scopeKey = async (s: ConsoleSession, id: string) => {
    if (s.kind === "operator") return;
    if ((await deps.keyAccount(id)) !== s.accountId) throw new GatewayError(404, "not_found", "No such key.");
  };
  /**
   * The usage view's period by name (`last=24h|30d`), ending at the gateway's clock: the page's own
   * clock may be minutes off, and a period it ended before the last minute's requests showed none
   * of them (a console probe). Nothing when not asked; with from, to or granularity it is refused.
   */
  const lastPeriod = (query: ConsoleQuery): { from: string; to: string; granularity: "hour" | "day" } | Record<string, never> => {
    if (query.last === undefined || query.last === "") return {};
    if (query.last !== "24h" && query.last !== "30d") throw new GatewayError(400, "invalid_request", "last is 24h or 30d.");
    if (query.from !== undefined || query.to !== undefined || query.granularity !== undefined) throw new GatewayError(400, "invalid_request", "last names the period: send it without from, to and granularity.");
    const r = rangeOf(query.last, deps.now());
    return { from: String(r.from), to: String(r.to), granularity: r.granularity };
  };
  const holderFields = (s: ConsoleSession, body: Record<string, unknown> | undefined) => {
    if (s.kind !== "holder" || !body) return;
    for (const field of Object.keys(body)) {
      if (!HOLDER_KEY_FIELDS.has(field)) throw new GatewayError(403, "permission", `Only an operator may set ${field.slice(0, 40)}.`);
    }
  };
  const signedIn = (request: Request, made: NewSession, set: { headers: Record<string, string | number> }) => {
    deps.sessionChecks?.found(hashSecret(made.token));
    set.headers["set-cookie"] = sessionCookie(made.token, request, Math.floor((made.expiresAt - deps.now()) / 1000));
    return info(made);
  };
  const address = (request: Request, server: { requestIP(r: Request): { address: string } | null } | null) => server?.requestIP(request)?.address ?? "unknown";
  // Made-up invite links, per address block: past INVITE_FAILURES_PER_MINUTE, refused before any read.
  const inviteFailures = createAuthFailures({ now: deps.now, limit: INVITE_FAILURES_PER_MINUTE });
  const inviteGate = (request: Request, server: { requestIP(r: Request): { address: string } | null } | null): string => {
    const block = addressBlock(address(request, server));
    if (inviteFailures.throttled(block)) throw new GatewayError(429, "rate_limit", "Too many invite links that do not exist from this address: try again in a minute.", { "retry-after": "60" });
    return block;
  };
  const inviteMissed = (block: string, message: string): GatewayError => {
    inviteFailures.failed(block);
    return new GatewayError(404, "not_found", message);
  };

  return new Elysia({ name: "switchyard/console-api", prefix: "/console/api" })
    // The gate above runs first when the admission plugin is wired; this keeps the routes shut to
    // another site if they were ever mounted without it.
    .onTransform({ as: "local" }, ({ request }) => {
      if (request.method !== "GET" && request.method !== "HEAD") sameSite(request);
    })
    // Nothing here may be cached by a browser or a proxy: balances, keys, usage.
    .onAfterHandle({ as: "local" }, ({ request, set }) => {
      set.headers["cache-control"] = "no-store";
      // Cookies of our name planted by another site on this host are ended (ours stays), so a
      // sign-in after the refusal above is not refused again.
      const clears = plantedCookieClears(request);
      if (clears.length > 0) {
        const own = set.headers["set-cookie"];
        (set.headers as Record<string, string | string[]>)["set-cookie"] = [...(own === undefined ? [] : Array.isArray(own) ? own : [String(own)]), ...clears];
      }
    })
    .get("/session", async ({ request }) => info(await session(request)))
    // A page's first data in one request: who is signed in (and the CSRF token), with the holder's
    // account or the operator's first page of accounts.
    .get("/overview", async ({ request }) => {
      // A browser that sends no session cookie is signed out, which is no error: answered 401, every
      // signed-out page load logged "Failed to load resource: 401" in the browser's console (a
      // console probe). A session cookie that no longer holds is still a 401, which says why.
      if (sessionTokens(request).length === 0 && request.headers.get("x-csrf-token") === null) return { session: null };
      const s = await session(request);
      if (s.kind === "holder") return { session: info(s), account: await accountWithKeys(s.accountId!, true) };
      return { session: info(s), accounts: await ops.listAccounts({ limit: "100" }) };
    })
    .post("/sign-in", async ({ request, body, set, server }) => {
      sameSite(request);
      const from = address(request, server);
      // Throttled by block: an IPv6 host holds a whole /64 (limits/address-block.ts); the log names the address.
      const block = addressBlock(from);
      const typed = typeof body.login === "string" ? body.login : null;
      // Counted and found lower-cased (console-auth.ts, LOGIN_PATTERN): `Ana@…` and `ana@…` are one login.
      const login = typed === null ? null : canonicalLogin(typed);
      const refuse = (what: string) => {
        // The address and which kind of sign-in, never what was typed.
        deps.log("warn", "console sign-in failed", { address: from, kind: what });
        return new GatewayError(401, "authentication", what === "operator" ? "Wrong admin token." : "Wrong login or password.");
      };
      // The right admin token is never refused, as on the admin API (routes/admin.ts): 32 random
      // characters are not guessed, and holders' failed sign-ins from the operator's address (one
      // proxy's, behind a load balancer) must not lock the operator out. Wrong ones count.
      const operatorRight = typeof body.token === "string" && !!deps.adminToken && equal(body.token, deps.adminToken);
      if (operatorRight) return signedIn(request, await startSession(store, { kind: "operator", accountId: null, login: (tokenHash) => operatorMark(adminToken!, tokenHash) }, deps.now()), set);
      // Counted as a failure from here until it is found right (sign-in-attempts.ts: a burst in parallel is not all checked).
      const wait = deps.signIns.begin(block, typeof body.token === "string" ? null : login);
      if (wait > 0) throw new GatewayError(429, "rate_limit", `Too many failed sign-ins. Retry after ${wait} s.`, { "retry-after": String(wait) });
      if (typeof body.token === "string") throw refuse("operator");
      if (login === null || typeof body.password !== "string") {
        // A malformed sign-in checks nothing: it is not a guess (and forgets no earlier failure).
        deps.signIns.cancel(block, login);
        throw new GatewayError(400, "invalid_request", "Send {token} (operators) or {login, password}.");
      }
      // Whatever its capitals (the store compares without them). Only a login of the form every
      // login has (ASCII, LOGIN_PATTERN) is looked up: PostgreSQL's lower() also folds letters such
      // as `İ`, so `alİce` found alice's account under a throttle count of its own, and a guesser
      // had five more tries per spelling (a hostile-tenant probe, 2026-11-30).
      const user = LOGIN_FORM.test(typed!) ? await store.findUser(login) : null;
      // An unknown login costs a hash check too: the answer's timing does not say which logins exist.
      const ok = await deps.passwords.verify(body.password, user?.passwordHash ?? (await deps.passwords.decoy())).catch((err) => {
        // Not checked: not a failure of this login or address either.
        if (err instanceof PasswordsBusyError) deps.signIns.cancel(block, login);
        throw busyAs429(err);
      });
      if (!user || !ok) throw refuse("holder");
      deps.signIns.succeeded(block, login);
      return signedIn(request, await startSession(store, { kind: "holder", accountId: user.accountId, login: user.login }, deps.now()), set);
    }, { body: SignIn })
    .post("/sign-out", async ({ request, set }) => {
      const s = await changer(request);
      await store.deleteSession(s.tokenHash);
      set.headers["set-cookie"] = clearedSessionCookie(request);
      return { signed_out: true };
    })
    // What an invite link's page shows before a password is typed: the login it is for (the one
    // to sign in with), until when, whether it resets a password; a used or expired link says so at once.
    .post("/invites/check", async ({ request, body, server }) => {
      sameSite(request);
      const block = inviteGate(request, server);
      const found = await store.findInvite(hashSecret(body.token), deps.now());
      if (!found) throw inviteMissed(block, "This invite link is not valid: it was used, it expired, or it was mistyped. Ask the operator for a new one.");
      return { login: found.login, expires_at: new Date(found.expiresAt).toISOString(), reset: found.reset };
    }, { body: CheckInvite })
    .post("/invites/accept", async ({ request, body, set, server }) => {
      sameSite(request);
      const tokenHash = hashSecret(body.token);
      const block = inviteGate(request, server);
      // The link is looked up before the password is hashed (argon2id, 64 MiB a hash): anyone may
      // post here, and a flood of made-up links hashed every password, took the gateway's CPU and
      // slowed every tenant (a hostile-tenant probe, 2026-11-30). acceptInvite checks it again, atomically.
      const invite = await store.findInvite(tokenHash, deps.now());
      if (!invite) throw inviteMissed(block, "This invite link is not valid: it was used, it expired, or it was mistyped.");
      const weak = weakPassword(body.password, invite.login);
      if (weak) throw new GatewayError(400, "invalid_request", `Choose another password: ${weak}`, undefined, { param: "password" });
      const outcome = await store.acceptInvite(tokenHash, await deps.passwords.hash(body.password).catch((err) => { throw busyAs429(err); }), deps.now());
      if (!outcome.ok) {
        throw outcome.reason === "login_taken"
          ? new GatewayError(409, "invalid_request", "That login was taken meanwhile: ask the operator for another invite.")
          : new GatewayError(404, "not_found", "This invite link is not valid: it was used, it expired, or it was mistyped.");
      }
      // Signed in from here: this place is the holder's, so failures others cause elsewhere do not
      // lock them out of it (as after a sign-in; a probe locked out a holder who had only accepted).
      deps.signIns.remember(addressBlock(address(request, server)), outcome.login);
      return signedIn(request, await startSession(store, { kind: "holder", accountId: outcome.accountId, login: outcome.login }, deps.now()), set);
    }, { body: AcceptInvite })
    .get("/accounts", async ({ request, query }) => {
      operator(await session(request));
      return ops.listAccounts(query);
    }, { query: t.Object({ limit: t.Optional(t.String({ maxLength: 10 })), cursor: t.Optional(t.String({ maxLength: 400 })), name: t.Optional(t.String({ maxLength: 200 })) }, { additionalProperties: true }) })
    .post("/accounts", async ({ request, body, set }) => {
      operator(await changer(request));
      set.status = 201;
      return ops.createAccount(body);
    }, { body: CreateAccount })
    .get("/accounts/:id", async ({ request, params }) => {
      const s = await session(request);
      scopeAccount(s, params.id);
      return accountWithKeys(params.id, s.kind === "holder");
    })
    // A page of the account's keys: the view's "Show more" and its search (ops.keyPage says the order).
    .get("/accounts/:id/keys", async ({ request, params, query }) => {
      scopeAccount(await session(request), params.id);
      await ops.accountFacts(params.id);
      return ops.keyPage(params.id, query, FIRST_KEYS_PAGE);
    }, { query: t.Object({ offset: t.Optional(t.String({ maxLength: 10 })), limit: t.Optional(t.String({ maxLength: 10 })), state: t.Optional(t.String({ maxLength: 20 })), search: t.Optional(t.String({ maxLength: 200 })) }, { additionalProperties: true }) })
    // Answered with the account's facts, not its keys: the page keeps the keys it has (a change of
    // a limit read all 10,000 again).
    .patch("/accounts/:id", async ({ request, params, body }) => {
      operator(await changer(request));
      await ops.updateAccount(params.id, body);
      return withDefaults(await ops.accountFacts(params.id));
    }, { body: PatchAccount })
    .post("/accounts/:id/credits", async ({ request, params, body, headers }) => {
      operator(await changer(request));
      return ops.topUp(params.id, body.amount, headers["idempotency-key"]);
    }, { body: TopUp })
    .post("/accounts/:id/debits", async ({ request, params, body, headers }) => {
      operator(await changer(request));
      return ops.debit(params.id, body.amount, headers["idempotency-key"]);
    }, { body: TopUp })
    .post("/accounts/:id/invites", async ({ request, params, body, set }) => {
      operator(await changer(request));
      await ops.accountFacts(params.id);
      const invite = await issueInvite(store, { accountId: params.id, login: body.login, now: deps.now(), origin: publicOrigin(request) });
      if (!invite) throw new GatewayError(409, "invalid_request", LOGIN_TAKEN);
      set.status = 201;
      return invite;
    }, { body: CreateInvite })
    // Operators manage holders' logins: who can sign in to an account, and ending that (someone left).
    .get("/accounts/:id/logins", async ({ request, params }) => {
      operator(await session(request));
      await ops.accountFacts(params.id);
      return store.listLogins(params.id, deps.now());
    })
    .delete("/accounts/:id/logins/:login", async ({ request, params }) => {
      operator(await changer(request));
      await ops.accountFacts(params.id);
      if (!(await store.removeLogin(params.id, params.login))) throw new GatewayError(404, "not_found", "The account has no such login or invite.");
      return { account_id: params.id, login: params.login, removed: true };
    })
    // A link that should not be used (made for the wrong person, leaked): the login, if any, stays.
    .delete("/accounts/:id/invites/:login", async ({ request, params }) => {
      operator(await changer(request));
      await ops.accountFacts(params.id);
      if (!(await store.cancelInvites(params.id, params.login, deps.now()))) throw new GatewayError(404, "not_found", "The account has no open invite for that login.");
      return { account_id: params.id, login: params.login, cancelled: true };
    })
    .post("/accounts/:id/keys", async ({ request, params, body, set }) => {
      const s = await changer(request);
      scopeAccount(s, params.id);
      holderFields(s, body ?? undefined);
      // A holder's key is no wider than the widest the operator gave the account, and a holder makes
      // at most HOLDER_KEYS_PER_DAY a day (accounts/holder-keys.ts).
      let ceiling = {};
      if (s.kind === "holder") {
        // Only the keys the rules read: those with limits and the last day's (AccountStore.listKeyLimits).
        const now = deps.now();
        const keys = await ops.keyLimits(params.id, now - HOLDER_KEY_WINDOW_MS);
        const wait = holderKeyWait(keys, now);
        if (wait > 0) {
          const seconds = Math.ceil(wait / 1000);
          // Whoever made them: the operator's keys count too, and the words say so (they read as the
          // holder's own doing to a holder who had made none; a console probe).
          const made = keys.filter((k) => Date.parse(k.created_at) > now - HOLDER_KEY_WINDOW_MS).length;
          throw new GatewayError(429, "rate_limit", `${made} keys of this account were made in the last 24 hours, by its holders and its operator (revoked ones included); its holders may make a key while fewer than ${HOLDER_KEYS_PER_DAY} were: the next one in ${Math.ceil(seconds / 60)} min. Ask the operator if you need one sooner.`, { "retry-after": String(seconds) });
        }
        ceiling = holderKeyCeiling(keys);
      }
      set.status = 201;
      return ops.createKey(params.id, { ...body, ...ceiling });
    }, { body: t.Optional(CreateKey) })
    .patch("/keys/:id", async ({ request, params, body }) => {
      const s = await changer(request);
      await scopeKey(s, params.id);
      holderFields(s, body);
      return ops.patchKey(params.id, body);
    }, { body: PatchKey })
    .delete("/keys/:id", async ({ request, params }) => {
      const s = await changer(request);
      await scopeKey(s, params.id);
      return ops.revokeKey(params.id);
    })
    // The usage report of the admin API (same code, same figures); a holder's is always their own account.
    .get("/usage", async ({ request, query }) => {
      const s = await session(request);
      if (s.kind === "holder") {
        if (query.account_id !== undefined && query.account_id !== s.accountId) throw new GatewayError(404, "not_found", "No such account.");
        if (query.key_id !== undefined) await scopeKey(s, query.key_id);
      }
      const accountId = s.kind === "holder" ? s.accountId! : query.account_id;
      const split = query.group_by === undefined || query.group_by === "" ? null : query.group_by;
      if (split !== null && split !== "account" && split !== "key" && split !== "model") throw new GatewayError(400, "invalid_request", "group_by is one of account, key or model here.");
      const asked = { ...query, account_id: accountId, group_by: split ?? "", ...lastPeriod(query) };
      // The download is the usage report itself; the view gets its summary of the same rows.
      if (query.format === "csv") return ops.usageReport(asked);
      const { q, rows } = await ops.usageRows(asked);
      // A chart of more periods than anyone can see (an hourly chart over millennia was 350 MB of JSON and 4.7 GB of memory).
      const periods = chartPeriods(q);
      if (periods > MAX_CHART_PERIODS) {
        throw new GatewayError(400, "invalid_request", `The range holds ${periods} periods of a ${q.granularity}; the console charts at most ${MAX_CHART_PERIODS}. Narrow it, or use granularity=day.`);
      }
      if (query.groups !== undefined && query.groups !== "" && query.groups !== "all") throw new GatewayError(400, "invalid_request", "groups is all (every group listed), or absent (the dearest first, the rest summed).");
      const summary = summarizeUsage(q, rows, split, query.groups === "all" ? null : TABLE_GROUPS);
      // One account's view also says what was refused before any upstream call (402, 429…): a
      // holder whose requests fail sees why here, without the admin API. None of it was charged.
      if (accountId === undefined || accountId === "") return summary;
      const { rejected } = await ops.accountUsage(accountId, { from: String(q.from), to: String(q.to) });
      return { ...summary, rejected };
    }, { query: ConsoleQuery })
    .get("/requests", async ({ request, query }) => {
      const s = await session(request);
      if (s.kind === "holder" && query.account_id !== undefined && query.account_id !== s.accountId) throw new GatewayError(404, "not_found", "No such account.");
      const limit = query.limit === undefined || query.limit === "" ? 50 : Number(query.limit);
      if (!Number.isInteger(limit) || limit < 1 || limit > MAX_RECENT) throw new GatewayError(400, "invalid_request", `limit must be a whole number from 1 to ${MAX_RECENT}.`);
      // One account's: named (a quiet account's page titled itself by its id), and an id that is
      // no account is a 404, not "no requests yet" (a console probe).
      const named = s.kind === "operator" && query.account_id !== undefined ? await ops.accountFacts(query.account_id) : undefined;
      await ops.flush();
      const rows = await store.recentRequests({ accountId: s.kind === "holder" ? s.accountId! : query.account_id, limit });
      if (query.format === "csv") return new Response(requestsCsv(rows), { headers: { "content-type": "text/csv; charset=utf-8", "content-disposition": 'attachment; filename="requests.csv"' } });
      return named ? { object: "list", data: rows, account: { id: named.id, name: named.name } } : { object: "list", data: rows };
    }, { query: ConsoleQuery })
    // The admin API's "check it now" (routes/admin.ts), from the Models view's vendor keys.
    .post("/vendor-keys/:provider/:key/probe", async ({ request, params }) => {
      operator(await changer(request));
      const probed = await deps.probeVendorKey(params.provider, params.key);
      if (!probed) throw new GatewayError(404, "not_found", "No such pooled vendor key.");
      if (probed === "busy") throw new GatewayError(409, "invalid_request", "A check of this key is under way: reload in a few seconds for its outcome.");
      return probed;
    }, { params: t.Object({ provider: t.String({ maxLength: 200 }), key: t.String({ maxLength: 200 }) }) })
    .get("/catalogue", async ({ request }) => {
      const s = await session(request);
      const price = (m: ModelConfig) => (m.category === "free" ? null : (m.pricing ?? null));
      // A holder sees what each model costs (they pay by these prices, and the console showed
      // them nowhere: a console probe); the gateway's health and vendor keys are the operator's.
      if (s.kind === "holder") return { object: "list", data: deps.models.map((m) => ({ id: m.id, category: m.category, context_length: m.context_length, pricing: price(m) })) };
      const health = new Map(deps.health().map((h) => [h.model, h]));
      return {
        object: "list",
        // What each vendor key is doing (cooling, refused and set aside): the operator's first
        // question when a model's errors rise, which only the admin API answered (a console probe).
        vendor_keys: await deps.vendorKeys(),
        data: deps.models.map((m) => ({
          id: m.id,
          provider: m.provider,
          category: m.category,
          context_length: m.context_length,
          pricing: price(m),
          health: health.get(m.id) ?? null,
        })),
      };
    });
}

/** Recent requests as CSV (RFC 4180), the columns the console shows. */
export function requestsCsv(rows: Awaited<ReturnType<ConsoleStore["recentRequests"]>>): string {
  const columns = ["created_at", "request_id", "account_id", "account_name", "key_id", "key_name", "model", "status", "latency_ms", "prompt_tokens", "fresh_input_tokens", "cache_read_tokens", "cache_write_5m_tokens", "cache_write_1h_tokens", "completion_tokens", "estimated", "cost"] as const;
  const field = (v: string | number | boolean | null) => {
    const text = v === null ? "" : String(v);
    const safe = typeof v === "string" && /^[=+\-@\t\r]/.test(text) ? `'${text}` : text;
    return /[",\r\n]/.test(safe) ? `"${safe.replaceAll('"', '""')}"` : safe;
  };
  return [columns.join(","), ...rows.map((r) => columns.map((c) => field(r[c])).join(","))].join("\r\n") + "\r\n";
}
