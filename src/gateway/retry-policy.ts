/**
 * What to do after an upstream refused: pure functions of the status, the headers and `now`.
 */
export type Verdict =
  /** The same model may answer if asked again (429, 503, 529). */
  | "retry"
  /** This model cannot answer now; the next one in the list may (other 5xx, 401/403/404 of our vendor key or config). */
  | "fallback"
  /** The request itself is wrong (400, 413, 422): no other model will like it better. */
  | "fail";

export function verdictFor(status: number): Verdict {
  if (status === 429 || status === 503 || status === 529) return "retry";
  if (status === 400 || status === 413 || status === 422) return "fail";
  return "fallback";
}

/**
 * The wait the upstream asked for, in ms: `retry-after-ms` (OpenAI), else `Retry-After` as
 * seconds or an HTTP date. Undefined when it asked for nothing usable, and when it asked for no
 * wait at all (0, or a date already past): both SDKs read such a wait as none told and back off
 * (openai-node and anthropic-sdk-typescript use it only when `0 < wait < 60 s`). Taken as "now",
 * a 429 saying `retry-after: 0`, or a date from a clock behind ours, was asked again at once
 * `max_retries` times, and cooled its pooled key for 0 ms (a raw-TCP probe, twenty-first session).
 */
export function requestedDelayMs(headers: Headers, now: number): number | undefined {
  const ms = toldWaitMs(headers, now);
  return ms !== undefined && ms > 0 ? ms : undefined;
}

function toldWaitMs(headers: Headers, now: number): number | undefined {
  // A header sent twice reads as its values joined by ", " ("3, 3"): the first one counts.
  // A `retry-after-ms: 0` leaves the word to `Retry-After`, as the openai SDK reads them.
  const ms = FIRST_NUMBER.exec(headers.get("retry-after-ms") ?? "");
  if (ms && Number(ms[1]) > 0) return Math.ceil(Number(ms[1]));
  const value = headers.get("retry-after");
  if (!value) return undefined;
  const seconds = FIRST_NUMBER.exec(value);
  if (seconds) return Math.ceil(Number(seconds[1]) * 1000);
  // Only an HTTP date (RFC 9110 §5.6.7: IMF-fixdate, and the obsolete RFC 850 and asctime forms a
  // recipient must still read) is read as one: `Date.parse` takes almost anything ("3, 3" was
  // 3 March 2001, a wait of nothing). asctime has no zone; it is GMT.
  const date = HTTP_DATE.exec(value);
  const at = date ? Date.parse(date[2] ? `${date[0]} GMT` : date[0]) : Number.NaN;
  return Number.isFinite(at) ? at - now : undefined;
}

/** A non-negative number, alone or first of a repeated header's values. */
const FIRST_NUMBER = /^\s*(\d+(?:\.\d+)?)\s*(?:,|$)/;
/**
 * `Sun, 06 Nov 1994 08:49:37 GMT`, `Sunday, 06-Nov-94 08:49:37 GMT` or `Sun Nov  6 08:49:37 1994`
 * (group 2: asctime), alone or first of a repeated header's values.
 */
const HTTP_DATE = /^\s*(?:[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT|[A-Z][a-z]{5,8}, \d{2}-[A-Z][a-z]{2}-\d{2} \d{2}:\d{2}:\d{2} GMT|([A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4}))/;

/** Exponential backoff with full jitter: base·2^attempt, capped, times a random factor in [0.5, 1). */
export function backoffMs(attempt: number, random: number, baseMs = 250, capMs = 4_000): number {
  return Math.round(Math.min(capMs, baseMs * 2 ** attempt) * (0.5 + random / 2));
}

/** After a refused attempt: ask the same model again after `delayMs`, try the next model, or give up. */
export type NextStep = { action: "retry"; delayMs: number } | { action: "next" } | { action: "fail" };

/**
 * The retry policy as one pure decision: `retry` counts the retries of this model so far,
 * `waitedMs` what the request has waited on retries in all. A wait the upstream asks for is
 * honoured; one longer than what is left of `maxWaitMs` is better spent on the next model.
 */
export function nextStep(
  refusal: { verdict: Verdict; delayMs?: number },
  retry: number,
  waitedMs: number,
  limits: { max_retries: number; max_wait_ms: number },
  random: number,
): NextStep {
  if (refusal.verdict === "fail") return { action: "fail" };
  if (refusal.verdict !== "retry" || retry >= limits.max_retries) return { action: "next" };
  const delayMs = refusal.delayMs ?? backoffMs(retry, random);
  return waitedMs + delayMs > limits.max_wait_ms ? { action: "next" } : { action: "retry", delayMs };
}
