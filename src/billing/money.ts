/** Money is integer micro-credits everywhere inside; decimals exist only at the API edge. */
export const MICRO_PER_CREDIT = 1_000_000;

/** Largest amount accepted at the edge; keeps every sum far inside Number.MAX_SAFE_INTEGER. */
export const MAX_CREDITS = 1_000_000_000;

/**
 * Largest balance a top-up may bring an account to (9,000,000,000 credits), below
 * Number.MAX_SAFE_INTEGER micro-credits (~9,007,199,254 credits): past it a balance read into
 * JavaScript is no longer exact to the micro-credit (a console probe topped up 10^10 credits in ten
 * steps and saw 11,000,000,000 where the database held 10,999,999,999.999999).
 */
export const MAX_BALANCE_MICRO = 9_000_000_000 * MICRO_PER_CREDIT;

/** Converts an API decimal to micro-credits, refusing anything that would be rounded away. */
export function creditsToMicro(credits: number): number {
  if (!Number.isFinite(credits) || credits < 0 || credits > MAX_CREDITS) {
    throw new RangeError(`credits must be a number between 0 and ${MAX_CREDITS}`);
  }
  const micro = Math.round(credits * MICRO_PER_CREDIT);
  if (Math.abs(micro - credits * MICRO_PER_CREDIT) > 1e-3) {
    throw new RangeError("credits may have at most 6 decimal places");
  }
  return micro;
}

export function microToCredits(micro: number): number {
  return micro / MICRO_PER_CREDIT;
}
