/** Words of the console that need no page: tested without a browser. */

/**
 * What each refusal status means to the one who was refused, naming every cause the gateway has
 * for it. "402 credits or the key's spend limit used up" read as "402 credits", and it left out the
 * account's spend limit; a suspended account's 403s were said to be "model not allowed for the key"
 * (a console probe, thirty-sixth session).
 */
const REFUSED: Record<string, string> = {
  "400": "malformed request",
  "401": "key not valid",
  "402": "out of credits, or the account's or a key's spend limit used up",
  "403": "a model the key may not use, or the account suspended",
  "404": "no such model",
  "408": "request body too slow",
  "413": "request too large",
  "422": "empty request",
  "429": "rate limited",
};

/**
 * One account's requests refused before any upstream call, by status, as the usage view says them:
 * "Refused before reaching a model (not charged): 5 — 3 × 402 (out of credits, …), 2 × 429 (rate limited)."
 * Null when none was refused.
 */
export function refusalsSaid(rejected: Record<string, number>): string | null {
  const entries = Object.entries(rejected).filter(([, n]) => n > 0).sort(([a], [b]) => Number(a) - Number(b));
  if (entries.length === 0) return null;
  const total = entries.reduce((sum, [, n]) => sum + n, 0);
  const each = entries.map(([status, n]) => `${n.toLocaleString("en-US")} × ${status}${REFUSED[status] ? ` (${REFUSED[status]})` : ""}`);
  return `Refused before reaching a model (not charged): ${total.toLocaleString("en-US")} — ${each.join(", ")}.`;
}
