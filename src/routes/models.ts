import { Elysia } from "elysia";
import type { Catalogue } from "../catalogue/catalogue.ts";

export function modelsRoute(catalogue: Catalogue) {
  const headers = { "content-type": "application/json" };
  return new Elysia({ name: "switchyard/models" }).get("/v1/models", () => new Response(catalogue.listJson(), { headers }));
}
