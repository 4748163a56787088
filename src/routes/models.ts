import { Elysia } from "elysia";
import type { Catalogue } from "../catalogue/catalogue.ts";

/**
 * The spec's list by default. Anthropic SDK clients (they always send anthropic-version) get
 * Anthropic's list shape, which is what their `models.list()` parses.
 */
export function modelsRoute(catalogue: Catalogue) {
  const headers = { "content-type": "application/json" };
  return new Elysia({ name: "switchyard/models" }).get("/v1/models", ({ request, query }) => {
    if (request.headers.has("anthropic-version")) return Response.json(catalogue.anthropicList(query as Record<string, string | undefined>));
    return new Response(catalogue.listJson(), { headers });
  });
}
