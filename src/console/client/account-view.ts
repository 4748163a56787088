import { api, ApiError, readInView, type Account, type AccountLogins, type DefaultLimits, type KeySummary, type Session } from "./api.ts";
import { announce, confirmFirst, creditsOf, carryHeldSecret, holdSecret, refocus, secretHeld, credits, dateOf, errorBox, failure, field, h, hiddenHeading, labelColumns, numberOf, periodSelect, unfinished, when } from "./dom.ts";

/**
 * Shows the view again; `focus` (a selector) is where focus goes, else the view. `changed` says
 * what a change touched, so only that is read again (or nothing, when the change's answer is the
 * new state: a top-up's balance, a saved key); without it the whole view is read.
 */
export type Reload = (focus?: string, changed?: Changed) => void;

/** What a change touched: fields of the account as the change answered them, a key as saved, or a part to read again. */
export interface Changed {
  account?: Partial<Account>;
  key?: KeySummary;
  keys?: true;
  logins?: true;
}

/**
 * One account: balance, keys (create, revoke, per-key limits) and, for operators, top-up, the
 * account's limit and invites. The data is one request (`GET /accounts/:id`, or the overview's).
 */
export function accountView(session: Session, account: Account, reload: Reload, logins?: AccountLogins): HTMLElement {
  const operator = session.kind === "operator";
  // Which account the view shows, for scripts and tests: a hash change keeps the last view until this one is read.
  const root = h("section", { "aria-labelledby": "account-title", "data-account-id": account.id });
  root.append(
    h("h1", { id: "account-title" }, ...(operator ? ["Account ", h("bdi", {}, account.name)] : ["Your account"])),
    h("dl", { class: "facts" },
      h("dt", {}, "Balance"), h("dd", {}, h("span", { "data-testid": "balance" }, credits(account.balance)), " credits", refusedForCredits(account, operator)),
      h("dt", {}, "Held by requests in flight"), h("dd", {}, `${credits(account.reserved)} credits`),
      h("dt", {}, "Spend limit"), h("dd", {}, h("span", { "data-testid": "account-limit" }, limitText(account.spend_limit, account.spend_limit_period, account.spent_in_period, account.period_resets_at)), usedUp("The account's", account.spend_limit, account.spent_in_period, account.period_resets_at)),
      h("dt", {}, "Requests, all keys together"), h("dd", {}, h("span", { "data-testid": "account-requests" }, requestLimitsText(account)), refusedForRate(account, operator)),
      h("dt", {}, "Tokens a minute, all keys together"), h("dd", {}, h("span", { "data-testid": "account-tokens" }, tokensLimitText(account))),
      h("dt", {}, "Account id"), h("dd", {}, h("code", {}, account.id)),
    ),
  );
  // Said first, where the holder looks: every request of the keys below is refused while it lasts.
  if (account.suspended_at) {
    root.insertBefore(h("div", { class: "error", role: "status", "data-testid": "account-suspended" },
      `${operator ? "This account is" : "Your account is"} suspended by the gateway's operator since ${when(account.suspended_at)}: every request of ${operator ? "its" : "your"} keys is refused (403) until ${operator ? "it is resumed" : "the operator resumes it"}.`), root.children[1] ?? null);
  }
  // Its own requests (the Requests view's latest 100 are every account's).
  if (operator) root.append(h("p", {}, h("a", { href: `#requests/${account.id}`, "data-testid": "account-requests-link" }, "Recent requests of this account")));
  if (operator) root.append(topUpForm(account, reload), debitForm(account, reload), accountLimitForm(account, reload), requestLimitsForm(account, reload), suspendForm(account, reload), inviteForm(account, reload), ...(logins ? [loginsSection(account, logins, reload)] : []));
  const history = creditHistory(account, operator);
  if (history) root.append(history);
  root.append(keysSection(session, account, reload));
  return root;
}

const CREDIT_MOVES = { opening: "Opening balance", top_up: "Added by the operator", debit: "Taken back by the operator" } as const;

/**
 * The balance's moves that are not charges: what the account opened with, what the operator added
 * or took back, newest first. A holder saw the balance jump after a top-up with nothing saying
 * why (a console probe); charges are in Usage and Requests.
 */
