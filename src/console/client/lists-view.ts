import { vendorKeysSaid } from "./vendor-keys-said.ts";
import { latencySaid } from "./latency-said.ts";
import { api, type AccountPage, type CatalogueEntry, type RecentRequest, type Session, type VendorKey } from "./api.ts";
import { announce, credits, errorBox, failure, field, h, hiddenHeading, refocus, when } from "./dom.ts";

/**
 * Operators: accounts, a page of 100 at a time (oldest first) with the next one a click away, a
 * search by name, and a form to make one. `query` is what this page was asked with.
 */
export function accountsView(page: AccountPage, open: (id: string) => void, reload: () => void, query: { name: string; cursor: string | null }, browse: (query: { name: string; cursor: string | null }) => void): HTMLElement {
  // dir=auto: a name in Hebrew or Arabic is typed right to left, as the list shows it (bdi).
  const name = h("input", { type: "text", dir: "auto", required: true, maxlength: "200", "data-testid": "account-name" });
  // The API's own bounds, so the browser says what is wrong where it is typed, not a schema's words after a round trip.
  const amount = h("input", { type: "number", min: "0", max: "1000000000", step: "any", value: "0", required: true, "data-testid": "account-credits" });
  const submit = h("button", { type: "submit", "data-testid": "account-create" }, "Create account");
  const out = h("div", {});
  const create = h("form", { class: "card", "aria-label": "New account" }, h("h2", {}, "New account"), field("Name", name), field("Opening credits", amount), submit, out);
  create.addEventListener("input", () => out.replaceChildren());
  create.addEventListener("submit", async (event) => {
    event.preventDefault();
    // One account per click: a double click or a second Enter made two (the button is off until the answer).
    if (submit.disabled) return;
    out.replaceChildren();
    submit.disabled = true;
    try {
      const made = await api<{ id: string }>("POST", "/accounts", { name: name.value, credits: Number(amount.value) });
      announce(`Account ${name.value} created.`);
      // The button stays off: this view is left for the new account's, and a click while that one
      // loads (a slow link) would make a second account.
      open(made.id);
    } catch (err) {
      out.append(errorBox(failure(err, "the account may or may not have been made: reload and look for it before creating it again.")));
      submit.disabled = false;
      refocus(submit);
    }
  });
  const rows = page.data.map((a) =>
    h("tr", { "data-testid": "account-row", "data-account-id": a.id },
      h("td", { class: "name" }, h("a", { href: `#account/${a.id}` }, h("bdi", {}, a.name)), a.suspended_at ? h("span", { class: "note", "data-testid": "account-suspended-mark" }, " (suspended)") : null),
      h("td", { class: "num" }, credits(a.balance)),
      h("td", {}, a.spend_limit === null ? "none" : `${credits(a.spend_limit)} ${a.spend_limit_period ? `per ${a.spend_limit_period}` : "lifetime"}`),
      h("td", {}, when(a.created_at)),
    ));
  void reload;
  const search = h("input", { type: "search", dir: "auto", maxlength: "200", value: query.name, "data-testid": "account-search" });
  const find = h("form", { class: "controls", role: "search", "aria-label": "Find accounts" }, field("Name contains", search), h("button", { type: "submit" }, "Find"));
  find.addEventListener("submit", (event) => {
    event.preventDefault();
    browse({ name: search.value.trim(), cursor: null });
  });
  const paging = h("p", { class: "controls" });
  if (query.cursor) {
    const first = h("button", { type: "button", "data-testid": "accounts-first" }, "First page");
    first.addEventListener("click", () => browse({ name: query.name, cursor: null }));
    paging.append(first);
  }
  if (page.next_cursor) {
    const next = h("button", { type: "button", "data-testid": "accounts-next" }, "Next page");
    next.addEventListener("click", () => browse({ name: query.name, cursor: page.next_cursor }));
    paging.append(next);
  }
  const what = `${page.data.length} account${page.data.length === 1 ? "" : "s"}${query.name ? ` named like “${query.name}”` : ""}${query.cursor || page.next_cursor ? (query.cursor ? " (a later page)" : " (first page)") : ""}`;
  return h("section", { "aria-labelledby": "accounts-title" },
    h("h1", { id: "accounts-title" }, "Accounts"),
    find,
    h("div", { class: "scroll" }, h("table", {}, h("caption", { "data-testid": "accounts-caption" }, what),
      h("thead", {}, h("tr", {}, ...["Name", "Balance (credits)", "Spend limit", "Created"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, ...rows))),
    paging,
    create,
  );
}

/** The latest requests: who, what, how it went and what it cost — never what was asked or answered. */
export function requestsView(session: Session, rows: RecentRequest[], accountId?: string, accountName?: string): HTMLElement {
  // "Ended": a record is written, and dated, when its request ends. Headed "Time", a 10-second
  // stream sent at 06:48:22 was listed at 06:48:33, and two sent together at different times (a
  // console probe, thirty-sixth session); the list is newest first by it.
  const cols = ["Ended", ...(session.kind === "operator" ? ["Account"] : []), "Key", "Model", "Status", "Duration (ms)", "Tokens in", "Tokens out", "Credits", "Request id"];
  // Refusals before any model (402, 429…) have no record: said to a holder, with where their
  // account's are counted. A holder whose requests all got 402 read "No requests yet" here and
  // nothing else (a console probe). The operator's Usage spans accounts and does not count them.
  const refusals = session.kind === "operator" ? null : h("p", { class: "note", "data-testid": "requests-refusals" }, "Requests refused before reaching a model (402 out of credits or over a spend limit, 429 too many, …) are not listed here: ", h("a", { href: "#usage" }, "Usage"), " counts them by status.");
  // One account's, for an operator: named in the title, with the way back to every account's.
  const title = accountId
    ? h("h1", { id: "requests-title" }, "Recent requests of ", h("bdi", {}, accountName || rows[0]?.account_name || accountId))
    : h("h1", { id: "requests-title" }, "Recent requests");
  const scope = accountId ? h("p", {}, h("a", { href: `#account/${accountId}` }, "The account"), " · ", h("a", { href: "#requests", "data-testid": "requests-all" }, "Every account's requests")) : null;
  // None yet: said in words, not a caption of "The last 0 requests" over an empty table.
  if (rows.length === 0) {
    return h("section", { "aria-labelledby": "requests-title" },
      title,
      scope,
      h("p", { "data-testid": "requests-empty" }, accountId ? "No requests of this account yet." : session.kind === "operator" ? "No requests yet: each request made with a key shows here, newest first." : "No requests yet: each request made with your account's keys shows here, newest first."),
      refusals);
  }
  return h("section", { "aria-labelledby": "requests-title" },
    title,
    scope,
    h("p", {}, h("a", { href: `/console/api/requests?format=csv&limit=200${accountId ? `&account_id=${encodeURIComponent(accountId)}` : ""}`, download: "" }, "Download CSV (last 200)")),
    refusals,
    // Not the Models view's latency (to the first byte): a request's whole time, to its last byte
    // or its cut, which two views calling both "latency" hid (a console probe).
    h("p", { class: "note" }, "Ended is when each request ended; Duration is its whole time, from its arrival to its end (a stream cut short: to its cut), so it arrived that long before."),
    h("div", { class: "scroll" }, h("table", { class: "wide" }, h("caption", {}, rows.length === 1 ? "The last request" : `The last ${rows.length} requests, newest first`),
      h("thead", {}, h("tr", {}, ...cols.map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, ...rows.map((r) => h("tr", { "data-testid": "request-row" },
        h("td", {}, when(r.created_at)),
        // Names as people know them, the id under each (names may repeat; a 401's key has none).
        ...(session.kind === "operator" ? [h("td", { class: "name" }, h("a", { href: `#account/${r.account_id}` }, named(r.account_name, r.account_id)))] : []),
        h("td", { class: "name" }, named(r.key_name, r.key_id)),
        h("td", {}, r.model),
        h("td", {}, r.status),
        h("td", { class: "num" }, r.latency_ms),
        h("td", { class: "num" }, tokensIn(r)),
        h("td", { class: "num" }, r.completion_tokens.toLocaleString("en-US")),
        h("td", { class: "num" }, credits(r.cost)),
        h("td", {}, h("code", {}, r.request_id)),
      ))))),
  );
}

/**
 * A request's prompt with the part read from or written to the vendor's cache under it: those are
 * billed at their own prices (Models), so "3600 tokens in" for 0.003375 credits at 3 a million did
 * not add up until the 3,000 cache reads were said (a console probe).
 */
function tokensIn(r: RecentRequest): HTMLElement | string {
  const total = r.prompt_tokens.toLocaleString("en-US");
  const parts = [
    [r.cache_read_tokens, "cache read"],
    [r.cache_write_5m_tokens, "cache write (5 min)"],
    [r.cache_write_1h_tokens, "cache write (1 h)"],
  ].filter(([n]) => (n as number) > 0).map(([n, what]) => `${(n as number).toLocaleString("en-US")} ${what}`);
  // Counts the vendor did not give (an answer cut short) are the gateway's, and billed as such.
  const estimated = r.estimated ? h("span", { class: "note part", "data-testid": "request-estimated" }, "in and out estimated by the gateway (the vendor sent no count)") : null;
  if (parts.length === 0 && !estimated) return total;
  return h("span", { "data-testid": "request-cached" }, total, parts.length > 0 ? h("span", { class: "note part" }, `of which ${parts.join(", ")}`) : null, estimated);
}

const pct = (x: number | null) => (x === null ? "—" : `${(x * 100).toFixed(1)} %`);
const ms = (x: number | null) => (x === null ? "—" : `${x.toLocaleString("en-US")} ms`);

/** A vendor key's state as an operator reads it: what it does now, and until when. */
function vendorKeyState(k: VendorKey): string {
  if (k.state === "cooling") return `cooling (the vendor limited its rate): back ${when(k.until ?? null)}`;
  if (k.state === "disabled") {
    const since = `set aside (the vendor refused it) since ${when(k.since ?? null)}`;
    // A provider's only key is not checked on a schedule: its requests still try it.
    return k.next_probe ? `${since}; next check ${when(k.next_probe)}` : `${since}; the provider's only key, so its requests still try it, and the first that succeeds brings it back`;
  }
  // Vendors limit rates per model: the key still serves the other models meanwhile.
  if (k.models_cooling && k.models_cooling.length > 0) return `in use; cooling for ${k.models_cooling.map((m) => `${m.model} (the vendor limited its rate): back ${when(m.until)}`).join("; ")}`;
  return "in use";
}

/**
 * The pooled vendor keys, by the environment variable that holds each (never its value): a key
 * cooling or set aside is why a provider's models fail or slow, and the operator saw it only in
 * the admin API (a console probe). Those not in use first.
 */
function vendorKeysSection(keys: VendorKey[], reload: (focus?: string) => void): HTMLElement {
  const out = keys.filter((k) => k.state !== "usable");
  const said = vendorKeysSaid(keys);
  const rows = [...out, ...keys.filter((k) => k.state === "usable")];
  return h("section", { "aria-labelledby": "vendor-keys-title" },
    h("h2", { id: "vendor-keys-title", tabindex: "-1" }, "Vendor keys"),
    h("p", { "data-testid": "vendor-keys-said" }, said, out.length > 0 ? " A key set aside is checked again by itself; Check now asks the vendor at once (after its billing was fixed, say)." : ""),
    // Stacked as cards on a phone, as every wide table: a key's state ran one word a line beside it.
    keys.length === 0 ? null : h("div", { class: "scroll" }, h("table", { class: "wide fit" }, h("caption", {}, "Vendor keys by the variable that holds each"),
      h("thead", {}, h("tr", {}, ...["Provider", "Key (variable)", "State"].map((c) => h("th", { scope: "col" }, c)), hiddenHeading("Actions"))),
      h("tbody", {}, ...rows.map((k) => h("tr", { "data-testid": "vendor-key-row", "data-state": k.state },
        h("td", {}, k.provider), h("td", {}, h("code", {}, k.key)), h("td", { class: k.state === "usable" ? undefined : "error" }, vendorKeyState(k)),
        h("td", {}, k.state === "usable" ? null : checkNow(k, reload)),
      ))))));
}

/** Asks the vendor about a key at once (the admin API's probe); the view is read again with its outcome. */
function checkNow(k: VendorKey, reload: (focus?: string) => void): HTMLElement {
  const button = h("button", { type: "button", "data-testid": "vendor-key-check", "aria-label": `Check ${k.provider} ${k.key} now` }, "Check now");
  const out = h("span", { class: "form-out" });
  button.addEventListener("click", async () => {
    button.disabled = true;
    out.replaceChildren();
    try {
      const probed = await api<{ accepted: boolean }>("POST", `/vendor-keys/${encodeURIComponent(k.provider)}/${encodeURIComponent(k.key)}/probe`);
      announce(probed.accepted ? `${k.key} is in use again.` : `The vendor still refuses ${k.key}.`);
      reload("#vendor-keys-title");
    } catch (err) {
      out.append(errorBox(failure(err, "reload to see the key's state.")));
      button.disabled = false;
      refocus(button);
    }
  });
  return h("span", {}, button, " ", out);
}

/** Operators: the models, their prices (credits per million tokens) and recent health; the vendor keys' states. */
export function catalogueView(models: CatalogueEntry[], vendorKeys: VendorKey[], reload: (focus?: string) => void): HTMLElement {
  const since = models.find((m) => m.health)?.health?.since;
  return h("section", { "aria-labelledby": "catalogue-title" },
    h("h1", { id: "catalogue-title" }, "Models"),
    h("p", {}, "Prices in credits per million tokens. Health counts this gateway process's answers", since ? ` since ${when(since)}` : "", "; latency is the time to the first byte."),
    h("div", { class: "scroll" }, h("table", { class: "wide" }, h("caption", {}, models.length === 1 ? "1 model" : `${models.length} models`),
      h("thead", {}, h("tr", {}, ...["Model", "Provider", "Kind", ...PRICE_COLUMNS, "Requests", "Errors", "p50", "p99"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, ...models.map((m) => h("tr", { "data-testid": "model-row" },
        h("th", { scope: "row" }, m.id),
        h("td", {}, m.provider ?? ""),
        h("td", {}, m.category),
        ...priceCells(m),
        h("td", { class: "num" }, m.health?.requests ?? 0),
        h("td", { class: "num" }, pct(m.health?.error_rate ?? null)),
        h("td", { class: "num", "data-testid": "model-p50" }, latencySaid(m.health?.latency_p50_ms ?? null, m.health?.latency_floor_ms)),
        h("td", { class: "num", "data-testid": "model-p99" }, latencySaid(m.health?.latency_p99_ms ?? null, m.health?.latency_floor_ms)),
      ))))),
    longContextPrices(models),
    vendorKeysSection(vendorKeys, reload),
  );
}

/**
 * The price columns' headings and a model's cells (credits per million tokens, or per image). The
 * long-lived writes are Anthropic's 1-hour ones and OpenAI's 12-hour ones (its 30-minute writes are
 * the short column's): one class, one price each model.
 */
const PRICE_COLUMNS = ["Input", "Output", "Cache read", "Cache write (5 min)", "Cache write (1 h / 12 h)", "Per image"];
function priceCells(m: CatalogueEntry): HTMLElement[] {
  return [
    h("td", { class: "num" }, m.pricing ? credits(m.pricing.input_per_mtok) : "free"),
    h("td", { class: "num" }, m.pricing ? credits(m.pricing.output_per_mtok) : "free"),
    h("td", { class: "num" }, m.pricing?.cache_read_per_mtok !== undefined ? credits(m.pricing.cache_read_per_mtok) : "—"),
    h("td", { class: "num" }, m.pricing?.cache_write_per_mtok !== undefined ? credits(m.pricing.cache_write_per_mtok) : "—"),
    h("td", { class: "num" }, m.pricing?.cache_write_1h_per_mtok !== undefined ? credits(m.pricing.cache_write_1h_per_mtok) : "—"),
    h("td", { class: "num" }, m.pricing?.per_image ? credits(m.pricing.per_image) : "—"),
  ];
}

/**
 * The prices a model bills a long prompt at (Claude Sonnet 4 above 200,000 tokens, GPT-5.5 above
 * 272,000: the whole request at them), under the table. The table showed the base prices only, so a
 * holder whose prompt passed the threshold paid twice the input price the page said (a console probe).
 */
function longContextPrices(models: CatalogueEntry[]): HTMLElement | null {
  const long = models.flatMap((m) => (m.pricing?.long_context ? [{ id: m.id, p: m.pricing.long_context }] : []));
  if (long.length === 0) return null;
  const price = (label: string, v: number | undefined) => (v === undefined ? [] : [`${label} ${credits(v)}`]);
  return h("div", { "data-testid": "long-context-prices" },
    h("h2", {}, "Prices for long prompts"),
    h("p", {}, "A request whose prompt (fresh input, cache reads and writes together) is longer than the length named is billed at these prices instead of those above, all of its tokens (credits per million):"),
    h("ul", {}, ...long.map(({ id, p }) => h("li", { "data-testid": "long-context-price" },
      h("strong", {}, id), ` above ${p.above_tokens.toLocaleString("en-US")} prompt tokens: `,
      [...price("input", p.input_per_mtok), ...price("output", p.output_per_mtok), ...price("cache read", p.cache_read_per_mtok), ...price("cache write (5 min)", p.cache_write_per_mtok), ...price("cache write (1 h)", p.cache_write_1h_per_mtok)].join(", "), "."))));
}

/**
 * Holders: what each model costs. They pay by these prices and the console showed them nowhere
 * (the Models view was the operator's, for its health figures): a bill could not be checked or a
 * model chosen by its price without asking the operator (a console probe).
 */
export function pricesView(models: CatalogueEntry[]): HTMLElement {
  return h("section", { "aria-labelledby": "catalogue-title" },
    h("h1", { id: "catalogue-title" }, "Models and prices"),
    h("p", {}, "Credits per million tokens of each kind (per image for image models): a request costs its tokens at these prices, as Usage counts them. A key limited to some models says so in its row."),
    h("div", { class: "scroll" }, h("table", { class: "wide" }, h("caption", {}, models.length === 1 ? "1 model" : `${models.length} models`),
      h("thead", {}, h("tr", {}, ...["Model", "Kind", "Context (tokens)", ...PRICE_COLUMNS].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, ...models.map((m) => h("tr", { "data-testid": "model-row" },
        h("th", { scope: "row" }, m.id),
        h("td", {}, m.category),
        h("td", { class: "num" }, m.context_length.toLocaleString("en-US")),
        ...priceCells(m),
      ))))),
    longContextPrices(models));
}

/** A name over its id, or the id alone when there is no name. */
function named(name: string | null, id: string): HTMLElement {
  if (!name) return h("code", {}, id || "—");
  return h("span", {}, h("bdi", {}, name), h("br", {}), h("code", { class: "note" }, id));
}
