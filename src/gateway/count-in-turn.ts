import { CountRefusedError, type CountQueue } from "../limits/count-queue.ts";
import { GatewayError } from "../streaming/gateway-error.ts";

/** A count on the gateway's tokenizer in `key`'s turn within its `account`'s (limits/count-queue.ts); its refusals as the client's 429, 503 or 499. */
export async function countInTurn(counts: CountQueue, key: string, text: string, signal: AbortSignal, limit?: number, account?: string): Promise<number> {
  try {
    return await counts.count(key, text, signal, limit, account);
  } catch (err) {
    if (!(err instanceof CountRefusedError)) throw err;
    if (err.reason === "aborted") throw new GatewayError(499, "invalid_request", err.message);
    if (err.reason === "key_busy") throw new GatewayError(429, "rate_limit", err.message, { "retry-after": "1" });
    throw new GatewayError(503, "overloaded", err.message, { "retry-after": "1" });
  }
}