function creditHistory(account: Account, operator: boolean): HTMLElement | null {
  const entries = account.credit_history;
  if (!entries || entries.length === 0) return null;
  const table = h("table", { class: "wide fit", "data-testid": "credit-history" },
    h("caption", {}, entries.length >= 20 ? "The latest 20" : `${entries.length} in all`),
    h("thead", {}, h("tr", {}, ...["When", "What", "Credits"].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, ...entries.map((e) => h("tr", { "data-testid": "credit-entry", "data-kind": e.kind },
      h("td", {}, when(e.created_at)), h("td", {}, CREDIT_MOVES[e.kind]), h("td", { class: "num" }, `${e.credits > 0 && e.kind !== "opening" ? "+" : ""}${credits(e.credits)}`),
    ))));
  labelColumns(table);
  return h("section", { "aria-labelledby": "credit-history-title" },
    h("h2", { id: "credit-history-title" }, "Credits added and taken back"),
    h("p", { class: "note" }, operator ? "The account's balance moves other than its requests' charges (those are in Usage and Requests)." : "Your balance's moves other than your requests' charges (those are in Usage and Requests)."),
    h("div", { class: "scroll" }, table));
}

/**
 * Said under the balance when requests were refused for it (402) in the 24 hours before the page
 * read the account: a holder whose every request failed saw a balance of 0.002 credits and nothing
 * else, the gateway holding each request for up to 0.08 (a console probe). A 402 is also a spend
 * limit used up, which its own line says.
 */
function refusedForCredits(account: Account, operator: boolean): HTMLElement | null {
  const n = account.refused_last_24h?.["402"] ?? 0;
  if (n === 0) return null;
  return h("div", { class: "error", "data-testid": "refused-for-credits" },
    `${n.toLocaleString("en-US")} request${n === 1 ? " in the last 24 hours was" : "s in the last 24 hours were"} refused (402)${latestOf(account, "402", n)}: the balance, less what requests in flight hold, could not cover what each may cost (its prompt and max_tokens at the model's prices), or a spend limit was used up. `,
    // A holder sets their keys' limits themselves: "ask for a top-up" alone sent one whose key limit was spent to the operator (a console probe).
    operator ? "Top up below, or raise the limit." : "A key's limit you can raise in its row below; for the balance or the account's limit, ask the gateway's operator.");
}

/**
 * Said beside the request limits when requests were refused by them (429) in the 24 hours before
 * the page read the account: the operator saw 402s only, and an account whose keys ran into their
 * rate showed nothing (a console probe).
 */
function refusedForRate(account: Account, operator: boolean): HTMLElement | null {
  const n = account.refused_last_24h?.["429"] ?? 0;
  if (n === 0) return null;
  return h("div", { class: "error", "data-testid": "refused-for-rate" },
    `${n.toLocaleString("en-US")} request${n === 1 ? " in the last 24 hours was" : "s in the last 24 hours were"} refused (429)${latestOf(account, "429", n)}: a key's or the account's requests a minute, or requests at once, were used up. `,
    operator ? "Raise the request limits below, or the key's in its row." : "For higher limits, ask the gateway's operator.");
}

/**
 * When the latest of a status's refusals was: the count alone stayed on the page, in red, for 24
 * hours after a limit was raised or a top-up made, and no one could tell whether requests were
 * still refused (a console probe, thirty-sixth session).
 */
function latestOf(account: Account, status: string, n: number): string {
  const at = account.refused_latest?.[status];
  if (!at) return "";
  return `, ${n === 1 ? "at" : "the latest at"} ${when(at).replace(/:00 UTC$/, " UTC")}`;
}

/** A spend limit as people read it: how much, per what, what the period spent so far, and when it starts again. */
function limitText(limit: number | null, period: string | null, spent: number, resetsAt: string | null): string {
  if (limit === null) return "none";
  const per = period ? `per ${period}` : "over its life";
  return `${creditsOf(limit)} ${per} (${credits(spent)} spent${resetsAt ? `; resets ${when(resetsAt)}` : ""})`;
}

/**
 * Said when a limit is spent: every request is refused (402) until the period resets or the limit is
 * raised. A limit saved below what the period had spent ("0.003 credits per day (0.0046 spent…)")
 * was only "saved.", and the key's next requests failed without the page saying so (a console probe).
 */
function usedUp(whose: string, limit: number | null, spent: number, resetsAt: string | null): HTMLElement | null {
  if (limit === null || spent < limit) return null;
  return h("div", { class: "error", "data-testid": "limit-used-up" }, `${whose} limit is used up: requests are refused ${resetsAt ? `until ${when(resetsAt)}, or until it is raised` : "until it is raised"}.`);
}

/** A key's state: revoked, expired (the gateway refuses it from then), or active. */
function keyStatus(k: KeySummary, now = Date.now()): { text: string; active: boolean } {
  if (k.revoked_at !== null) return { text: `revoked ${when(k.revoked_at)}`, active: false };
  if (k.expires_at !== null && Date.parse(k.expires_at) <= now) return { text: `expired ${when(k.expires_at)}`, active: false };
  return { text: k.expires_at ? `active until ${when(k.expires_at)}` : "active", active: true };
}

/**
 * A form whose submit runs `action`; failures show in the form, never as a stack. An action that
 * answers "hold" leaves the button disabled (until the view is shown again).
 */
function form(title: string, fields: HTMLElement[], submit: HTMLButtonElement, action: () => Promise<void | "hold">, heading: "h2" | "h3" = "h2"): HTMLElement {
  const out = h("div", { class: "form-out" });
  const el = h("form", { class: "card", "aria-label": title }, h(heading, {}, title), ...fields, submit, out);
  // An answer about what was typed before goes once the user types again (the browser's own checks
  // may stop the next submit before it clears it).
  el.addEventListener("input", () => out.replaceChildren());
  el.addEventListener("submit", async (event) => {
    event.preventDefault();
    out.replaceChildren();
    submit.disabled = true;
    let hold = false;
    try {
      hold = (await action()) === "hold";
    } catch (err) {
      out.append(errorBox(failure(err)));
    } finally {
      submit.disabled = hold;
      if (!hold) refocus(submit);
    }
  });
  return el;
}

/** What the two balance forms say and where they send it. */
const BALANCE_MOVES = {
  topup: {
    title: "Top up", label: "Credits to add", button: "Add credits", path: "credits", done: "Added", noun: "top-up",
    pending: (amount: string) => `adding ${amount} again within ${PENDING_MINUTES} minutes of it adds it once.`,
    unknown: "the credits may or may not have been added. Add the same amount again in a moment: it is added once either way.",
  },
  debit: {
    title: "Take credits back", label: "Credits to take back", button: "Take back", path: "debits", done: "Took back", noun: "debit",
    pending: (amount: string) => `taking back ${amount} again within ${PENDING_MINUTES} minutes of it takes it back once.`,
    unknown: "the credits may or may not have been taken back. Take back the same amount again in a moment: it is taken back once either way.",
  },
} as const;

function topUpForm(account: Account, reload: Reload): HTMLElement {
  return balanceForm(account, reload, "topup");
}

/**
 * A top-up made by mistake is taken back here, never past what the account has available (its
 * balance less what requests in flight hold: the gateway's 409 says how much that is).
 */
function debitForm(account: Account, reload: Reload): HTMLElement {
  return balanceForm(account, reload, "debit");
}

function balanceForm(account: Account, reload: Reload, kind: keyof typeof BALANCE_MOVES): HTMLElement {
  const say = BALANCE_MOVES[kind];
  const amount = h("input", { type: "number", min: "0.000001", max: "1000000000", step: "any", required: true, inputmode: "decimal", "data-testid": `${kind}-amount` });
  const submit = h("button", { type: "submit", "data-testid": `${kind}-submit` }, say.button);
  // One top-up, one key: sent again after a failure whose answer was lost (the credits may have
  // been added), the gateway adds them once. A new amount is a new top-up. Kept for the tab's
  // session, so a reload between the lost answer and the retry still adds them once. Debits alike.
  const stored = `switchyard-${kind}:${account.id}`;
  let idempotency: Pending | null = readPending(stored);
  // Said where the operator types: the same amount again is this top-up, not a new one.
  const pending = idempotency ? h("p", { class: "note", "data-testid": `${kind}-pending` }, `A ${say.noun} of ${idempotency.amount} credits got no answer; ${say.pending(idempotency.amount)}`) : null;
  const fields = pending ? [field(say.label, amount), pending] : [field(say.label, amount)];
  return form(say.title, fields, submit, async () => {
    if (idempotency?.amount !== amount.value) idempotency = { amount: amount.value, key: crypto.randomUUID(), at: Date.now() };
    sessionStorage.setItem(stored, JSON.stringify(idempotency));
    let moved: Pick<Account, "balance" | "reserved">;
    try {
      moved = await api<Pick<Account, "balance" | "reserved">>("POST", `/accounts/${account.id}/${say.path}`, { amount: Number(amount.value) }, { "idempotency-key": idempotency.key });
    } catch (err) {
      if (err instanceof ApiError && err.gatewaySaid && !unfinished(err)) {
        // The gateway refused it: its fate is known, and the key is not kept.
        sessionStorage.removeItem(stored);
        idempotency = null;
        throw err;
      }
      // No answer (none at all, a proxy's 502/504) or the gateway's own 5xx (its database unusable
      // for a moment: a 503 that says "may or may not have been made"): the key is kept, so the
      // same amount again is this one. A 503 dropped it, and the retry it advised added twice.
      throw new ApiError(0, failure(err, say.unknown));
    }
    sessionStorage.removeItem(stored);
    idempotency = null;
    announce(`${say.done} ${creditsOf(Number(amount.value))}.`);
    // Back where the operator was (the view is drawn again with the new balance, which the answer
    // says: nothing is read again), not at its top.
    // Its entry leads the credits' history (the server's time is a moment off; the next read has it).
    const entry = { created_at: new Date().toISOString(), kind: kind === "debit" ? ("debit" as const) : ("top_up" as const), credits: (kind === "debit" ? -1 : 1) * Number(amount.value) };
    reload(`[data-testid=${kind}-amount]`, { account: { balance: moved.balance, reserved: moved.reserved, credit_history: [entry, ...(account.credit_history ?? [])].slice(0, 20) } });
    // Held until the view is shown again: the amount is still typed and its key is spent, so a
    // second click before the new view would be applied twice.
    return "hold";
  });
}

/** A limit and its period as the API takes them; a period without a limit is refused, not saved as "none". */
function limitChange(limit: HTMLInputElement, period: HTMLSelectElement): { spend_limit: number | null; spend_limit_period: string | null } {
  const value = numberOf(limit, "The spend limit");
  if (value !== null && !(value >= 0)) throw new ApiError(400, "A spend limit is a number of credits, 0 or more (empty: none).");
  if (value === null && period.value) throw new ApiError(400, "A period needs a limit: enter one, or choose lifetime for none.");
  return { spend_limit: value, spend_limit_period: period.value || null };
}

function accountLimitForm(account: Account, reload: Reload): HTMLElement {
  const limit = h("input", { type: "number", min: "0", max: "1000000000", step: "any", value: account.spend_limit ?? "", placeholder: "none", "data-testid": "account-spend-limit" });
  const period = periodSelect(account.spend_limit_period);
  const submit = h("button", { type: "submit", "data-testid": "account-limit-submit" }, "Save limit");
  return form("Account spend limit", [field("Limit in credits (empty: none)", limit), field("Period", period)], submit, async () => {
    const facts = await api<Partial<Account>>("PATCH", `/accounts/${account.id}`, limitChange(limit, period));
    announce("Limit saved.");
    reload("[data-testid=account-limit-submit]", { account: facts });
    return "hold";
  });
}

/** The account's own limits on all its keys together, as people read them; unset ones are the gateway's, shown as numbers. */
function requestLimitsText(account: Account): string {
  const d = account.default_limits;
  const rate = account.rate_limit_per_minute ?? d?.account_requests_per_minute ?? null;
  const cap = account.max_concurrent_requests ?? d?.account_max_concurrent_requests ?? null;
  const fromGateway = (own: number | null | undefined) => (own == null && d ? " (the gateway's)" : "");
  if (rate == null && cap == null) return d ? "no limit beyond each key's own" : "the gateway's default limits";
  return `${rate == null ? "no limit a minute" : `${rate.toLocaleString("en-US")} a minute${fromGateway(account.rate_limit_per_minute)}`}; ${cap == null ? "no limit at once" : `${cap.toLocaleString("en-US")} at once${fromGateway(account.max_concurrent_requests)}`}`;
}

/** The account's prompt and answer tokens a minute (its own, else the gateway's), as people read them. */
function tokensLimitText(account: Account): string {
  const d = account.default_limits;
  const tokens = account.tokens_per_minute ?? d?.account_tokens_per_minute ?? null;
  if (tokens == null) return d ? "no limit" : "the gateway's default";
  return `${tokens.toLocaleString("en-US")}${account.tokens_per_minute == null ? " (the gateway's)" : ""}: prompts and answers together; past it requests get 429 until the minute refills`;
}

/** A whole number in range from a field, or null for empty (the gateway's default). */
function wholeOf(input: HTMLInputElement, what: string, max: number): number | null {
  const value = numberOf(input, what);
  if (value !== null && !(Number.isInteger(value) && value >= 1 && value <= max)) throw new ApiError(400, `${what} is a whole number from 1 to ${max.toLocaleString("en-US")} (empty: the gateway's default).`);
  return value;
}

/** A field's placeholder for "empty: the gateway's value", with the value when the page knows it. */
function gatewayValue(n: number | null | undefined): string {
  return n === undefined ? "default" : n === null ? "none" : `${n.toLocaleString("en-US")} (the gateway's)`;
}

function requestLimitsForm(account: Account, reload: Reload): HTMLElement {
  const d = account.default_limits;
  const rate = h("input", { type: "number", min: "1", max: "1000000", step: "1", value: account.rate_limit_per_minute ?? "", placeholder: gatewayValue(d?.account_requests_per_minute), "data-testid": "account-rpm" });
  const cap = h("input", { type: "number", min: "1", max: "100000", step: "1", value: account.max_concurrent_requests ?? "", placeholder: gatewayValue(d?.account_max_concurrent_requests), "data-testid": "account-concurrent" });
  const tokens = h("input", { type: "number", min: "1", max: "1000000000", step: "1", value: account.tokens_per_minute ?? "", placeholder: gatewayValue(d === undefined ? undefined : d.account_tokens_per_minute ?? null), "data-testid": "account-tpm" });
  const submit = h("button", { type: "submit", "data-testid": "account-requests-submit" }, "Save request limits");
  const note = h("p", { class: "note" }, "For all the account's keys together, beside each key's own limits; more get 429. Tokens: prompt and answer tokens as the vendor counts them, so one tenant cannot use up the vendors' tokens a minute the others share.");
  return form("Account request limits", [field("Requests a minute (empty: default)", rate), field("Requests at once (empty: default)", cap), field("Tokens a minute (empty: default)", tokens), note], submit, async () => {
    // Only what was changed here: a value another operator set since this page was shown stays.
    const changes: Record<string, number | null> = {};
    const perMinute = wholeOf(rate, "Requests a minute", 1_000_000);
    if (perMinute !== (account.rate_limit_per_minute ?? null)) changes.rate_limit_per_minute = perMinute;
    const atOnce = wholeOf(cap, "Requests at once", 100_000);
    if (atOnce !== (account.max_concurrent_requests ?? null)) changes.max_concurrent_requests = atOnce;
    const perMinuteTokens = wholeOf(tokens, "Tokens a minute", 1_000_000_000);
    if (perMinuteTokens !== (account.tokens_per_minute ?? null)) changes.tokens_per_minute = perMinuteTokens;
    const facts = Object.keys(changes).length > 0 ? await api<Partial<Account>>("PATCH", `/accounts/${account.id}`, changes) : {};
    announce(Object.keys(changes).length > 0 ? "Request limits saved." : "Nothing changed.");
    reload("[data-testid=account-requests-submit]", { account: facts });
    return "hold";
  });
}

/**
 * The account's on/off switch: suspended, every request of its keys is a 403 until it is resumed;
 * answers under way finish, and its balance, keys and logins stay (docs/api.md, "Suspending an account").
 * Suspending asks first, as a revoke does, and says what it does: it was one click that stopped
 * every key of a tenant at once (the sixth console probe). Resuming does not ask.
 */
function suspendForm(account: Account, reload: Reload): HTMLElement {
  const suspended = Boolean(account.suspended_at);
  const button = h("button", { type: "button", ...(suspended ? {} : { class: "danger" }), "data-testid": "account-suspend-submit" }, suspended ? "Resume account" : "Suspend account");
  const note = h("p", { class: "note", id: "suspend-note" }, suspended
    ? "Resumed, its keys work again from their next request."
    : "Every request of its keys is refused (403) from their next one, free models too, until it is resumed. Answers under way finish; its balance, keys and logins stay.");
  const out = h("div", { class: "form-out" });
  const run = async () => {
    out.replaceChildren();
    button.disabled = true;
    try {
      const facts = await api<Partial<Account>>("PATCH", `/accounts/${account.id}`, { suspended: !suspended });
      announce(suspended ? "Account resumed." : "Account suspended: its keys are refused from their next request.");
      reload("[data-testid=account-suspend-submit]", { account: facts });
    } catch (err) {
      // A session that ended or was replaced: the page follows by itself (api.ts, onSessionLost).
      if (err instanceof ApiError && (err.status === 401 || err.sessionReplaced)) return;
      out.append(errorBox(failure(err)));
      button.disabled = false;
      button.focus();
    }
  };
  if (suspended) button.addEventListener("click", () => void run());
  else confirmFirst(button, "Suspend the account", () => void run(), 5_000, "Its keys are refused from their next request, until you resume it.");
  const title = suspended ? "Account suspended" : "Suspend the account";
  return h("section", { class: "card", "aria-labelledby": "suspend-title" }, h("h2", { id: "suspend-title" }, title), note, button, out);
}

function inviteForm(account: Account, reload: Reload): HTMLElement {
  // The rule is said where the field is, and in the browser's own refusal (its `title`): "Please
  // match the requested format" was all a refused login got (a console probe).
  const rule = "3 to 64 characters: letters, digits and . _ @ -";
  const ruleNote = h("p", { class: "note", id: `invite-rule-${account.id}` }, `A login is ${rule}. A login of this account gets a link to set a new password.`);
  const login = h("input", { type: "text", required: true, autocomplete: "off", autocapitalize: "none", spellcheck: "false", pattern: "[A-Za-z0-9._@\\-]{3,64}", maxlength: "64", title: rule, "aria-describedby": ruleNote.id, "data-testid": "invite-login" });
  const submit = h("button", { type: "submit", "data-testid": "invite-submit" }, "Make invite link");
  const shown = h("div", {});
  const el = form("Invite the account holder", [field("Login they will sign in with", login), ruleNote, shown], submit, async () => {
    const invite = await api<{ url: string; expires_at: string }>("POST", `/accounts/${account.id}/invites`, { login: login.value });
    const done = h("button", { type: "button", "data-testid": "invite-done" }, "Done");
    done.addEventListener("click", () => {
      holdSecret(null);
      reload("#logins-title", { logins: true });
    });
    // Copied as a key is (a 90-character link selected by hand, on a phone, lost its end).
    const code = h("code", { class: "secret", "data-testid": "invite-url" }, invite.url);
    const copy = h("button", { type: "button", "data-testid": "invite-copy" }, "Copy link");
    const note = h("span", { class: "note", "data-testid": "invite-copy-note", "aria-live": "polite" });
    copy.addEventListener("click", () => void copySecret(code, note, invite.url, "Link"));
    shown.replaceChildren(h("p", {}, "Send this link to them; it works once, until ", when(invite.expires_at), ". It replaces any earlier link for this login:"), h("p", {}, code, " ", copy, " ", note), done);
    holdSecret({ shown: code, block: shown, what: "invite link", owner: account.id });
    announce("Invite link made.");
    // Focus on what comes next: the clicked button is held off, and focus left with it (to the page's top).
    copy.focus();
    // Held until Done: a second click would make a second link and silently replace the one shown.
    return "hold";
  });
  // Carried into a view another change redrew, as a new key's secret is (keysSection).
  if (carryHeldSecret(shown, "invite link", account.id)) login.disabled = submit.disabled = true;
  return el;
}

/** Who can sign in to the account's console, and the invites not yet used: each can be removed (someone left). */
function loginsSection(account: Account, logins: AccountLogins, reload: Reload): HTMLElement {
  const out = h("div", { class: "form-out" });
  // A login's row removes the login (someone left); an invite's row cancels only its link, so a
  // login of the account that was sent a new one keeps signing in with its password.
  const remove = (login: string, invite: boolean) => {
    const what = invite ? `the invite for ${login}` : `login ${login}`;
    const button = h("button", { type: "button", class: "danger", "data-testid": invite ? "invite-cancel" : "login-remove", "aria-label": `${invite ? "Cancel" : "Remove"} ${what}` }, invite ? "Cancel invite" : "Remove");
    confirmFirst(button, `${invite ? "Cancel" : "Remove"} ${what}`, async () => {
      out.replaceChildren();
      button.disabled = true;
      try {
        await api("DELETE", `/accounts/${account.id}/${invite ? "invites" : "logins"}/${encodeURIComponent(login)}`);
        announce(invite ? `The invite for ${login} is cancelled: its link no longer works.` : `${login} removed: it can no longer sign in.`);
        reload("#logins-title", { logins: true });
      } catch (err) {
        // A session that ended or was replaced: the page follows by itself (api.ts, onSessionLost).
        if (err instanceof ApiError && (err.status === 401 || err.sessionReplaced)) return;
        out.append(errorBox(failure(err)));
        button.disabled = false;
      }
    });
    return button;
  };
  const rows = [
    ...logins.logins.map((l) => h("tr", { "data-testid": "login-row" }, h("td", {}, h("bdi", {}, l.login)), h("td", {}, `signs in since ${when(l.created_at)}`), h("td", {}, remove(l.login, false)))),
    ...logins.invites.map((i) => h("tr", { "data-testid": "login-row" }, h("td", {}, h("bdi", {}, i.login)), h("td", {}, `invited, link valid until ${when(i.expires_at)}`), h("td", {}, remove(i.login, true)))),
  ];
  return h("section", { class: "card", "aria-labelledby": "logins-title" },
    h("h2", { id: "logins-title", tabindex: "-1" }, "Console logins"),
    rows.length === 0 ? h("p", { class: "note" }, "No one can sign in to this account yet: invite its holder above.")
      // Stacked as cards on a phone, as every wide table: a login and its button ran off the screen (a console probe).
      : h("table", { class: "wide fit" }, h("caption", {}, "Logins and invites not yet used"), h("thead", {}, h("tr", {}, ...["Login", "State"].map((c) => h("th", { scope: "col" }, c)), hiddenHeading("Actions"))), h("tbody", {}, ...rows)),
    out);
}

/**
 * Copies a secret; where the page may not use the clipboard (plain HTTP on another host than
 * localhost has no `navigator.clipboard`), the secret is selected for the user to copy, and told so.
 */
async function copySecret(code: HTMLElement, note: HTMLElement, text: string, what = "Key"): Promise<void> {
  try {
    if (!navigator.clipboard) throw new Error("no clipboard");
    await navigator.clipboard.writeText(text);
    holdSecret(null);
    announce(`${what} copied.`);
    note.replaceChildren("Copied.");
    return;
  } catch {
    const range = document.createRange();
    range.selectNodeContents(code);
    const selection = window.getSelection();
    selection?.removeAllRanges();
    selection?.addRange(range);
    // The older way still works on some pages the clipboard API is not given.
    const copied = (() => {
      try {
        return document.execCommand("copy");
      } catch {
        return false;
      }
    })();
    if (copied) holdSecret(null);
    announce(copied ? `${what} copied.` : `The browser did not let the page copy: the ${what.toLowerCase()} is selected, copy it with Ctrl+C (⌘C).`);
    note.replaceChildren(copied ? "Copied." : "Selected: copy it with Ctrl+C (⌘C).");
  }
}

/** Why no key can be made: the account holds the most it may. */
const FULL_KEYS = "This account has 10 keys in use, the most it may have: revoke one to create another.";

function keysSection(session: Session, account: Account, reload: Reload): HTMLElement {
  const operator = session.kind === "operator";
  // What the gateway counts against the ten: keys neither revoked nor expired (an expired key
  // frees its place; the page had said it was "counted until revoked", and held Create key at ten
  // while the gateway would have made one). The others are listed under them, newest first.
  const inUse = account.keys.filter((k) => keyStatus(k).active);
  const others = account.keys.filter((k) => !keyStatus(k).active);
  const page = account.keys_page ?? { active: inUse.length, inactive: others.length, next_offset: null };
  const name = h("input", { type: "text", dir: "auto", maxlength: "200", "data-testid": "key-name" });
  const limit = h("input", { type: "number", min: "0", max: "1000000000", step: "any", placeholder: "none", "data-testid": "new-key-spend-limit" });
  const period = periodSelect(null);
  const rpm = h("input", { type: "number", min: "1", max: "1000000", step: "1", placeholder: gatewayValue(account.default_limits?.key_requests_per_minute) });
  const models = h("input", { type: "text", placeholder: "every model", "data-testid": "key-models" });
  const secret = h("div", {});
  /** The form is used while a secret is shown: a second click would make a second key and hide this one's. */
  const holdForm = () => {
    for (const input of [name, limit, rpm, models, period]) input.disabled = true;
  };
  // At ten keys the button stays focusable and says why (a disabled one told keyboard and screen-reader users nothing).
  const full = inUse.length >= 10;
  const submit = h("button", { type: "submit", "data-testid": "key-create", ...(full ? { "aria-disabled": "true", "aria-describedby": "keys-full" } : {}) }, "Create key");
  const fullNote = full ? [h("p", { class: "note", id: "keys-full", "data-testid": "keys-full" }, FULL_KEYS)] : [];
  // What a holder's new key may reach, said before it is made: the operator's limits on the
  // account's keys carry over (accounts/holder-keys.ts), and a row saying so once it existed was
  // all a holder learnt (a console probe).
  const ceiling = operator ? undefined : account.new_key;
  const reach = ceiling && (ceiling.models || ceiling.rate_limit_per_minute !== undefined || ceiling.max_concurrent_requests !== undefined)
    ? [h("p", { class: "note", "data-testid": "key-ceiling" }, "As the operator limited this account's keys, a key you make ",
      [ceiling.models ? `may use only ${ceiling.models.join(", ")}` : null,
        ceiling.rate_limit_per_minute !== undefined ? `takes at most ${ceiling.rate_limit_per_minute.toLocaleString("en-US")} requests a minute` : null,
        ceiling.max_concurrent_requests !== undefined ? `runs at most ${ceiling.max_concurrent_requests.toLocaleString("en-US")} at once` : null].filter(Boolean).join("; "), ".")]
    : [];
  const create = form("New key", [...fullNote, ...reach, field("Name", name), field("Spend limit in credits (empty: none)", limit), field("Period", period), ...(operator ? [field("Requests per minute", rpm), field("Only these models (ids or prefix*, comma-separated)", models)] : []), secret], submit, async () => {
    if (full) throw new ApiError(409, FULL_KEYS);
    const body: Record<string, unknown> = { name: name.value || undefined };
    const limits = limitChange(limit, period);
    if (limits.spend_limit !== null) body.spend_limit = limits.spend_limit;
    if (limits.spend_limit_period) body.spend_limit_period = limits.spend_limit_period;
    const perMinute = operator ? numberOf(rpm, "Requests per minute") : null;
    if (perMinute !== null) body.rate_limit_per_minute = perMinute;
    if (operator && models.value.trim() !== "") body.models = models.value.split(",").map((m) => m.trim()).filter((m) => m !== "");
    let key: { id: string; key: string };
    try {
      key = await api<{ id: string; key: string }>("POST", `/accounts/${account.id}/keys`, body);
    } catch (err) {
      // Its answer lost, a key may have been made whose secret no one will see: say what to do.
      throw new ApiError(0, failure(err, "the key may or may not have been made, and if it was, its secret is lost: reload, revoke a key you did not get, and create another."));
    }
    // The key is shown here once: the gateway keeps only its hash.
    const copy = h("button", { type: "button", "data-testid": "key-copy" }, "Copy");
    const code = h("code", { class: "secret", "data-testid": "key-secret" }, key.key);
    const note = h("span", { class: "note", "data-testid": "key-copy-note", "aria-live": "polite" });
    copy.addEventListener("click", () => void copySecret(code, note, key.key));
    secret.replaceChildren(h("div", { class: "notice", role: "alert" },
      h("p", {}, "Your new key — copy it now, it is not shown again:"),
      h("p", {}, code, " ", copy, " ", note),
      h("button", { type: "button", "data-testid": "key-secret-done" }, "Done"),
    ));
    // Whether the keys above list the new one already (below): Done then needs to read nothing.
    let listed = false;
    secret.querySelector<HTMLButtonElement>("[data-testid=key-secret-done]")!.addEventListener("click", () => {
      holdSecret(null);
      reload("#keys-title", listed ? {} : { keys: true });
    });
    holdSecret({ shown: code, block: secret, what: "new key", owner: account.id });
    announce("Key created. It is shown once.");
    // Done shows the keys again, with an empty form.
    holdForm();
    // Focus on what comes next: the button and fields are held off, and focus left with them (to the page's top).
    copy.focus();
    // The keys above list the new one while its secret is shown (carried into the redrawn view):
    // they said "No keys yet: create one below" over a first key's secret, and "9 of 10 in use"
    // over a tenth's, until Done (a console probe, thirty-sixth session). Read here, not by the
    // view's reload, so a read that fails leaves the secret on screen as it is.
    void api<Account>("GET", `/accounts/${encodeURIComponent(account.id)}`).then((fresh) => {
      if (secretHeld()?.shown !== code) return;
      listed = true;
      // Focus stays where it is in the secret's block (Done, say), or goes to Copy: moved, it was lost.
      const at = document.activeElement?.closest("[data-testid]")?.getAttribute("data-testid");
      const focused = at && secret.querySelector(`[data-testid="${at}"]`) ? at : "key-copy";
      reload(`[data-testid="${focused}"]`, { account: fresh });
    }, () => undefined);
    return "hold";
  }, "h3");
  // A secret still shown when another change on this page redrew it (a top-up, a key's Save) is
  // carried into the new view, its form held as before: it vanished without a word (a console probe).
  if (carryHeldSecret(secret, "new key", account.id)) {
    holdForm();
    submit.disabled = true;
  }
  const row = (k: KeySummary) => keyRow(k, reload, operator, account.default_limits);
  const keysTable = (caption: string, keys: KeySummary[]) => h("table", { class: "wide" },
    h("caption", {}, caption),
    h("thead", {}, h("tr", {}, ...["Name", "Key", "Created", "Spent (all time)", "Limit", "Status"].map((c) => h("th", { scope: "col" }, c)), hiddenHeading("Actions"))),
    h("tbody", {}, ...keys.map(row)),
  );
  // The keys in use, then the revoked and expired ones folded under their count: listed in full
  // they were most of the page (an account that had made and revoked 228 keys was 28,000 px tall,
  // its 2 live keys somewhere in it; a console probe).
  const shownInUse = inUse.length === 0 ? h("p", { class: "note", "data-testid": "keys-none-in-use" }, "No keys in use: create one below.")
    : h("div", { class: "scroll" }, keysTable(`Keys: ${inUse.length} of 10 in use`, inUse));
  const folded = page.inactive === 0 ? null : otherKeys(account, others, page, keysTable, row);
  // None yet: said in words, not a table of headings without rows.
  const listed = inUse.length === 0 && page.inactive === 0 ? [h("p", { class: "note", "data-testid": "keys-empty" }, "No keys yet: create one below.")] : [shownInUse, folded];
  return h("section", { "aria-labelledby": "keys-title" }, h("h2", { id: "keys-title", tabindex: "-1" }, "Keys"), keysHow(), ...listed, create);
}

/** A page of keys as the console's API answers (`GET /accounts/:id/keys`). */
interface KeyPageAnswer { data: KeySummary[]; total: number; next_offset: number | null }

/** How many revoked and expired keys "Show more" reads at a time (the first page is the gateway's, FIRST_KEYS_PAGE). */
const MORE_KEYS = 50;

/**
 * The revoked and expired keys, folded under their count, newest first: the page read with the
 * account, then a page a click ("Show more"), and a search by name or key (`svc-sk-…`) over all
 * of them. The account's answer had every key: 10,000 revoked keys were 3.5 MB on each view and
 * after each change, and drawing them all 140,000 elements (5–17 s); a console probe. The pages
 * read are kept with the account (`more` is added to `account.keys`), so a change made below that
 * draws the view again keeps them. A search's results are its own list until it is cleared.
 */
function otherKeys(account: Account, loaded: KeySummary[], page: NonNullable<Account["keys_page"]>, table: (caption: string, keys: KeySummary[]) => HTMLTableElement, row: (k: KeySummary) => HTMLTableRowElement): HTMLElement {
  const count = (n: number) => n.toLocaleString("en-US");
  const shown = table("", loaded);
  const caption = shown.querySelector("caption")!;
  const more = h("button", { type: "button", "data-testid": "keys-more" });
  const search = h("input", { type: "search", dir: "auto", maxlength: "200", "data-testid": "keys-search" });
  const find = h("button", { type: "submit", "data-testid": "keys-search-submit" }, "Find");
  const out = h("div", { class: "form-out" });
  /** The list shown: the account's (`term` empty) or a search's, how many it has and where its next page starts. */
  let list = { term: "", rows: loaded.length, total: page.inactive, next: page.next_offset };
  const said = () => {
    const rest = list.total - list.rows;
    caption.textContent = list.term
      ? `Revoked and expired keys named like “${list.term}”: ${count(list.total)}${rest > 0 ? `, the newest ${count(list.rows)} shown` : ""}`
      : `Revoked and expired keys: ${count(list.total)}, no longer accepted, newest first${rest > 0 ? `; the newest ${count(list.rows)} shown` : ""}`;
    more.textContent = `Show ${count(Math.min(MORE_KEYS, rest))} more (${count(rest)} not shown)`;
    more.hidden = list.next === null || rest <= 0;
    // The table's box is named by its caption (dom.ts): the search changes it.
    shown.parentElement?.setAttribute("aria-label", caption.textContent);
  };
  const read = (term: string, offset: number) => {
    const q = new URLSearchParams({ state: "inactive", offset: String(offset), limit: String(MORE_KEYS), ...(term ? { search: term } : {}) });
    return readInView<KeyPageAnswer>(`/accounts/${encodeURIComponent(account.id)}/keys?${q}`);
  };
  /** Reads asked for so far: a slower, earlier one (a page of the list before a search) is not drawn over the last. */
  let asked = 0;
  /** Runs a read the fold asked for; a refusal is said under it (a session that ended: the page follows by itself). */
  const asking = async (button: HTMLButtonElement, run: (current: () => boolean) => Promise<void>) => {
    out.replaceChildren();
    button.disabled = true;
    const mine = ++asked;
    try {
      await run(() => mine === asked);
    } catch (err) {
      if (!(err instanceof ApiError && (err.status === 401 || err.sessionReplaced))) out.append(errorBox(failure(err, "reload to try again.")));
    } finally {
      button.disabled = false;
    }
  };
  const showMore = () => asking(more, async (current) => {
    const got = await read(list.term, list.next ?? list.rows);
    if (!current()) return;
    const rows = got.data.map(row);
    labelColumns(shown, rows);
    shown.tBodies[0]!.append(...rows);
    list = { ...list, rows: list.rows + got.data.length, total: got.total, next: got.next_offset };
    // Kept with this view's account (new arrays, never the one a redrawn view shares: a page that
    // comes after a top-up redrew the view is not counted in the new one).
    if (!list.term) {
      account.keys = [...account.keys, ...got.data];
      account.keys_page = { ...page, inactive: got.total, next_offset: got.next_offset };
      // `list.rows` counts this page already: adding it again grew the fold by a page at each Back (a console probe).
      shownFolds.set(account.id, Math.max(shownFolds.get(account.id) ?? 0, list.rows));
    }
    said();
    // Still on the button while there are more; else on the table's box (the button is gone).
    if (more.hidden && !restoring) shown.parentElement?.focus();
    announce(`${count(rows.length)} more keys shown.`);
  });
  more.addEventListener("click", () => void showMore());
  const searchForm = h("form", { role: "search", class: "find", "aria-label": "Find a revoked or expired key" }, field("Name or key (svc-sk-…)", search), find);
  searchForm.addEventListener("submit", (event) => {
    event.preventDefault();
    void asking(find, async (current) => {
      const term = search.value.trim();
      // Cleared: the account's list as read before, no request.
      const got = term ? await read(term, 0) : { data: account.keys.filter((k) => !keyStatus(k).active), total: account.keys_page?.inactive ?? 0, next_offset: account.keys_page?.next_offset ?? null };
      if (!current()) return;
      const rows = got.data.map(row);
      labelColumns(shown, rows);
      shown.tBodies[0]!.replaceChildren(...rows);
      list = { term, rows: got.data.length, total: got.total, next: got.next_offset };
      said();
      announce(term ? `${count(got.total)} revoked or expired keys named like “${term}”.` : "All revoked and expired keys shown again.");
    });
  });
  said();
  // Open as it was left when the view is drawn again after a change made in it (a key saved in
  // it, a top-up): closed, the saved key's button that focus goes back to was hidden.
  const fold = h("details", { class: "revoked", "data-testid": "keys-revoked", open: openFolds.has(account.id) },
    h("summary", {}, `Revoked and expired keys (${count(page.inactive)})`),
    searchForm, out,
    h("div", { class: "scroll" }, shown), more);
  fold.addEventListener("toggle", () => (fold.open ? openFolds.add(account.id) : openFolds.delete(account.id)));
  // Drawn from a fresh read (Back to this account, a link to it) after "Show more" was used in
  // this tab: the pages shown before are read again, so Back does not fall back to the first 50.
  let restoring = false;
  // Only after a move in the tab's history: a change made on the page reads the account again on
  // purpose (its first pages), and the tests pin those reads.
  const wanted = navigated ? shownFolds.get(account.id) ?? 0 : 0;
  navigated = false;
  if (wanted > list.rows && list.next !== null) {
    restoring = true;
    void (async () => {
      while (wanted > list.rows && list.next !== null && !list.term) {
        const before = list.rows;
        await showMore();
        if (list.rows === before) break;
      }
      restoring = false;
    })();
  }
  return fold;
}

/** The accounts whose fold of revoked and expired keys was left open in this tab. */
const openFolds = new Set<string>();
/** How many revoked and expired keys each account's fold showed in this tab ("Show more"), to show as many again. */
const shownFolds = new Map<string, number>();
/** Whether the address moved (Back, Forward, a link) since the last fold was drawn. */
let navigated = false;
window.addEventListener("hashchange", () => (navigated = true));

/**
 * Where a key is used: a first-time holder had a key and nothing saying where to send it (the
 * README says; the console did not). This page's origin is the gateway's as the browser reaches it.
 */
function keysHow(): HTMLElement {
  const base = location.origin;
  return h("p", { class: "note", "data-testid": "keys-how" },
    "A key is the API key of OpenAI's clients with the base URL ", h("code", {}, `${base}/v1`),
    ", and of Anthropic's with ", h("code", {}, base), " (no /v1). ", h("code", {}, "GET /v1/models"), " with a key lists the models it may use.");
}

/** A row's field with its name shown above it (the aria-label says which key's). */
const labelled = (text: string, input: HTMLElement) => h("label", { class: "mini" }, h("span", {}, text), input);

/** A key's own limits of pace, as its holder reads them: the operator's to set; unset ones are the gateway's, shown as numbers. */
function paceText(k: KeySummary, defaults: DefaultLimits | undefined): string {
  const perMinute = k.rate_limit_per_minute ?? defaults?.key_requests_per_minute ?? null;
  const rate = perMinute === null ? "the gateway's default rate" : `${perMinute.toLocaleString("en-US")} requests a minute${k.rate_limit_per_minute === null ? " (the gateway's)" : ""}`;
  const cap = k.max_concurrent_requests || defaults?.key_max_concurrent_requests;
  return cap ? `${rate}, ${cap.toLocaleString("en-US")} at once${k.max_concurrent_requests ? "" : " (the gateway's)"}` : rate;
}

/** A comma-separated list of model ids and prefix* patterns; empty: every model (null). */
function modelsOf(input: HTMLInputElement): string[] | null {
  const list = input.value.split(",").map((m) => m.trim()).filter((m) => m !== "");
  return list.length === 0 ? null : list;
}

function keyRow(k: KeySummary, reload: Reload, operator: boolean, defaults: DefaultLimits | undefined): HTMLTableRowElement {
  const revoked = k.revoked_at !== null;
  // Names may repeat: the key's visible ending tells two apart.
  const label = k.name === null ? `${k.prefix}…${k.last4}` : `${k.name} (…${k.last4})`;
  const actions = h("td", {});
  if (!revoked) {
    const rename = h("input", { type: "text", dir: "auto", maxlength: "200", value: k.name ?? "", placeholder: "no name", "aria-label": `Name of ${label}`, "data-testid": "key-rename" });
    // A day the key stops working at its start (UTC); empty: it does not expire.
    const lastDay = k.expires_at ? new Date(Date.parse(k.expires_at) - 1).toISOString().slice(0, 10) : "";
    // No day before today (UTC) in the picker: such a day is over, and the key would stop at once.
    const expires = h("input", { type: "date", value: lastDay, min: new Date().toISOString().slice(0, 10), "aria-label": `Last day of ${label} (UTC; empty: no end)`, "data-testid": "key-expires" });
    const limit = h("input", { type: "number", min: "0", max: "1000000000", step: "any", value: k.spend_limit ?? "", placeholder: "none", "aria-label": `Spend limit of ${label}`, "data-testid": "key-spend-limit" });
    const period = periodSelect(k.spend_limit_period, { "aria-label": `Period of ${label}'s limit` });
    // The operator's own settings of a key: its pace and its models (a holder sees them, read-only).
    const rpm = h("input", { type: "number", min: "1", max: "1000000", step: "1", value: k.rate_limit_per_minute ?? "", placeholder: gatewayValue(defaults?.key_requests_per_minute), "aria-label": `Requests a minute for ${label} (empty: the gateway's default)`, "data-testid": "key-rpm" });
    const atOnce = h("input", { type: "number", min: "1", max: "100000", step: "1", value: k.max_concurrent_requests ?? "", placeholder: gatewayValue(defaults?.key_max_concurrent_requests), "aria-label": `Requests at once for ${label} (empty: the gateway's default)`, "data-testid": "key-at-once" });
    const models = h("input", { type: "text", value: (k.models ?? []).join(", "), placeholder: "every model", "aria-label": `Models ${label} may use (comma-separated; empty: every model)`, "data-testid": "key-models-edit" });
    const save = h("button", { type: "button", "data-testid": "key-save", "aria-label": `Save ${label}` }, "Save");
    const revoke = h("button", { type: "button", class: "danger", "data-testid": "key-revoke", "aria-label": `Revoke ${label}` }, "Revoke");
    const out = h("div", { class: "form-out" });
    /**
     * A row's action, as the forms do theirs: its buttons wait while it runs, and a refusal is
     * shown in the row (a session that ended goes back to sign-in), never an unseen rejection.
     */
    const act = (button: HTMLButtonElement, run: () => Promise<Changed>, focusAfter: string) => async () => {
      out.replaceChildren();
      save.disabled = revoke.disabled = true;
      try {
        reload(focusAfter, await run());
      } catch (err) {
        // A session that ended or was replaced: the page follows by itself (api.ts, onSessionLost).
        if (err instanceof ApiError && (err.status === 401 || err.sessionReplaced)) return;
        out.append(errorBox(failure(err), "key-error"));
        save.disabled = revoke.disabled = false;
        // Enabled first: a disabled button takes no focus, and it fell to the page's top (a console probe).
        button.focus();
      } finally {
        save.disabled = revoke.disabled = false;
      }
    };
    save.addEventListener("click", act(save, async () => {
      // Outside a form the browser holds no field to its type or `min`: checked here, before asking,
      // so a mistyped limit or a date typed in part is refused rather than sent as "none".
      // Sent only when changed here: a limit set elsewhere since this page was shown (another
      // operator, the holder, the API) is not put back by saving the key's new name.
      const spend = limitChange(limit, period);
      const changes: Record<string, unknown> = spend.spend_limit !== (k.spend_limit ?? null) || spend.spend_limit_period !== (k.spend_limit_period ?? null) ? spend : {};
      const day = dateOf(expires, "The last day");
      const name = rename.value.trim();
      // The last day counts whole: the key stops at the start of the next one (UTC).
      // 9999-12-31, the last day a date can name, ends at its last millisecond: the day after has no four-digit year.
      const until = day === "" ? null : new Date(Math.min(Date.parse(`${day}T00:00:00Z`) + 86_400_000, LAST_INSTANT)).toISOString();
      if (name !== (k.name ?? "")) changes.name = name === "" ? null : name;
      if (day !== lastDay) {
        // A day already over stops the key at once: a holder west of UTC who picked their own
        // today (the UTC day before, from late afternoon on the American coasts) took their key
        // out of use, and the page said "saved." (a console probe). Revoke says that plainly.
        if (until !== null && Date.parse(until) <= Date.now()) {
          throw new ApiError(400, `The last day ${day} (UTC) is already over: the key would stop at once. Choose ${new Date().toISOString().slice(0, 10)} or later, or revoke the key.`);
        }
        changes.expires_at = until;
      }
      if (operator) {
        // Sent only when changed: the gateway checks each, and a holder's save never carries them.
        const perMinute = numberOf(rpm, "Requests a minute");
        if (perMinute !== k.rate_limit_per_minute) changes.rate_limit_per_minute = perMinute;
        const most = numberOf(atOnce, "Requests at once");
        if (most !== (k.max_concurrent_requests ?? null)) changes.max_concurrent_requests = most;
        const allowed = modelsOf(models);
        if ((allowed ?? []).join(",") !== (k.models ?? []).join(",")) changes.models = allowed;
      }
      // The answer is the key as saved: its row is drawn from it, nothing else read again.
      const saved = Object.keys(changes).length > 0 ? await api<KeySummary>("PATCH", `/keys/${k.id}`, changes) : undefined;
      // Revoked meanwhile (another tab, operator or script): the gateway saved the change on the
      // revoked key, and the page said "saved." of a key it then listed with the revoked (a console probe).
      if (saved && saved.revoked_at !== null && k.revoked_at === null) {
        announce(`${label} was revoked meanwhile (another tab, operator or script): it is listed with the revoked keys now.`);
        return { keys: true };
      }
      announce(saved ? `${label} saved.` : `${label}: nothing changed.`);
      // A key that came back into use (an expired key given a later last day), or left it: the
      // keys are read again, so it is listed and counted where it now is.
      if (saved && keyStatus(saved).active !== keyStatus(k).active) return { keys: true };
      return saved ? { key: saved } : {};
    }, `[data-key-id="${k.id}"] [data-testid=key-save]`));
    confirmFirst(revoke, `Revoke ${label}`, act(revoke, async () => {
      try {
        await api("DELETE", `/keys/${k.id}`);
        announce(`${label} revoked.`);
      } catch (err) {
        // Revoked meanwhile (another tab, another operator, the CLI): the gateway has no such
        // active key (404). What was asked is so: the view is read again and shows it revoked,
        // where the row had kept saying "active" over "No such active key." (a console probe).
        if (!(err instanceof ApiError && err.status === 404)) throw err;
        announce(`${label} was already revoked.`);
      }
      // The keys are read again (the first page of each list): the revoked one moves to the other.
      return { keys: true };
    }, "#keys-title"));
    // Enter in a row's field saves the row, as it would in a form (the row is not one: a table row cannot hold a form).
    for (const input of [rename, expires, limit, ...(operator ? [rpm, atOnce, models] : [])]) {
      input.addEventListener("keydown", (e) => {
        // Not the Enter that ends an input method's composition (a CJK name typed in part).
        if (e.key !== "Enter" || e.isComposing || save.disabled) return;
        e.preventDefault();
        save.click();
      });
    }
    const paced = operator ? [labelled("Requests/min", rpm), labelled("At once", atOnce), labelled("Models", models)] : [];
    actions.append(h("span", { class: "inline" }, labelled("Name", rename), labelled("Last day (UTC)", expires), labelled("Limit (credits)", limit), labelled("Period", period), ...paced, save), " ", revoke, out);
  }
  return h("tr", { "data-testid": "key-row", "data-key-id": k.id },
    h("td", { class: "name" }, k.name === null ? "—" : h("bdi", {}, k.name), k.models ? h("div", { class: "note" }, `only ${k.models.join(", ")}`) : null),
    // The id is what request lists and usage downloads name the key by.
    h("td", {}, h("code", {}, `${k.prefix}…${k.last4}`), h("div", { class: "note" }, "id ", h("code", { "data-testid": "key-id" }, k.id))),
    h("td", {}, when(k.created_at)),
    h("td", { class: "num" }, credits(k.spent)),
    h("td", {}, h("span", { "data-testid": "key-limit" }, limitText(k.spend_limit, k.spend_limit_period, k.spent_in_period, k.period_resets_at)), k.revoked_at === null ? usedUp("This key's", k.spend_limit, k.spent_in_period, k.period_resets_at) : null, h("div", { class: "note", "data-testid": "key-pace" }, paceText(k, defaults))),
    h("td", { "data-testid": "key-status" }, keyStatus(k).text),
    actions,
  );
}

/** The latest instant the gateway takes as a date (9999-12-31T23:59:59.999Z). */
const LAST_INSTANT = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

/** A top-up whose answer was lost, kept in the tab's session storage: its amount, key and time. */
interface Pending { amount: string; key: string; at: number }

/** How long a lost top-up's key is kept: past it, the same amount is a new top-up. */
const PENDING_MINUTES = 10;

function readPending(name: string): Pending | null {
  try {
    const value = JSON.parse(sessionStorage.getItem(name) ?? "null") as Partial<Pending> | null;
    const fresh = value && typeof value.amount === "string" && typeof value.key === "string" && typeof value.at === "number" && Date.now() - value.at < PENDING_MINUTES * 60_000;
    if (fresh) return { amount: value.amount!, key: value.key!, at: value.at! };
    sessionStorage.removeItem(name);
    return null;
  } catch {
    return null;
  }
}
