/** Words of the console that need no page: tested without a browser. */

/**
 * What the vendor keys' states come to. A provider with no key in use is named: its models fail now
 * (a console probe: "requests go to the provider's other keys" was all it said of one that had none left).
 */
export function vendorKeysSaid(keys: readonly { provider: string; state: string }[]): string {
  if (keys.length === 0) return "No provider has vendor keys here (local or simulated upstreams only).";
  const out = keys.filter((k) => k.state !== "usable").length;
  if (out === 0) return `All ${keys.length} in use.`;
  const providers = [...new Set(keys.map((k) => k.provider))];
  const stopped = providers.filter((p) => keys.every((k) => k.provider !== p || k.state !== "usable"));
  const none = stopped.length === 0 ? "" : ` ${listed(stopped)} ${stopped.length === 1 ? "has" : "have"} no key in use: ${stopped.length === 1 ? "its" : "their"} models fail until one comes back.`;
  return `${out} of ${keys.length} not in use: requests go to the provider's other keys.${none}`;
}

/** "a", "a and b", "a, b and c". */
function listed(names: string[]): string {
  return names.length <= 1 ? (names[0] ?? "") : `${names.slice(0, -1).join(", ")} and ${names.at(-1)}`;
}
