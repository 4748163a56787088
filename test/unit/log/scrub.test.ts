import { describe, expect, test } from "bun:test";
import { CLIENT_MESSAGE_MAX, createScrubber, LOG_DETAIL_MAX, scrubForClient, replaceSecrets, scrubLogDetail, scrubSecrets } from "../../../src/log/scrub.ts";
import { jsonLogger, withoutSecrets, type Logger } from "../../../src/log/log.ts";
import { LEAKY_ERRORS } from "../../helpers/leaky-errors.ts";

describe("scrubForClient: what a client may see of a vendor's error", () => {
  test("the operator's vendor project, organisation and workspace ids are left out (shorter than 32 characters; a review)", () => {
    expect(scrubForClient("Project `proj_JMo3Q9spNIEWhSxusokLegJY` does not have access to model `gpt-4.1-2025-04-14`")).toBe("Project `[redacted]` does not have access to model `gpt-4.1-2025-04-14`");
    expect(scrubForClient("Your organization org-AbCdEf0123456789xyzABCDE must be verified; workspace wrkspc_01AbCdEfGh23 too")).toBe("Your organization [redacted] must be verified; workspace [redacted] too");
    // Words that only start like one stay.
    expect(scrubForClient("org-level quota and user-facing text")).toBe("org-level quota and user-facing text");
  });

  test.each(LEAKY_ERRORS.map((e) => [e.name, e] as const))("%s", (_name, e) => {
    const out = scrubForClient(e.message);
    for (const leak of [...e.secrets, ...e.internals]) expect(out).not.toContain(leak);
    for (const useful of e.kept) expect(out).toContain(useful);
    expect(out.length).toBeLessThanOrEqual(CLIENT_MESSAGE_MAX);
  });

  test("removed spans become placeholders; the sentence around them stays in place", () => {
    expect(scrubForClient("Incorrect API key provided: sk-proj-****abcd. See https://platform.openai.com/x.")).toBe(
      "Incorrect API key provided: [redacted]. See [url]",
    );
    expect(scrubForClient("connect ECONNREFUSED 10.0.3.7:8443 via api.internal.corp")).toBe("connect ECONNREFUSED [host] via [host]");
    expect(scrubForClient("cannot read /srv/app/config.yaml or C:\\app\\x.json")).toBe("cannot read [path] or [path]");
  });

  test("names that only look dotted stay: model ids, versions, file names, namespaces", () => {
    const text = "gpt-4.1, claude-3.5-sonnet, anthropic.claude-3-5-sonnet-20240620-v1:0, v1.2.3, main.py, System.IO.File, e.g. messages.0.content";
    expect(scrubForClient(text)).toBe(text);
  });

  test("a long message is capped, with an ellipsis", () => {
    const out = scrubForClient("The request was refused because ".repeat(200));
    expect(out.length).toBe(CLIENT_MESSAGE_MAX);
    expect(out.endsWith("…")).toBe(true);
  });

  test("a message of nothing but internals leaves nothing", () => {
    expect(scrubForClient("\n    at foo (/srv/app/x.js:1:2)\n    at bar (/srv/app/y.js:3:4)")).toBe("");
  });
});

