/**
 * `server.cors_origins` as the gateway reads it (http/cors.ts answers browsers with it): checked
 * when the config loads, so an origin that can never match what browsers send is a mistake said
 * at start, not a silent refusal.
 */

/** The origins allowed, from `server.cors_origins`; undefined when none is. */
export interface CorsPolicy {
  /** `*`: any origin, answered with `*` (no credentials are ever allowed, so it is safe). */
  readonly any: boolean;
  readonly origins: ReadonlySet<string>;
}

/** What a listed origin must look like: scheme, host and an optional port, as browsers send `Origin`. */
const ORIGIN = /^https?:\/\/[^\s/?#@]+$/;

/** The policy for `server.cors_origins`; throws on an entry that can never match an `Origin` header. */
export function corsPolicy(origins: readonly string[]): CorsPolicy | undefined {
  if (origins.length === 0) return undefined;
  for (const origin of origins) {
    if (origin !== "*" && !ORIGIN.test(origin)) {
      throw new Error(`server.cors_origins: "${origin}" is not an origin (scheme://host[:port], no path or trailing slash) or "*"`);
    }
  }
  return { any: origins.includes("*"), origins: new Set(origins.map((o) => o.toLowerCase())) };
}
