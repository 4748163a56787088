import { describe, expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, IMAGES_API_MODEL, OPENAI_MODEL, post, useGateway } from "../helpers/gateway.ts";

/**
 * A 402's advice names the field the client's own API bounds its answer with. The Responses API
 * has no `max_tokens` (its field is `max_output_tokens`), and an embeddings request has nothing
 * of the kind to lower: a new user with a small balance read "Lower max_tokens" on both.
 */
const EMBED = "test/embed";
const embeddingModel = { id: EMBED, provider: "fake-openai", upstream_model: "text-embedding-3-small", category: "embedding", context_length: 8192, pricing: { input_per_mtok: 20, output_per_mtok: 0 } };
const ADMIN = "refusal-advice-admin-token-0123456789abcdef";

const upstream = useFakeUpstream();
// 0.0001 credits: less than any of the requests below may cost.
const poor = useGateway(() => ({ upstreamUrl: upstream.url, extraModels: [embeddingModel], credits: 0.0001 }));
const limited = useGateway(() => ({ upstreamUrl: upstream.url, extraModels: [embeddingModel], adminToken: ADMIN }));

const requests = {
  "/v1/chat/completions": { model: OPENAI_MODEL, messages: [{ role: "user", content: "hello" }] },
  "/v1/messages": { model: ANTHROPIC_MODEL, max_tokens: 100, messages: [{ role: "user", content: "hello" }] },
  "/v1/responses": { model: OPENAI_MODEL, input: "hello", max_output_tokens: 100 },
  "/v1/embeddings": { model: EMBED, input: "hello there" },
} as const;

/** The 402's message, whichever shape the route writes its errors in. */
async function refusal(res: Response): Promise<string> {
  expect(res.status).toBe(402);
  const body = (await res.json()) as { error: { message: string } };
  return body.error.message;
}

describe("a 402 says what the client can change, in its own API's words", () => {
  test("out of balance: chat and messages say max_tokens, the Responses API max_output_tokens, embeddings only the top-up", async () => {
    const said: Record<string, string> = {};
    for (const [path, body] of Object.entries(requests)) said[path] = await refusal(await post(poor, path, body));
    expect(said["/v1/chat/completions"]).toEndWith("Lower max_tokens or top up the account.");
    expect(said["/v1/messages"]).toEndWith("Lower max_tokens or top up the account.");
    expect(said["/v1/responses"]).toEndWith("Lower max_output_tokens or top up the account.");
    expect(said["/v1/embeddings"]).toEndWith("available. Top up the account.");
    for (const message of Object.values(said)) expect(message).toStartWith("Insufficient credits: this request may cost up to ");
    expect(upstream.requests).toHaveLength(0);
  });

  test("a model behind the images API, which takes no answer limit, is not said to get cheaper with a lower max_tokens", async () => {
    // Its hold is one image and the model's whole answer cap whatever max_tokens says (context-fit.ts).
    const chat = await refusal(await post(poor, "/v1/chat/completions", { model: IMAGES_API_MODEL, max_tokens: 10, messages: [{ role: "user", content: "a cat" }] }));
    expect(chat).toEndWith("available. Top up the account.");
    const messages = await refusal(await post(poor, "/v1/messages", { model: IMAGES_API_MODEL, max_tokens: 10, messages: [{ role: "user", content: "a cat" }] }));
    expect(messages).toEndWith("available. Top up the account.");
    // With a model in its fallbacks that takes one, lowering it can help.
    const mixed = await refusal(await post(poor, "/v1/chat/completions", { models: [IMAGES_API_MODEL, OPENAI_MODEL], max_tokens: 10, messages: [{ role: "user", content: "a cat" }] }));
    expect(mixed).toEndWith("Lower max_tokens or top up the account.");
    expect(upstream.requests).toHaveLength(0);
  });

  test("past a key's spend limit: the same advice, with the wait for the reset", async () => {
    const g = limited;
    const patched = await fetch(`${g.url}/v1/admin/keys/${g.keyId}`, {
      method: "PATCH",
      headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
      body: JSON.stringify({ spend_limit: 0.0001, spend_limit_period: "day" }),
    });
    expect(patched.status).toBe(200);
    const responses = await refusal(await post(g, "/v1/responses", requests["/v1/responses"]));
    expect(responses).toStartWith("Spend limit reached: this key's daily spend limit of 0.0001 credits");
    expect(responses).toEndWith("Lower max_output_tokens, wait for the reset, or ask for a higher limit.");
    const embeddings = await refusal(await post(g, "/v1/embeddings", requests["/v1/embeddings"]));
    expect(embeddings).toEndWith(". Wait for the reset, or ask for a higher limit.");
    expect(embeddings).not.toContain("max_tokens");
    expect(await refusal(await post(g, "/v1/chat/completions", requests["/v1/chat/completions"]))).toEndWith("Lower max_tokens, wait for the reset, or ask for a higher limit.");
    expect(upstream.requests).toHaveLength(0);
  });
});
