import { api, ApiError, type Account, type KeySummary, type Session } from "./api.ts";
import { announce, credits, errorBox, field, h, periodSelect, when } from "./dom.ts";

/**
 * One account: balance, keys (create, revoke, per-key limits) and, for operators, top-up, the
 * account's limit and invites. The data is one request (`GET /accounts/:id`, or the overview's).
 */
export function accountView(session: Session, account: Account, reload: () => void): HTMLElement {
  const operator = session.kind === "operator";
  const root = h("section", { "aria-labelledby": "account-title" });
  root.append(
    h("h1", { id: "account-title" }, ...(operator ? ["Account ", h("bdi", {}, account.name)] : ["Your account"])),
    h("dl", { class: "facts" },
      h("dt", {}, "Balance"), h("dd", {}, h("span", { "data-testid": "balance" }, credits(account.balance)), " credits"),
      h("dt", {}, "Held by requests in flight"), h("dd", {}, `${credits(account.reserved)} credits`),
      h("dt", {}, "Spend limit"), h("dd", { "data-testid": "account-limit" }, limitText(account.spend_limit, account.spend_limit_period, account.spent_in_period, account.period_resets_at)),
      h("dt", {}, "Account id"), h("dd", {}, h("code", {}, account.id)),
    ),
  );
  if (operator) root.append(topUpForm(account, reload), accountLimitForm(account, reload), inviteForm(account));
  root.append(keysSection(session, account, reload));
  return root;
}

/** A spend limit as people read it: how much, per what, what the period spent so far, and when it starts again. */
function limitText(limit: number | null, period: string | null, spent: number, resetsAt: string | null): string {
  if (limit === null) return "none";
  const per = period ? `per ${period}` : "over its life";
  return `${credits(limit)} credits ${per} (${credits(spent)} spent${resetsAt ? `; resets ${when(resetsAt)}` : ""})`;
}

/** A key's state: revoked, expired (the gateway refuses it from then), or active. */
function keyStatus(k: KeySummary, now = Date.now()): { text: string; active: boolean } {
  if (k.revoked_at !== null) return { text: `revoked ${when(k.revoked_at)}`, active: false };
  if (k.expires_at !== null && Date.parse(k.expires_at) <= now) return { text: `expired ${when(k.expires_at)}`, active: false };
  return { text: k.expires_at ? `active until ${when(k.expires_at)}` : "active", active: true };
}

/** A form whose submit runs `action`; failures show in the form, never as a stack. */
function form(title: string, fields: HTMLElement[], submit: HTMLButtonElement, action: () => Promise<void>): HTMLElement {
  const out = h("div", { class: "form-out" });
  const el = h("form", { class: "card", "aria-label": title }, h("h2", {}, title), ...fields, submit, out);
  el.addEventListener("submit", async (event) => {
    event.preventDefault();
    out.replaceChildren();
    submit.disabled = true;
    try {
      await action();
    } catch (err) {
      out.append(errorBox(err instanceof ApiError ? err.message : "Something went wrong."));
    } finally {
      submit.disabled = false;
    }
  });
  return el;
}

function topUpForm(account: Account, reload: () => void): HTMLElement {
  const amount = h("input", { type: "number", min: "0.000001", step: "any", required: true, inputmode: "decimal", "data-testid": "topup-amount" });
  const submit = h("button", { type: "submit", "data-testid": "topup-submit" }, "Add credits");
  return form("Top up", [field("Credits to add", amount)], submit, async () => {
    await api("POST", `/accounts/${account.id}/credits`, { amount: Number(amount.value) });
    announce(`Added ${amount.value} credits.`);
    reload();
  });
}

