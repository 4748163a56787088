import { expect, test } from "bun:test";
import { addressBlock } from "../../../src/limits/address-block.ts";

test("IPv6 addresses are counted by their /64; IPv4 (and IPv4-mapped) as they are; anything else as it came", () => {
  expect(addressBlock("2001:db8:1:2:aaaa:bbbb:cccc:dddd")).toBe("2001:db8:1:2::/64");
  expect(addressBlock("2001:db8:1:2::1")).toBe("2001:db8:1:2::/64");
  expect(addressBlock("2001:DB8:0001:0002:ffff::9")).toBe("2001:db8:1:2::/64");
  expect(addressBlock("2001:db8::")).toBe("2001:db8:0:0::/64");
  expect(addressBlock("::1")).toBe("0:0:0:0::/64");
  expect(addressBlock("fe80::1%eth0")).toBe("fe80:0:0:0::/64");
  expect(addressBlock("::ffff:192.0.2.7")).toBe("192.0.2.7");
  expect(addressBlock("192.0.2.7")).toBe("192.0.2.7");
  for (const odd of ["unknown", "1::2::3", "1:2:3", "12345::1", "g::1"]) expect(addressBlock(odd)).toBe(odd);
  // Two hosts of one /64 are one block; of two /64s, two.
  expect(addressBlock("2001:db8:1:2::a")).toBe(addressBlock("2001:db8:1:2:ffff::b"));
  expect(addressBlock("2001:db8:1:2::a")).not.toBe(addressBlock("2001:db8:1:3::a"));
});
