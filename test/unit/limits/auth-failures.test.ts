import { expect, test } from "bun:test";
import { createAuthFailures } from "../../../src/limits/auth-failures.ts";

test("failures are counted per address over a sliding minute: the 11th within it is throttled, until the oldest leaves the window", () => {
  let now = 1_000_000;
  const failures = createAuthFailures({ now: () => now });
  for (let i = 0; i < 10; i++) {
    expect(failures.failed("10.0.0.1").throttled).toBe(false);
    now += 1_000;
  }
  // Another address has a count of its own.
  expect(failures.failed("10.0.0.2").throttled).toBe(false);
  // 11th failure, 10 s after the first: throttled until the second of them is a minute old (at +61 s).
  const eleventh = failures.failed("10.0.0.1");
  expect(eleventh).toEqual({ throttled: true, retryAfterSeconds: 51 });
  now += 51_000;
  expect(failures.failed("10.0.0.1").throttled).toBe(false);
  // A full minute later the address starts afresh.
  now += 60_000;
  for (let i = 0; i < 10; i++) expect(failures.failed("10.0.0.1").throttled).toBe(false);
  expect(failures.failed("10.0.0.1").throttled).toBe(true);
});

test("memory is bounded: past maxAddresses the least recently failing address is forgotten", () => {
  const failures = createAuthFailures({ limit: 1, maxAddresses: 2, now: () => 0 });
  failures.failed("a");
  failures.failed("b");
  failures.failed("c");
  // "a" was forgotten: its next failure is its first again.
  expect(failures.failed("a").throttled).toBe(false);
  expect(failures.failed("c").throttled).toBe(true);
});