function accountLimitForm(account: Account, reload: () => void): HTMLElement {
  const limit = h("input", { type: "number", min: "0", step: "any", value: account.spend_limit ?? "", placeholder: "none" });
  const period = periodSelect(account.spend_limit_period);
  const submit = h("button", { type: "submit" }, "Save limit");
  return form("Account spend limit", [field("Limit in credits (empty: none)", limit), field("Period", period)], submit, async () => {
    await api("PATCH", `/accounts/${account.id}`, { spend_limit: limit.value === "" ? null : Number(limit.value), spend_limit_period: period.value || null });
    announce("Limit saved.");
    reload();
  });
}

function inviteForm(account: Account): HTMLElement {
  const login = h("input", { type: "text", required: true, autocomplete: "off", pattern: "[A-Za-z0-9._@\\-]{3,64}", "data-testid": "invite-login" });
  const submit = h("button", { type: "submit", "data-testid": "invite-submit" }, "Make invite link");
  const shown = h("div", {});
  const el = form("Invite the account holder", [field("Login they will sign in with", login), shown], submit, async () => {
    const invite = await api<{ url: string; expires_at: string }>("POST", `/accounts/${account.id}/invites`, { login: login.value });
    shown.replaceChildren(h("p", {}, "Send this link to them; it works once, until ", when(invite.expires_at), ":"), h("p", {}, h("code", { class: "secret", "data-testid": "invite-url" }, invite.url)));
    announce("Invite link made.");
  });
  return el;
}

