import { toolInput } from "./json-shape.ts";

/**
 * A tool call's arguments streamed to an Anthropic client as `input_json_delta`s that always stay
 * JSON, whatever the upstream wrote. Anthropic's own arguments always are; an OpenAI-kind upstream's
 * need not be (a small model's `{"city": Paris}`, Python's `True`, a trailing comma, OpenAI's two
 * objects run together), and the Anthropic SDK parses the deltas as they come (`partialParse` of
 * the text so far: `messages.stream()`, `finalMessage()`, Claude Code): text that is not a prefix
 * of JSON throws, and the whole answer is lost. A whole answer already carries such arguments as
 * `{_raw}` (json-shape.ts, `toolInput`).
 *
 * Pieces go out as they come while the text so far is a prefix of one JSON object. From the first
 * character that is not, nothing more goes out, and `finish` writes what completes what went out
 * into an object that also holds the whole text as `_raw` (`{"city": ` + `null,"_raw":"…"}`); text
 * that did not start as an object is written whole at the end, as the whole answer writes it. A
 * prefix that is still incomplete at the end (cut by the token cap) is left as it is: the SDK
 * reads an unfinished prefix. Pure, and linear in what it is given.
 */
export class ToolArgumentsStream {
  #raw = "";
  /** Text went out (a `{` and what followed it); before, only whitespace came. */
  #started = false;
  #broken = false;
  /** Open containers, innermost last: `o` object, `a` array. */
  readonly #stack: ("o" | "a")[] = [];
  #state: State = "start";
  /** Inside a string: whether it is an object's key; its escape (`\`, or `\u` and the hex digits read so far). */
  #string: "key" | "value" | undefined;
  #escape: "" | "\\" | "u0" | "u1" | "u2" | "u3" = "";
  #number: NumberState | undefined;
  /** Inside `true`, `false` or `null`: the letters still to come. */
  #literal = "";

