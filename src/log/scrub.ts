/**
 * Scrubbing of text the gateway did not write (an upstream's error message, an error's text on
 * its way to a log) before it goes somewhere it must not leak.
 *
 * - `scrubSecrets` removes what is shaped like a credential: vendor and gateway keys, AWS key
 *   ids and secrets, JWTs, bearer tokens, secret-named fields and query parameters, passwords in
 *   URLs, private keys. It is what every log line gets: hosts and paths stay, operators need them.
 * - `scrubForClient` also removes what tells an outsider about our infrastructure: URLs, host
 *   names, IP addresses, file paths, stack traces, ARNs and account ids, long opaque tokens. It
 *   keeps the rest of the vendor's words ("max_tokens: 9000 > 8192, which is the maximum
 *   allowed"), which SDK users read to fix their request, and caps the length.
 *
 * Every pattern runs in linear time on hostile input, by construction: a match may only start
 * where a run of its characters starts (a lookbehind, or a literal prefix), and every repeated
 * class is followed by a character the class cannot contain, so an attempt that fails never
 * leaves work for the attempts after it. Bounded repeats ({1,4}) are the only nesting.
 */

const REDACTED = "[redacted]";

// ---------------------------------------------------------------------------------------------
// Secrets (logs and clients)
// ---------------------------------------------------------------------------------------------

/** PEM private keys, to their END line or, cut off, to the end of the text. */
const PRIVATE_KEY = /-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY-----[\s\S]*?(?:-----END[A-Z0-9 ]{0,40}PRIVATE KEY-----|$)/g;

