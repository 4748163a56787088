import type { ErrorKind } from "../streaming/events.ts";

/**
 * An error whose message is safe to show a client. Anything else that escapes a handler is
 * logged and answered with a generic message, so internals never reach the wire.
 */
export class GatewayError extends Error {
  /** Set once the request that failed already left its usage record (it reached the pipeline). */
  recorded = false;

  constructor(
    readonly status: number,
    readonly kind: ErrorKind,
    message: string,
    readonly headers?: Record<string, string>,
  ) {
    super(message);
  }
}
