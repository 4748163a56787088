/**
 * Issue 33: a provider whose key variable is unset used to start silently and call its vendor
 * with no key. It is named at start (one warning line) and in `/ready`'s detail, by the
 * variable's name only: no secret of any provider appears in either.
 */
import { expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { useGateway, VENDOR_OPENAI_KEY } from "../helpers/gateway.ts";
import type { LogLevel } from "../../src/log/log.ts";

const upstream = useFakeUpstream();
const logged: { level: LogLevel; message: string; fields?: Record<string, unknown> }[] = [];
// The Anthropic provider's variable (TEST_ANTHROPIC_KEY) is empty; the OpenAI one's is set.
const gw = useGateway(() => ({ upstreamUrl: upstream.url, vendorKeys: { anthropic: "" }, log: (level, message, fields) => logged.push({ level, message, fields }) }));

test("the provider without its key is named in one warning line at start, by provider and variable, never by a secret", () => {
  void gw.url;
  const warnings = logged.filter((l) => l.level === "warn" && l.message.startsWith("providers without a vendor key"));
  expect(warnings).toHaveLength(1);
  expect(warnings[0]!.fields).toEqual({ providers: ["fake-anthropic (TEST_ANTHROPIC_KEY)"] });
  expect(JSON.stringify(logged)).not.toContain(VENDOR_OPENAI_KEY);
});

test("/ready stays 200 (other providers serve) and lists the provider and its unset variable, without any secret", async () => {
  const res = await fetch(`${gw.url}/ready`);
  const text = await res.text();
  expect(res.status).toBe(200);
  expect(JSON.parse(text).providers_without_key).toEqual([{ provider: "fake-anthropic", env: ["TEST_ANTHROPIC_KEY"] }]);
  expect(text).not.toContain(VENDOR_OPENAI_KEY);
});
