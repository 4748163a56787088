import { api, ApiError, onSessionLost, setCsrf, type Account, type AccountLogins, type AccountPage, type Catalogue, type Overview, type RecentRequest, type Session } from "./api.ts";
import { accountView, type Changed } from "./account-view.ts";
import { accountsView, catalogueView, pricesView, requestsView } from "./lists-view.ts";
import { loadUsage, usageView, type UsageChoice } from "./usage-view.ts";
import { announce, errorBox, failure, field, h, hideNotice, holdSecret, mayLeave, secretAtStake, secretHeld, when } from "./dom.ts";

/**
 * The console's client: one page, views chosen by the URL's fragment (#accounts, #account/ID,
 * #usage, #catalogue, #requests; #invite=TOKEN for an invite link). Each view asks for its data
 * in one request; the first one also says who is signed in (GET /overview).
 */
const main = document.getElementById("main")!;
const nav = document.getElementById("nav")!;
const who = document.getElementById("who")!;
let session: Session | null = null;
/** The overview's data, used once by the first view instead of a second request. */
let preloaded: Overview | null = null;
const FIRST_USAGE: UsageChoice = { range: "24h", split: "model" };
let usageChoice: UsageChoice = FIRST_USAGE;
/** The operator's accounts list as last asked: a name to look for, and the page. */
let accountsQuery: { name: string; cursor: string | null } = { name: "", cursor: null };

/**
 * The account view's data as last shown: a change made in it reads again only what it touched
 * (`Changed`), the rest is this. Any other way to the view (a link, Back, a reload) reads it whole.
 */
let held: { id: string; account: Account; logins: AccountLogins | undefined } | null = null;

/** What one user chose on this tab does not carry over to the next one signed in here. */
function forgetChoices(): void {
  usageChoice = FIRST_USAGE;
  accountsQuery = { name: "", cursor: null };
  held = null;
}

// The skip link moves focus to the view without changing the address (which chooses the view).
document.querySelector<HTMLAnchorElement>("a.skip")?.addEventListener("click", (event) => {
  event.preventDefault();
  main.focus();
});

/**
 * Shows a view. Focus moves to it, so keyboard and screen-reader users follow; or, when the view
 * is the same one shown again after a change made in it (a key saved, a period chosen), back to
 * the control that made the change (`focus`, a selector), so they are where they were.
 */
/** Routes started so far: each knows whether a later one has begun (see `route`). */
let routes = 0;

function show(view: HTMLElement, focus?: string): void {
  main.removeAttribute("aria-busy");
  // What was loading has come: the view (focused below) says the rest.
  if (document.getElementById("status")?.textContent === LOADING) announce("");
  main.replaceChildren(view);
  // The tab and the history name the view (its heading), not only the product.
  const heading = view.querySelector("h1")?.textContent?.trim();
  document.title = heading ? `${heading} · Switchyard console` : "Switchyard console";
  const target = focus ? main.querySelector<HTMLElement>(focus) : null;
  if (target) return target.focus();
  // Another view starts at its top: the page kept the last one's scroll, so an account opened
  // from the foot of the accounts list showed its own foot (its name, balance and top-up out of
  // sight), and focusing `main`, already partly in view, did not scroll (a console probe). Back
  // (or a reload) returns to where the view was left, kept in its history entry (below).
  window.scrollTo(0, scrolledTo());
  main.focus({ preventScroll: true });
}

/** Where this history entry's view was left (`leaving`, below); 0 for a new one. */
function scrolledTo(): number {
  const y = (history.state as { scrollY?: unknown } | null)?.scrollY;
  return typeof y === "number" && y >= 0 ? y : 0;
}

/**
 * A link followed (by mouse or Enter) first writes where its view was scrolled into the history
 * entry it leaves: Back to the accounts list from the foot of its 100 rows went to its top.
 */
