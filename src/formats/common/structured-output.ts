import type { Json } from "./wire-types.ts";
import type { StructuredOutputStyle } from "./model-traits.ts";

/**
 * Structured output across the formats (docs/decisions.md, "Structured output and reasoning
 * across formats"). OpenAI asks with `response_format` (`json_schema` with a schema, or
 * `json_object`); Anthropic with `output_config.format: {type: "json_schema", schema}`, which
 * takes a narrower JSON Schema and has no schema-less mode. Where Anthropic's cannot say what
 * the client asked (`json_object`, an open object, a recursive schema, a model without structured
 * outputs), a forced tool whose input is the answer stands in, and its call comes back to the
 * client as the answer's text. Pure: values in, values out.
 */

/** What an Anthropic request gets for an OpenAI `response_format`. */
export type AnthropicStructured =
  | { kind: "native"; format: { type: "json_schema"; schema: Json } }
  /** A tool to force: its input is the answer; `name` is not one of the client's tools. */
  | { kind: "tool"; tool: { name: string; description: string; input_schema: Json } };

/** The forced tool's name, unless a client tool has it. */
const ANSWER_TOOL = "json_answer";

/**
 * `response_format` → Anthropic's way of asking for it, or undefined for plain text (no format,
 * `text`, or a shape we do not know: nothing is asked rather than something wrong).
 */
export function anthropicStructuredOutput(responseFormat: unknown, style: StructuredOutputStyle, clientTools: ReadonlySet<string>): AnthropicStructured | undefined {
  const format = responseFormat as { type?: unknown; json_schema?: { name?: unknown; description?: unknown; schema?: unknown } } | null | undefined;
  if (format?.type !== "json_schema" && format?.type !== "json_object") return undefined;
  const given = format.type === "json_schema" && isObject(format.json_schema?.schema) ? (format.json_schema.schema as Json) : undefined;
  if (format.type === "json_schema" && style === "native" && given) {
    const schema = anthropicSchema(given);
    if (schema) return { kind: "native", format: { type: "json_schema", schema } };
  }
  let name = ANSWER_TOOL;
  while (clientTools.has(name)) name = `_${name}`;
  const about = typeof format.json_schema?.description === "string" ? ` ${format.json_schema.description}` : "";
  const description = given
    ? `Give your whole answer by calling this tool: its input is the answer, a JSON object matching the schema.${about}`
    : "Give your whole answer by calling this tool: its input is the answer, as one JSON object.";
  // A tool's input is always an object; a schema of something else (OpenAI refuses those too) asks for any object.
  return { kind: "tool", tool: { name, description, input_schema: given?.type === "object" ? given : { type: "object" } } };
}

/** Formats Anthropic's structured outputs check strings against; others are told in the description. */
const STRING_FORMATS = new Set(["date-time", "time", "date", "duration", "email", "hostname", "uri", "ipv4", "ipv6", "uuid"]);

/**
 * A JSON Schema in the subset Anthropic's structured outputs accept, or undefined when it cannot
 * be said there without changing what it allows. The rewrite is the one Anthropic's own SDK
 * applies to its users' schemas (`transformJSONSchema`): every object closed with
 * `additionalProperties: false`, `oneOf` as `anyOf`, and constraints the API refuses (minimum,
 * maxLength, pattern, unknown formats, minItems above 1…) moved into the description, where the
 * model still reads them. Undefined for what closing would change: objects that allow keys of
 * their own (no `properties`, or `additionalProperties` not false), nodes without a type, and
 * recursive schemas (refused by Anthropic).
 */
export function anthropicSchema(schema: Json): Json | undefined {
  if (isRecursive(schema)) return undefined;
  try {
    return strictNode(structuredClone(schema));
  } catch (err) {
    if (err instanceof NotExpressible) return undefined;
    throw err;
  }
}

class NotExpressible extends Error {}

function strictNode(node: Json): Json {
  if (!isObject(node)) throw new NotExpressible();
  const out: Json = {};
  const take = (key: string) => {
    const value = node[key];
    delete node[key];
    return value;
  };
  const defs = take("$defs");
  if (isObject(defs)) out.$defs = Object.fromEntries(Object.entries(defs).map(([k, v]) => [k, strictNode(v as Json)]));
  const definitions = take("definitions");
  if (isObject(definitions)) out.definitions = Object.fromEntries(Object.entries(definitions).map(([k, v]) => [k, strictNode(v as Json)]));
  const ref = take("$ref");
  if (typeof ref === "string") return { ...out, $ref: ref };

  const isPrimitive = (v: unknown) => v === null || typeof v !== "object";
  if (Array.isArray(node.enum) && node.enum.length > 0 && node.enum.every(isPrimitive)) out.enum = take("enum");
  if (node.const !== undefined && isPrimitive(node.const)) out.const = take("const");
  const literal = "enum" in out || "const" in out;
  const type = take("type");
  const anyOf = take("anyOf");
  const oneOf = take("oneOf");
  const allOf = take("allOf");
  delete node.$schema;
  if (Array.isArray(anyOf) || Array.isArray(oneOf)) out.anyOf = ((anyOf ?? oneOf) as Json[]).map(strictNode);
  else if (Array.isArray(allOf)) out.allOf = (allOf as Json[]).map(strictNode);
  else if (!literal) {
    // `{}` or a description alone allows any value: nothing closed can say that.
    if (type === undefined) throw new NotExpressible();
    out.type = type;
  }
  for (const key of ["description", "title"]) if (node[key] !== undefined) out[key] = take(key);

  const types = literal ? [] : Array.isArray(type) ? type : [type];
  if (types.includes("object")) {
    const properties = take("properties");
    const additional = take("additionalProperties");
    if (!isObject(properties) && additional !== false) throw new NotExpressible();
    if (additional !== undefined && additional !== false) throw new NotExpressible();
    out.properties = Object.fromEntries(Object.entries((properties ?? {}) as Json).map(([k, v]) => [k, strictNode(v as Json)]));
    out.additionalProperties = false;
    const required = take("required");
    if (Array.isArray(required)) out.required = required;
  }
  if (types.includes("string") && typeof node.format === "string" && STRING_FORMATS.has(node.format)) out.format = take("format");
  if (types.includes("array")) {
    const items = take("items");
    if (items !== undefined) out.items = strictNode(items as Json);
    if (node.minItems === 0 || node.minItems === 1) out.minItems = take("minItems");
  }
  // What is left is a constraint Anthropic refuses: the model is told it in words instead.
  const rest = Object.entries(node);
  if (rest.length > 0) {
    const said = `{${rest.map(([k, v]) => `${k}: ${JSON.stringify(v)}`).join(", ")}}`;
    out.description = typeof out.description === "string" && out.description ? `${out.description}\n\n${said}` : said;
  }
  return out;
}

