import { expect, test } from "bun:test";
import { refusalsSaid } from "../../../src/console/client/refusals-said.ts";

test("the usage view's refusals name every cause of a status, the status apart from the words (a console probe)", () => {
  expect(refusalsSaid({})).toBeNull();
  expect(refusalsSaid({ "402": 0 })).toBeNull();
  // "174 × 402 credits or the key's spend limit used up" read as 402 credits, and the account's
  // spend limit had refused them; a suspended account's 403 was "model not allowed for the key".
  expect(refusalsSaid({ "403": 1, "402": 1174 })).toBe(
    "Refused before reaching a model (not charged): 1,175 — 1,174 × 402 (out of credits, or the account's or a key's spend limit used up), 1 × 403 (a model the key may not use, or the account suspended).",
  );
  expect(refusalsSaid({ "429": 2, "499": 1 })).toBe("Refused before reaching a model (not charged): 3 — 2 × 429 (rate limited), 1 × 499.");
});
