import { Elysia } from "elysia";
import { timingSafeEqual } from "node:crypto";
import { PROMETHEUS_CONTENT_TYPE } from "../../ops/metrics.ts";
import { errorResponse } from "../plugins/errors.ts";

export interface MetricsRouteOptions {
  /** The exposition text; undefined until the app is built. A promise when gathered from every worker. */
  expose: () => string | undefined | Promise<string | undefined>;
  /** SWITCHYARD_METRICS_TOKEN: when set, scrapes need `Authorization: Bearer <token>`. */
  token?: string;
}

/**
 * `GET /metrics`, Prometheus' text format. No API key (scrapers have none); with a token
 * configured, only `Authorization: Bearer <token>` is accepted (compared in constant time).
 */
export function metricsRoute(o: MetricsRouteOptions) {
  const expected = o.token ? Buffer.from(`Bearer ${o.token}`) : undefined;
  return new Elysia({ name: "switchyard/metrics" }).get("/metrics", async ({ request }) => {
    if (expected) {
      const given = Buffer.from(request.headers.get("authorization") ?? "");
      if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
        return errorResponse(false, 401, "authentication", "Invalid metrics token: send Authorization: Bearer <SWITCHYARD_METRICS_TOKEN>.", { "www-authenticate": "Bearer" });
      }
    }
    return new Response((await o.expose()) ?? "", { headers: { "content-type": PROMETHEUS_CONTENT_TYPE, "cache-control": "no-store" } });
  });
}
