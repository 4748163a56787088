import { Elysia } from "elysia";
import { errorResponse, isAnthropicPath } from "./errors.ts";

/**
 * Bodies over the limit are refused from their Content-Length, before a byte is read, with our
 * JSON error; Bun's maxRequestBodySize (set where the server listens) catches bodies sent
 * without a length.
 */
export function bodyLimitPlugin(maxBytes: number) {
  return new Elysia({ name: "switchyard/body-limit" }).onRequest(({ request }) => {
    const length = Number(request.headers.get("content-length") ?? 0);
    if (length > maxBytes) {
      return errorResponse(isAnthropicPath(request.url), 413, "request_too_large", `The request body is ${length} bytes; the limit is ${maxBytes}.`);
    }
  });
}
