import { GatewayError } from "./gateway-error.ts";
import { scrubForClient } from "../ops/scrub.ts";

/**
 * An upstream's refusal, in the spec's statuses. A request the vendor found malformed is the
 * client's to fix (400), with the vendor's words (scrubbed: see ops/scrub.ts) saying what to fix;
 * anything on the vendor's side, our key included, is a 502 that costs nothing and says nothing
 * of the vendor's internals.
 */
export function upstreamStatusError(status: number, detail: string | undefined): GatewayError {
  const scrubbed = detail ? scrubForClient(detail) : "";
  const said = scrubbed ? `: ${scrubbed}` : "";
  if (status === 400 || status === 422) return new GatewayError(400, "invalid_request", `The upstream provider rejected the request${said}`);
  if (status === 413) return new GatewayError(413, "request_too_large", "The request is too large for the upstream provider.");
  if (status === 429) return new GatewayError(502, "overloaded", "The upstream provider is rate limiting the gateway. Retrying is appropriate.");
  if (status === 529 || status === 503) return new GatewayError(502, "overloaded", "The upstream provider is overloaded. Retrying is appropriate.");
  return new GatewayError(502, "upstream", `The upstream provider failed (status ${status}). Retrying is appropriate.`);
}

/** A vendor's error frame mid-stream, as the client sees it: our sentence, then the vendor's scrubbed words. */
export function upstreamStreamErrorMessage(lead: string, vendorMessage: unknown): string {
  const scrubbed = typeof vendorMessage === "string" ? scrubForClient(vendorMessage) : "";
  return scrubbed ? `${lead}: ${scrubbed}` : `${lead}.`;
}
