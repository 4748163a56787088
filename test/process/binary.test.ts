import { afterAll, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { hashEmbedding } from "../../src/providers/simulated/hash-embedding.ts";
import { compiledBinary } from "../helpers/compiled-binary.ts";

const dir = mkdtempSync(join(tmpdir(), "switchyard-binary-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const run = (binary: string, args: string[], env: Record<string, string>) =>
  Bun.spawn([binary, ...args], { cwd: dir, env: { PATH: process.env.PATH ?? "/usr/bin:/bin", ...env }, stdin: "ignore", stdout: "pipe", stderr: "pipe" });

test("the compiled binary runs with production defaults: no BUN_CONFIG_MAX_HTTP_REQUESTS needed, answers with ids, reports ready through --health-check", async () => {
  const binary = await compiledBinary();
  // Only what a test needs to find it (a free port, loopback) and the admin API on.
  const child = run(binary, [], { PORT: "0", HOST: "127.0.0.1", SWITCHYARD_ADMIN_TOKEN: "admin-secret-0123456789abcdef0123456789abcdef", SWITCHYARD_DEMO: "1" });
  let errors = "";
  void (async () => {
    for await (const chunk of child.stderr) errors += new TextDecoder().decode(chunk);
  })();
  try {
    let banner = "";
    const reader = child.stdout.getReader();
    const deadline = Date.now() + 15_000;
    while (!banner.includes("curl") && Date.now() < deadline) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`exited: ${banner}${errors}`);
      banner += new TextDecoder().decode(value);
    }
    const url = banner.match(/listening on (http:\/\/\S+)/)![1]!;
    const key = banner.match(/svc-sk-[A-Za-z0-9_-]+/)![0];

    // The same process (pid) now runs with fetch's limit raised, and did not warn about it.
    if (existsSync(`/proc/${child.pid}/environ`)) {
      const environ = readFileSync(`/proc/${child.pid}/environ`, "utf8").split("\0");
      expect(environ).toContain("BUN_CONFIG_MAX_HTTP_REQUESTS=4096");
      // And with the gateway's allocator settings (config/start-env.ts).
      expect(environ).toContain("MIMALLOC_PURGE_HOLES_MIN_INTERVAL=1000");
      expect(environ).toContain("MIMALLOC_PURGE_DELAY=1000");
    }
    expect(errors).not.toContain("BUN_CONFIG_MAX_HTTP_REQUESTS");

    const res = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "x-request-id": "binary-1" },
      body: JSON.stringify({ model: "switchyard/echo", messages: [{ role: "user", content: "hi" }] }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-request-id")).toBe("binary-1");
    // A large embeddings answer (2,048 vectors of 1,024: ~5 MB) is read on the embeddings thread,
    // whose entry point the build must hold: without it, this answer is a 502.
    const texts = Array.from({ length: 2048 }, (_, i) => `text number ${i} of the batch`);
    const embeddings = await fetch(`${url}/v1/embeddings`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "switchyard/embed", input: texts, dimensions: 1024, encoding_format: "float" }),
    });
    expect(embeddings.status).toBe(200);
    const list = (await embeddings.json()) as { data: { index: number; embedding: number[] }[] };
    expect(list.data).toHaveLength(2048);
    expect(list.data[2047]!.embedding).toEqual(Array.from(hashEmbedding(texts[2047]!, 1024)));
    // Routes beside the admin API's bearer plugin work in the minified build too.
    for (const path of ["/openapi.json", "/metrics", "/ready"]) expect([path, (await fetch(url + path)).status]).toEqual([path, 200]);
    expect((await fetch(`${url}/v1/admin/usage?format=csv`, { headers: { authorization: "Bearer admin-secret-0123456789abcdef0123456789abcdef" } })).status).toBe(200);
    // The console's page, bundled at build time and embedded in the binary (no file beside it), and its API.
    const page = await fetch(`${url}/console/`);
    expect(page.status).toBe(200);
    expect(await page.text()).toContain("uplot");
    const signIn = await fetch(`${url}/console/api/sign-in`, { method: "POST", headers: { "content-type": "application/json", origin: url }, body: JSON.stringify({ token: "admin-secret-0123456789abcdef0123456789abcdef" }) });
    expect(signIn.status).toBe(200);
    const cookie = signIn.headers.get("set-cookie")!.split(";")[0]!;
    expect((await fetch(`${url}/console/api/overview`, { headers: { cookie } })).status).toBe(200);

    const port = new URL(url).port;
    const check = run(binary, ["--health-check"], { PORT: port });
    expect(await check.exited).toBe(0);
    child.kill("SIGTERM");
    expect(await child.exited).toBe(0);
    const down = run(binary, ["--health-check"], { PORT: port });
    expect(await down.exited).toBe(1);
    expect(await new Response(down.stderr).text()).toContain("does not answer");

    // `switchyard admin …`: the admin CLI from the binary, on the gateway's ledger (the Docker
    // image has no Bun to run src/cli/admin.ts with: `docker exec switchyard switchyard admin …`).
    const admin = async (...args: string[]) => {
      const proc = run(binary, ["admin", ...args], {});
      const [code, out, err] = await Promise.all([proc.exited, new Response(proc.stdout).text(), new Response(proc.stderr).text()]);
      return { code, out, err };
    };
    const made = await admin("accounts", "create", "from-the-binary", "5");
    expect([made.code, made.err]).toEqual([0, ""]);
    const account = JSON.parse(made.out) as { id: string; name: string };
    expect(account.name).toBe("from-the-binary");
    const listed = await admin("accounts", "list", "--name", "from-the-binary");
    expect(listed.code).toBe(0);
    expect(JSON.parse(listed.out).data.map((a: { id: string }) => a.id)).toEqual([account.id]);
    expect((await admin("--help")).code).toBe(0);
  } finally {
    child.kill("SIGKILL");
  }
}, 60_000);
