/**
 * The block a client address is counted by in per-address throttles (sign-in failures, admin
 * token failures, anonymous bodies): an IPv4 address as it is; an IPv6 address by its /64, the
 * block one customer's network gets, since one host may hold any number of addresses in it and
 * counted one by one they escaped every per-address bound (a probe, 2026-11-30); an IPv4-mapped
 * IPv6 address (`::ffff:1.2.3.4`) as its IPv4 address. Anything else is returned as it came. Pure.
 */
export function addressBlock(address: string): string {
  if (!address.includes(":")) return address;
  const lower = address.toLowerCase();
  const zone = lower.indexOf("%");
  const bare = zone === -1 ? lower : lower.slice(0, zone);
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(bare);
  if (mapped) return mapped[1]!;
  const halves = bare.split("::");
  if (halves.length > 2) return address;
  const head = halves[0] ? halves[0].split(":") : [];
  const tail = halves.length === 2 && halves[1] ? halves[1].split(":") : [];
  const missing = 8 - head.length - tail.length;
  if (missing < 0 || (halves.length === 1 && missing !== 0)) return address;
  const groups = [...head, ...Array<string>(halves.length === 2 ? missing : 0).fill("0"), ...tail];
  if (groups.length !== 8 || groups.some((g) => !/^[0-9a-f]{1,4}$/.test(g))) return address;
  return `${groups.slice(0, 4).map((g) => g.replace(/^0+(?=.)/, "")).join(":")}::/64`;
}
