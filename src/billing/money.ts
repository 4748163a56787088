/** Money is integer micro-credits everywhere inside; decimals exist only at the API edge. */
export const MICRO_PER_CREDIT = 1_000_000;

/** Largest amount accepted at the edge; keeps every sum far inside Number.MAX_SAFE_INTEGER. */
export const MAX_CREDITS = 1_000_000_000;

/**
 * Largest balance a top-up may bring an account to (8,000,000,000 credits). The integer is exact
 * far beyond it, but the API and the console show credits as a decimal, and above 2^33 credits
 * (8,589,934,592) a double's spacing passes 10^-6: 8,999,999,999.999999 read back as
 * 8,999,999,999.999998 (a console probe, twenty-eighth session; the cap was 9,000,000,000). Below
 * 2^33 every six-decimal amount prints as itself (checked over two million random balances).
 */
export const MAX_BALANCE_MICRO = 8_000_000_000 * MICRO_PER_CREDIT;

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
