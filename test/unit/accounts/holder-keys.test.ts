import { expect, test } from "bun:test";
import { holderKeyCeiling } from "../../../src/accounts/holder-keys.ts";
import { MAX_KEY_MODELS } from "../../../src/accounts/admin-input.ts";
import type { KeySummary } from "../../../src/accounts/account-store.ts";

const key = (fields: Partial<KeySummary>): KeySummary => ({
  id: "key_x", name: null, prefix: "svc-sk-", last4: "abcd", created_at: "", revoked_at: null, expires_at: null, rate_limit_per_minute: null, spend_limit: null,
  spent: 0, spend_limit_period: null, spent_in_period: 0, period_resets_at: null, models: null, max_concurrent_requests: null, ...fields,
});

test("field by field: keys that leave a field to the default do not widen it; none set: the defaults", () => {
  expect(holderKeyCeiling([])).toEqual({});
  expect(holderKeyCeiling([key({})])).toEqual({});
  expect(holderKeyCeiling([key({}), key({ models: ["a/*"], rate_limit_per_minute: 5 }), key({ models: ["b/x", "a/*"], max_concurrent_requests: 3 })]))
    .toEqual({ models: ["a/*", "b/x"], rate_limit_per_minute: 5, max_concurrent_requests: 3 });
});

test("the models of many keys together are cut to what one key may list: a narrower list, never a refusal", () => {
  const many = Array.from({ length: 3 }, (_, k) => key({ models: Array.from({ length: 60 }, (_, i) => `m/${k}-${i}`) }));
  expect(holderKeyCeiling(many).models).toHaveLength(MAX_KEY_MODELS);
});