function keysSection(session: Session, account: Account, reload: () => void): HTMLElement {
  const operator = session.kind === "operator";
  // What the gateway counts against the ten: keys not revoked (an expired one still counts until revoked).
  const active = account.keys.filter((k) => k.revoked_at === null);
  const name = h("input", { type: "text", maxlength: "200", "data-testid": "key-name" });
  const limit = h("input", { type: "number", min: "0", step: "any", placeholder: "none" });
  const period = periodSelect(null);
  const rpm = h("input", { type: "number", min: "1", step: "1", placeholder: "gateway default" });
  const models = h("input", { type: "text", placeholder: "every model", "data-testid": "key-models" });
  const secret = h("div", {});
  const submit = h("button", { type: "submit", "data-testid": "key-create", disabled: active.length >= 10 }, "Create key");
  const create = form("New key", [field("Name", name), field("Spend limit in credits (empty: none)", limit), field("Period", period), ...(operator ? [field("Requests per minute", rpm), field("Only these models (ids or prefix*, comma-separated)", models)] : []), secret], submit, async () => {
    const body: Record<string, unknown> = { name: name.value || undefined };
    if (limit.value !== "") body.spend_limit = Number(limit.value);
    if (period.value) body.spend_limit_period = period.value;
    if (operator && rpm.value !== "") body.rate_limit_per_minute = Number(rpm.value);
    if (operator && models.value.trim() !== "") body.models = models.value.split(",").map((m) => m.trim()).filter((m) => m !== "");
    const key = await api<{ id: string; key: string }>("POST", `/accounts/${account.id}/keys`, body);
    // The key is shown here once: the gateway keeps only its hash.
    const copy = h("button", { type: "button" }, "Copy");
    copy.addEventListener("click", () => void navigator.clipboard?.writeText(key.key).then(() => announce("Key copied.")));
    secret.replaceChildren(h("div", { class: "notice", role: "alert" },
      h("p", {}, "Your new key — copy it now, it is not shown again:"),
      h("p", {}, h("code", { class: "secret", "data-testid": "key-secret" }, key.key), " ", copy),
      h("button", { type: "button", "data-testid": "key-secret-done" }, "Done"),
    ));
    secret.querySelector<HTMLButtonElement>("[data-testid=key-secret-done]")!.addEventListener("click", () => reload());
    announce("Key created. It is shown once.");
  });
  const table = h("table", {},
    h("caption", {}, `Keys (${active.length} of 10 active)`),
    h("thead", {}, h("tr", {}, ...["Name", "Key", "Created", "Spent (all time)", "Limit", "Status", ""].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, ...account.keys.map((k) => keyRow(k, reload))),
  );
  return h("section", { "aria-labelledby": "keys-title" }, h("h2", { id: "keys-title" }, "Keys"), h("div", { class: "scroll" }, table), create);
}

function keyRow(k: KeySummary, reload: () => void): HTMLElement {
  const revoked = k.revoked_at !== null;
  const label = k.name ?? `${k.prefix}…${k.last4}`;
  const actions = h("td", {});
  if (!revoked) {
    const rename = h("input", { type: "text", maxlength: "200", value: k.name ?? "", placeholder: "no name", "aria-label": `Name of ${label}`, "data-testid": "key-rename" });
    // A day the key stops working at its start (UTC); empty: it does not expire.
    const lastDay = k.expires_at ? new Date(Date.parse(k.expires_at) - 1).toISOString().slice(0, 10) : "";
    const expires = h("input", { type: "date", value: lastDay, "aria-label": `Last day of ${label} (UTC; empty: no end)`, "data-testid": "key-expires" });
    const limit = h("input", { type: "number", min: "0", step: "any", value: k.spend_limit ?? "", placeholder: "none", "aria-label": `Spend limit of ${label}` });
    const period = periodSelect(k.spend_limit_period, { "aria-label": `Period of ${label}'s limit` });
    const save = h("button", { type: "button", "data-testid": "key-save" }, "Save");
    const revoke = h("button", { type: "button", class: "danger", "data-testid": "key-revoke", "aria-label": `Revoke ${label}` }, "Revoke");
    const out = h("div", { class: "form-out" });
    /**
     * A row's action, as the forms do theirs: its buttons wait while it runs, and a refusal is
     * shown in the row (a session that ended goes back to sign-in), never an unseen rejection.
     */
    const act = (button: HTMLButtonElement, run: () => Promise<void>) => async () => {
      out.replaceChildren();
      save.disabled = revoke.disabled = true;
      try {
        await run();
        reload();
      } catch (err) {
        if (err instanceof ApiError && err.status === 401) return reload();
        out.append(errorBox(err instanceof ApiError ? err.message : "Something went wrong.", "key-error"));
        button.focus();
      } finally {
        save.disabled = revoke.disabled = false;
      }
    };
    save.addEventListener("click", act(save, async () => {
      const value = limit.value === "" ? null : Number(limit.value);
      // Outside a form the browser does not hold the field to its `min`: said here, before asking.
      if (value !== null && !(value >= 0)) throw new ApiError(400, "A spend limit is a number of credits, 0 or more (empty: none).");
      const name = rename.value.trim();
      // The last day counts whole: the key stops at the start of the next one (UTC).
      const until = expires.value === "" ? null : new Date(Date.parse(`${expires.value}T00:00:00Z`) + 86_400_000).toISOString();
      const changes: Record<string, unknown> = { spend_limit: value, spend_limit_period: period.value || null };
      if (name !== (k.name ?? "")) changes.name = name === "" ? null : name;
      if (expires.value !== lastDay) changes.expires_at = until;
      await api("PATCH", `/keys/${k.id}`, changes);
      announce(`${label} saved.`);
    }));
    revoke.addEventListener("click", act(revoke, async () => {
      await api("DELETE", `/keys/${k.id}`);
      announce(`${label} revoked.`);
    }));
    actions.append(h("span", { class: "inline" }, rename, expires, limit, period, save), " ", revoke, out);
  }
  return h("tr", { "data-testid": "key-row", "data-key-id": k.id },
    h("td", {}, k.name === null ? "—" : h("bdi", {}, k.name), k.models ? h("div", { class: "note" }, `only ${k.models.join(", ")}`) : null),
    h("td", {}, h("code", {}, `${k.prefix}…${k.last4}`)),
    h("td", {}, when(k.created_at)),
    h("td", { class: "num" }, credits(k.spent)),
    h("td", { "data-testid": "key-limit" }, limitText(k.spend_limit, k.spend_limit_period, k.spent_in_period, k.period_resets_at)),
    h("td", { "data-testid": "key-status" }, keyStatus(k).text),
    actions,
  );
}
