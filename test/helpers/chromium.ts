import { chromium, type Browser, type BrowserContext, type Page } from "playwright-core";

/** Debian's Chromium (the only browser these machines can install); SWITCHYARD_CHROMIUM names another. */
export const CHROMIUM = process.env.SWITCHYARD_CHROMIUM ?? "/usr/bin/chromium";

/** Headless, no sandbox (CI runs as root), and nothing of its own on the network while a test runs. */
const ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"];

/** A browser whose contexts share nothing (each its own cookies). */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args: ARGS });
}

/** One browser profile kept in `dir` (what a person's browser is: one cookie jar, its pages). */
export function launchChromiumProfile(dir: string, viewport: { width: number; height: number }): Promise<BrowserContext> {
  return chromium.launchPersistentContext(dir, { executablePath: CHROMIUM, headless: true, args: ARGS, viewport });
}

/**
 * An operator's page opened on one account's view, once that account is shown. Going there from
 * another view changes only the address's hash: the view before stays until the account is read,
 * and a form filled before then was the last account's (a flaky CI run: a spend limit typed into
 * the view that was being replaced).
 */
export async function openAccount(page: Page, base: string, id: string): Promise<void> {
  await page.goto(`${base}/console/#account/${id}`);
  await page.locator(`section[data-account-id="${id}"]`).waitFor();
}
