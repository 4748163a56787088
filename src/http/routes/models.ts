import { Elysia } from "elysia";
import type { Catalogue } from "../../catalogue/catalogue.ts";
import { GatewayError } from "../../streaming/gateway-error.ts";
import type { Principals } from "../plugins/admission.ts";

/**
 * The spec's list by default. Anthropic SDK clients (they always send anthropic-version) get
 * Anthropic's list shape, which is what their `models.list()` parses. A key limited to models
 * sees only those (catalogue `visibleTo`).
 */
export function modelsRoute(catalogue: Catalogue, principals: Principals) {
  const headers = { "content-type": "application/json" };
  return new Elysia({ name: "switchyard/models" })
    .get("/v1/models", ({ request, query }) => {
      const view = catalogue.visibleTo(principals.of(request).models);
      if (request.headers.has("anthropic-version")) {
        const q = query as Record<string, string | undefined>;
        // Anthropic's range (1 to 1000, 20 by default): a value outside it is refused, not clamped.
        if (q.limit !== undefined && !/^(?:[1-9]\d{0,2}|1000)$/.test(q.limit)) throw new GatewayError(400, "invalid_request", "limit: must be an integer from 1 to 1000.");
        return Response.json(view.anthropicList(q));
      }
      return new Response(view.listJson(), { headers });
    })
    // Ids contain a slash (`openai/gpt-4o-mini`); SDKs send it encoded (`%2F`), curl users plain.
    .get("/v1/models/*", ({ request }) => {
      const path = new URL(request.url).pathname;
      let id: string;
      try {
        id = decodeURIComponent(path.slice("/v1/models/".length));
      } catch {
        id = path.slice("/v1/models/".length);
      }
      const view = catalogue.visibleTo(principals.of(request).models);
      const entry = request.headers.has("anthropic-version") ? view.anthropicEntry(id) : view.entry(id);
      if (!entry) throw new GatewayError(404, "not_found", `The model "${id.slice(0, 200)}" does not exist. GET /v1/models lists the available ids.`, undefined, { code: "model_not_found" });
      return Response.json(entry);
    });
}
