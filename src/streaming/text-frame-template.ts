import type { SseEvent } from "./sse-parser.ts";

/**
 * Reading a vendor's text frames without parsing them.
 *
 * Within one answer a vendor writes every plain text frame the same way: OpenAI's chunk repeats
 * its id, `created`, model and fingerprint, then `"delta":{"content":"…"}` and the same tail;
 * Anthropic's `content_block_delta` differs only in its text. A translating stream parsed each
 * one whole (`JSON.parse`: ~0.27 µs and a handful of objects a frame; a template's read is ~0.07
 * µs and one string; about 3 % of a Claude Code path stream in all). A template is learnt from one frame the decoder has
 * parsed and found to mean its text alone: everything before the text's string literal (the
 * head) and after it (the tail). A later frame with that head and tail, and a valid JSON string
 * between them, is the same JSON with another text: it means that text, and nothing else.
 * Anything else (another key, a finish, usage, an error, a literal that is not a whole string) is
 * parsed as before, so a template only ever saves work.
 */
export interface TextFrameTemplate {
  /** The text of a frame made on this template, or undefined: parse it. */
  read(data: string): string | undefined;
}

/**
 * A template from `data`, a frame already parsed whose only meaning is `text`, the string value of
 * its key `key` (written with its quotes: `"content"`). None when the key is not written exactly
 * once or its literal does not hold `text` (a vendor that escapes differently from JSON.stringify
 * is still found: the literal is read, not searched for).
 *
 * `reads`: where the decoder takes the text from in the parsed frame; the template is refused
 * unless that is the literal found.
 *
 * `padding`: a key after the text whose string value changes from frame to frame and means
 * nothing (OpenAI's `"obfuscation"`, random characters that hide the text's length on the wire).
 * Its value may be anything without a quote, a backslash or a control character.
 */
export function learnTextFrame(data: string, key: string, text: string, reads: (parsed: unknown) => unknown, padding?: string): TextFrameTemplate | undefined {
  const literal = onlyLiteral(data, key, 0);
  if (literal === undefined) return undefined;
  const [start, end] = literal;
  try {
    if (JSON.parse(data.slice(start, end + 1)) !== text) return undefined;
  } catch {
    return undefined;
  }
  const head = data.slice(0, start);
  // The tail, split around the padding's value when there is one: [before it, after it].
  let middle = data.slice(end + 1);
  let last = "";
  const pad = padding === undefined ? undefined : onlyLiteral(data, padding, end + 1);
  if (pad !== undefined) {
    if (!plain(data, pad[0] + 1, pad[1])) return undefined;
    middle = data.slice(end + 1, pad[0] + 1);
    last = data.slice(pad[1]);
  }
  // The literal found must be the one the decoder reads: a key written twice (JSON keeps the last),
  // spelt another way (`"content" :`, `"\u0063ontent"`) or at another path would let later frames
  // say one text to the client's parser and another to ours. The frame with another text in the
  // literal, parsed, must read as that text.
  const probe = text === "\u0000" ? "\u0001" : "\u0000";
  try {
    const padValue = pad === undefined ? "" : data.slice(pad[0] + 1, pad[1]);
    if (reads(JSON.parse(`${head}${JSON.stringify(probe)}${middle}${padValue}${last}`)) !== probe) return undefined;
  } catch {
    return undefined;
  }
  const least = head.length + middle.length + last.length + 2;
  return {
    read(frame) {
      if (frame.length < least || !frame.startsWith(head) || !frame.endsWith(last)) return undefined;
      const open = head.length;
      let close: number;
      if (pad === undefined) {
        if (!frame.endsWith(middle)) return undefined;
        close = frame.length - middle.length - 1;
      } else {
        // The padding's value has no quote, so its key is the last place the part before it is.
        const padAt = frame.lastIndexOf(middle, frame.length - last.length - middle.length);
        if (padAt <= open || !plain(frame, padAt + middle.length, frame.length - last.length)) return undefined;
        close = padAt - 1;
      }
      if (close <= open || frame.charCodeAt(open) !== 34 || frame.charCodeAt(close) !== 34) return undefined;
      // No quote, backslash or control character: the text is the literal's inside as it is.
      if (plain(frame, open + 1, close)) return frame.slice(open + 1, close);
      try {
        // Escapes are JSON's to read; a stray quote makes this throw, and the frame is parsed whole.
        const value: unknown = JSON.parse(frame.slice(open, close + 1));
        return typeof value === "string" ? value : undefined;
      } catch {
        return undefined;
      }
    },
  };
}

/** How many text frames may teach one stream's reader (again when the one learnt stops fitting). */
const LEARN_TRIES = 3;

/**
 * One stream decoder's template, with the frame's event name as part of it: `read` before
 * parsing a frame, `learn` from a parsed frame whose only meaning is `text`. A few frames may
 * teach it, so a template that stops fitting (a text block after a thinking one has another index)
 * is learnt again, while a server whose frames never repeat (it numbers its chunks) costs only
 * those few tries.
 */
export function textFrameReader(key: string, reads: (parsed: unknown) => unknown, padding?: string) {
  let template: TextFrameTemplate | undefined;
  let event: string | undefined;
  let tries = LEARN_TRIES;
  return {
    read: (frame: SseEvent): string | undefined => (template !== undefined && frame.event === event ? template.read(frame.data) : undefined),
    learn(frame: SseEvent, text: string): void {
      if (tries === 0) return;
      tries--;
      const learnt = learnTextFrame(frame.data, key, text, reads, padding);
      if (learnt) [template, event] = [learnt, frame.event];
    },
  };
}

/**
 * The string literal (the indexes of its quotes) of `key`, written once in `data` after `from`
 * and nowhere before it. In valid JSON a quoted name followed by its colon is a key: quotes inside
 * strings are escaped.
 */
function onlyLiteral(data: string, key: string, from: number): [number, number] | undefined {
  const marker = `${key}:"`;
  const at = data.indexOf(marker, from);
  if (at === -1 || data.indexOf(marker, at + 1) !== -1 || (from > 0 && data.lastIndexOf(marker, from) !== -1)) return undefined;
  const start = at + marker.length - 1;
  const end = closingQuote(data, start + 1);
  return end === -1 ? undefined : [start, end];
}

/** Whether `text` from `from` to `to` holds no quote, backslash or control character (a loop: a
 * frame's text is a few characters, for which a regular expression's call costs more than its scan). */
function plain(text: string, from: number, to: number): boolean {
  for (let i = from; i < to; i++) {
    const c = text.charCodeAt(i);
    if (c < 32 || c === 34 || c === 92) return false;
  }
  return true;
}

/** The index of the quote that ends the string whose text starts at `from`, or -1. */
function closingQuote(data: string, from: number): number {
  for (let i = data.indexOf('"', from); i !== -1; i = data.indexOf('"', i + 1)) {
    let slashes = 0;
    while (data.charCodeAt(i - 1 - slashes) === 92 /* \ */) slashes++;
    if (slashes % 2 === 0) return i;
  }
  return -1;
}