// The page puts the view where it was itself, once drawn: the browser's own restoring ran before
// the view's data came, on the view being left.
history.scrollRestoration = "manual";
document.addEventListener("click", (event) => {
  const link = (event.target as Element | null)?.closest?.("a[href^='#']");
  if (link) history.replaceState({ ...(history.state ?? {}), scrollY: window.scrollY }, "");
}, true);

/** The address named the same view another way (normalized): the entry keeps where it was left. */
function sameView(address: string): void {
  if (location.hash !== address) history.replaceState(history.state, "", address);
}

function renderNav(): void {
  nav.replaceChildren();
  who.replaceChildren();
  if (!session) return;
  const links: [string, string][] = session.kind === "operator"
    ? [["#accounts", "Accounts"], ["#usage", "Usage"], ["#catalogue", "Models"], ["#requests", "Requests"]]
    : [["#account", "Account"], ["#usage", "Usage"], ["#catalogue", "Models"], ["#requests", "Requests"]];
  // An operator on one account (`#account/ID`) is in Accounts.
  const section = location.hash.split(/[/?]/)[0] || links[0]![0];
  const current = session.kind === "operator" && section === "#account" ? "#accounts" : section;
  const items = links.map(([href, text]) => {
    const link = h("a", { href, "aria-current": current === href ? "page" : undefined }, text);
    // The link of the view shown, at an address that names it more fully (`#usage/30d/key`,
    // `#accounts?name=…`), reads it again in place: followed, it added a history entry that
    // showed the same view, and Back took two presses to leave it (a console probe).
    link.addEventListener("click", (event) => {
      if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
      const shown = location.hash.split(/[/?]/)[0];
      if (shown !== href || location.hash === href) return;
      event.preventDefault();
      if (!mayLeave()) return;
      void route();
    });
    return h("li", {}, link);
  });
  nav.append(h("ul", {}, ...items));
  const out = h("button", { type: "button", class: "link", "data-testid": "sign-out" }, "Sign out");
  out.addEventListener("click", async () => {
    const held = secretHeld();
    if (!mayLeave()) return;
    try {
      await signOut();
    } catch (err) {
      // Still signed in, the secret still on screen: it is guarded again.
      holdSecret(held);
      show(h("section", {}, h("h1", {}, "Not signed out"), errorBox(err instanceof ApiError ? err.message : "The gateway did not answer: you are still signed in. Try again.")));
      return;
    }
    session = null;
    preloaded = null;
    setCsrf("");
    forgetChoices();
    location.hash = "";
    signInView();
  });
  who.append(session.kind === "operator" ? "Operator" : (session.login ?? ""), " ", out);
}

/**
 * Ends the browser's session. When another sign-in replaced this page's one, the session the
 * browser holds now is the one ended (the user asked to sign out of this browser); already ended
 * is done. Anything else (the gateway did not answer) throws: the page must not say signed out.
 */
async function signOut(): Promise<void> {
  try {
    await api("POST", "/sign-out");
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) return;
    if (!(err instanceof ApiError && (err.status === 403 || err.sessionReplaced))) throw err;
    setCsrf("");
    try {
      setCsrf((await api<Overview>("GET", "/overview")).session.csrf);
    } catch (again) {
      if (again instanceof ApiError && again.status === 401) return;
      throw again;
    }
    await api("POST", "/sign-out");
  }
}

/** Another sign-in in this browser replaced this page's session: show whoever is signed in now, and say so. */
async function resync(changeRefused = false): Promise<void> {
  setCsrf("");
  preloaded = null;
  forgetChoices();
  try {
    const now = await api<Overview>("GET", "/overview");
    session = now.session;
    setCsrf(session.csrf);
    preloaded = now;
  } catch {
    session = null;
    signInView("This page's session was replaced or ended: sign in again.");
    return;
  }
  announce(`Another sign-in in this browser replaced this page's session${changeRefused ? ", so your change was not made" : ""}: now ${session.kind === "operator" ? "operator" : session.login ?? "an account holder"}.`, { ms: 20_000 });
  const home = session.kind === "operator" ? "#accounts" : "#account";
  if (location.hash === home) await route();
  else location.hash = home;
}

