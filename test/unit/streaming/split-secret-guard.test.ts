import { describe, expect, test } from "bun:test";
import { createSplitSecretGuard, HOLD_FROM } from "../../../src/streaming/split-secret-guard.ts";

const KEY = "sk-live-Q7x9Zb3Lm2Np";

/** What the client reads of `pieces`, piece by piece, and what the end lets go. */
function through(pieces: string[], secrets: string[] = [KEY]): string[] {
  const guard = createSplitSecretGuard(secrets)!;
  const out = pieces.map((p) => guard.text(p));
  out.push(guard.flush());
  return out;
}

describe("createSplitSecretGuard", () => {
  test("none without a secret long enough to hold for", () => {
    expect(createSplitSecretGuard([])).toBeUndefined();
    expect(createSplitSecretGuard(["abcd"])).toBeUndefined();
  });

  test("a secret split in two: the first piece's end is held, the second reads [redacted]", () => {
    expect(through(["Your key is sk-li", "ve-Q7x9Zb3Lm2Np, bye"])).toEqual(["Your key is ", "[redacted], bye", ""]);
  });

  test("a secret one character a piece: held from its fourth character on", () => {
    expect(through(["a", ..."sk-live-Q7x9Zb3Lm2Np".split(""), "!"])).toEqual(["a", "s", "k", "-", ...Array(KEY.length - HOLD_FROM).fill(""), "[redacted]", "!", ""]);
  });

  test(`fewer than ${HOLD_FROM} characters of its start go out; its rest, whole in the next piece, does not`, () => {
    expect(through(["Your key is s", "k-live-Q7x9Zb3Lm2Np, bye"])).toEqual(["Your key is s", "[redacted], bye", ""]);
    expect(through(["sk-", "l", "ive-Q7x9", "Zb3Lm2Np"])).toEqual(["sk-", "", "", "[redacted]", ""]);
  });

  test("whole secrets in a piece, and twice in a row", () => {
    expect(through([`${KEY} and ${KEY}`])).toEqual(["[redacted] and [redacted]", ""]);
    expect(through([KEY + KEY])).toEqual(["[redacted][redacted]", ""]);
  });

  test("a start no rest follows goes out as it came: with the next piece, or at the end", () => {
    expect(through(["see sk-live-Q7", "-other"])).toEqual(["see ", "sk-live-Q7-other", ""]);
    expect(through(["see sk-live-Q7"])).toEqual(["see ", "sk-live-Q7"]);
    expect(through(["Hello world", " sk-live is", " a prefix"])).toEqual(["Hello world", " sk-live is", " a prefix", ""]);
  });

  test("text that is no secret's start is the same string, never held", () => {
    const guard = createSplitSecretGuard([KEY, "another-secret-value"])!;
    for (const piece of ["plain", " text with s", "k and an", "other-secr"]) {
      const out = guard.text(piece);
      if (piece === "other-secr") expect(out).toBe("");
      else expect(out).toBe(piece);
    }
    expect(guard.text("et-value!")).toBe("[redacted]!");
  });
});

test("discard drops what is held: a failed answer lets no key's start out", () => {
  const guard = createSplitSecretGuard([KEY])!;
  expect(guard.text("see sk-live-Q7")).toBe("see ");
  guard.discard();
  expect(guard.flush()).toBe("");
});
