/**
 * How much work a JSON text is before it is parsed: its nesting, its objects and arrays, its
 * object members. Pure. The request body is checked with it (http/plugins/json-body.ts), and so is
 * JSON that arrives inside a string (a tool call's `arguments`) before anything parses it.
 */

/** Deeper than any chat request needs; deep enough that no real tool schema is refused. */
export const MAX_JSON_DEPTH = 64;

/**
 * Deeper than any vendor's answer or frame nests (a tool call's input inside a content block inside
 * an answer, with room to spare). Past ~25,000 levels JSON.stringify takes a second and more, and
 * past ~40,000 it throws: an upstream's 90 KB of brackets in a field of its own made a paid 500
 * and froze every request for seconds (a raw-TCP probe, 2026-11-30).
 */
export const MAX_ANSWER_DEPTH = 256;

/**
 * Whether a vendor's JSON text nests deeper than MAX_ANSWER_DEPTH. A text shorter than twice the
 * limit cannot (each level takes two characters), so the usual stream frame is not read at all.
 */
export function nestsTooDeep(text: string): boolean {
  return text.length > 2 * MAX_ANSWER_DEPTH && nestingDepth(text, MAX_ANSWER_DEPTH) > MAX_ANSWER_DEPTH;
}

/**
 * How deeply a JSON text nests, outside strings, stopping as soon as it passes `limit`.
 * JSON.parse itself copes with 100,000 levels, but everything after it (validation, error
 * reports, re-serialising for the upstream) walks the value recursively, slowly or to a stack
 * overflow; and parsing first would let 10 MB of brackets build millions of nested arrays
 * (700 ms and 400 MB for 5,000,000) only to refuse them. Strings, most of a conversation's
 * bytes, are jumped over with indexOf rather than read a character at a time: 13–25 µs for a
 * 210 KB conversation instead of 220.
 */
export function nestingDepth(text: string, limit: number): number {
  return jsonShape(text, limit, Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY).depth;
}

/**
 * Most objects and arrays, and most members of objects, in one body; and most members of one
 * object. Bodies of many small values under the byte cap cost the request thread far more than
 * their bytes: 10 MB of nested empty arrays took JSON.parse 650 ms (every tenant's requests
 * waited, RSS 3.9 GB with a few at once), one object of 700,000 keys over a second; free token
 * counting let a tenant send them at 600 a minute. A real conversation holds a few thousand
 * (Claude Code's largest: a few thousand messages, each a handful of objects and members); an
 * embeddings batch of token ids is a flat array of numbers, which costs little and is not counted.
 */
export const MAX_JSON_CONTAINERS = 100_000;
export const MAX_JSON_MEMBERS = 100_000;
export const MAX_OBJECT_MEMBERS = 10_000;

/**
 * A JSON text's deepest nesting and its count of objects and arrays and of object members,
 * outside strings; stops as soon as one passes its limit (`over` says which).
 */
export function jsonShape(text: string, maxDepth: number, maxContainers: number, maxMembers: number): { depth: number; over?: "depth" | "containers" | "members" | "object"; containers?: number; members?: number } {
  let depth = 0;
  let max = 0;
  let containers = 0;
  let members = 0;
  // Per open level: whether it is an object, and its members so far.
  const isObject: boolean[] = [];
  const objectMembers: number[] = [];
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 34 /* " */) {
      // The closing quote is the next one not escaped by an odd run of backslashes.
      for (;;) {
        const quote = text.indexOf('"', i + 1);
        if (quote === -1) return { depth: max }; // unterminated: JSON.parse refuses it
        let before = quote - 1;
        while (text.charCodeAt(before) === 92 /* \ */) before--;
        i = quote;
        if ((quote - 1 - before) % 2 === 0) break;
      }
    } else if (c === 123 /* { */ || c === 91 /* [ */) {
      if (++depth > max && (max = depth) > maxDepth) return { depth: max, over: "depth" };
      if (++containers > maxContainers) return { depth: max, over: "containers" };
      isObject[depth] = c === 123;
      objectMembers[depth] = 0;
    } else if (c === 125 || c === 93) depth--;
    else if (c === 44 /* , */ && isObject[depth]) {
      if (++members > maxMembers) return { depth: max, over: "members" };
      if (++objectMembers[depth]! >= MAX_OBJECT_MEMBERS) return { depth: max, over: "object" };
    }
  }
  return { depth: max, containers, members };
}

/**
 * What a request's JSON-in-strings may still hold, all of its tool calls together (one budget per
 * request): 33 calls of 99,990 containers each fit in 10 MB, each under the body's own limits,
 * and took 0.6 s to parse and write out again (a reviewer's finding).
 */