describe("scrubSecrets: what a log line may carry", () => {
  test.each(LEAKY_ERRORS.filter((e) => e.secrets.length > 0).map((e) => [e.name, e] as const))("%s", (_name, e) => {
    const out = scrubSecrets(e.message);
    for (const secret of e.secrets) expect(out).not.toContain(secret);
  });

  test("hosts, addresses and paths stay for the operator; ids without a secret's shape too", () => {
    const text = "upstream 10.0.3.7:8443 (vllm-0.vllm.svc.cluster.local) failed reading /srv/app/x.js for req_0196f0e1c2d34b5a8e7f901234567890";
    expect(scrubSecrets(text)).toBe(text);
  });

  test("the filter in front of the patterns lets every leak shape through, and turns away only texts the patterns leave alone", () => {
    for (const e of LEAKY_ERRORS) expect(scrubSecrets(e.message)).toBe(replaceSecrets(e.message));
    // Random texts built from pieces of every pattern, their near misses and plain words: the
    // filtered and the unfiltered scrub agree on each (a piece the filter forgot would differ).
    const pieces = [
      "sk-", "svc-sk-", "sk-ant-", "AIza", "ghp_", "gho_", "github_pat_", "xoxb-", "AKIA", "ASIA", "AROA", "eyJ", "eyJhbGciOi.", ".",
      "Bearer ", "bearer\t", "Authorization: ", "authorization=", "api_key", "apikey", "ApiKey", "access-token", "client_secret",
      "secret_access_key", "aws_secret", "private-key", "password", "passwd", "PRIVATE KEY-----", "-----BEGIN RSA ", "-----END ",
      "token=", "sig=", "code=", "key=", "_key", "Token", "\" :", "\t:", "password", "secret_key", "x-amz-signature=", "https://", "user:", "@", "=", ":", "\"", "'", " ", "-", "_", "/", "?", "&",
      "ABCDEFGHIJKLMNOP", "abcdefghij0123456789", "0123456789", "Z", "q", "request", "model", "openai/gpt-4o-mini", "chatcmpl-9x",
    ];
    let seed = 42;
    const next = (n: number) => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) >>> 16) % n;
    let changed = 0;
    for (let i = 0; i < 50_000; i++) {
      let text = "";
      for (let j = next(8) + 1; j > 0; j--) text += pieces[next(pieces.length)];
      const unfiltered = replaceSecrets(text);
      expect(scrubSecrets(text)).toBe(unfiltered);
      if (unfiltered !== text) changed++;
    }
    // The check is only as good as the texts with something to remove: over a thousand had.
    expect(changed).toBeGreaterThan(1_000);
    // One text per pattern that holds only that pattern's literal: each is scrubbed.
    const minimal = [
      "-----BEGIN RSA PRIVATE KEY-----MIIEpAIBAAKCAQEA", "//u:hunter2@db", "Authorization: Basic dXNlcjpwYXNz", "Bearer abcdefgh1234",
      "password: hunter2", "passwd=hunter2", "client_secret: abc", "id_token: abc", "api_key: abc", "secret_access_key : abc", "'password' : hunter2", "?sig=abc", "sk-abcdef0123", "AIzaSyA1234567890abcdefghij",
      "ghp_abcdefghij0123456789", "github_pat_abcdefghij0123456789", "xoxb-0123456789", "AKIAABCDEFGHIJKLMNOP", "ASIAABCDEFGHIJKLMNOP", "eyJhbGciOi.eyJzdWIi.abc",
    ];
    for (const text of minimal) expect(scrubSecrets(text)).not.toBe(text);
    // Texts a log line usually carries are turned away by the filter.
    for (const plain of ["0196f0e1-c2d3-7b5a-8e7f-901234567890", "/v1/chat/completions", "openai/gpt-4o-mini", "complete", "chatcmpl-0196f0e1", "key_0196f0e1c2d3", "a token count"]) {
      expect(scrubSecrets(plain)).toBe(plain);
    }
  });

  test("the JSON logger scrubs a line of plain fields that holds a secret in any of them, or in its message", () => {
    let written = "";
    const log = jsonLogger("info", (text) => (written += text));
    log("warn", "upstream refused", { detail: 'said {"api_key"\t: "hunter2hunter2"}', model: "sk-proj-abcdefghijklmnop0123456789" });
    expect(written).not.toContain("hunter2hunter2");
    expect(written).not.toContain("abcdefghijklmnop0123456789");
    expect(JSON.parse(written)).toMatchObject({ level: "warn", message: "upstream refused", model: "[redacted]" });
    written = "";
    log("warn", "key sk-ant-api03-abcdefghijklmnopqrstuvwxyz was refused", { n: 1, ok: true, none: null });
    expect(JSON.parse(written)).toEqual({ time: expect.any(String), level: "warn", message: "key [redacted] was refused", n: 1, ok: true, none: null });
    // Fields that are not a plain object (a class with its own toJSON) are scrubbed as copies, not written as they serialise.
    written = "";
    class Leaky {
      safe = "nothing here";
      toJSON() {
        return { leaked: "sk-proj-abcdefghijklmnop0123456789" };
      }
    }
    log("warn", "odd fields", new Leaky() as unknown as Record<string, unknown>);
    expect(written).not.toContain("abcdefghijklmnop0123456789");
    expect(JSON.parse(written)).toMatchObject({ message: "odd fields", safe: "nothing here" });
    // A line without a secret is written as it was given.
    written = "";
    log("warn", "request", { clientRequestId: "0196f0e1-c2d3", path: "/v1/chat/completions", status: 200, keyId: "key_0196" });
    expect(JSON.parse(written)).toEqual({ time: expect.any(String), level: "warn", message: "request", clientRequestId: "0196f0e1-c2d3", path: "/v1/chat/completions", status: 200, keyId: "key_0196" });
  });

  test("the password of a URL goes, the URL stays", () => {
    expect(scrubSecrets("GET https://svc:hunter2@proxy.internal:3128/v1?api_key=abc123&x=1")).toBe(
      "GET https://[redacted]@proxy.internal:3128/v1?api_key=[redacted]&x=1",
    );
  });
});

