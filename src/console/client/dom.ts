/** A few DOM helpers: elements from plain values, text always as text (never HTML). */
import { ApiError } from "./api.ts";

type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, string | number | boolean | ((event: Event) => void) | undefined>;

export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === false) continue;
    if (typeof value === "function") el.addEventListener(name.slice(2).toLowerCase(), value);
    else if (value === true) el.setAttribute(name, "");
    else el.setAttribute(name, String(value));
  }
  for (const child of children) if (child !== null && child !== undefined && child !== false) el.append(typeof child === "number" ? String(child) : child);
  if (tag === "table" && typeof attrs.class === "string" && attrs.class.split(" ").includes("wide")) labelColumns(el as HTMLTableElement);
  // A box that scrolls sideways is reached and scrolled by keyboard too, named by its table's caption (axe: scrollable-region-focusable).
  if (tag === "div" && attrs.class === "scroll") {
    el.tabIndex = 0;
    el.setAttribute("role", "region");
    el.setAttribute("aria-label", el.querySelector("caption")?.textContent || "Table");
  }
  return el;
}

/** A column heading that is not seen (a column of buttons) but still names the column to screen readers. */
export function hiddenHeading(text: string): HTMLTableCellElement {
  return h("th", { scope: "col" }, h("span", { class: "sr-only" }, text));
}

/**
 * Each body cell of a wide table names its column (`data-label`): on a phone the rows stack as
 * cards, each cell under its column's name (console.css), instead of a 930-pixel table scrolled
 * sideways with rows 400 pixels tall.
 */
export function labelColumns(table: HTMLTableElement, rows?: HTMLTableRowElement[]): void {
  const heads = [...(table.tHead?.rows[0]?.cells ?? [])].map((cell) => cell.textContent ?? "");
  // `rows`: rows about to be added to the table (drawn later, on a click), else all its rows.
  for (const row of rows ?? [...table.tBodies, ...(table.tFoot ? [table.tFoot] : [])].flatMap((section) => [...section.rows])) {
    [...row.cells].forEach((cell, i) => heads[i] && cell.setAttribute("data-label", heads[i]!));
  }
}

/** A labelled input: the label names it for screen readers and is what a click focuses. */
export function field(label: string, input: HTMLInputElement | HTMLSelectElement): HTMLElement {
  const id = input.id || `f-${Math.random().toString(36).slice(2, 9)}`;
  input.id = id;
  return h("div", { class: "field" }, h("label", { for: id }, label), input);
}

export function periodSelect(value: string | null, attrs: Attrs = {}): HTMLSelectElement {
  const select = h("select", attrs);
  for (const [v, text] of [["", "lifetime"], ["day", "per day"], ["week", "per week"], ["month", "per month"]] as const) {
    select.append(h("option", { value: v, selected: (value ?? "") === v }, text));
  }
  return select;
}

/**
 * A number field's value: null when empty, else the number; what the browser could not read as a
 * number ("15-", "1e") is refused, where `.value` would be "" and clear a limit the user meant to set.
 */
export function numberOf(input: HTMLInputElement, what: string): number | null {
  if (input.validity.badInput) throw new ApiError(400, `${what} is not a number.`);
  return input.value === "" ? null : Number(input.value);
}

/** A date field's value ("" when empty); a date typed in part is refused rather than read as none. */
export function dateOf(input: HTMLInputElement, what: string): string {
  if (input.validity.badInput) throw new ApiError(400, `${what} is not a whole date.`);
  return input.value;
}

/** Credits as people read them: up to 6 decimals, no trailing zeros. */
export function credits(n: number): string {
  return n.toLocaleString("en-US", { maximumFractionDigits: 6 });
}

/** An amount with its noun: "1 credit", "2.5 credits" ("Added 1 credits." was a probe's finding). */
export function creditsOf(amount: number): string {
  return `${credits(amount)} ${amount === 1 ? "credit" : "credits"}`;
}

export function when(iso: string | null): string {
  return iso ? iso.replace("T", " ").replace(/\.\d+Z$/, " UTC").replace(/Z$/, " UTC") : "—";
}

let hideStatus: ReturnType<typeof setTimeout> | undefined;

/**
 * Says what just happened: to screen readers (the page's polite live region) and, unless `quiet`,
 * on screen too, in a notice at the foot of the view for `ms` (clicks go through it to the page). Said to
 * screen readers alone, a refused top-up ("your change was not made"), a vendor key still refused
 * and "nothing changed" were not seen by anyone else (a console probe in a real browser).
 */
export function announce(text: string, o: { quiet?: boolean; ms?: number } = {}): void {
  const status = document.getElementById("status");
  if (!status) return;
  status.textContent = text;
  clearTimeout(hideStatus);
  const shown = !o.quiet && text !== "";
  status.classList.toggle("shown", shown);
  if (shown) hideStatus = setTimeout(() => status.classList.remove("shown"), o.ms ?? 10_000);
}

/**
 * Puts the notice away before its time (Escape, main.ts): it covers the foot of the page, and a
 * user who has read it has no other way to move it (clicks pass through it).
 */
export function hideNotice(): void {
  clearTimeout(hideStatus);
  document.getElementById("status")?.classList.remove("shown");
}

/**
 * A secret shown once (a new key, an invite link) and not yet copied or put away with Done:
 * `shown`, the element with it; `block`, what holds it with its Copy and Done; `owner`, the account.
 */
export interface HeldSecret { shown: Element; block: Element; what: string; owner: string }
let unsaved: HeldSecret | null = null;

/**
 * Marks a secret the page shows once (null: put away, copied). Leaving the page by its menu, Sign
 * out or the browser lost it without a word: the gateway keeps only its hash, so the key had to be
 * revoked and made again (a console probe).
 */
