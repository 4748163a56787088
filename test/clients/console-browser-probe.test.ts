import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Browser, type Page } from "playwright-core";
import { launchChromium, openAccount } from "../helpers/chromium.ts";
import { startGatewayProcess, type GatewayProcess, stopGatewayProcess } from "../helpers/gateway-process.ts";

/**
 * An account holder checking the bill in a real headless Chromium, in front of the real gateway
 * process and a loopback vendor that reports prompt caching as OpenAI and Anthropic do
 * (`prompt_tokens_details.cached_tokens`; `cache_read_input_tokens` and `cache_creation`). What a
 * fifth console probe found (docs/decisions.md): a request's cached tokens and a model's prices for
 * long prompts were not on any page, so the credits a request cost could not be checked.
 */
const ADMIN = "admin-probe-0123456789abcdef0123456789abcdef";
const PASSWORD = "a long enough password";
/** What the vendor reports for a long prompt (above the 200,000 tokens where Sonnet 4.5's 1M window costs more). */
const LONG_PROMPT = 250_000;

const dir = mkdtempSync(join(tmpdir(), "switchyard-console-probe-"));
let gateway: GatewayProcess;
let vendor: ReturnType<typeof Bun.serve>;
let browser: Browser;

function startVendor() {
  return Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(req) {
      const url = new URL(req.url);
      if (url.pathname.endsWith("/models")) return Response.json({ object: "list", data: [] });
      const body = (await req.json()) as { model: string };
      if (url.pathname.endsWith("/messages")) {
        const long = body.model === "claude-sonnet-4-5";
        return Response.json({
          id: "msg_1", type: "message", role: "assistant", model: body.model, content: [{ type: "text", text: "Hi" }], stop_reason: "end_turn", stop_sequence: null,
          usage: long
            ? { input_tokens: LONG_PROMPT, output_tokens: 20, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 }
            : { input_tokens: 100, output_tokens: 20, cache_read_input_tokens: 3000, cache_creation_input_tokens: 500, cache_creation: { ephemeral_5m_input_tokens: 500, ephemeral_1h_input_tokens: 0 } },
        });
      }
      return Response.json({
        id: "chatcmpl-1", object: "chat.completion", created: 1, model: body.model,
        choices: [{ index: 0, message: { role: "assistant", content: "Hello" }, finish_reason: "stop" }],
        // A vendor (or a proxy) that leaves usage out: the gateway estimates the counts.
        ...(body.model === "gpt-no-count" ? {} : { usage: { prompt_tokens: 1200, completion_tokens: 7, total_tokens: 1207, prompt_tokens_details: { cached_tokens: 1024 } } }),
      });
    },
  });
}

const admin = async (method: string, path: string, body?: unknown) => {
  const res = await fetch(`${gateway.url}${path}`, { method, headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
  return res.json() as Promise<any>;
};

/** A request on the Anthropic route; `words` makes the prompt long enough for what the vendor reports. */
async function messages(key: string, model: string, words: number): Promise<void> {
  const res = await fetch(`${gateway.url}/v1/messages`, {
    method: "POST",
    headers: { "x-api-key": key, "content-type": "application/json", "anthropic-version": "2023-06-01" },
    body: JSON.stringify({ model, max_tokens: 100, messages: [{ role: "user", content: "word ".repeat(words) }] }),
  });
  expect(res.status).toBe(200);
  await res.arrayBuffer();
}

async function chat(key: string, model = "oai/gpt-4.1"): Promise<void> {
  const res = await fetch(`${gateway.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content: "word ".repeat(1500) }] }),
  });
  expect(res.status).toBe(200);
  await res.arrayBuffer();
}

/** A holder of a new account with one key, signed in through the invite link in a page of its own. */
async function holder(name: string): Promise<{ page: Page; account: string; key: string }> {
  const account = await admin("POST", "/v1/admin/accounts", { name, credits: 100 });
  const key = await admin("POST", `/v1/admin/accounts/${account.id}/keys`, { name: `${name} key` });
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
  return { page, account: account.id, key: key.key };
}

beforeAll(async () => {
  vendor = startVendor();
  const config = join(dir, "config.json");
  writeFileSync(config, JSON.stringify({
    providers: [
      { id: "oai", kind: "openai", base_url: `http://127.0.0.1:${vendor.port}/v1`, keys: [{ env: "PROBE_OAI_KEY" }] },
      { id: "ant", kind: "anthropic", base_url: `http://127.0.0.1:${vendor.port}`, keys: [{ env: "PROBE_ANT_KEY" }] },
    ],
    models: [
      { id: "oai/no-count", provider: "oai", upstream_model: "gpt-no-count", category: "text", context_length: 128_000, pricing: { input_per_mtok: 2, output_per_mtok: 8 } },
      { id: "oai/gpt-4.1", provider: "oai", upstream_model: "gpt-4.1", category: "text", context_length: 128_000, pricing: { input_per_mtok: 2, output_per_mtok: 8, cache_read_per_mtok: 0.5 } },
      // Cache prices from Anthropic's multipliers (0.3 read, 3.75 a 5-minute write).
      { id: "ant/claude-sonnet", provider: "ant", upstream_model: "claude-sonnet-4-0", category: "text", context_length: 200_000, pricing: { input_per_mtok: 3, output_per_mtok: 15 } },
      // The 1M window: 6 and 22.5 above 200,000 prompt tokens (the family's long-context prices).
      { id: "ant/claude-sonnet-1m", provider: "ant", upstream_model: "claude-sonnet-4-5", category: "text", context_length: 1_000_000, pricing: { input_per_mtok: 3, output_per_mtok: 15 } },
    ],
    limits: { requests_per_minute: 100_000 },
  }));
  [gateway, browser] = await Promise.all([
    startGatewayProcess({ SWITCHYARD_DB: join(dir, "gateway.sqlite"), SWITCHYARD_ADMIN_TOKEN: ADMIN, SWITCHYARD_DEMO: "1", SWITCHYARD_CONFIG: config, PROBE_OAI_KEY: "sk-probe-oai", PROBE_ANT_KEY: "sk-probe-ant", OPENAI_API_KEY: "", ANTHROPIC_API_KEY: "" }),
    launchChromium(),
  ]);
}, 30_000);