function signInView(message?: string): void {
  renderNav();
  // Required: an empty Enter asked the gateway, and counted as a failed try against the address's 20 (a console probe).
  const login = h("input", { type: "text", autocomplete: "username", autocapitalize: "none", spellcheck: "false", required: true, "data-testid": "sign-in-login" });
  const password = h("input", { type: "password", autocomplete: "current-password", required: true, "data-testid": "sign-in-password" });
  const token = h("input", { type: "password", autocomplete: "off", required: true, "data-testid": "sign-in-token" });
  const out = h("div", {});
  if (message) out.append(errorBox(message, "sign-in-error"));
  const holderButton = h("button", { type: "submit", "data-testid": "sign-in-submit" }, "Sign in");
  const operatorButton = h("button", { type: "submit", "data-testid": "sign-in-token-submit" }, "Sign in as operator");
  // One sign-in at a time: a double-click sent two (two of a login's five tries when wrong, two sessions when right; a console probe).
  // A refused sign-in puts focus back in the field to type again (`retry`): the button that had it
  // was disabled meanwhile, and focus fell to the page's top (a console probe).
  const submit = async (body: Record<string, string>, retry: HTMLInputElement) => {
    if (holderButton.disabled) return;
    out.replaceChildren();
    // An API key is what a paying user has: typed here it was "Wrong login or password" (or "Wrong
    // admin token"), and a try counted against the login. It is not sent: the page says what signs in.
    const typed = [login, password, token].find((input) => API_KEY.test(input.value.trim()));
    if (typed) {
      out.append(errorBox("That is an API key (svc-sk-…): it calls the API, it does not sign in here. Account holders sign in with the login and password set from the invite link the gateway's operator sends them; operators with the admin token.", "sign-in-error"));
      typed.focus();
      typed.select();
      return;
    }
    holderButton.disabled = operatorButton.disabled = true;
    let refused = false;
    try {
      const s = await api<Session>("POST", "/sign-in", body);
      signedIn(s);
    } catch (err) {
      refused = true;
      out.append(errorBox(failure(err, "you are not signed in: try again."), "sign-in-error"));
    } finally {
      holderButton.disabled = operatorButton.disabled = false;
    }
    if (refused) {
      retry.focus();
      retry.select();
    }
  };
  const holderForm = h("form", { class: "card", "aria-labelledby": "holder-title" }, h("h2", { id: "holder-title" }, "Account holders"),
    h("p", { class: "note", "data-testid": "sign-in-holder-note" }, "Your login and password come from the invite link the gateway's operator sends you; an API key does not sign in here."),
    field("Login", login), field("Password", password), holderButton);
  holderForm.addEventListener("submit", (e) => {
    e.preventDefault();
    void submit({ login: login.value, password: password.value }, password);
  });
  const operatorForm = h("form", { class: "card", "aria-labelledby": "operator-title" }, h("h2", { id: "operator-title" }, "Operators"), field("Admin token", token), operatorButton);
  operatorForm.addEventListener("submit", (e) => {
    e.preventDefault();
    void submit({ token: token.value }, token);
  });
  show(h("section", { "aria-labelledby": "sign-in-title" }, h("h1", { id: "sign-in-title" }, "Sign in"), out, h("div", { class: "pair" }, holderForm, operatorForm)));
}

