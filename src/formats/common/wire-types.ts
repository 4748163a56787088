import { Kind } from "@sinclair/typebox";
import { t, type Static, type TSchema } from "elysia";
import type { TObject, TProperties } from "@sinclair/typebox";

/*
 * What the formats' schemas share. Each wire shape is one TypeBox schema in its format's
 * `schema.ts`, used three ways: the route validates with it, the OpenAPI document prints it, and
 * its `static` type is what translators read and write. Bodies stay open (additionalProperties):
 * every field we do not name travels through untouched when formats match.
 */

/** A JSON object as the gateway handles it: any field, read with care. */
export type Json = Record<string, unknown>;

/**
 * An upstream's kind: the wire its API speaks, OpenAI's or Anthropic's. A request's body travels
 * through the gateway in one of them too (its format's `wire`, formats/format.ts).
 */
export type UpstreamKind = "openai" | "anthropic";

/** Objects stay open: parameters we do not model reach same-format upstreams untouched. */
export const open = { additionalProperties: true } as const;

/**
 * An open object whose type says so too: the named fields as the schema types them, any other
 * field as unknown. The schema is exactly `t.Object(properties, open)`.
 */
export const OpenObject = <P extends TProperties>(properties: P) => t.Unsafe<Static<TObject<P>> & Json>(t.Object(properties, open));

/**
 * Elysia's t.Integer carries a string-coercing transform, and one transform anywhere makes every
 * request body go through a full decode walk; a whole number is just a multiple of 1.
 */
export const WholeNumber = (options: NonNullable<Parameters<typeof t.Number>[0]>) => t.Number({ ...options, multipleOf: 1 });

/** Optional, and null allowed (OpenAI's way of saying "the default"). */
export const Nullable = <T extends TSchema>(schema: T) => {
  // What the value must be, said when it is not (a union's own words are "Expected union value").
  const error = expected(schema);
  return t.Optional(t.Union([schema, t.Null()], error ? { error } : {}));
};

/** A number's or a string's bounds in words, for a field's refusal ("must be a number from 0 to 2"). */
function expected(schema: TSchema): string | undefined {
  const s = schema as { type?: string; minimum?: number; maximum?: number; multipleOf?: number };
  if (s.type === "number" || s.type === "integer") {
    const kind = s.type === "integer" || s.multipleOf === 1 ? "a whole number" : "a number";
    if (s.minimum !== undefined && s.maximum !== undefined) return `must be ${kind} from ${s.minimum} to ${s.maximum}, or null`;
    if (s.minimum !== undefined) return `must be ${kind} of at least ${s.minimum}, or null`;
    if (s.maximum !== undefined) return `must be ${kind} of at most ${s.maximum}, or null`;
    return `must be ${kind}, or null`;
  }
  if (s.type === "boolean") return "must be true, false or null";
  if (s.type === "string") return "must be a string, or null";
  return undefined;
}

/**
 * A field the translators read or write with this type, which the gateway does not check on
 * arrival (the upstream does, in its own words): named for the type and the OpenAPI document,
 * never refused here.
 */
export const Unchecked = <T>() => t.Optional(t.Unsafe<T>({ [Kind]: "Unknown" }));

/**
 * What a translation decided beside the body, filled in by the translator for its caller:
 * the answer's handling and the log.
 */
export interface TranslationNotes {
  /** A tool forced to carry a JSON answer: its call is the answer's text (formats/common/answer-tool.ts). */
  answerTool?: string;
  /** Fields the client sent that the upstream does not get, and why; for the log. */
  dropped?: string[];
}