export interface JsonBudget {
  containers: number;
  members: number;
}

/** A fresh budget: as much as one request body may hold. */
export const jsonBudget = (): JsonBudget => ({ containers: MAX_JSON_CONTAINERS, members: MAX_JSON_MEMBERS });

/**
 * A tool call's arguments (JSON text) as the object Anthropic's `tool_use.input` needs. Text that
 * is not JSON, or JSON that is not an object, stays visible (`{_raw}`, `{value}`) so the call still
 * goes through. So does JSON past the body's own limits: a 90 KB string of 45,000 nested brackets
 * in an earlier call's `arguments` passed the body's checks (it is one string there), and parsing
 * it and writing it out again for the upstream took the request thread 1.5 s to a stack overflow,
 * every tenant waiting (a hostile-tenant probe, 2026-11-30). Checked first, it costs a scan.
 * `budget` is shared by the calls of one request (or answer) and spent by each parsed one.
 */
export function toolInput(text: string | undefined, budget: JsonBudget = { containers: MAX_JSON_CONTAINERS, members: MAX_JSON_MEMBERS }): Record<string, unknown> {
  if (!text || text.trim() === "") return {};
  const shape = jsonShape(text, MAX_JSON_DEPTH, budget.containers, budget.members);
  if (shape.over !== undefined) return { _raw: text };
  budget.containers -= shape.containers ?? 0;
  budget.members -= shape.members ?? 0;
  try {
    const value: unknown = JSON.parse(text);
    return value !== null && typeof value === "object" && !Array.isArray(value) ? (value as Record<string, unknown>) : { value };
  } catch {
    return { _raw: text };
  }
}

/**
 * Whether JSON text that arrives in pieces (a tool call's streamed arguments) is one whole object
 * yet, as `JSON.parse` of the whole text would say, kept up to date piece by piece: the text is
 * scanned once (strings, escapes, depth), and parsed only when its outermost object closes with
 * nothing but whitespace after it. Asked after every event of an answer, parsing the whole text
 * each time was quadratic: 20,000 argument chunks took 6.7 s (an audit).
 */
export class JsonObjectProgress {
  #text = "";
  #depth = 0;
  #inString = false;
  #escaped = false;
  /** The first character that is not whitespace was `{`; false once anything else came first. */
  #object: boolean | undefined;
  /** The outermost object closed; anything but whitespace after it means the text is not one object. */
  #closed = false;
  #trailing = false;
  #whole: boolean | undefined;

  get text(): string {
    return this.#text;
  }

  append(piece: string): void {
    this.#text += piece;
    if (this.#object === false || this.#trailing) return;
    if (this.#closed) {
      // Whitespace after the object changes nothing (its answer stays, parsed once: a closed but
      // broken object followed by 40,000 spaces was parsed 40,000 times, a probe); anything else
      // means it is not one object.
      for (let i = 0; i < piece.length; i++) if (!isSpace(piece.charCodeAt(i))) this.#trailing = true;
      return;
    }
    this.#whole = undefined;
    for (let i = 0; i < piece.length; i++) {
      const c = piece.charCodeAt(i);
      if (this.#closed) {
        if (!isSpace(c)) this.#trailing = true;
        if (this.#trailing) return;
        continue;
      }
      if (this.#inString) {
        if (this.#escaped) this.#escaped = false;
        else if (c === 92 /* \ */) this.#escaped = true;
        else if (c === 34 /* " */) this.#inString = false;
        continue;
      }
      if (this.#object === undefined) {
        if (isSpace(c)) continue;
        this.#object = c === 123 /* { */;
        if (!this.#object) return;
      }
      if (c === 34) this.#inString = true;
      else if (c === 123 || c === 91) this.#depth++;
      else if (c === 125 || c === 93) {
        if (--this.#depth === 0) this.#closed = true;
      }
    }
  }

  /**
   * One whole JSON object (what `JSON.parse` takes), with nothing after it but whitespace. Empty
   * is not (a parameterless call may still send `{}`), nor is `12` (more digits may follow:
   * arguments are an object).
   */
  get whole(): boolean {
    if (!this.#closed || this.#trailing || this.#object !== true) return false;
    if (this.#whole === undefined) {
      try {
        JSON.parse(this.#text);
        this.#whole = true;
      } catch {
        this.#whole = false;
      }
    }
    return this.#whole;
  }
}

const isSpace = (c: number) => c === 32 || c === 9 || c === 10 || c === 13;

/** A JSON object (not an array, not null): what a vendor frame or one of its parts must be to be read. */
export const isJsonObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);