afterAll(async () => {
  await browser?.close();
  await stopGatewayProcess(gateway);
  vendor?.stop(true);
  rmSync(dir, { recursive: true, force: true });
});

test("a request's cached prompt tokens are said under its prompt (3,600 tokens in for 0.003375 credits at 3 a million did not add up), and its credits are the ledger's and the prices' to the unit", async () => {
  const { page, account, key } = await holder("cache co");
  await messages(key, "ant/claude-sonnet", 4_000);
  await chat(key);

  await page.goto(`${gateway.url}/console/#requests`);
  const rows = page.getByTestId("request-row");
  await rows.nth(1).waitFor();
  // Newest first: the chat request, then the Anthropic one.
  const cell = (row: number, column: string) => rows.nth(row).locator(`td[data-label="${column}"]`).innerText();
  expect((await cell(0, "Tokens in")).replace(/\s+/g, " ")).toBe("1,200 of which 1,024 cache read");
  expect((await cell(1, "Tokens in")).replace(/\s+/g, " ")).toBe("3,600 of which 3,000 cache read, 500 cache write (5 min)");
  // The figures a holder can check on the Models page: fresh, read, write and output at their prices.
  expect(await cell(0, "Credits")).toBe(String((176 * 2 + 1024 * 0.5 + 7 * 8) / 1e6));
  expect(await cell(1, "Credits")).toBe(String((100 * 3 + 3000 * 0.3 + 500 * 3.75 + 20 * 15) / 1e6));

  // The same figures as the admin API's usage (the ledger's records).
  const { total } = await admin("GET", `/v1/admin/accounts/${account}/usage`);
  expect({ read: total.cache_read_tokens, write: total.cache_write_5m_tokens, cost: total.cost, savings: total.cache_savings }).toEqual({ read: 4024, write: 500, cost: 0.004295, savings: 0.009261 });

  // The CSV carries them too, under their own names.
  const csv = await page.evaluate(async () => (await fetch("/console/api/requests?format=csv")).text());
  const [head, first] = csv.split("\r\n");
  const columns = head!.split(",");
  const values = first!.split(",");
  expect(Object.fromEntries(["prompt_tokens", "cache_read_tokens", "cache_write_5m_tokens", "cache_write_1h_tokens", "estimated", "cost"].map((c) => [c, values[columns.indexOf(c)]])))
    .toEqual({ prompt_tokens: "1200", cache_read_tokens: "1024", cache_write_5m_tokens: "0", cache_write_1h_tokens: "0", estimated: "false", cost: "0.00092" });

  // The usage view says what the cache columns and savings are.
  await page.goto(`${gateway.url}/console/#usage`);
  await page.getByTestId("usage-row").first().waitFor();
  expect(await page.getByTestId("usage-total-credits").textContent()).toBe(String(total.cost));
  expect(await page.getByTestId("usage-cache-savings").textContent()).toBe(String(total.cache_savings));
  expect(await page.getByTestId("usage-cache-note").textContent()).toContain("at its own price");
  await page.context().close();
}, 30_000);