describe("scrubLogDetail: a vendor's error body for the log", () => {
  const prompt = "Please summarise my confidential merger memo for ACME Corp";

  test("a validation error that echoes the prompt keeps the error and drops the prompt", () => {
    const body = `1 validation error for ChatCompletionRequest\nmessages.0.content\n  Input should be a valid list [type=list_type, input_value='${prompt}', input_type=str]`;
    const out = scrubLogDetail(body);
    expect(out).toContain("1 validation error for ChatCompletionRequest");
    expect(out).not.toContain("confidential merger memo");
  });

  test("a JSON echo of the request is left out", () => {
    const out = scrubLogDetail(JSON.stringify({ detail: "bad request", request: { model: "m", messages: [{ role: "user", content: prompt }] } }));
    expect(out).toContain("bad request");
    expect(out).not.toContain("merger");
  });

  test("secrets go and the detail is short", () => {
    const out = scrubLogDetail(`invalid key sk-test-openai-SECRET-0123456789 ${"x ".repeat(1000)}`);
    expect(out).not.toContain("SECRET-0123456789");
    expect(out.length).toBe(LOG_DETAIL_MAX);
  });
});

describe("the logger the app uses", () => {
  test("a logger that scrubs already is not wrapped again (each line is scrubbed once), and still scrubs", () => {
    let written = "";
    const json = jsonLogger("info", (text) => (written += text));
    expect(withoutSecrets(json)).toBe(json);
    const capture: Logger = () => {};
    const once = withoutSecrets(capture);
    expect(once).not.toBe(capture);
    expect(withoutSecrets(once)).toBe(once);
    withoutSecrets(json)("warn", "upstream said Bearer sk-proj-abcdefghijklmnop0123456789", { detail: "key sk-ant-api03-abcdefghijklmnopqrstuvwxyz" });
    expect(written).toContain("warn");
    expect(written).not.toContain("abcdefghijklmnop0123456789");
    expect(written).not.toContain("abcdefghijklmnopqrstuvwxyz");
  });

  test("every string field, nested ones and errors included, and the message lose their secrets", () => {
    const lines: unknown[] = [];
    const capture: Logger = (level, message, fields) => lines.push({ level, message, ...fields });
    const log = withoutSecrets(capture);
    const key = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789";
    log("warn", `failed with ${key}`, { error: new Error(`bad key ${key}`), nested: { list: [`Bearer ${key}`], n: 3 }, requestId: "req_0196" });
    const text = JSON.stringify(lines);
    expect(text).not.toContain("abcdefghijklmnopqrstuvwxyz0123456789");
    expect(lines[0]).toMatchObject({ level: "warn", message: "failed with [redacted]", nested: { n: 3 }, requestId: "req_0196" });
  });

  test("the JSON logger: a turn's lines in one write, below its level none; a warning at once, after what waited; no secret", async () => {
    const writes: string[] = [];
    const log = jsonLogger("info", (text) => writes.push(text));
    const parse = (text: string) => text.trimEnd().split("\n").map((line) => JSON.parse(line) as Record<string, unknown>);
    log("info", "a", { n: 1, secret: "Bearer abcdefgh12345678" });
    log("debug", "hidden");
    log("info", "b");
    expect(writes).toEqual([]);
    await new Promise((resolve) => setImmediate(resolve));
    expect(writes.length).toBe(1);
    const first = parse(writes[0]!);
    expect(first.map((l) => l.message)).toEqual(["a", "b"]);
    expect(first[0]).toMatchObject({ level: "info", n: 1, secret: "Bearer [redacted]" });
    expect(typeof first[0]!.time).toBe("string");
    log("info", "c");
    log("warn", "d", {});
    expect(writes.length).toBe(2);
    expect(parse(writes[1]!).map((l) => [l.level, l.message])).toEqual([["info", "c"], ["warn", "d"]]);
  });

  test("the JSON logger: lines still waiting for the end of the turn are written when the process exits", () => {
    const script = `import { jsonLogger } from ${JSON.stringify(new URL("../../../src/log/log.ts", import.meta.url).pathname)}; const log = jsonLogger("info"); log("info", "last words", { n: 7 }); process.exit(3);`;
    const child = Bun.spawnSync({ cmd: [process.execPath, "-e", script], stderr: "pipe", stdout: "ignore" });
    expect(child.exitCode).toBe(3);
    expect(JSON.parse(child.stderr.toString().trim())).toMatchObject({ level: "info", message: "last words", n: 7 });
  });
});

