import type { RedisClient } from "bun";

/** A Lua script with its SHA-1, made once: sent by hash, whole only when Redis does not know it. */
export interface RedisScript {
  readonly text: string;
  readonly sha: string;
}

export function redisScript(text: string): RedisScript {
  return { text, sha: new Bun.CryptoHasher("sha1").update(text).digest("hex") };
}

/**
 * Runs `script` by its hash; a Redis that restarted has forgotten it (NOSCRIPT), and EVAL then
 * sends it whole (caching it again). `whole`: EVAL at once, for a call whose place in the
 * connection's order matters (the fallback would go after commands sent meanwhile).
 */
export async function evalScript(client: RedisClient, script: RedisScript, keys: readonly string[], args: readonly string[], whole = false): Promise<unknown> {
  const argv = [String(keys.length), ...keys, ...args];
  if (whole) return client.send("EVAL", [script.text, ...argv]);
  try {
    return await client.send("EVALSHA", [script.sha, ...argv]);
  } catch (err) {
    if (err instanceof Error && err.message.startsWith("NOSCRIPT")) return client.send("EVAL", [script.text, ...argv]);
    throw err;
  }
}