test("a model's prices for long prompts are shown (a 1M-window Sonnet billed a 250,000-token prompt at twice the input price the page said)", async () => {
  const { page, key } = await holder("long co");
  await messages(key, "ant/claude-sonnet-1m", LONG_PROMPT + 1_000);
  await page.goto(`${gateway.url}/console/#catalogue`);
  await page.getByTestId("model-row").first().waitFor();
  const long = page.getByTestId("long-context-price");
  expect(await long.count()).toBe(1);
  expect((await long.innerText()).replace(/\s+/g, " ")).toBe("ant/claude-sonnet-1m above 200,000 prompt tokens: input 6, output 22.5, cache read 0.6, cache write (5 min) 7.5, cache write (1 h) 12.");

  // What the request cost is what those prices say.
  await page.goto(`${gateway.url}/console/#requests`);
  const row = page.getByTestId("request-row").first();
  await row.waitFor();
  expect(await row.locator('td[data-label="Credits"]').innerText()).toBe(String((LONG_PROMPT * 6 + 20 * 22.5) / 1e6));
  await page.context().close();
}, 30_000);

test("a request whose counts the gateway estimated says so beside them (the vendor sent no usage; it read as the vendor's count)", async () => {
  const { page, account, key } = await holder("estimate co");
  await chat(key, "oai/no-count");
  // One request, estimated: the total's line says so of it, not "1 of them".
  await page.goto(`${gateway.url}/console/#usage/24h/model`);
  await page.getByTestId("usage-row").first().waitFor();
  expect(await page.getByTestId("usage-estimated").textContent()).toBe("its tokens estimated by the gateway (the vendor sent no count)");
  await chat(key);
  await page.goto(`${gateway.url}/console/#requests`);
  const rows = page.getByTestId("request-row");
  await rows.nth(1).waitFor();
  // Newest first: the counted request says nothing more, the estimated one says whose figures they are.
  expect(await rows.nth(0).getByTestId("request-estimated").count()).toBe(0);
  expect(await rows.nth(1).getByTestId("request-estimated").textContent()).toBe("in and out estimated by the gateway (the vendor sent no count)");
  const api = await page.evaluate(async () => ((await (await fetch("/console/api/requests")).json()) as { data: { estimated: boolean }[] }).data.map((r) => r.estimated));
  expect(api).toEqual([false, true]);
  // The estimate is what was billed: its credits are its figures at the model's prices.
  const tokensIn = Number((await rows.nth(1).locator('td[data-label="Tokens in"]').innerText()).split("\n")[0]!.replaceAll(",", ""));
  const tokensOut = Number((await rows.nth(1).locator('td[data-label="Tokens out"]').innerText()).replaceAll(",", ""));
  expect(await rows.nth(1).locator('td[data-label="Credits"]').innerText()).toBe(String((tokensIn * 2 + tokensOut * 8) / 1e6));
  const { total } = await admin("GET", `/v1/admin/accounts/${account}/usage`);
  expect(total.prompt_tokens).toBe(tokensIn + 1200);
  expect(total.estimated_requests).toBe(1);
  // The usage view counts it too (it counted only requests): in the total's line and in its model's row.
  await page.goto(`${gateway.url}/console/#usage/24h/model`);
  await page.getByTestId("usage-row").first().waitFor();
  expect(await page.getByTestId("usage-estimated").textContent()).toBe("1 of them with tokens estimated by the gateway (the vendor sent no count)");
  const estimatedCells = await page.getByTestId("usage-row").evaluateAll((trs) => trs.map((tr) => [(tr as any).cells[0]!.textContent, (tr as any).cells[2]!.textContent]));
  expect(estimatedCells).toContainEqual(["oai/no-count", "1"]);
  const href = (await page.getByRole("link", { name: "Download CSV" }).getAttribute("href"))!;
  const [head, ...lines] = (await page.evaluate(async (url) => (await fetch(url)).text(), href)).split("\r\n");
  const at = head!.split(",").indexOf("estimated_requests");
  expect(at).toBe(head!.split(",").length - 1);
  expect(lines.filter((l) => l.includes("oai/no-count")).map((l) => l.split(",")[at])).toEqual(["1"]);
  await page.context().close();
}, 30_000);

