import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Browser, type Page } from "playwright-core";
import { launchChromium } from "../helpers/chromium.ts";
import { startGatewayProcess, type GatewayProcess, stopGatewayProcess } from "../helpers/gateway-process.ts";

/**
 * What an account holder reads in the console, in a real headless Chromium in front of the real
 * gateway process and a loopback vendor: what the thirty-sixth session's console probe found
 * misleading (docs/decisions.md, "Thirty-sixth session: what the console probe found").
 */
const ADMIN = "admin-reads-0123456789abcdef0123456789abcdef";
const PASSWORD = "a long enough password";
/** How long the vendor takes over a `gpt-slow` answer. */
const SLOW_MS = 1_500;

const dir = mkdtempSync(join(tmpdir(), "switchyard-console-reads-"));
let gateway: GatewayProcess;
let vendor: ReturnType<typeof Bun.serve>;
let browser: Browser;

function startVendor() {
  return Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(req) {
      if (new URL(req.url).pathname.endsWith("/models")) return Response.json({ object: "list", data: [] });
      const body = (await req.json()) as { model: string };
      if (body.model === "gpt-slow") await Bun.sleep(SLOW_MS);
      return Response.json({
        id: "chatcmpl-1", object: "chat.completion", created: 1, model: body.model,
        choices: [{ index: 0, message: { role: "assistant", content: "Hello" }, finish_reason: "stop" }],
        usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
      });
    },
  });
}

const admin = async (method: string, path: string, body?: unknown) => {
  const res = await fetch(`${gateway.url}${path}`, { method, headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
  return res.json() as Promise<any>;
};

async function chat(key: string, model: string): Promise<void> {
  const res = await fetch(`${gateway.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, max_tokens: 20, messages: [{ role: "user", content: "hi" }] }),
  });
  expect(res.status).toBe(200);
  await res.arrayBuffer();
}

/** A holder of a new account (no keys yet), signed in through the invite link in a page of its own. */
async function holder(name: string): Promise<{ page: Page; account: string }> {
  const account = await admin("POST", "/v1/admin/accounts", { name, credits: 100 });
  const invite = await admin("POST", `/v1/admin/accounts/${account.id}/invites`, { login: `${name.replaceAll(" ", "-")}@example.com` });
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  // A missing element fails its test at 10 s, before bun's 30 s timeout would kill the run.
  page.setDefaultTimeout(10_000);
  await page.goto(invite.url);
  await page.getByTestId("invite-password").fill(PASSWORD);
  await page.getByTestId("invite-password-again").fill(PASSWORD);
  await page.getByTestId("invite-accept").click();
  await page.getByTestId("balance").waitFor();
  return { page, account: account.id };
}

beforeAll(async () => {
  vendor = startVendor();
  const config = join(dir, "config.json");
  writeFileSync(config, JSON.stringify({
    providers: [{ id: "oai", kind: "openai", base_url: `http://127.0.0.1:${vendor.port}/v1`, keys: [{ env: "READS_OAI_KEY" }] }],
    models: [
      { id: "oai/fast", provider: "oai", upstream_model: "gpt-fast", category: "text", context_length: 128_000, pricing: { input_per_mtok: 2, output_per_mtok: 8 } },
      { id: "oai/slow", provider: "oai", upstream_model: "gpt-slow", category: "text", context_length: 128_000, pricing: { input_per_mtok: 2, output_per_mtok: 8 } },
    ],
    limits: { requests_per_minute: 100_000 },
  }));
  [gateway, browser] = await Promise.all([
    startGatewayProcess({ SWITCHYARD_DB: join(dir, "gateway.sqlite"), SWITCHYARD_ADMIN_TOKEN: ADMIN, SWITCHYARD_CONFIG: config, READS_OAI_KEY: "sk-reads", OPENAI_API_KEY: "", ANTHROPIC_API_KEY: "" }),
    launchChromium(),
  ]);
}, 30_000);

afterAll(async () => {
  await browser?.close();
  await stopGatewayProcess(gateway);
  vendor?.stop(true);
  rmSync(dir, { recursive: true, force: true });
});

