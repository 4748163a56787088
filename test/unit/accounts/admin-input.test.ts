import { describe, expect, test } from "bun:test";
import { AdminInputError, creditsText, parseCredits, parseIdempotencyKey, parseInstant, parseName, parseRateLimit, parseSpendPeriod, parseTopUp } from "../../../src/accounts/admin-input.ts";

describe("admin input", () => {
  test("parseInstant: ISO dates and date-times (UTC without a zone) and epoch ms; only real calendar dates before 10000", () => {
    expect(parseInstant("2027-01-31", "expires_at")).toBe(Date.UTC(2027, 0, 31));
    expect(parseInstant("2027-01-31T12:30:00Z", "expires_at")).toBe(Date.UTC(2027, 0, 31, 12, 30));
    expect(parseInstant("2027-01-31T12:30", "expires_at")).toBe(Date.UTC(2027, 0, 31, 12, 30));
    expect(parseInstant("2027-01-31T12:30:00.250+02:00", "expires_at")).toBe(Date.UTC(2027, 0, 31, 10, 30, 0, 250));
    expect(parseInstant("2028-02-29", "expires_at")).toBe(Date.UTC(2028, 1, 29));
    expect(parseInstant("9999-12-31T23:59:59Z", "expires_at")).toBe(Date.UTC(9999, 11, 31, 23, 59, 59));
    expect(parseInstant("1798761600000", "expires_at")).toBe(1798761600000);
    for (const bad of ["2027-02-29", "2026-02-30", "2026-04-31", "2026-13-01", "2026-00-10", "2026-01-01T24:00:00Z", "2026-01-01T12:60Z", "+010000-01-01T00:00:00Z", "10000-01-01", "tomorrow", "", "99999999999999999", "2026-1-1"]) {
      expect(() => parseInstant(bad, "expires_at")).toThrow(AdminInputError);
      try {
        parseInstant(bad, "expires_at");
      } catch (err) {
        expect((err as Error).message).toContain("expires_at");
      }
    }
  });

  test("periods, credits and rate limits", () => {
    expect(parseSpendPeriod("day")).toBe("day");
    expect(parseSpendPeriod(null)).toBeNull();
    expect(() => parseSpendPeriod("year")).toThrow("spend_limit_period");
    expect(() => parseSpendPeriod("none", "--period")).toThrow("--period");
    expect(parseCredits(1.000001, "spend_limit")).toBe(1_000_001);
    expect(() => parseCredits(1.0000001, "spend_limit")).toThrow("spend_limit");
    expect(() => parseCredits(-1, "spend_limit")).toThrow(AdminInputError);
    expect(parseRateLimit(1)).toBe(1);
    expect(parseRateLimit(1_000_000)).toBe(1_000_000);
    for (const bad of [0, 1.5, 1_000_001, "5", Number.NaN]) expect(() => parseRateLimit(bad)).toThrow("rate_limit_per_minute");
  });

  test("issue 32: year 0 is a leap year; amounts below a micro-credit, empty or long names, malformed keys are refused", () => {
    expect(parseInstant("0000-02-29", "expires_at")).toBe(Date.parse("0000-02-29T00:00:00Z"));
    expect(parseInstant("0", "from")).toBe(0);
    expect(() => parseInstant("0100-02-29", "expires_at")).toThrow("expires_at");
    expect(() => parseCredits(5e-10, "amount")).toThrow("amount");
    expect(parseCredits(0, "credits")).toBe(0);
    expect(() => parseCredits("5", "credits")).toThrow("credits");
    expect(() => parseTopUp(0)).toThrow("amount");
    expect(parseTopUp(0.000001)).toBe(1);
    expect(creditsText("2.5", "credits")).toBe(2.5);
    for (const bad of ["", " ", "0x10", "Infinity", "-1", "1,5", undefined]) expect(() => creditsText(bad, "credits")).toThrow("credits");
    expect(parseName("a")).toBe("a");
    expect(() => parseName("")).toThrow("name");
    expect(() => parseName("x".repeat(201), "--name")).toThrow("--name");
    // Blank names show as nothing in the console's lists: refused; inner and edge spaces are fine.
    for (const blank of [" ", "   ", "\t\n"]) expect(() => parseName(blank)).toThrow("more than spaces");
    expect(parseName(" team a ")).toBe(" team a ");
    // Control and text-direction characters: a holder's key name must not show the operator something else.
    for (const hidden of ["a\u202Egnp.exe", "evil\u2067x", "line\nbreak", "tab\tname", "nul\u0000", "rlm\u200F", "zero\u200Bwidth", "bom\uFEFF", "para\u2029sep"]) expect(() => parseName(hidden)).toThrow("text-direction");
    expect(parseName("مفتاح العميل")).toBe("مفتاح العميل");
    // Other invisible format characters too (soft hyphen, word joiner, tags); the joiners names need stay.
    for (const hidden of ["soft\u00ADhyphen", "word\u2060joiner", "tag\u{E0041}"]) expect(() => parseName(hidden)).toThrow("text-direction");
    expect(parseName("\u{1F469}\u200D\u{1F4BB} team")).toBe("\u{1F469}\u200D\u{1F4BB} team");
    expect(parseName("می\u200Cخواهم")).toBe("می\u200Cخواهم");
    expect(parseIdempotencyKey("a1-B2_c3")).toBe("a1-B2_c3");
    for (const bad of ["", "a b", "x".repeat(201), "é", 5]) expect(() => parseIdempotencyKey(bad)).toThrow(AdminInputError);
  });
});