/** An invite link: what it is for first (a used or expired link says so before a password is typed), then the password form. */
async function inviteView(token: string): Promise<void> {
  let invite: { login: string; expires_at: string; reset: boolean };
  try {
    invite = await api("POST", "/invites/check", { token });
  } catch (err) {
    // Not a dead end: a used link's holder (most often) signs in with the password they chose.
    show(h("section", { class: "card", "aria-labelledby": "invite-title" }, h("h1", { id: "invite-title" }, "This invite link does not work"),
      errorBox(err instanceof ApiError ? err.message : "The gateway did not answer. Reload to try again.", "sign-in-error"),
      h("p", {}, "Already set your password? ", h("a", { href: "/console/#", "data-testid": "invite-to-sign-in" }, "Go to the console"), ".")));
    return;
  }
  // The login in the form, unseen: a password manager saves the new password under it (a form
  // without one saved it under no login, or offered it for another).
  const username = h("input", { type: "text", autocomplete: "username", value: invite.login, readonly: true, hidden: true, "data-testid": "invite-username" });
  // 12 to 256, as the gateway takes them: a longer one was refused with the API's words (a console probe).
  const rule = h("p", { class: "note", id: "invite-password-rule" }, "12 to 256 characters.");
  const password = h("input", { type: "password", autocomplete: "new-password", minlength: "12", maxlength: "256", required: true, "aria-describedby": "invite-password-rule", "data-testid": "invite-password" });
  const again = h("input", { type: "password", autocomplete: "new-password", minlength: "12", maxlength: "256", required: true, "data-testid": "invite-password-again" });
  const out = h("div", {});
  const accept = h("button", { type: "submit", "data-testid": "invite-accept" }, "Set password and sign in");
  // An operator (or another holder) who opens the link in their own browser is told what it does
  // there: it signs that browser in as this login, in every tab (a console probe: nothing said so).
  const current = await api<{ session: Session }>("GET", "/overview").then((o) => o.session, () => undefined);
  const already = current === undefined ? null
    : h("p", { class: "notice", "data-testid": "invite-signed-in" }, "This browser is signed in to the console ",
      current.kind === "operator" ? "as its operator" : current.login ? `as ${current.login}` : "already",
      `. Setting the password signs it in as ${invite.login} instead, in every tab; send the link to them, or open it in a private window.`);
  const form = h("form", { class: "card", "aria-labelledby": "invite-title" },
    h("h1", { id: "invite-title" }, invite.reset ? "Set a new password" : "Set your password"),
    already,
    h("p", {}, invite.reset ? "This link sets a new password for your login; you will be signed out elsewhere." : "You were invited to a Switchyard account.",
      " You sign in with the login ", h("strong", { class: "login", "data-testid": "invite-login-shown" }, invite.login), ". Choose a password of at least 12 characters. This link works once, until ", when(invite.expires_at), "."),
    username, field("Password", password), rule, field("Password again", again), accept, out);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    // Once: a second click used the link after the first had (its 404 showed over the first's success).
    if (accept.disabled) return;
    out.replaceChildren();
    if (password.value !== again.value) {
      out.append(errorBox("The two passwords differ.", "sign-in-error"));
      again.focus();
      return;
    }
    accept.disabled = true;
    try {
      const s = await api<Session>("POST", "/invites/accept", { token, password: password.value });
      // The token leaves the address bar (and the history entry) once used.
      history.replaceState(history.state, "", "/console/#account");
      signedIn(s);
    } catch (err) {
      // A lost answer may have used the link: then it works no more, and the password typed is the one to sign in with.
      out.append(errorBox(failure(err, "your password may or may not have been set: try again, and if the link no longer works, sign in with the password you typed."), "sign-in-error"));
      accept.disabled = false;
      // Back to the field to change, not the page's top (the button was held off, and focus left with it).
      password.focus();
    }
  });
  show(form);
}

/** Views a session of this kind has (the first part of the fragment); others send it home. */
const VIEWS = { operator: ["accounts", "account", "usage", "catalogue", "requests"], holder: ["account", "usage", "catalogue", "requests"] } as const;

function signedIn(s: Session): void {
  preloaded = null;
  forgetChoices();
  session = s;
  setCsrf(s.csrf);
  const home = s.kind === "operator" ? "#accounts" : "#account";
  // A link opened before signing in (a bookmark, a session that ended) is where the user goes.
  const { view: asked, id } = place();
  // An operator's account view names its account; a holder's is their own.
  const known = (VIEWS[s.kind] as readonly string[]).includes(asked!) && !(s.kind === "operator" && asked === "account" && !id);
  if (location.hash === "" || known) void route();
  else location.hash = home;
}

