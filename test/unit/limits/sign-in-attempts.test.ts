import { describe, expect, test } from "bun:test";
import { createSignInAttempts } from "../../../src/limits/sign-in-attempts.ts";

/** One failed sign-in: begun and never found right. */
const fail = (a: ReturnType<typeof createSignInAttempts>, address: string, login: string) => a.begin(address, login);
/** One right sign-in: 0 and recorded, or the wait it got. */
const signIn = (a: ReturnType<typeof createSignInAttempts>, address: string, login: string) => {
  const wait = a.begin(address, login);
  if (wait === 0) a.succeeded(address, login);
  return wait;
};

describe("console sign-in attempts", () => {
  test("five failures for a login from anywhere hold it everywhere it never signed in from, right password or not", () => {
    const clock = { now: 0 };
    const a = createSignInAttempts({ now: () => clock.now });
    for (const [i, address] of ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"].entries()) expect([i, fail(a, address, "ana")]).toEqual([i, 0]);
    expect(signIn(a, "10.0.0.6", "ana")).toBeGreaterThan(0);
    clock.now += 15 * 60_000 + 1;
    expect(signIn(a, "10.0.0.6", "ana")).toBe(0);
  });

  test("a guesser who knows a holder's login cannot lock them out of the place they signed in from; the guesser stays held", () => {
    const clock = { now: 0 };
    const a = createSignInAttempts({ now: () => clock.now });
    expect(signIn(a, "192.0.2.10", "ana")).toBe(0);
    for (let i = 0; i < 5; i++) expect(fail(a, "203.0.113.7", "ana")).toBe(0);
    // The guesser waits, and so would anyone new; the holder at their desk does not.
    expect(fail(a, "203.0.113.7", "ana")).toBeGreaterThan(0);
    expect(signIn(a, "198.51.100.1", "ana")).toBeGreaterThan(0);
    expect(signIn(a, "192.0.2.10", "ana")).toBe(0);
    // The holder's success does not give the guesser more tries.
    expect(fail(a, "203.0.113.7", "ana")).toBeGreaterThan(0);
    // The same guesses kept up for a day never lock the holder out.
    for (let minute = 0; minute < 24 * 60; minute += 15) {
      clock.now += 15 * 60_000 + 1;
      for (let i = 0; i < 6; i++) fail(a, "203.0.113.7", "ana");
      expect(signIn(a, "192.0.2.10", "ana")).toBe(0);
    }
  });

  test("a place remembered without a sign-in (an invite accepted there) is known as after one: guesses elsewhere do not lock the holder out of it, nor is a failure given back", () => {
    const a = createSignInAttempts({ now: () => 0 });
    a.remember("192.0.2.10", "ana");
    for (let i = 0; i < 5; i++) expect(fail(a, "203.0.113.7", "ana")).toBe(0);
    expect(signIn(a, "198.51.100.1", "ana")).toBeGreaterThan(0);
    expect(signIn(a, "192.0.2.10", "ana")).toBe(0);
    // An address that failed 20 times stays held for others: remembering gave none of its failures back.
    for (let i = 0; i < 20; i++) fail(a, "192.0.2.99", `guess${i}`);
    a.remember("192.0.2.99", "bo");
    expect(signIn(a, "192.0.2.99", "someone")).toBeGreaterThan(0);
    expect(signIn(a, "192.0.2.99", "bo")).toBe(0);
  });

  test("from a place it signed in from, a login has its own five tries: wrong ones there hold it there, and a right one clears them", () => {
    const clock = { now: 0 };
    const a = createSignInAttempts({ now: () => clock.now });
    expect(signIn(a, "192.0.2.10", "ana")).toBe(0);
    for (let i = 0; i < 4; i++) expect(fail(a, "192.0.2.10", "ana")).toBe(0);
    expect(signIn(a, "192.0.2.10", "ana")).toBe(0);
    for (let i = 0; i < 5; i++) expect(fail(a, "192.0.2.10", "ana")).toBe(0);
    expect(signIn(a, "192.0.2.10", "ana")).toBeGreaterThan(0);
    // Those failures were counted there only: from elsewhere the login still has its five.
    expect(signIn(a, "198.51.100.1", "ana")).toBe(0);
  });

  test("a known place is forgotten after 30 days: the login is counted with everywhere else again", () => {
    const clock = { now: 0 };
    const a = createSignInAttempts({ now: () => clock.now });
    expect(signIn(a, "192.0.2.10", "ana")).toBe(0);
    clock.now += 30 * 86_400_000 + 1;
    for (let i = 0; i < 5; i++) expect(fail(a, "203.0.113.7", "ana")).toBe(0);
    expect(signIn(a, "192.0.2.10", "ana")).toBeGreaterThan(0);
  });

  test("a malformed attempt from a known place gives back only its own count's entry", () => {
    const clock = { now: 0 };
    const a = createSignInAttempts({ now: () => clock.now });
    expect(signIn(a, "192.0.2.10", "ana")).toBe(0);
    for (let i = 0; i < 5; i++) expect(fail(a, "203.0.113.7", "ana")).toBe(0);
    for (let i = 0; i < 10; i++) {
      expect(a.begin("192.0.2.10", "ana")).toBe(0);
      a.cancel("192.0.2.10", "ana");
    }
    // The guesser's five still hold elsewhere: the cancels did not take from them.
    expect(fail(a, "203.0.113.7", "ana")).toBeGreaterThan(0);
  });
});
