import { describe, expect, test } from "bun:test";
import { passwordHasher, PasswordsBusyError } from "../../../src/console/console-auth.ts";

describe("console passwords", () => {
  test("the gateway's own cost is argon2id at Bun's defaults (64 MiB, 2 passes); the decoy an unknown login is checked against costs the same", async () => {
    const own = passwordHasher();
    const hash = await own.hash("correct horse battery staple");
    expect(hash).toStartWith("$argon2id$v=19$m=65536,t=2,");
    expect(await own.decoy()).toStartWith("$argon2id$v=19$m=65536,t=2,");
    expect(await own.verify("correct horse battery staple", hash)).toBe(true);
    expect(await own.verify("correct horse battery stapler", hash)).toBe(false);
  });

  test("a test's cheaper cost is the one its hashes and decoy say, and a hash made at any cost still verifies (the cost is read from the hash)", async () => {
    const cheap = passwordHasher({ memoryCost: 1024, timeCost: 1 });
    const hash = await cheap.hash("correct horse battery staple");
    expect(hash).toStartWith("$argon2id$v=19$m=1024,t=1,");
    expect(await cheap.decoy()).toStartWith("$argon2id$v=19$m=1024,t=1,");
    expect(await passwordHasher().verify("correct horse battery staple", hash)).toBe(true);
    expect(await cheap.verify("anything", "not a hash")).toBe(false);
  });

  test("checks at once are capped, a few more wait, past them one is refused at once (PasswordsBusyError); the slots come back", async () => {
    const gated = passwordHasher({ memoryCost: 1024, timeCost: 1 }, { atOnce: 1, waiting: 1 });
    const hash = await gated.hash("correct horse battery staple");
    const outcomes = await Promise.allSettled([0, 1, 2].map(() => gated.verify("correct horse battery staple", hash)));
    expect(outcomes.map((o) => o.status)).toEqual(["fulfilled", "fulfilled", "rejected"]);
    expect((outcomes[2] as PromiseRejectedResult).reason).toBeInstanceOf(PasswordsBusyError);
    expect(outcomes.slice(0, 2).map((o) => (o as PromiseFulfilledResult<boolean>).value)).toEqual([true, true]);
    // Hashing counts too, and the slots are back once the checks ended.
    const later = await Promise.allSettled([gated.hash("a"), gated.verify("x", hash), gated.verify("y", hash)]);
    expect(later.map((o) => o.status)).toEqual(["fulfilled", "fulfilled", "rejected"]);
    expect(await gated.verify("correct horse battery staple", hash)).toBe(true);
  });
});
