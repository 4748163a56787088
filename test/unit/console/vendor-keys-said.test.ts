import { expect, test } from "bun:test";
import { vendorKeysSaid } from "../../../src/console/client/vendor-keys-said.ts";

test("the Models view names a provider with no vendor key in use: its models fail now (a console probe)", () => {
  expect(vendorKeysSaid([])).toBe("No provider has vendor keys here (local or simulated upstreams only).");
  expect(vendorKeysSaid([{ provider: "a", state: "usable" }, { provider: "a", state: "usable" }])).toBe("All 2 in use.");
  expect(vendorKeysSaid([{ provider: "a", state: "usable" }, { provider: "a", state: "disabled" }])).toBe("1 of 2 not in use: requests go to the provider's other keys.");
  expect(vendorKeysSaid([{ provider: "loop", state: "cooling" }, { provider: "loop", state: "disabled" }, { provider: "b", state: "usable" }]))
    .toBe("2 of 3 not in use: requests go to the provider's other keys. loop has no key in use: its models fail until one comes back.");
  expect(vendorKeysSaid([{ provider: "x", state: "disabled" }, { provider: "y", state: "cooling" }]))
    .toBe("2 of 2 not in use: requests go to the provider's other keys. x and y have no key in use: their models fail until one comes back.");
});
