import { describe, expect, test } from "bun:test";
import { passwordHasher } from "../../../src/console/console-auth.ts";

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
});
