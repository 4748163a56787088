/**
 * A known secret (a configured vendor key) split across a stream's text frames.
 *
 * Each frame's data loses the known secrets it holds whole (log/scrub.ts, `withoutKnown`), but an
 * upstream that echoes its key as generated text writes it a few characters a frame, and no one
 * frame holds it (a raw-TCP probe, thirty-first session: `sk-live-` in one delta, the rest in the
 * next, reached the client whole). This guard reads the answer's text as one run, in order:
 *
 * - a secret whole in the run (held text and the new piece together, or written with escapes the
 *   frame's own scrub did not know) goes out as `[redacted]`;
 * - a piece that ends with a secret's first `HOLD_FROM` characters or more is held back, that end
 *   only, until the next piece says whether the secret follows;
 * - fewer than `HOLD_FROM` characters of a secret's start go out (holding every delta that ends
 *   in `s` would hold one frame in twenty), and the rest of that secret, when the next piece
 *   starts with it, goes out as `[redacted]`: at most three characters of a key reach the client.
 *
 * What ends the text (a finish, a tool call, a block's end, the answer's end) lets what is held go,
 * as it came: a secret's start that no rest followed is not the secret. What says nothing (a ping,
 * an empty delta, usage) lets nothing go: released there, a held start went out whole and the rest,
 * past the last three characters sent, was no longer known for the secret's (a review). A failure
 * drops what is held. A pure core: the stream stage decides when a piece ends the text, and how a
 * changed piece is written (stream-answer.ts).
 */

const REDACTED = "[redacted]";
/** The shortest start of a secret a piece's end is held back for. */
export const HOLD_FROM = 4;

export interface SplitSecretGuard {
  /** What of the answer's next text goes out now (the same string when nothing changed); the rest is held. */
  text(piece: string): string;
  /** What is held, let go (not followed by text): "" when nothing is. */
  flush(): string;
  /** What is held, dropped: the answer failed, and a key's start is not let out before its error. */
  discard(): void;
}

/** What a guard needs of a secret list, worked out once per list (a gateway's list grows only as it starts). */
interface Prepared {
  count: number;
  known: readonly string[];
  /** Each secret's first HOLD_FROM characters: nothing can happen to a run that holds none of them. */
  heads: readonly string[];
  /** Each head cut in two after its first 1 to HOLD_FROM - 1 characters: one that straddles what was sent and a piece. */
  splits: readonly (readonly [string, string])[];
}
const preparedLists = new WeakMap<readonly string[], Prepared>();

function prepare(secrets: readonly string[]): Prepared {
  let prepared = preparedLists.get(secrets);
  if (!prepared || prepared.count !== secrets.length) {
    const known = secrets.filter((s) => s.length > HOLD_FROM);
    const heads = [...new Set(known.map((s) => s.slice(0, HOLD_FROM)))];
    const splits = heads.flatMap((head) => Array.from({ length: HOLD_FROM - 1 }, (_, i) => [head.slice(0, i + 1), head.slice(i + 1)] as const));
    prepared = { count: secrets.length, known, heads, splits };
    preparedLists.set(secrets, prepared);
  }
  return prepared;
}

/** A guard for `secrets` (8 characters or more, as the scrubber keeps them), or undefined when there are none. */
export function createSplitSecretGuard(secrets: readonly string[]): SplitSecretGuard | undefined {
  const { known, heads, splits } = prepare(secrets);
  if (known.length === 0) return undefined;
  /** Text not sent yet: the start of a secret, maybe. */
  let held = "";
  /**
   * The last characters sent, HOLD_FROM - 1 of them or more (the last piece whole, when it is that
   * long: no string is cut per piece): a secret may have begun in them.
   */
  let tail = "";

  /** The earliest place in `text` from which it runs to its end as a secret's start of HOLD_FROM characters or more, or -1. */
  const startOfSecret = (text: string): number => {
    let from = -1;
    for (const secret of known) {
      const first = secret[0]!;
      // Shorter than the secret (a whole one is already replaced), HOLD_FROM or longer.
      let at = text.indexOf(first, Math.max(0, text.length - secret.length + 1));
      while (at !== -1 && at <= text.length - HOLD_FROM && (from === -1 || at < from)) {
        if (secret.startsWith(text.slice(at))) {
          from = at;
          break;
        }
        at = text.indexOf(first, at + 1);
      }
    }
    return from;
  };

  /**
   * Whether the run `tail + piece` (nothing held) holds a secret's first HOLD_FROM characters: a
   * held start, a whole secret and one begun in what was sent all do. Most pieces hold none, and
   * go out as they are, with no string made but the new tail.
   */
  const mayHold = (piece: string): boolean => {
    for (const head of heads) if (piece.includes(head)) return true;
    if (tail !== "") for (const [sent, rest] of splits) if (tail.endsWith(sent) && piece.startsWith(rest)) return true;
    return false;
  };

  return {
    text(piece) {
      if (held === "" && !mayHold(piece)) {
        tail = piece.length >= HOLD_FROM - 1 ? piece : (tail + piece).slice(-(HOLD_FROM - 1));
        return piece;
      }
      // The run as the client's text has it: what was sent last, what is held, the new piece.
      const sent = tail.length;
      let run = tail + held + piece;
      held = "";
      for (const secret of known) {
        // One that began in what was sent: the rest of it goes as the placeholder.
        const begun = sent === 0 ? -1 : run.indexOf(secret, Math.max(0, sent - secret.length + 1));
        if (begun !== -1 && begun < sent) run = run.slice(0, sent) + REDACTED + run.slice(begun + secret.length);
        if (run.includes(secret, sent)) run = run.slice(0, sent) + run.slice(sent).split(secret).join(REDACTED);
      }
      const from = startOfSecret(run);
      const cut = from === -1 ? run.length : Math.max(from, sent);
      held = run.slice(cut);
      const out = run.slice(sent, cut);
      tail = run.slice(0, cut).slice(-(HOLD_FROM - 1));
      return out;
    },
    flush() {
      const out = held;
      held = "";
      if (out !== "") tail = (tail + out).slice(-(HOLD_FROM - 1));
      return out;
    },
    discard() {
      held = "";
    },
  };
}