/** A `$ref` to the root, or definitions that reach themselves through refs. */
function isRecursive(schema: Json): boolean {
  const refs = (node: unknown, into: Set<string>): Set<string> => {
    if (Array.isArray(node)) for (const n of node) refs(n, into);
    else if (isObject(node)) {
      for (const [key, value] of Object.entries(node)) {
        if (key === "$ref" && typeof value === "string") into.add(value);
        else if (key !== "$defs" && key !== "definitions") refs(value, into);
      }
    }
    return into;
  };
  if (refs(schema, new Set()).has("#")) return true;
  const defs = new Map<string, Set<string>>();
  for (const container of ["$defs", "definitions"]) {
    const group = schema[container];
    if (isObject(group)) for (const [name, def] of Object.entries(group)) defs.set(`#/${container}/${name}`, refs(def, new Set()));
  }
  for (const set of defs.values()) if (set.has("#")) return true;
  return hasCycle(defs);
}

/**
 * Whether refs between definitions loop: one depth-first walk over every definition, each visited
 * once (linear in definitions and refs). A walk from each definition in turn was quadratic, on the
 * request thread: 12,000 definitions in a request's schema held every tenant's requests for 9 s
 * (a hostile-tenant probe, 2026-11-30). Iterative, so a chain of definitions cannot overflow the stack.
 */
function hasCycle(defs: Map<string, Set<string>>): boolean {
  const DONE = 2;
  const state = new Map<string, number>(); // 1: on the current path, 2: fully walked
  for (const root of defs.keys()) {
    if (state.has(root)) continue;
    state.set(root, 1);
    const path: { name: string; next: Iterator<string> }[] = [{ name: root, next: defs.get(root)!.values() }];
    while (path.length > 0) {
      const top = path[path.length - 1]!;
      const step = top.next.next();
      if (step.done) {
        state.set(top.name, DONE);
        path.pop();
        continue;
      }
      const ref = step.value;
      const seen = state.get(ref);
      if (seen === 1) return true;
      if (seen === DONE) continue;
      const refs = defs.get(ref);
      // A ref to something that is not a definition leads nowhere.
      if (!refs) continue;
      state.set(ref, 1);
      path.push({ name: ref, next: refs.values() });
    }
  }
  return false;
}

/**
 * Anthropic `output_config.format` → OpenAI `response_format`. `strict: true` (OpenAI's
 * constrained decoding, what Anthropic's structured outputs are) when the schema meets OpenAI's
 * strict rules; otherwise `strict: false`, since OpenAI refuses a strict schema that leaves a
 * property optional, and Anthropic allows that.
 */
export function openaiResponseFormat(outputFormat: unknown): Json | undefined {
  const format = outputFormat as { type?: unknown; schema?: unknown } | null | undefined;
  if (format?.type !== "json_schema" || !isObject(format.schema)) return undefined;
  const schema = format.schema as Json;
  return { type: "json_schema", json_schema: { name: "output", schema, strict: isOpenAIStrictSchema(schema) } };
}

/** Keywords OpenAI's strict mode refuses. */
const NOT_STRICT = ["allOf", "not", "if", "then", "else", "dependentRequired", "dependentSchemas", "patternProperties", "unevaluatedProperties", "propertyNames"];

/** Every object closed and every property required, nothing strict mode refuses, a root object. */
export function isOpenAIStrictSchema(schema: Json): boolean {
  if (schema.type !== "object") return false;
  const ok = (node: unknown): boolean => {
    if (!isObject(node)) return typeof node === "boolean";
    if (NOT_STRICT.some((k) => k in node)) return false;
    const types = Array.isArray(node.type) ? node.type : [node.type];
    const properties = isObject(node.properties) ? node.properties : undefined;
    if (types.includes("object") || properties) {
      if (node.additionalProperties !== false) return false;
      // A set: `includes` per property made 9,999 properties against a `required` of 950,000
      // entries a 10 s stall of the request thread (a hostile-tenant probe, 2026-11-30).
      const required = new Set(Array.isArray(node.required) ? node.required : []);
      if (!Object.keys(properties ?? {}).every((k) => required.has(k))) return false;
    }
    const children: unknown[] = [...Object.values(properties ?? {})];
    for (const key of ["anyOf", "oneOf", "prefixItems"]) if (Array.isArray(node[key])) children.push(...(node[key] as unknown[]));
    for (const key of ["$defs", "definitions"]) if (isObject(node[key])) children.push(...Object.values(node[key] as Json));
    if (node.items !== undefined) children.push(node.items);
    return children.every(ok);
  };
  return ok(schema);
}

function isObject(value: unknown): value is Json {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}
