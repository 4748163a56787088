import { Elysia } from "elysia";
import { buildOpenApiDocument, type RouteInfo } from "../openapi.ts";
import pkg from "../../../package.json" with { type: "json" };

/**
 * `GET /openapi.json`: the OpenAPI 3.1 document of every route, built on the first request from
 * the routes the app serves (`routes()`), then the same bytes every time. No key.
 */
export function openApiRoute(routes: () => readonly RouteInfo[]) {
  let text: string | undefined;
  return new Elysia({ name: "switchyard/openapi" }).get("/openapi.json", () =>
    new Response((text ??= JSON.stringify(buildOpenApiDocument(routes(), pkg.version))), { headers: { "content-type": "application/json" } }),
  );
}