const showView = (view: HTMLElement, focus?: string) => show(view, focus);

async function route(focus?: string, changed?: Changed): Promise<void> {
  if (!session) return;
  // Only the latest route shows what it read: a slower, earlier one (page 1 of the accounts after
  // "Next page" was clicked) would otherwise replace the view the user asked for last.
  const mine = ++routes;
  const show = (view: HTMLElement, f?: string) => {
    if (mine === routes) showView(view, f);
  };
  renderNav();
  const { view, id, extra, query } = place();
  const s = session;
  // A view that takes a moment says so (the last one stayed, looking current, on a slow link).
  const loading = setTimeout(() => {
    if (mine !== routes || main.getAttribute("aria-busy") === "true") return;
    main.setAttribute("aria-busy", "true");
    main.prepend(h("p", { class: "loading", "data-testid": "loading" }, LOADING));
    // Said by the page's live region, there from the start: a status element added with its text
    // already in it is not announced by screen readers (a live region's changes are, not its arrival).
    // A change's reload (`focus` or `changed` given) leaves what the change just said on screen
    // ("… revoked" was erased by a slow reload's "Loading…"; a review); another view says it.
    const reload = focus !== undefined || changed !== undefined;
    if (!reload || !document.getElementById("status")?.classList.contains("shown")) announce(LOADING, { quiet: true });
  }, LOADING_MARK_MS);
  // What the page loaded with serves the first view only, whichever it is: later views (and
  // another session on this tab) read fresh, never a balance or an account from before.
  const first = preloaded;
  preloaded = null;
  try {
    // A holder's own account only: another account's id is no page here (it showed the holder's
    // own account under the other id's address; a console probe).
    if (s.kind === "holder" && (view === "account" || view === "") && (!id || id === s.account_id)) {
      const { account } = await accountData(s.account_id!, false, changed, first?.account);
      show(accountView(s, account, (f, c) => void route(f, c)), focus);
    } else if (s.kind === "operator" && (view === "accounts" || view === "" || (view === "account" && !id))) {
      // A search and page named by the address (`#accounts?name=acme&cursor=…`): a reload or Back keeps them.
      const q = (accountsQuery = accountsQueryOf(query) ?? accountsQuery);
      const address = accountsAddress(q);
      sameView(address);
      const asked = new URLSearchParams({ limit: "100", ...(q.name ? { name: q.name } : {}), ...(q.cursor ? { cursor: q.cursor } : {}) });
      const page = (!q.name && !q.cursor ? first?.accounts : undefined) ?? (await api<AccountPage>("GET", `/accounts?${asked}`));
      show(accountsView(page, (accountId) => (location.hash = `#account/${accountId}`), () => void route(), q, (next) => {
        accountsQuery = next;
        history.replaceState(history.state, "", accountsAddress(next));
        void route();
      }));
    } else if (s.kind === "operator" && view === "account" && id) {
      const { account, logins } = await accountData(id, true, changed);
      show(accountView(s, account, (f, c) => void route(f, c), logins), focus);
    } else if (view === "usage") {
      // The period and split are in the address (#usage/30d/key): a reload or a bookmark keeps them.
      usageChoice = usageChoiceOf(s, id, extra) ?? usageChoice;
      sameView(`#usage/${usageChoice.range}/${usageChoice.split}`);
      show(usageView(s, await loadUsage(usageChoice), usageChoice, (choice, f) => {
        usageChoice = choice;
        history.replaceState(history.state, "", `#usage/${choice.range}/${choice.split}`);
        void route(f);
      }), focus);
    } else if (view === "catalogue") {
      const catalogue = await api<Catalogue>("GET", "/catalogue");
      show(s.kind === "operator" ? catalogueView(catalogue.data, catalogue.vendor_keys ?? [], (f) => void route(f)) : pricesView(catalogue.data), focus);
    } else if (view === "requests" && (s.kind === "operator" || !id || id === s.account_id)) {
      // An operator may read one account's (`#requests/ID`, from its page): the latest 100 of every
      // account hid a quiet account's behind a busy one's (a console probe).
      const of = s.kind === "operator" && id ? id : undefined;
      const page = await api<{ data: RecentRequest[]; account?: { name: string } }>("GET", `/requests?limit=100${of ? `&account_id=${encodeURIComponent(of)}` : ""}`);
      show(requestsView(s, page.data, of, page.account?.name));
    } else {
      show(h("section", {}, h("h1", {}, "Not found"), h("p", {}, "No such page here.")));
    }
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) {
      session = null;
      signInView("Your session ended: sign in again.");
      return;
    }
    if (err instanceof ApiError && err.sessionReplaced) return resync();
    // A way to ask again where the user is: the menu's link to this view changes nothing (the address is the same).
    const again = h("button", { type: "button", "data-testid": "view-retry" }, "Try again");
    again.addEventListener("click", () => void route());
    show(h("section", {}, h("h1", {}, "Could not load this page"), errorBox(err instanceof ApiError ? err.message : "The gateway did not answer."), again));
  } finally {
    clearTimeout(loading);
    if (mine === routes) main.removeAttribute("aria-busy");
  }
}