  /** What of `piece` may go out now (all of it, while the text stays a prefix of an object). */
  push(piece: string): string {
    this.#raw += piece;
    if (this.#broken) return "";
    for (let i = 0; i < piece.length; i++) {
      // Inside a string only a quote, a backslash or a control character changes anything: jumped
      // to (a file's content written by a tool is most of a call's arguments).
      if (this.#string !== undefined && this.#escape === "") {
        STRING_STOP.lastIndex = i;
        if (!STRING_STOP.test(piece)) break;
        i = STRING_STOP.lastIndex - 1;
      }
      if (!this.#step(piece.charCodeAt(i))) {
        this.#broken = true;
        return this.#started ? piece.slice(0, i) : "";
      }
    }
    return this.#started ? piece : "";
  }

  /** What closes the text that went out into one object, when the upstream's was not one; else "". */
  finish(): string {
    if (!this.#broken) return "";
    if (!this.#started) return JSON.stringify(toolInput(this.#raw));
    // The object closed before the text went wrong (two objects run together): it stands.
    if (this.#state === "done") return "";
    let out = "";
    if (this.#string !== undefined) {
      if (this.#escape === "\\") out += "\\";
      else if (this.#escape.startsWith("u")) out += "0".repeat(4 - Number(this.#escape[1]));
      out += '"';
      this.#state = this.#string === "key" ? "colon" : "after";
    } else if (this.#number !== undefined) {
      if (!COMPLETE_NUMBER.has(this.#number)) out += "0";
      this.#state = "after";
    } else if (this.#literal) {
      out += this.#literal;
      this.#state = "after";
    }
    if (this.#state === "colon") out += ":null";
    else if (this.#state === "value") out += "null";
    // A nested object waiting for a key after a comma gets one; the outermost gets `_raw`.
    else if (this.#state === "key" && this.#stack.length > 1) out += '"":null';
    for (let depth = this.#stack.length - 1; depth > 0; depth--) out += this.#stack[depth] === "o" ? "}" : "]";
    const empty = this.#stack.length === 1 && (this.#state === "key-or-end" || this.#state === "key");
    return `${out}${empty ? "" : ","}"_raw":${JSON.stringify(this.#raw)}}`;
  }

  /** One character: false when the text is no longer a prefix of a JSON object. */
  #step(c: number): boolean {
    if (this.#string !== undefined) return this.#inString(c);
    if (this.#literal) {
      if (c !== this.#literal.charCodeAt(0)) return false;
      this.#literal = this.#literal.slice(1);
      if (!this.#literal) this.#state = "after";
      return true;
    }
    if (this.#number !== undefined) {
      const next = nextNumber(this.#number, c);
      if (next) {
        this.#number = next;
        return true;
      }
      if (!COMPLETE_NUMBER.has(this.#number)) return false;
      this.#number = undefined;
      this.#state = "after";
    }
    if (isSpace(c)) return true;
    switch (this.#state) {
      case "start":
        if (c !== 123 /* { */) return false;
        this.#started = true;
        return this.#open("o");
      case "done":
        return false;
      case "key-or-end":
        if (c === 125 /* } */) return this.#close("o");
        if (c !== 34 /* " */) return false;
        this.#string = "key";
        return true;
      case "key":
        if (c !== 34) return false;
        this.#string = "key";
        return true;
      case "colon":
        if (c !== 58 /* : */) return false;
        this.#state = "value";
        return true;
      case "value-or-end":
        if (c === 93 /* ] */) return this.#close("a");
        return this.#value(c);
      case "value":
        return this.#value(c);
      case "after":
        if (c === 44 /* , */) {
          this.#state = this.#stack.at(-1) === "o" ? "key" : "value";
          return true;
        }
        if (c === 125) return this.#close("o");
        if (c === 93) return this.#close("a");
        return false;
    }
  }

  #value(c: number): boolean {
    if (c === 34) {
      this.#string = "value";
      return true;
    }
    if (c === 123) return this.#open("o");
    if (c === 91 /* [ */) return this.#open("a");
    if (c === 116 /* t */) this.#literal = "rue";
    else if (c === 102 /* f */) this.#literal = "alse";
    else if (c === 110 /* n */) this.#literal = "ull";
    else {
      const number = nextNumber("none", c);
      if (!number) return false;
      this.#number = number;
    }
    return true;
  }

  #open(kind: "o" | "a"): boolean {
    this.#stack.push(kind);
    this.#state = kind === "o" ? "key-or-end" : "value-or-end";
    return true;
  }

  #close(kind: "o" | "a"): boolean {
    if (this.#stack.at(-1) !== kind) return false;
    this.#stack.pop();
    this.#state = this.#stack.length === 0 ? "done" : "after";
    return true;
  }

  #inString(c: number): boolean {
    if (this.#escape === "\\") {
      if (c === 117 /* u */) this.#escape = "u0";
      else if (ESCAPES.has(c)) this.#escape = "";
      else return false;
      return true;
    }
    if (this.#escape !== "") {
      if (!isHex(c)) return false;
      const read = Number(this.#escape[1]) + 1;
      this.#escape = read === 4 ? "" : (`u${read}` as "u1" | "u2" | "u3");
      return true;
    }
    if (c === 92 /* \ */) this.#escape = "\\";
    else if (c === 34) {
      this.#state = this.#string === "key" ? "colon" : "after";
      this.#string = undefined;
    } else if (c < 0x20) return false;
    return true;
  }
}

/** Where the parser stands outside strings, numbers and literals. */
type State = "start" | "key-or-end" | "key" | "colon" | "value" | "value-or-end" | "after" | "done";

/** A JSON number read so far: `-`, `0`, digits, `.`, fraction digits, `e`, its sign, its digits. */
type NumberState = "none" | "sign" | "zero" | "int" | "dot" | "frac" | "exp" | "exp-sign" | "exp-digits";
const COMPLETE_NUMBER: ReadonlySet<NumberState> = new Set(["zero", "int", "frac", "exp-digits"]);

function nextNumber(at: NumberState, c: number): NumberState | undefined {
  const digit = c >= 48 && c <= 57;
  switch (at) {
    case "none":
      return c === 45 /* - */ ? "sign" : c === 48 ? "zero" : digit ? "int" : undefined;
    case "sign":
      return c === 48 ? "zero" : digit ? "int" : undefined;
    case "zero":
      return c === 46 /* . */ ? "dot" : c === 101 || c === 69 /* e E */ ? "exp" : undefined;
    case "int":
      return digit ? "int" : c === 46 ? "dot" : c === 101 || c === 69 ? "exp" : undefined;
    case "dot":
      return digit ? "frac" : undefined;
    case "frac":
      return digit ? "frac" : c === 101 || c === 69 ? "exp" : undefined;
    case "exp":
      return c === 43 || c === 45 /* + - */ ? "exp-sign" : digit ? "exp-digits" : undefined;
    case "exp-sign":
    case "exp-digits":
      return digit ? "exp-digits" : undefined;
  }
}

/** What ends plain string content: a quote, a backslash, or a control character (not JSON inside a string). */
const STRING_STOP = /["\\\u0000-\u001f]/g;

/** The characters a `\` may escape in JSON (other than `u`). */
const ESCAPES: ReadonlySet<number> = new Set([34, 92, 47, 98, 102, 110, 114, 116]);
const isHex = (c: number) => (c >= 48 && c <= 57) || (c >= 65 && c <= 70) || (c >= 97 && c <= 102);
const isSpace = (c: number) => c === 32 || c === 9 || c === 10 || c === 13;