test("a key's limit saved below what its period spent says the key is refused until the reset (it said only \"saved.\", and the next request was a 402)", async () => {
  const { page, key } = await holder("limit co");
  await chat(key);
  await page.goto(`${gateway.url}/console/#account`);
  const row = page.getByTestId("key-row").first();
  expect(await row.getByTestId("limit-used-up").count()).toBe(0);
  await row.getByTestId("key-spend-limit").fill("0.0005");
  await row.locator("select").selectOption("day");
  await row.getByTestId("key-save").click();
  const said = page.getByTestId("key-row").first().getByTestId("limit-used-up");
  await said.waitFor();
  expect(await said.textContent()).toMatch(/^This key's limit is used up: requests are refused until \d{4}-\d\d-\d\d 00:00:00 UTC, or until it is raised\.$/);
  // What the page says is what the gateway does.
  const refused = await fetch(`${gateway.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify({ model: "oai/gpt-4.1", messages: [{ role: "user", content: "hi" }] }) });
  expect(refused.status).toBe(402);
  await refused.arrayBuffer();
  // Raised above what was spent, the words go.
  await page.getByTestId("key-row").first().getByTestId("key-spend-limit").fill("1");
  await page.getByTestId("key-row").first().getByTestId("key-save").click();
  await page.getByTestId("key-row").first().getByTestId("key-limit").filter({ hasText: "1 credit per day" }).waitFor();
  expect(await page.getByTestId("limit-used-up").count()).toBe(0);
  await page.context().close();
}, 30_000);

test("the operator suspends an account from its page and resumes it; the holder's page and the accounts list say so, and the gateway refuses its key meanwhile", async () => {
  const { page: holderPage, account, key } = await holder("suspended co");
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  page.setDefaultTimeout(10_000);
  await page.goto(`${gateway.url}/console/`);
  await page.getByTestId("sign-in-token").fill(ADMIN);
  await page.getByTestId("sign-in-token-submit").click();
  await page.getByTestId("account-row").first().waitFor();
  await openAccount(page, gateway.url, account);
  // It asks first, as a revoke does, and says what it does: one click stopped every key of the account.
  const suspend = page.getByTestId("account-suspend-submit");
  await suspend.filter({ hasText: "Suspend account" }).click();
  expect(await suspend.textContent()).toBe("Confirm suspend account");
  expect(await suspend.getAttribute("aria-label")).toBe("Confirm: Suspend the account. Its keys are refused from their next request, until you resume it.");
  expect(await page.locator("#status").textContent()).toBe("Press again to suspend the account. Its keys are refused from their next request, until you resume it.");
  expect((await fetch(`${gateway.url}/v1/admin/accounts/${account}`, { headers: { authorization: `Bearer ${ADMIN}` } }).then((r) => r.json() as Promise<any>)).suspended_at).toBeNull();
  // Escape takes it back; pressed again, it asks again.
  await suspend.press("Escape");
  expect(await suspend.textContent()).toBe("Suspend account");
  // That Escape's "Not done" is shown; it is not the Escape that puts a notice away.
  expect(await page.locator("#status").textContent()).toBe("Not done: suspend the account.");
  expect(await page.locator("#status").evaluate((el) => el.classList.contains("shown"))).toBe(true);
  await suspend.click();
  await Bun.sleep(550); // a confirming click is one of its own (dom.ts, CONFIRM_AFTER_MS)
  await suspend.click();
  await page.getByTestId("account-suspended").waitFor();
  expect(await page.getByTestId("account-suspended").textContent()).toContain("This account is suspended by the gateway's operator since");
  const ask = () => fetch(`${gateway.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify({ model: "oai/gpt-4.1", messages: [{ role: "user", content: "hi" }] }) });
  const refused = await ask();
  expect(refused.status).toBe(403);
  await refused.arrayBuffer();
  await holderPage.reload();
  await holderPage.getByTestId("account-suspended").waitFor();
  expect(await holderPage.getByTestId("account-suspended").textContent()).toContain("Your account is suspended");
  await page.goto(`${gateway.url}/console/#accounts?name=suspended%20co`);
  await page.getByTestId("account-row").filter({ hasText: "suspended co" }).getByTestId("account-suspended-mark").waitFor();

  await openAccount(page, gateway.url, account);
  await page.getByTestId("account-suspend-submit").filter({ hasText: "Resume account" }).click();
  await page.getByTestId("account-suspend-submit").filter({ hasText: "Suspend account" }).waitFor();
  expect(await page.getByTestId("account-suspended").count()).toBe(0);
  const answered = await ask();
  expect(answered.status).toBe(200);
  await answered.arrayBuffer();
  await context.close();
  await holderPage.context().close();
}, 30_000);