/**
 * Hostile input: a megabyte shaped to make a backtracking pattern try every split of a run. A
 * pattern that is not linear takes minutes on these (and the test times out); linear ones take
 * milliseconds. The outputs are checked, so a pattern that gives up early fails too.
 */
describe("a megabyte of hostile input", () => {
  const MB = 1 << 20;
  /** At least a megabyte of whole units. */
  const fill = (unit: string) => unit.repeat(Math.ceil(MB / unit.length));

  const cases: [string, string, (out: string) => void][] = [
    ["one long key", "sk-" + fill("a"), (out) => expect(out).toBe("[redacted]")],
    ["one long JWT", "eyJ" + fill("a") + ".b.c", (out) => expect(out).toBe("[redacted]")],
    ["one long token without a prefix", fill("a") + "1", (out) => expect(out).toBe("[redacted]")],
    ["hyphens", fill("-"), (out) => expect(out).toBe("-".repeat(CLIENT_MESSAGE_MAX - 1) + "…")],
    ["dotted labels without a suffix", fill("a."), (out) => expect(out.startsWith("a.a.a.a.")).toBe(true)],
    ["dotted labels ending in a suffix", fill("a.").slice(0, -1) + ".internal", (out) => expect(out).toBe("[host]")],
    ["dotted digits", fill("1."), (out) => expect(out.startsWith("1.1.1.1.1")).toBe(true)],
    ["colons and hex", fill("ab:"), (out) => expect(out.startsWith("ab:ab:ab:")).toBe(true)],
    ["IPv6 addresses", fill("fe80::1 "), (out) => expect(out.startsWith("[host] [host] [host]") && !out.includes("fe80")).toBe(true)],
    ["an IPv6 run that never ends", fill("fe80::1:"), (out) => expect(out.startsWith("fe80::1:fe80::1:")).toBe(true)],
    ["path segments", fill("/a"), (out) => expect(out).toBe("[path]")],
    ["slashes", fill("/"), (out) => expect(out).toBe("/".repeat(CLIENT_MESSAGE_MAX - 1) + "…")],
    ["Windows drive prefixes", fill("C:\\"), (out) => expect(out).not.toContain("C:\\")],
    ["unclosed private key headers", fill("-----BEGIN RSA PRIVATE KEY-----"), (out) => expect(out).toBe("[redacted]")],
    ["URL passwords without an @", "https://u:" + fill("p"), (out) => expect(out).toBe("[url]")],
    ["indented stack frames", fill("\n    at f (/x/y.js:1:2)"), (out) => expect(out).toBe("")],
    ["traceback headers", fill("Traceback (most recent call last):\n"), (out) => expect(out).toBe("")],
    ["open parentheses after `at`", fill("at a ("), (out) => expect(out.startsWith("at a (at a (")).toBe(true)],
    ["unclosed tags in an HTML page", "<html>" + fill("<a "), (out) => expect(out.length).toBe(CLIENT_MESSAGE_MAX)],
    ["api_key= without end", "api_key=" + fill("x"), (out) => expect(out).toBe("api_key=[redacted]")],
  ];

  test.each(cases)("%s", (_name, input, check) => {
    check(scrubForClient(input));
  });

  test("log details: unclosed quotes and echo fields", () => {
    expect(scrubLogDetail('"' + fill("a")).length).toBe(LOG_DETAIL_MAX);
    expect(scrubLogDetail("'input': '" + fill("a b "))).toBe("'input': [omitted]");
  });
});