/**
 * The account view's data: read whole (its facts and first pages of keys, and for an operator its
 * logins), or after a change made in the view only what the change touched, the rest as held. A
 * top-up read the account and every one of its keys again: 3.5 MB at 10,000 keys (a console probe).
 */
async function accountData(id: string, operator: boolean, changed: Changed | undefined, first?: Account): Promise<{ account: Account; logins: AccountLogins | undefined }> {
  const path = `/accounts/${encodeURIComponent(id)}`;
  const kept = changed && held?.id === id ? held : null;
  let account: Account;
  let logins: AccountLogins | undefined;
  if (!kept) {
    [account, logins] = await Promise.all([first ?? api<Account>("GET", path), operator ? api<AccountLogins>("GET", `${path}/logins`) : undefined]);
  } else {
    account = { ...kept.account, ...changed!.account };
    const key = changed!.key;
    if (key) account.keys = account.keys.map((k) => (k.id === key.id ? key : k));
    let keys: Account | undefined;
    [keys, logins] = await Promise.all([
      changed!.keys ? api<Account>("GET", path) : undefined,
      changed!.logins && operator ? api<AccountLogins>("GET", `${path}/logins`) : kept.logins,
    ]);
    // A new or revoked key: the account's first pages of keys again (its facts come with them, as fresh).
    if (keys) account = { ...account, ...keys };
  }
  held = { id, account, logins };
  return { account, logins };
}

