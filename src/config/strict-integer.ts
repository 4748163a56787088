import { Kind } from "@sinclair/typebox";
import { t } from "elysia";

/**
 * A whole number as JSON writes it, and nothing else: JSON Schema's `{type: "integer"}`.
 *
 * Elysia's `t.Integer` is a union with numeric strings and a transform turning them into numbers.
 * The config loader checks without decoding, so `max_tokens_cap: "100"` passed and reached the
 * vendor as the string "100"; and /openapi.json documented every such integer as "a string of
 * format integer, or an integer". This is TypeBox's own Integer kind (checked by TypeBox and by
 * Elysia's compiled validators alike), which Elysia's `t` replaces with its own; no transform, so no
 * decode walk either. Request bodies use formats/common/wire-types.ts's WholeNumber.
 */
export const StrictInteger = (options: NonNullable<Parameters<typeof t.Number>[0]> = {}) =>
  t.Unsafe<number>({ ...options, [Kind]: "Integer", type: "integer" });
