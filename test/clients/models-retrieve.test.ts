import { beforeAll, expect, test } from "bun:test";
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { useGateway, ANTHROPIC_MODEL, OPENAI_MODEL } from "../helpers/gateway.ts";

const upstream = useFakeUpstream();
// An aliased model, as Claude Code's names reach one.
const gw = useGateway(() => ({
  upstreamUrl: upstream.url,
  extraModels: [{ id: "test/aliased", provider: "fake-anthropic", upstream_model: "claude-sonnet-4-5", category: "text", context_length: 200_000, pricing: { input_per_mtok: 3000, output_per_mtok: 15000 }, aliases: ["claude-sonnet-4-5", "claude-haiku-*"] }],
}));
let openai: OpenAI;
let anthropic: Anthropic;

beforeAll(() => {
  openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 0 });
  anthropic = new Anthropic({ baseURL: gw.url, apiKey: gw.key, maxRetries: 0 });
});

test("openai SDK models.retrieve: the list's element for that id (the SDK sends the slash encoded)", async () => {
  const list = (await (await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${gw.key}` } })).json()) as { data: { id: string }[] };
  const model = await openai.models.retrieve(OPENAI_MODEL);
  expect(model).toEqual(expect.objectContaining(list.data.find((m) => m.id === OPENAI_MODEL)!));
  expect(model).toMatchObject({ id: OPENAI_MODEL, object: "model", category: "text" });
});

test("the id unencoded in the path, as curl users write it", async () => {
  const res = await fetch(`${gw.url}/v1/models/${ANTHROPIC_MODEL}`, { headers: { authorization: `Bearer ${gw.key}` } });
  expect(res.status).toBe(200);
  expect(await res.json()).toMatchObject({ id: ANTHROPIC_MODEL, object: "model" });
});

test("anthropic SDK models.retrieve: Anthropic's shape", async () => {
  const model = await anthropic.models.retrieve(ANTHROPIC_MODEL);
  expect(model).toMatchObject({ type: "model", id: ANTHROPIC_MODEL, display_name: expect.any(String), created_at: expect.any(String) });
});

test("an unknown id is a 404 the SDKs type as NotFoundError; no key is a 401", async () => {
  expect(await openai.models.retrieve("no/such-model").catch((e) => e)).toBeInstanceOf(OpenAI.NotFoundError);
  expect(await anthropic.models.retrieve("no/such-model").catch((e) => e)).toBeInstanceOf(Anthropic.NotFoundError);
  expect((await fetch(`${gw.url}/v1/models/${OPENAI_MODEL}`)).status).toBe(401);
});

test("errors on the models routes are in the shape of the client that asked: Anthropic's with anthropic-version (an unknown id, a bad key), OpenAI's without", async () => {
  const missing = await anthropic.models.retrieve("no/such-model").catch((e) => e);
  expect(missing.error).toMatchObject({ type: "error", error: { type: "not_found_error", message: expect.stringContaining("no/such-model") } });
  const badKey = await fetch(`${gw.url}/v1/models`, { headers: { "x-api-key": "svc-sk-wrong", "anthropic-version": "2023-06-01" } });
  expect(badKey.status).toBe(401);
  expect(await badKey.json()).toMatchObject({ type: "error", error: { type: "authentication_error" } });
  const openaiMissing = await openai.models.retrieve("no/such-model").catch((e) => e);
  expect(openaiMissing.error).toMatchObject({ type: "not_found_error", code: "model_not_found" });
  expect(openaiMissing.error.error).toBeUndefined();
});

test("an alias, exact or a prefix pattern's, is retrieved as the model a chat with that name uses, under the name asked for, in both shapes", async () => {
  const model = await openai.models.retrieve("claude-sonnet-4-5");
  expect(model).toMatchObject({ id: "claude-sonnet-4-5", object: "model", model_id: "test/aliased", category: "text", context_length: 200_000 });
  expect(await anthropic.models.retrieve("claude-sonnet-4-5")).toMatchObject({ type: "model", id: "claude-sonnet-4-5" });
  // `claude-haiku-*` routes a chat with this dated name; retrieving it was a 404 (an SDK probe).
  expect(await openai.models.retrieve("claude-haiku-4-5-20251001")).toMatchObject({ id: "claude-haiku-4-5-20251001", object: "model", model_id: "test/aliased" });
  expect(await anthropic.models.retrieve("claude-haiku-4-5-20251001")).toMatchObject({ type: "model", id: "claude-haiku-4-5-20251001" });
  expect(await openai.models.retrieve("claude-opus-4-5").catch((e) => e)).toBeInstanceOf(OpenAI.NotFoundError);
});
