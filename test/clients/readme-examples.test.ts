/**
 * The README's and docs/api.md's examples, run as written against the gateway as the quick start
 * runs it (`bun src/index.ts`: no config file, no vendor key, the simulated upstream, the demo
 * key) with an admin token in its environment: the SDK snippets as `try.ts` files in a folder
 * that sees the checkout's node_modules (what `bun install` put there), the curl lines through
 * bash with the variables the docs tell the reader to export. Only the address changes (the
 * gateway listens on a free port, not 8080), and the `acct_…` / `key_…` placeholders become the
 * ids the lines before them printed.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { startGatewayProcess, type GatewayProcess } from "../helpers/gateway-process.ts";

const ROOT = resolve(import.meta.dir, "../..");
const ADMIN_TOKEN = "readme-admin-token-0123456789abcdef0123456789";
const readme = readFileSync(join(ROOT, "README.md"), "utf8");
const apiReference = readFileSync(join(ROOT, "docs/api.md"), "utf8");

/** The text of a `## ` section of the README, up to the next one. */
function section(title: string): string {
  const start = readme.indexOf(`\n## ${title}\n`);
  expect(start).toBeGreaterThan(-1);
  const end = readme.indexOf("\n## ", start + 1);
  return readme.slice(start, end === -1 ? undefined : end);
}
const blocks = (text: string, lang: string) => [...text.matchAll(new RegExp("```" + lang + "\\n([\\s\\S]*?)```", "g"))].map((m) => m[1]!);

let gateway: GatewayProcess;
let dir: string;
let address: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "switchyard-readme-examples-"));
  // The snippets import the SDKs as a reader's file in the checkout would.
  symlinkSync(join(ROOT, "node_modules"), join(dir, "node_modules"));
  gateway = await startGatewayProcess({ SWITCHYARD_DB: join(dir, "gw.sqlite"), SWITCHYARD_ADMIN_TOKEN: ADMIN_TOKEN, OPENAI_API_KEY: "", ANTHROPIC_API_KEY: "", SWITCHYARD_CONFIG: "" });
  address = new URL(gateway.url).host;
});
afterAll(async () => {
  gateway?.child.kill("SIGKILL");
  await gateway?.child.exited;
  rmSync(dir, { recursive: true, force: true });
});

const env = () => ({ PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: dir, SWITCHYARD_KEY: gateway.key, SWITCHYARD_ADMIN_TOKEN: ADMIN_TOKEN });
const here = (text: string) => text.replaceAll("localhost:8080", address);

/** A TypeScript snippet saved as try.ts and run with bun, as the README says. */
async function runSnippet(code: string): Promise<{ exitCode: number; stdout: string; stderr: string }> {
  const file = join(dir, "try.ts");
  writeFileSync(file, here(code));
  const run = Bun.spawn([process.execPath, file], { cwd: dir, env: env(), stdout: "pipe", stderr: "pipe" });
  const [stdout, stderr, exitCode] = await Promise.all([new Response(run.stdout).text(), new Response(run.stderr).text(), run.exited]);
  return { exitCode, stdout, stderr };
}

/** One shell line through bash; curl's status code is printed last, on a line of its own. */
async function runCurl(line: string): Promise<{ status: number; body: string }> {
  const run = Bun.spawn(["bash", "-c", `${here(line).replace(/\s+#.*$/, "")} -sS -w '\\n%{http_code}'`], { env: env(), stdout: "pipe", stderr: "pipe" });
  const [stdout, stderr, exitCode] = await Promise.all([new Response(run.stdout).text(), new Response(run.stderr).text(), run.exited]);
  expect({ line, exitCode, stderr }).toEqual({ line, exitCode: 0, stderr: "" });
  const cut = stdout.lastIndexOf("\n");
  return { status: Number(stdout.slice(cut + 1)), body: stdout.slice(0, cut) };
}

describe("README, Quick start", () => {
  test("the SDK snippet runs as written: two embeddings of 256 dimensions, and an answer in Anthropic's format", async () => {
    const [snippet] = blocks(section("Quick start"), "ts");
    const run = await runSnippet(snippet!);
    expect({ exitCode: run.exitCode, stderr: run.stderr }).toEqual({ exitCode: 0, stderr: "" });
    // The simulated lorem model answers with the same sentence whatever it is asked.
    expect(run.stdout).toStartWith('2 embeddings of 256 dimensions\n{\n  type: "text",\n  text: "Lorem ipsum dolor sit amet, ');
  });
});

describe("README, Use with the Vercel AI SDK", () => {
  test("the example runs as written against a model that exists without vendor keys", async () => {
    const [snippet] = blocks(section("Use with the Vercel AI SDK"), "ts");
    expect(snippet).toContain('switchyard("switchyard/lorem")');
    const run = await runSnippet(snippet!);
    expect({ exitCode: run.exitCode, stderr: run.stderr }).toEqual({ exitCode: 0, stderr: "" });
    // Both calls (Responses API, Anthropic's format) get the simulated lorem model's sentence.
    const [responses, messages, end] = run.stdout.split("\n");
    expect(responses).toStartWith("Lorem ipsum dolor sit amet, ");
    expect(messages).toBe(responses);
    expect(end).toBe("");
  });
});

describe("README, Accounts, keys, credits", () => {
  test("the admin curl lines run as written with SWITCHYARD_ADMIN_TOKEN and SWITCHYARD_KEY exported", async () => {
    const lines = blocks(section("Accounts, keys, credits"), "sh").flatMap((b) => b.split("\n")).filter((l) => l.startsWith("curl "));
    expect(lines).toHaveLength(5);
    const created = await runCurl(lines[0]!);
    expect(created.status).toBe(201);
    const account = JSON.parse(created.body) as { id: string; name: string; balance: number };
    expect(account).toMatchObject({ name: "acme", balance: 500 });
    const key = await runCurl(lines[1]!.replace("acct_…", account.id));
    expect(key.status).toBe(201);
    const { id: keyId } = JSON.parse(key.body) as { id: string };
    const limited = await runCurl(lines[2]!.replace("key_…", keyId));
    expect(limited.status).toBe(200);
    expect(JSON.parse(limited.body)).toMatchObject({ id: keyId, spend_limit: 10, spend_limit_period: "day" });
    const scoped = await runCurl(lines[3]!.replace("key_…", keyId));
    expect(scoped.status).toBe(200);
    expect(JSON.parse(scoped.body)).toMatchObject({ id: keyId, models: ["switchyard/*"], max_concurrent_requests: 4 });
    const own = await runCurl(lines[4]!);
    expect(own.status).toBe(200);
    expect(JSON.parse(own.body)).toMatchObject({ account: { reserved: 0 }, key: { spend_limit: null } });
  });
});

describe("docs/api.md", () => {
  test("GET /v1/models/{id}'s curl line runs as written", async () => {
    const line = apiReference.split("\n").find((l) => l.startsWith("curl localhost:8080/v1/models/"))!;
    const answer = await runCurl(line);
    expect(answer.status).toBe(200);
    expect(JSON.parse(answer.body)).toMatchObject({ id: "switchyard/echo", object: "model" });
  });

  test("the account list's first curl line runs as written", async () => {
    const line = apiReference.split("\n").find((l) => l.startsWith('curl -s "localhost:8080/v1/admin/accounts?limit=100&name=acme"'))!;
    const answer = await runCurl(line);
    expect(answer.status).toBe(200);
    expect(JSON.parse(answer.body)).toMatchObject({ object: "list", next_cursor: null });
  });
});