test("a new key is listed above its secret while the secret is shown (the list said \"No keys yet\" over a first key's secret until Done)", async () => {
  const { page, account } = await holder("first key co");
  expect(await page.getByTestId("keys-empty").textContent()).toBe("No keys yet: create one below.");
  await page.getByTestId("key-name").fill("laptop");
  await page.getByTestId("key-create").click();
  const secret = (await page.getByTestId("key-secret").textContent())!;
  const row = page.getByTestId("key-row").filter({ hasText: "laptop" });
  await row.waitFor();
  expect(await page.getByTestId("keys-empty").count()).toBe(0);
  expect(await page.locator("table caption", { hasText: "Keys:" }).textContent()).toBe("Keys: 1 of 10 in use");
  // The row is the key made, by its id; the secret is still shown once, below, and guarded.
  const [made] = (await admin("GET", `/v1/admin/accounts/${account}/keys`)).data;
  expect(await row.getAttribute("data-key-id")).toBe(made.id);
  expect(await page.getByTestId("key-secret").textContent()).toBe(secret);
  expect(await page.getByTestId("key-create").isDisabled()).toBe(true);
  expect(await page.evaluate(() => (globalThis as any).document.activeElement?.getAttribute("data-testid"))).toBe("key-copy");
  // Done puts the secret away; the key stays listed, the form is empty again.
  await page.getByTestId("key-secret-done").click();
  await page.getByTestId("key-secret").waitFor({ state: "detached" });
  expect(await page.getByTestId("key-row").count()).toBe(1);
  expect(await page.getByTestId("key-name").inputValue()).toBe("");
  expect(await page.getByTestId("key-create").isDisabled()).toBe(false);
  expect(await page.content()).not.toContain(secret);
  await page.context().close();
}, 30_000);

test("the Requests view heads its time \"Ended\" and says a request arrived its duration before (a slow request sent with a fast one was listed seconds after it, under \"Time\")", async () => {
  const { page, account } = await holder("slow co");
  const key = await admin("POST", `/v1/admin/accounts/${account}/keys`, { name: "slow key" });
  const sent = Date.now();
  await Promise.all([chat(key.key, "oai/slow"), chat(key.key, "oai/fast")]);
  await page.goto(`${gateway.url}/console/#requests`);
  const rows = page.getByTestId("request-row");
  await rows.nth(1).waitFor();
  const heads = await page.locator("table thead th").allTextContents();
  expect(heads[0]).toBe("Ended");
  expect(await page.locator("p.note", { hasText: "Duration" }).textContent()).toBe(
    "Ended is when each request ended; Duration is its whole time, from its arrival to its end (a stream cut short: to its cut), so it arrived that long before.",
  );
  // Newest first by its end: the slow request, sent with the fast one, ended last; its time is its
  // end (at least SLOW_MS after both were sent), and its duration says when it arrived.
  const cell = (row: number, column: string) => rows.nth(row).locator(`td[data-label="${column}"]`).innerText();
  expect(await cell(0, "Model")).toBe("oai/slow");
  expect(await cell(1, "Model")).toBe("oai/fast");
  const ended = Date.parse((await cell(0, "Ended")).replace(" UTC", "Z").replace(" ", "T"));
  expect(ended).toBeGreaterThanOrEqual(Math.floor((sent + SLOW_MS) / 1000) * 1000);
  expect(Number(await cell(0, "Duration (ms)"))).toBeGreaterThanOrEqual(SLOW_MS);
  await page.context().close();
}, 30_000);

test("what a holder's new key may reach writes its figures as the rest of the page does (\"at most 1000000 requests a minute\" beside a row's \"1,000,000\")", async () => {
  const { page, account } = await holder("wide co");
  await admin("POST", `/v1/admin/accounts/${account}/keys`, { name: "operator's", rate_limit_per_minute: 1_000_000, max_concurrent_requests: 12_000 });
  await page.reload();
  expect(await page.getByTestId("key-ceiling").textContent()).toBe(
    "As the operator limited this account's keys, a key you make takes at most 1,000,000 requests a minute; runs at most 12,000 at once.",
  );
  expect(await page.getByTestId("key-row").textContent()).toContain("1,000,000 requests a minute");
  await page.context().close();
}, 30_000);

test("the refusals under the balance say when the latest was (the count alone stayed in red for 24 hours after the limit was raised)", async () => {
  const { page, account } = await holder("refused co");
  const key = await admin("POST", `/v1/admin/accounts/${account}/keys`, { name: "refused key" });
  await admin("PATCH", `/v1/admin/accounts/${account}`, { spend_limit: 0, spend_limit_period: "day" });
  const refused = async () => {
    const res = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: "POST", headers: { authorization: `Bearer ${key.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "oai/fast", max_tokens: 20, messages: [{ role: "user", content: "hi" }] }),
    });
    expect(res.status).toBe(402);
    await res.arrayBuffer();
  };
  const minute = (at: number) => new Date(Math.floor(at / 60_000) * 60_000).toISOString().slice(0, 16).replace("T", " ");
  const before = Date.now();
  await refused();
  await refused();
  const after = Date.now();
  await page.reload();
  const said = (await page.getByTestId("refused-for-credits").textContent())!;
  expect(said).toStartWith("2 requests in the last 24 hours were refused (402), the latest at ");
  const at = /the latest at (\d{4}-\d\d-\d\d \d\d:\d\d) UTC: the balance/.exec(said)?.[1];
  expect([minute(before), minute(after)]).toContain(at!);
  // The admin API's account usage says it too.
  const usage = await admin("GET", `/v1/admin/accounts/${account}/usage`);
  expect(usage.rejected).toEqual({ "402": 2 });
  expect(usage.rejected_latest["402"].slice(0, 16).replace("T", " ")).toBe(at!);
  await page.context().close();
}, 30_000);
