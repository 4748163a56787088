import { api, ApiError, setCsrf, type Account, type AccountPage, type CatalogueEntry, type Overview, type RecentRequest, type Session } from "./api.ts";
import { accountView } from "./account-view.ts";
import { accountsView, catalogueView, requestsView } from "./lists-view.ts";
import { loadUsage, usageView, type UsageChoice } from "./usage-view.ts";
import { errorBox, field, h } from "./dom.ts";

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
let usageChoice: UsageChoice = { range: "24h", split: "model" };

function show(view: HTMLElement): void {
  main.replaceChildren(view);
  // Focus moves to the new view's heading area, so keyboard and screen-reader users follow it.
  main.focus();
}

function renderNav(): void {
  nav.replaceChildren();
  who.replaceChildren();
  if (!session) return;
  const links: [string, string][] = session.kind === "operator"
    ? [["#accounts", "Accounts"], ["#usage", "Usage"], ["#catalogue", "Models"], ["#requests", "Requests"]]
    : [["#account", "Account"], ["#usage", "Usage"], ["#requests", "Requests"]];
  const current = location.hash.split("/")[0] || links[0]![0];
  nav.append(h("ul", {}, ...links.map(([href, text]) => h("li", {}, h("a", { href, "aria-current": current === href ? "page" : undefined }, text)))));
  const out = h("button", { type: "button", class: "link", "data-testid": "sign-out" }, "Sign out");
  out.addEventListener("click", async () => {
    await api("POST", "/sign-out").catch(() => undefined);
    session = null;
    preloaded = null;
    setCsrf("");
    location.hash = "";
    signInView();
  });
  who.append(session.kind === "operator" ? "Operator" : (session.login ?? ""), " ", out);
}

function signInView(message?: string): void {
  renderNav();
  const login = h("input", { type: "text", autocomplete: "username", "data-testid": "sign-in-login" });
  const password = h("input", { type: "password", autocomplete: "current-password", "data-testid": "sign-in-password" });
  const token = h("input", { type: "password", autocomplete: "off", "data-testid": "sign-in-token" });
  const out = h("div", {});
  if (message) out.append(errorBox(message, "sign-in-error"));
  const submit = async (body: Record<string, string>) => {
    out.replaceChildren();
    try {
      const s = await api<Session>("POST", "/sign-in", body);
      signedIn(s);
    } catch (err) {
      out.append(errorBox(err instanceof ApiError ? err.message : "Sign-in failed.", "sign-in-error"));
    }
  };
  const holderForm = h("form", { class: "card", "aria-labelledby": "holder-title" }, h("h2", { id: "holder-title" }, "Account holders"), field("Login", login), field("Password", password), h("button", { type: "submit", "data-testid": "sign-in-submit" }, "Sign in"));
  holderForm.addEventListener("submit", (e) => {
    e.preventDefault();
    void submit({ login: login.value, password: password.value });
  });
  const operatorForm = h("form", { class: "card", "aria-labelledby": "operator-title" }, h("h2", { id: "operator-title" }, "Operators"), field("Admin token", token), h("button", { type: "submit", "data-testid": "sign-in-token-submit" }, "Sign in as operator"));
  operatorForm.addEventListener("submit", (e) => {
    e.preventDefault();
    void submit({ token: token.value });
  });
  show(h("section", { "aria-labelledby": "sign-in-title" }, h("h1", { id: "sign-in-title" }, "Sign in"), out, h("div", { class: "pair" }, holderForm, operatorForm)));
}

function inviteView(token: string): void {
  const password = h("input", { type: "password", autocomplete: "new-password", minlength: "12", required: true, "data-testid": "invite-password" });
  const again = h("input", { type: "password", autocomplete: "new-password", minlength: "12", required: true, "data-testid": "invite-password-again" });
  const out = h("div", {});
  const form = h("form", { class: "card", "aria-labelledby": "invite-title" },
    h("h1", { id: "invite-title" }, "Set your password"),
    h("p", {}, "You were invited to a Switchyard account. Choose a password of at least 12 characters."),
    field("Password", password), field("Password again", again), h("button", { type: "submit", "data-testid": "invite-accept" }, "Set password and sign in"), out);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    out.replaceChildren();
    if (password.value !== again.value) {
      out.append(errorBox("The two passwords differ.", "sign-in-error"));
      return;
    }
    try {
      const s = await api<Session>("POST", "/invites/accept", { token, password: password.value });
      // The token leaves the address bar (and the history entry) once used.
      history.replaceState(null, "", "/console/#account");
      signedIn(s);
    } catch (err) {
      out.append(errorBox(err instanceof ApiError ? err.message : "Something went wrong.", "sign-in-error"));
    }
  });
  show(form);
}

function signedIn(s: Session): void {
  preloaded = null;
  session = s;
  setCsrf(s.csrf);
  const home = s.kind === "operator" ? "#accounts" : "#account";
  if (location.hash === "" || location.hash === home) void route();
  else location.hash = home;
}

async function route(): Promise<void> {
  if (!session) return;
  renderNav();
  const [view, id] = location.hash.replace(/^#/, "").split("/");
  const s = session;
  // What the page loaded with serves the first view only, whichever it is: later views (and
  // another session on this tab) read fresh, never a balance or an account from before.
  const first = preloaded;
  preloaded = null;
  try {
    if (s.kind === "holder" && (view === "account" || view === "")) {
      const account = first?.account ?? (await api<Account>("GET", `/accounts/${s.account_id}`));
      show(accountView(s, account, () => void route()));
    } else if (s.kind === "operator" && (view === "accounts" || view === "")) {
      const page = first?.accounts ?? (await api<AccountPage>("GET", "/accounts?limit=100"));
      show(accountsView(page, (accountId) => (location.hash = `#account/${accountId}`), () => void route()));
    } else if (s.kind === "operator" && view === "account" && id) {
      show(accountView(s, await api<Account>("GET", `/accounts/${encodeURIComponent(id)}`), () => void route()));
    } else if (view === "usage") {
      show(usageView(s, await loadUsage(usageChoice), usageChoice, (choice) => {
        usageChoice = choice;
        void route();
      }));
    } else if (view === "catalogue" && s.kind === "operator") {
      show(catalogueView((await api<{ data: CatalogueEntry[] }>("GET", "/catalogue")).data));
    } else if (view === "requests") {
      show(requestsView(s, (await api<{ data: RecentRequest[] }>("GET", "/requests?limit=100")).data));
    } else {
      show(h("section", {}, h("h1", {}, "Not found"), h("p", {}, "No such page here.")));
    }
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) {
      session = null;
      signInView("Your session ended: sign in again.");
      return;
    }
    show(h("section", {}, h("h1", {}, "Could not load this page"), errorBox(err instanceof ApiError ? err.message : "The gateway did not answer.")));
  }
}

async function start(): Promise<void> {
  const invite = /^#invite=([A-Za-z0-9_-]+)$/.exec(location.hash);
  if (invite) return inviteView(invite[1]!);
  try {
    preloaded = await api<Overview>("GET", "/overview");
    session = preloaded.session;
    setCsrf(session.csrf);
    await route();
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) signInView();
    else show(errorBox("The gateway did not answer. Reload to try again."));
  }
}

window.addEventListener("hashchange", () => {
  const invite = /^#invite=([A-Za-z0-9_-]+)$/.exec(location.hash);
  if (invite) inviteView(invite[1]!);
  else void route();
});
void start();