describe("vendor keys known by value (a gateway's scrubber)", () => {
  const scrubber = createScrubber();

  test("a key with '/' is scrubbed as written and as an encoder that escapes slashes writes it", () => {
    const key = "proxy/Zq9+Lm7";
    scrubber.remember(key);
    const body = JSON.stringify({ error: { message: `bad key ${key}` } });
    expect(scrubber.logDetail(body)).not.toContain("Zq9+Lm7");
    expect(scrubber.logDetail(body.replace(/\//g, "\\/"))).not.toContain("Zq9+Lm7");
    expect(scrubber.forClient(`bad key ${key}`)).toBe("bad key [redacted]");
  });

  test("a key with a quote or a backslash is scrubbed inside JSON text too", () => {
    const key = 'ab"cd\\ef-42';
    scrubber.remember(key);
    expect(scrubber.logDetail(JSON.stringify({ message: `bad key ${key}` }))).not.toContain("cd");
  });

  test("a key that contains another is replaced whole", () => {
    scrubber.remember("tok1-abc9");
    scrubber.remember("tok1-abc9-zz9Q");
    expect(scrubber.forClient("bad key tok1-abc9-zz9Q and tok1-abc9")).toBe("bad key [redacted] and [redacted]");
  });

  test("placeholders and short values are not remembered: ordinary words stay", () => {
    for (const placeholder of ["none", "EMPTY", "dummy", "changeme", "sk-x"]) scrubber.remember(placeholder);
    expect(scrubber.forClient("tool_choice must be one of none, auto; EMPTY is not a dummy value, changeme")).toBe("tool_choice must be one of none, auto; EMPTY is not a dummy value, changeme");
  });

  test("a value without letters is not remembered: replaced in an answer's JSON, it would break its numbers", () => {
    const own = createScrubber();
    own.remember("20240101");
    own.remember("12345-67890");
    const answer = '{"created":1720240101,"usage":{"prompt_tokens":12345}}';
    expect(own.withoutKnown(answer)).toBe(answer);
    own.remember("proxy-key-2024");
    expect(own.withoutKnown('{"debug":"proxy-key-2024","created":1720240101}')).toBe('{"debug":"[redacted]","created":1720240101}');
    expect(own.secrets()).toContain("proxy-key-2024");
  });

  test("a vendor's masked echo of a known key without a known prefix (its start, with or without its end) is scrubbed from error text; an answer's text is left alone", () => {
    const own = createScrubber();
    const keys = ["Xq7LmN2pR4sT6vW8yZ0bC1dE3fG5hJ9k", "gsk_Q1w2E3r4T5y6U7i8O9p0AaSsDdFfGgHhJjKkLlZzXxCcVvBb", "xai-ZYXWVUTSRQPONMLKJIHGFEDCBA0123456789abcdefghij", "proxy-key-0123456"];
    for (const key of keys) own.remember(key);
    for (const key of keys) {
      for (const echo of [`${key.slice(0, 12)}...${key.slice(-4)}`, `${key.slice(0, 20)}****`, key.slice(0, 16), `${key.slice(0, 12)}…${key.slice(-4)}`]) {
        const said = `Incorrect API key provided: ${echo}. You can find your API key in your dashboard.`;
        for (const out of [own.forClient(said), own.logDetail(said)]) {
          expect(out).toContain("Incorrect API key provided: [redacted]");
          for (const fragment of [key.slice(0, 8), key.slice(-4)]) expect([echo, out.includes(fragment)]).toEqual([echo, false]);
        }
      }
    }
    // Twice in one text, and beside other words.
    expect(own.forClient(`keys Xq7LmN2pR4sT**** and Xq7LmN2pR4sT6vW8 refused`)).toBe("keys [redacted] and [redacted] refused");
    // A key with characters a mask does not use is found whole first, never cut at them (a review:
    // its start's run stopped at the `/` and the rest went out).
    const slashed = "Zq7LmN2pR4sTuv/w+9Kd=Hh3Jj";
    own.remember(slashed);
    for (const out of [own.forClient(`Invalid API key: ${slashed} was refused`), own.logDetail(`Invalid API key: ${slashed} was refused`)]) {
      expect(out).toBe("Invalid API key: [redacted] was refused");
    }
    // Many echoes in one text: each replaced (in one pass: one copy per echo made 64 KB of them ~100 ms).
    const anthropicLike = createScrubber();
    anthropicLike.remember("sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789");
    expect(anthropicLike.forClient("a sk-ant-api03-abcd** b sk-ant-api03-ab… c sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789 d")).toBe("a [redacted] b [redacted] c [redacted] d");
    // An answer relayed as written keeps a mention of the start (a coding answer quoting a prefix).
    expect(own.withoutKnown('{"content":"export KEY=gsk_Q1w2E3r4T5"}')).toBe('{"content":"export KEY=gsk_Q1w2E3r4T5"}');
  });

  test("a key JSON wrote with \\u escapes, any of its characters or all, in either case of hex", () => {
    const own = createScrubber();
    const key = "vkOA+SECRET/abc-0123456789";
    own.remember(key);
    const u = (c: string, upper = true) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")[upper ? "toUpperCase" : "toLowerCase"]()}`;
    const forms = [
      key.replaceAll("+", u("+")),
      key.replaceAll("+", u("+", false)).replaceAll("/", "\\/"),
      [...key].map((c) => u(c)).join(""),
      [...key].map((c, i) => (i % 2 ? u(c, false) : c)).join(""),
    ];
    for (const form of forms) {
      const text = `{"debug":"${form}","note":"caf\\u00e9"}`;
      expect(JSON.parse(text).debug).toBe(key);
      expect(own.withoutKnown(text)).toBe('{"debug":"[redacted]","note":"caf\\u00e9"}');
      expect(own.forClient(`bad key ${form}`)).toBe("bad key [redacted]");
    }
    // Other escaped text is left as it is (the same string).
    const other = '{"content":"na\\u00efve \\u002B one"}';
    expect(own.withoutKnown(other)).toBe(other);
    // An escaped backslash before text that reads as an escape is a backslash and text (no key in
    // it): left as it is, so the JSON stays JSON (a review: it became `\\[redacted]`).
    const notKey = String.raw`{"content":"\\u0076kOA+SECRET/abc-0123456789"}`;
    expect(JSON.parse(notKey).content).toBe(String.raw`\u0076kOA+SECRET/abc-0123456789`);
    expect(own.withoutKnown(notKey)).toBe(notKey);
    // A backslash, then the key with its first character escaped: the key goes, the backslash stays.
    const afterBackslash = String.raw`{"content":"\\\u0076kOA+SECRET/abc-0123456789"}`;
    expect(JSON.parse(afterBackslash).content).toBe(`\\${key}`);
    expect(JSON.parse(own.withoutKnown(afterBackslash)).content).toBe("\\[redacted]");
  });

  test("escaped text is searched in linear time, and text of other escapes (CJK) not at all", () => {
    const own = createScrubber();
    for (let i = 0; i < 10; i++) own.remember(`proxy-key-${i}-Zq9Lm7Xw2Pn4`);
    const hostile = "\\u00".repeat(250_000);
    let at = performance.now();
    expect(own.withoutKnown(hostile)).toBe(hostile);
    const hostileMs = performance.now() - at;
    const cjk = "\\u4e2d\\u6587".repeat(100_000);
    at = performance.now();
    for (let i = 0; i < 100; i++) own.withoutKnown(cjk);
    const cjkMs = (performance.now() - at) / 100;
    // Generous bounds for a loaded machine: what is checked is that neither grows with the keys' work.
    expect([hostileMs < 2_000, cjkMs < 5]).toEqual([true, true]);
  });

  test("each gateway's scrubber knows its own keys only; the plain functions know none", () => {
    const other = createScrubber();
    other.remember("other-proxy-key-77");
    expect(other.forClient("bad key other-proxy-key-77")).toBe("bad key [redacted]");
    expect(scrubber.forClient("bad key other-proxy-key-77")).toBe("bad key other-proxy-key-77");
    expect(other.forClient("bad key tok1-abc9")).toBe("bad key tok1-abc9");
    expect(scrubForClient("bad key tok1-abc9")).toBe("bad key tok1-abc9");
  });
});

describe("hostile sizes (an audit of the request thread's work)", () => {
  test("a 2 MB HTML error of unclosed <h1 tags is reduced in one pass, not one scan per tag (quadratic: 7 s for 256 KB)", () => {
    // No `>` anywhere: every `<h1` start looked for one to the end.
    const page = "<html" + "<h1 ".repeat(500_000);
    expect(scrubForClient(page)).toBe("<html" + "<h1 ".repeat(200).slice(0, CLIENT_MESSAGE_MAX - 6).trimEnd() + "…");
  });
});