export function holdSecret(held: HeldSecret | null): void {
  unsaved = held;
}

/** The secret held now (to hold it again when what it was let go for failed: a sign-out without an answer). */
export function secretHeld(): HeldSecret | null {
  return unsaved;
}

/**
 * Moves a held secret of `what` and `owner` into `into` (the same place in a view another change
 * redrew), and keeps it held there; false when there is none.
 */
export function carryHeldSecret(into: Element, what: string, owner: string): boolean {
  if (!unsaved || unsaved.what !== what || unsaved.owner !== owner || unsaved.block === into) return false;
  into.replaceChildren(...Array.from(unsaved.block.childNodes));
  // Said once: an alert moved into each redrawn view was read out again after every change.
  for (const alert of into.querySelectorAll("[role=alert]")) alert.removeAttribute("role");
  unsaved = { ...unsaved, block: into };
  return true;
}

/** Focus back on `button` when it was lost (to the page) while the button was off for its request. */
export function refocus(button: HTMLElement): void {
  if (document.activeElement === null || document.activeElement === document.body) button.focus();
}

/** The secret still on screen that leaving would lose, if any (one a reload of its view replaced is gone already). */
export function secretAtStake(): string | null {
  if (unsaved && !unsaved.shown.isConnected) unsaved = null;
  return unsaved?.what ?? null;
}

/** True when the page may go elsewhere: no secret is at stake, or the user said to leave it. */
export function mayLeave(): boolean {
  const what = secretAtStake();
  if (what === null) return true;
  if (!window.confirm(`Leave without your ${what}? It is shown only once: after you leave, it cannot be shown again.`)) return false;
  unsaved = null;
  return true;
}

/**
 * What a change that failed says: the gateway's own words when it answered. When it did not (no
 * answer: a dropped connection, the gateway down; or a proxy's 502/504 without the gateway's
 * words), the change may or may not have been made, and `unsure` says what to do about it
 * ("Something went wrong." left a user to guess, and a second try could do it twice).
 */
export function failure(err: unknown, unsure = "your change may or may not have been made: reload to see, and make it again if it was not."): string {
  if (err instanceof ApiError && err.gatewaySaid && !unfinished(err)) return err.message;
  // The gateway's own 5xx (its database unusable for a moment: 503) leaves the change's fate as
  // unknown as no answer does: its first sentence says why; its advice is the API's (a top-up
  // "retry with the same Idempotency-Key", which a console user cannot do), so the form's is said.
  if (err instanceof ApiError && err.gatewaySaid) return `${firstSentence(err.message)} So ${unsure}`;
  return `The gateway did not answer${err instanceof ApiError && err.status > 0 ? ` (${err.status})` : ""}, so ${unsure}`;
}

/** A change the gateway answered with a 5xx of its own: refused or made, it cannot say. */
export function unfinished(err: ApiError): boolean {
  return err.status >= 500;
}

function firstSentence(text: string): string {
  return /^.*?[.!?](?=\s|$)/.exec(text)?.[0] ?? text;
}

export function errorBox(message: string, testid?: string): HTMLElement {
  return h("p", { class: "error", role: "alert", "data-testid": testid }, message);
}

/** How long an armed button waits before a click confirms it (a double click's clicks are ~100 ms apart; a person reading "Confirm" takes longer). */
const CONFIRM_AFTER_MS = 500;

/**
 * A button whose action cannot be undone (revoking a key, removing a login), or stops a tenant at
 * once (suspending an account), asks once more: the first click turns it into "Confirm …" for a
 * few seconds (and says so to screen readers, with `consequence`), the second does it. No dialog:
 * one stays on the page, by keyboard as by mouse.
 */
export function confirmFirst(button: HTMLButtonElement, what: string, run: () => void, armedMs = 5_000, consequence = "This cannot be undone."): void {
  const label = button.textContent ?? "";
  const name = button.getAttribute("aria-label");
  let timer: ReturnType<typeof setTimeout> | undefined;
  let armedAt = 0;
  const disarm = () => {
    clearTimeout(timer);
    timer = undefined;
    button.textContent = label;
    if (name) button.setAttribute("aria-label", name);
    button.removeAttribute("data-armed");
  };
  button.addEventListener("click", () => {
    if (timer === undefined) {
      button.textContent = `Confirm ${label.toLowerCase()}`;
      button.setAttribute("aria-label", `Confirm: ${what}. ${consequence}`);
      button.setAttribute("data-armed", "");
      announce(`Press again to ${what.charAt(0).toLowerCase()}${what.slice(1)}. ${consequence}`);
      timer = setTimeout(disarm, armedMs);
      armedAt = performance.now();
      return;
    }
    // The confirming click is one of its own: a double click's second click, or Enter held down
    // (its clicks repeat many times a second), comes within moments of the first and would do at
    // once what the first only armed (a double click revoked a key; a console probe).
    if (performance.now() - armedAt < CONFIRM_AFTER_MS) return;
    disarm();
    run();
  });
  // Enter or Space held down repeats: its repeats are not a click of their own, however long it is held.
  button.addEventListener("keydown", (e) => {
    if (e.repeat && (e.key === "Enter" || e.key === " ")) e.preventDefault();
  });
  // Escape takes an armed button back at once (it disarmed only after its 5 seconds).
  button.addEventListener("keydown", (e) => {
    if (e.key !== "Escape" || timer === undefined) return;
    e.preventDefault();
    disarm();
    announce(`Not done: ${what.charAt(0).toLowerCase()}${what.slice(1)}.`);
  });
}