/** `user:password@` in a URL. */
const URL_PASSWORD = /(\/\/)[^\s\/@:"'<>]+:[^\s\/@"'<>]*@/g;

/** An Authorization header's value, whatever its scheme. */
const AUTHORIZATION = /(?<![A-Za-z0-9])(authorization["']?\s*[:=]\s*["']?)(?:(?:bearer|basic|token|digest)\s+)?[^\s"',;]+/gi;

/** `Bearer <token>` anywhere (a token shorter than 8 is a word, as in "Bearer token missing"). */
const BEARER = /(?<![A-Za-z0-9])(bearer\s+)[A-Za-z0-9._~+\/=-]{8,}/gi;

/** Fields whose value is a secret, as JSON, YAML, env or header text: `"api_key": "…"`, `password=…`. */
const SECRET_FIELD = new RegExp(
  String.raw`(?<![A-Za-z0-9])((?:x-)?(?:goog-)?(?:api[_-]?key|apikey|access[_-]?token|refresh[_-]?token|auth[_-]?token|session[_-]?token|security[_-]?token|id[_-]?token|client[_-]?secret|secret[_-]?(?:access[_-]?)?key|aws[_-]?secret(?:[_-]?access)?(?:[_-]?key)?|private[_-]?key|password|passwd)["']?\s*[:=]\s*["']?)[^\s"'&,;<>)}\]]+`,
  "gi",
);

/** Query parameters (and `key=` in prose) that carry credentials. */
const SECRET_PARAM = /(?<![\w-])((?:key|token|secret|sig|signature|code|auth|x-amz-signature|x-amz-credential|x-amz-security-token)=)[^\s&"'#<>]+/gi;

/**
 * Tokens recognisable by their prefix, each a whole run of token characters: OpenAI (`sk-`,
 * `sk-proj-`, masked `sk-proj-****abcd`), Anthropic (`sk-ant-`), ours (`svc-sk-`), Google
 * (`AIza`), GitHub (`ghp_`…), Slack (`xox?-`), AWS access key ids, JWTs and JWEs.
 */
const SECRET_TOKEN = new RegExp(
  String.raw`(?<![\w-])(?:` +
    [
      String.raw`(?:svc-)?sk-[\w*-]{6,}`,
      String.raw`AIza[\w-]{20,}`,
      String.raw`(?:ghp|gho|ghu|ghs|ghr|github_pat)_\w{20,}`,
      String.raw`xox[abposre]-[\w-]{10,}`,
      String.raw`(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}`,
      String.raw`eyJ[\w-]+(?:\.[\w-]*){1,4}`,
    ].join("|") +
    String.raw`)(?![\w-])`,
  "g",
);

/**
 * What every pattern above needs somewhere in its match, case aside: `PRIVATE KEY`, the `@` of
 * a URL's password, `authorization`, `bearer`, a secret field's name (each ends in key, token,
 * secret or passw(or)d) before its `:` (or `=`), the `=` of a query parameter, and each token
 * prefix. A text without any of them has nothing to remove, and one test is cheaper than seven
 * passes: most strings a log line carries (ids such as `key_…`, model names, paths, outcomes)
 * are decided here. test/unit/log/scrub.test.ts checks this filter against the patterns on every leak
 * shape and on random text.
 */
const MAY_HOLD_SECRET = /PRIVATE KEY|[@=]|(?:key|token|secret|passw(?:or)?d)["']?\s*:|authorization|bearer|sk-|AIza|gh[opusr]_|github_pat_|xox|A(?:KIA|SIA|GPA|IDA|ROA|NPA|NVA|IPA)|eyJ/i;

/** Whether a text may hold a credential: false means `scrubSecrets` would return it unchanged. */
export function mayHoldSecret(text: string): boolean {
  return MAY_HOLD_SECRET.test(text);
}

/** Credentials removed, everything else left as it is: for log lines. */
export function scrubSecrets(text: string): string {
  return MAY_HOLD_SECRET.test(text) ? replaceSecrets(text) : text;
}

/** Every secret pattern applied, without the filter in front (what `scrubSecrets` does to a text the filter lets through). */
export function replaceSecrets(text: string): string {
  return text
    .replace(PRIVATE_KEY, REDACTED)
    .replace(URL_PASSWORD, `$1${REDACTED}@`)
    .replace(AUTHORIZATION, `$1${REDACTED}`)
    .replace(BEARER, `$1${REDACTED}`)
    .replace(SECRET_FIELD, `$1${REDACTED}`)
    .replace(SECRET_PARAM, `$1${REDACTED}`)
    .replace(SECRET_TOKEN, REDACTED);
}

/**
 * Secrets known by value: the configured vendor keys. A vendor that echoes our key ("Incorrect
 * API key provided: …") is caught by the shapes above for any key of a real vendor's form; a key
 * of another form (a self-hosted proxy's) is caught here, wherever it appears, as written and as
 * JSON writes it inside a string (quotes and backslashes escaped, `/` as `\/` too, as some
 * encoders do). Applied to what clients see of a vendor's words and to vendor details in log
 * lines. Each gateway has its own (app.ts creates it from its configuration), so two apps in one
 * process never scrub with each other's keys.
 */
export interface Scrubber {
  /**
   * Values that would match ordinary text are not remembered: shorter than 8 characters, or
   * letters only (placeholders such as `none`, `EMPTY`, `dummy`, `changeme` that self-hosted
   * servers accept); no real key is either.
   */
  remember(value: string | undefined): void;
  /** scrubForClient, the known secrets included. */
  forClient(text: string, max?: number): string;
  /** scrubLogDetail, the known secrets included. */
  logDetail(text: string, max?: number, echoOf?: string): string;
  /**
   * Only the known secrets replaced, the rest as it is (the same string when none is there): for
   * an answer relayed as the vendor wrote it, whose fields the gateway does not model (a vendor
   * echoing the key it was sent in a `debug_info` of its own, a raw-TCP probe, 2026-11-30).
   */
  withoutKnown(text: string): string;
  /** The known secrets' forms, for `withoutKnownSecrets` where the scrubber cannot go (a worker thread). */
  secrets(): readonly string[];
}

export function createScrubber(): Scrubber {
  const known: string[] = [];
  /** The first characters of each long known secret: a vendor's masked echo of it starts so (see withoutKnownStarts). */
  const starts: string[] = [];
  return {
    remember(value) {
      // Nor a value without letters (`20240101`): replaced in an answer's JSON text, it would break numbers.
      if (!value || value.length < 8 || /^[A-Za-z]+$/.test(value) || !/[A-Za-z]/.test(value)) return;
      const escaped = JSON.stringify(value).slice(1, -1);
      for (const form of [value, escaped, escaped.replaceAll("/", "\\/")]) if (!known.includes(form)) known.push(form);
      // Longest first: a key that contains another is replaced whole, not around the shorter one.
      known.sort((a, b) => b.length - a.length);
      const start = value.length >= 20 ? value.slice(0, 10) : value.length >= 16 ? value.slice(0, 8) : undefined;
      if (start !== undefined && !starts.includes(start)) starts.push(start);
    },
    // Whole values first: a key with a character a mask does not use (`/`, `+`, `=`) would be cut
    // at it by its start's run, and the rest of it would no longer be found whole (a review).
    forClient: (text, max) => scrubForClient(withoutKnownStarts(withoutKnownSecrets(text, known), starts), max, known),
    logDetail: (text, max, echoOf) => scrubLogDetail(withoutKnownStarts(withoutKnownSecrets(text, known), starts), max, echoOf, known),
    withoutKnown: (text) => withoutKnownSecrets(text, known),
    secrets: () => known,
  };
}

/** For decoders used without a gateway (tests, benches): the shapes only, no secret known by value. */
export const SHAPES_ONLY: Scrubber = {
  remember() {
    throw new Error("SHAPES_ONLY knows no secrets: create a scrubber (createScrubber) to remember one");
  },
  forClient: (text, max) => scrubForClient(text, max),
  logDetail: (text, max, echoOf) => scrubLogDetail(text, max, echoOf),
  withoutKnown: (text) => text,
  secrets: () => [],
};

/**
 * `text` without the masked echoes of known secrets: a vendor refusing a key often repeats its
 * start, with or without its end (`Xq7LmN2pR4sT...hJ9k`, `gsk_Q1w2E3r4T5y6U7i8****`), which the
 * shapes catch only for prefixes they know (`sk-`). A run of key characters (and the `*`, `.` or
 * `…` of a mask) that begins as a known secret of 16 characters or more begins (its first 10, or 8
 * for a shorter one) goes whole. Error text only (clients' messages, log details): an answer's own
 * text may mention a vendor's prefix, and is never changed for it.
 */
export function withoutKnownStarts(text: string, starts: readonly string[]): string {
  for (const start of starts) {
    let at = text.indexOf(start);
    if (at === -1) continue;
    // One pass, the pieces joined once: a body of many echoes is linear, not one copy per echo.
    const pieces: string[] = [];
    let from = 0;
    while (at !== -1) {
      let end = at + start.length;
      while (end < text.length && MASKED_KEY_CHAR.test(text[end]!)) end++;
      // A full stop after the echo is the sentence's (a mask of dots at the end stays as dots).
      while (end > at + start.length && text[end - 1] === ".") end--;
      pieces.push(text.slice(from, at), REDACTED);
      from = end;
      at = text.indexOf(start, end);
    }
    pieces.push(text.slice(from));
    text = pieces.join("");
  }
  return text;
}
/** What a masked key is written with: its own characters and the mask's. */
const MASKED_KEY_CHAR = /[\w*.…-]/;

/**
 * `text` with each of `known` replaced (the same string when none is there): as written, and as
 * JSON may write it with `\u` escapes, any character of it or all (.NET's System.Text.Json
 * writes `+` as `\u002B`; Python's `ensure_ascii` escapes more): a raw-TCP probe's key with
 * escaped `+` signs reached the client whole, decoded by its JSON parser (thirty-second session).
 */
export function withoutKnownSecrets(text: string, known: readonly string[]): string {
  for (const secret of known) if (text.includes(secret)) text = text.split(secret).join(REDACTED);
  if (known.length === 0 || !text.includes("\\u")) return text;
  const escaped = escapedForms(known);
  // Keys of ASCII characters escape only as \u00XX: a text of other escapes (CJK written by a
  // server that escapes all but ASCII) is not searched.
  if (escaped.ascii && !text.includes("\\u00")) return text;
  return text.replace(escaped.pattern, (match, at: number, whole: string) => {
    // A match whose first backslash is itself escaped (`\\u0073…` is a backslash, then text) is
    // text, not an escape: replaced, it left `\[redacted]`, which is not JSON (a review).
    let backslashes = 0;
    for (let i = at - 1; i >= 0 && whole.charCodeAt(i) === 92; i--) backslashes++;
    return backslashes % 2 === 1 ? match : REDACTED;
  });
}

/** One pattern for a list's escaped forms; whether its secrets are all ASCII. */
interface EscapedForms {
  pattern: RegExp;
  ascii: boolean;
}
/** By list: a gateway's scrubber keeps one list, which grows only as it starts (its length says when). */
const escapedByList = new WeakMap<readonly string[], { count: number; forms: EscapedForms }>();
/** By contents, for copies made one answer at a time (the embeddings worker's). */
const escapedByText = new Map<string, EscapedForms>();

/**
 * One pattern for every way JSON may write `known`: each UTF-16 unit as itself or as `\uXXXX`
 * (hex in either case), a `/` also as `\/`, a quote as `\"`, a backslash as `\\`; one
 * alternative per secret (a list holds a key as written and as JSON writes it: the same secret).
 * Alternatives of one unit each, in sequence, no repetition: linear in the text.
 */
function escapedForms(known: readonly string[]): EscapedForms {
  const cached = escapedByList.get(known);
  if (cached && cached.count === known.length) return cached.forms;
  const key = known.join("\n");
  let forms = escapedByText.get(key);
  if (!forms) {
    const secrets = [...new Set(known.map(unescapedForm))].sort((a, b) => b.length - a.length);
    const unit = (code: number): string => {
      const hex = code.toString(16).padStart(4, "0");
      const anyCase = [...hex].map((d) => (d >= "a" ? `[${d}${d.toUpperCase()}]` : d)).join("");
      const short = code === 0x2f ? "|\\\\/" : code === 0x22 ? '|\\\\"' : code === 0x5c ? "|\\\\\\\\" : "";
      return `(?:\\u${hex}|\\\\u${anyCase}${short})`;
    };
    const pattern = new RegExp(secrets.map((secret) => Array.from({ length: secret.length }, (_, i) => unit(secret.charCodeAt(i))).join("")).join("|"), "g");
    forms = { pattern, ascii: secrets.every((secret) => /^[\x00-\x7f]*$/.test(secret)) };
    if (escapedByText.size >= 16) escapedByText.clear();
    escapedByText.set(key, forms);
  }
  escapedByList.set(known, { count: known.length, forms });
  return forms;
}

/** A secret as written, from the form JSON gives it inside a string (itself when it is no such form). */
function unescapedForm(form: string): string {
  if (!form.includes("\\")) return form;
  try {
    return JSON.parse(`"${form}"`) as string;
  } catch {
    return form;
  }
}

// ---------------------------------------------------------------------------------------------
// Internals (clients only)
// ---------------------------------------------------------------------------------------------

/** A Python traceback: its header and every indented line after it; the exception line stays. */
const PY_TRACEBACK = /Traceback \(most recent call last\):[^\n]*(?:\n[ \t][^\n]*)*/g;
/** A Python frame outside a traceback block. */
const PY_FRAME = /\bFile "[^"\n]*", line \d+(?:, in [\w<>.]+)?/g;
/** Indented `at …` lines: Node, Java, .NET stack frames; Java's `... 12 more`. */
const AT_FRAME = /\n[ \t]+(?:at [^\n]*|\.\.\. \d+ more[^\n]*)/g;
/** A frame inside a line (a trace whose newlines a proxy flattened): `at f (/x.js:1:2)`, `at a.B.c(B.java:42)`. */
const INLINE_FRAME = /(?<![\w.])at [\w$.<>-]+(?: \[as [\w$.<>-]+\])? ?\([^()\n]*:\d+\)/g;

const URL_ANY = /\b[a-z][a-z0-9+.-]{0,15}:\/\/[^\s"'<>`)},]+/gi;
const ARN = /(?<![\w-])arn:aws[\w-]*:[^\s"'<>,;)\]}]+/g;
/** AWS account ids, and any other lone 12-digit number, which nothing a client needs looks like. */
const ACCOUNT_ID = /(?<![\w-])\d{12}(?![\w-])/g;
/**
 * Vendors' ids of the operator's own accounts: OpenAI's projects and organisations (`proj_…`,
 * `org-…`, under 32 characters, so LONG_TOKEN missed them), users and Anthropic's workspaces (a review).
 */
const VENDOR_ACCOUNT = /(?<![\w-])(?:proj|org|user|wrkspc)[-_][A-Za-z0-9]{12,}(?![\w-])/g;

const IPV4 = /(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5})?(?!\.?\d)/g;
const H = "[0-9A-Fa-f]{1,4}";
/** Full, `a::b`, and `::b` forms; brackets, a zone and a port go with the address. */
const IPV6 = new RegExp(
  String.raw`(?<![\w:.])\[?(?:(?:${H}:){7}${H}|(?:${H}:){1,6}:(?:${H}(?::${H}){0,5})?|::(?:${H}(?::${H}){0,6})?)(?:%[\w.]+)?(?:\](?::\d{1,5})?)?(?![\w:])`,
  "g",
);

/** Suffixes that make a dotted name a host: public ones vendors run on and private ones networks use. */
const TLD = new Set(
  ("com net org io ai dev app cloud co us eu uk de fr jp cn info biz xyz tech run " +
    "internal local localdomain lan intra intranet corp home svc cluster test example invalid").split(" "),
);
/**
 * A dotted run of host characters; whether it is a host is decided on the match, from its last
 * label, because a regex that backtracks label by label to find a suffix is slow on hostile input.
 */
const DOTTED = /(?<![\w.-])[a-z0-9-]+\.[a-z0-9.-]+(?::\d{1,5})?/gi;
const LOCALHOST = /(?<![\w.-])localhost(?::\d{1,5})?(?![\w-])/gi;

/** `api.internal.corp` → `[host]`; `foo.com.evil` → `[host].evil`; `gpt-4.1`, `main.py`, `System.IO` stay. */
function hostOrNot(match: string): string {
  const colon = match.lastIndexOf(":");
  const labels = (colon === -1 ? match : match.slice(0, colon)).split(".");
  for (let end = labels.length; end > 1; end--) {
    // Written lowercase, as host names are: `System.IO.File` is a .NET namespace, not a host.
    if (!TLD.has(labels[end - 1]!)) continue;
    if (end === labels.length) return "[host]";
    return `[host].${labels.slice(end).join(".")}${colon === -1 ? "" : match.slice(colon)}`;
  }
  return match;
}

/** Two segments or more (`/srv/app`), optionally `:line:col`; `./x/y` and `~/x/y` too; not a JSON pointer (`#/messages/0`). */
const UNIX_PATH = /(?<![\w.~\/:#-])(?:~|\.{1,2})?\/[\w.@%+~-]+\/[\w.@%+~\/-]*(?::\d+){0,2}/g;
/**
 * `C:\Program Files\x\y.dll` and `\\server\share\x`: the run up to a character no Windows path
 * holds; `windowsPath` then ends it at the first space after its last backslash (directories may
 * hold spaces, and the sentence goes on after the file name).
 */
const WINDOWS_PATH = /(?<![A-Za-z0-9])(?:[A-Za-z]:|\\\\[\w.$-]+)\\[^\r\n"'<>|?*:]*/g;

function windowsPath(match: string): string {
  const file = match.slice(match.lastIndexOf("\\"));
  const end = file.search(/\s/);
  return end === -1 ? "[path]" : `[path]${file.slice(end)}`;
}

/** Opaque tokens of letters and digits, 32 characters or more: keys without a known prefix, hashes, ids. */
const LONG_TOKEN = /(?<![\w+=-])(?=[\w+=-]*\d)(?=[\w+=-]*[A-Za-z])[\w+=-]{32,}(?![\w+=-])/g;

const HTML_DOCUMENT = /<!doctype|<html|<body|<head/i;
// `[^<>]` in the attributes: with `[^>]`, each of 100,000 `<h1 ` without a `>` scanned to the end (quadratic: 7 s for 256 KB, an audit).
const HTML_TITLE = /<(title|h1)\b[^<>]*>([^<]*)</gi;
const HTML_TAG = /<[^<>]*>/g;

/** The longest vendor message a client is shown. */
export const CLIENT_MESSAGE_MAX = 500;

/**
 * What of an upstream's message a client may see: secrets and internals replaced by
 * placeholders, an HTML error page reduced to its title, whitespace collapsed, at most `max`
 * characters. Empty when nothing useful is left.
 */
export function scrubForClient(text: string, max = CLIENT_MESSAGE_MAX, known: readonly string[] = []): string {
  let out = withoutKnownSecrets(text, known);
  if (HTML_DOCUMENT.test(out)) {
    const titles: string[] = [];
    for (const m of out.matchAll(HTML_TITLE)) if (m[2]!.trim()) titles.push(m[2]!.trim());
    out = titles.length > 0 ? [...new Set(titles)].join(" - ") : out.replace(HTML_TAG, " ");
  }
  out = scrubSecrets(out)
    .replace(PY_TRACEBACK, "")
    .replace(PY_FRAME, "")
    .replace(AT_FRAME, "")
    .replace(INLINE_FRAME, "")
    .replace(URL_ANY, "[url]")
    .replace(ARN, REDACTED)
    .replace(IPV4, "[host]")
    .replace(IPV6, "[host]")
    .replace(DOTTED, hostOrNot)
    .replace(LOCALHOST, "[host]")
    .replace(UNIX_PATH, "[path]")
    .replace(WINDOWS_PATH, windowsPath)
    .replace(LONG_TOKEN, REDACTED)
    .replace(ACCOUNT_ID, REDACTED)
    .replace(VENDOR_ACCOUNT, REDACTED)
    .replace(/\s+/g, " ")
    .trim();
  return out.length > max ? `${out.slice(0, max - 1)}…` : out;
}

// ---------------------------------------------------------------------------------------------
// Log details
// ---------------------------------------------------------------------------------------------

/** Quoted spans long enough to be someone's text (vendors quote the input they refuse), not a vendor's short phrase. */
const LONG_QUOTED = /"[^"\n]{40,}"|(?<![A-Za-z])'[^'\n]{40,}'/g;
/** Values of fields that hold the request's text, in JSON or Python-repr error bodies. */
const ECHO_FIELD = /((?<![\w-])["']?(?:input|input_value|prompt|content|text|messages|system)["']?\s*[:=]\s*)(?:"[^"\n]*"?|'[^'\n]*'?|[\[{][^\n]*)/gi;

/** The longest vendor detail written to a log line. */
export const LOG_DETAIL_MAX = 200;

/**
 * How much of the request's own text is searched for echoes (the search runs on error paths only).
 * 256 KB let a prompt of "ab" repeated and an error of "aabb…" take 265 ms of the request thread
 * per failed attempt (each window's search is long on such text; an audit).
 */
const ECHO_SOURCE_MAX = 32 * 1024;
/** A run this long that the request's text also holds is the request's, wherever the vendor put it. */
const ECHO_RUN = 16;
const ECHO_STEP = 4;

/**
 * `text` without the runs of ECHO_RUN or more characters that also stand in `source` (the
 * request's own text: a vendor that quotes the prompt without quotes or field names). Windows
 * every ECHO_STEP characters are looked up, so at most ECHO_STEP − 1 characters at the edge of an
 * echo remain; a few dozen `includes` over at most ECHO_SOURCE_MAX characters, on error paths only.
 */
export function withoutEchoOf(text: string, source: string): string {
  if (source.length < ECHO_RUN || text.length < ECHO_RUN) return text;
  const haystack = source.length > ECHO_SOURCE_MAX ? source.slice(0, ECHO_SOURCE_MAX) : source;
  const echoed: [number, number][] = [];
  for (let at = 0; at + ECHO_RUN <= text.length; at += ECHO_STEP) {
    if (!haystack.includes(text.slice(at, at + ECHO_RUN))) continue;
    const last = echoed.at(-1);
    if (last && at <= last[1]) last[1] = at + ECHO_RUN;
    else echoed.push([at, at + ECHO_RUN]);
  }
  if (echoed.length === 0) return text;
  let out = "";
  let from = 0;
  for (const [start, end] of echoed) {
    out += `${text.slice(from, start)}[request text omitted]`;
    from = end;
  }
  return out + text.slice(from);
}

/**
 * A vendor's error text fit for a log line, scrubbed as a client's error message is (secrets,
 * hosts, paths, opaque tokens) and more: what may be an echo of the prompt (a field holding the
 * input, a long quoted span, any run of the request's own text given as `echoOf`) left out, at
 * most `max` characters. The prompt is the client's, not the operator's, and may be anything.
 */
export function scrubLogDetail(text: string, max = LOG_DETAIL_MAX, echoOf?: string, known: readonly string[] = []): string {
  // Secrets go before anything is cut, so none is cut in half and half kept.
  let out = scrubSecrets(withoutKnownSecrets(text, known)).slice(0, 8 * max);
  if (echoOf) out = withoutEchoOf(out, echoOf);
  return scrubForClient(out.replace(ECHO_FIELD, "$1[omitted]").replace(LONG_QUOTED, "[quoted text omitted]"), max, known);
}