/** Where the address points: the view, its id and extra part (`#usage/30d/key`), and what follows `?`. */
function place(): { view: string; id: string | undefined; extra: string | undefined; query: URLSearchParams } {
  const [where = "", query = ""] = location.hash.replace(/^#/, "").split("?");
  const [view = "", id, extra] = where.split("/");
  return { view, id, extra, query: new URLSearchParams(query) };
}

/** The accounts list's search and page as the address names them; undefined when it names neither (the last one asked is shown). */
function accountsQueryOf(query: URLSearchParams): { name: string; cursor: string | null } | undefined {
  const name = query.get("name") ?? "";
  const cursor = query.get("cursor");
  return name || cursor ? { name, cursor } : undefined;
}

function accountsAddress(q: { name: string; cursor: string | null }): string {
  const query = new URLSearchParams({ ...(q.name ? { name: q.name } : {}), ...(q.cursor ? { cursor: q.cursor } : {}) }).toString();
  return query ? `#accounts?${query}` : "#accounts";
}

const LOADING = "Loading…";

/** The gateway's API keys (accounts/account-store.ts, KEY_PREFIX): never a login, password or admin token. */
const API_KEY = /^svc-sk-[A-Za-z0-9_-]{43}$/;

/** How long a view may take before the page says it is loading (a quick one shows no flash). */
const LOADING_MARK_MS = 200;

/** The usage view's choice named by the address (`#usage/30d/key`), if it names one this session may make. */
function usageChoiceOf(s: Session, range: string | undefined, split: string | undefined): UsageChoice | undefined {
  if (range !== "24h" && range !== "30d") return undefined;
  const splits: readonly string[] = s.kind === "operator" ? ["model", "key", "account"] : ["model", "key"];
  return splits.includes(split ?? "") ? { range, split: split as UsageChoice["split"] } : { range, split: FIRST_USAGE.split };
}

// A change refused because this page's session ended or was replaced: the page follows (api.ts).
onSessionLost((status, read) => {
  if (status === 409) {
    void resync(!read);
    return;
  }
  session = null;
  setCsrf("");
  signInView(read ? "Your session ended: sign in again." : "Your session ended, so your change was not made: sign in again.");
});

/**
 * An invite link's token: its characters after `#invite=`, what follows left (a mail client's
 * "." or ">" at the end of a sentence, which made the link a sign-in page without a word).
 */
function inviteToken(hash: string): string | null {
  return /^#invite=([A-Za-z0-9_-]+)/.exec(hash)?.[1] ?? null;
}

/** Whether the page has asked who is signed in (not when it opened on an invite link). */
let asked = false;

async function start(): Promise<void> {
  const invite = inviteToken(location.hash);
  if (invite) return inviteView(invite);
  asked = true;
  try {
    preloaded = await api<Overview>("GET", "/overview");
    session = preloaded.session;
    setCsrf(session.csrf);
    await route();
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) signInView();
    // The gateway's words when it answered (a 500 is not "did not answer"), under a heading that names the page.
    else show(h("section", {}, h("h1", {}, "Could not load the console"), errorBox(err instanceof ApiError && err.gatewaySaid ? `${err.message} Reload to try again.` : "The gateway did not answer. Reload to try again.")));
  }
}

/**
 * Where the tab's history is, as far as this page has seen it: each entry's `i` (in history.state)
 * counts up from the first, so a refused leave knows which way to go back. Putting the old
 * address in place of the new one overwrote an entry: after Back and "stay", the next Back left
 * the console; after a menu link, Back went nowhere (a console probe).
 */
let entryIndex = 0;
/** A refused leave is going back to its entry: the hashchange that brings it is not a leave. */
let restoring = false;
function markEntry(): void {
  const state = history.state as { i?: unknown } | null;
  if (typeof state?.i === "number") entryIndex = state.i;
  else history.replaceState({ ...(state ?? {}), i: ++entryIndex }, "");
}

window.addEventListener("hashchange", () => {
  if (restoring) {
    restoring = false;
    markEntry();
    return;
  }
  // A new key's secret on screen: leaving asks first, and staying goes back to the entry left (its
  // view was never left, so it is not read again): as far the other way for an entry the page has
  // seen (Back or Forward, of one entry or several), one back for a new one (a link).
  if (!mayLeave()) {
    const i = (history.state as { i?: unknown } | null)?.i;
    restoring = true;
    if (typeof i === "number" && i !== entryIndex) history.go(entryIndex - i);
    else history.back();
    return;
  }
  markEntry();
  const invite = inviteToken(location.hash);
  if (invite) void inviteView(invite);
  // A page that never asked who is signed in (it opened on an invite link: a used one's "Go to
  // the console" did nothing) asks as a load does; signed out, that is the sign-in. Not a page
  // that knows it is signed out (Sign out changes the address, and its sign-in form stays).
  else if (!session && !asked) void start();
  else void route();
});
// Escape puts a notice away; not the Escape that took an armed button back (its "Not done" is the news).
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && !event.defaultPrevented) hideNotice();
});
// A reload or a closed tab would lose it too: the browser asks (in its own words).
window.addEventListener("beforeunload", (event) => {
  if (secretAtStake() !== null) event.preventDefault();
});
markEntry();
void start();
