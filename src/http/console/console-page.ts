import { Elysia } from "elysia";
import { errorResponse } from "../plugins/errors.ts";

const notFound = () => errorResponse(false, 404, "not_found", "No such console route.");

// A type only: the module itself (and its embedded bundle) is loaded on the first request, below.
import type { ConsolePage } from "../../console/console-assets.ts";

/**
 * Loads the page on its first request: the bundle (console/console-assets.ts, embedded in the
 * binary at build time) is imported only then, so a gateway whose console nobody opens never
 * parses it, and `/v1/*` requests never touch it.
 */
function lazyPage(): () => Promise<ConsolePage & { gzip: Uint8Array; gzipEtag: string }> {
  let page: Promise<ConsolePage & { gzip: Uint8Array; gzipEtag: string }> | undefined;
  // Gzipped once (125 KB of script and styles are 48 KB so), for the browsers that take it: all of them.
  return () => (page ??= import("../../console/console-assets.ts").then(({ consolePage }) => {
    const p = consolePage();
    return { ...p, gzip: Bun.gzipSync(p.html, { level: 9 }), gzipEtag: `${p.etag.slice(0, -1)}-gz"` };
  }));
}

/** Whether the request takes gzip (`Accept-Encoding`, a q of 0 refusing it). */
function takesGzip(request: Request): boolean {
  const coding = (request.headers.get("accept-encoding") ?? "").split(",").map((c) => c.trim().split(/\s*;\s*/)).find(([name]) => name?.toLowerCase() === "gzip");
  return coding !== undefined && !coding.slice(1).some((param) => /^q=0(\.0*)?$/i.test(param));
}

/**
 * `/console`: one request for the whole shell (script and styles inline, so nothing else loads
 * before the first view's data). Cached by ETag; the CSP allows only the page's own script and
 * style (by hash) and requests to this origin.
 */
export function consolePageRoutes() {
  const page = lazyPage();
  const serve = async (request: Request) => {
    const p = await page();
    const gzip = takesGzip(request);
    const headers = {
      etag: gzip ? p.gzipEtag : p.etag,
      vary: "accept-encoding",
      "cache-control": "no-cache",
      "content-security-policy": p.csp,
      "x-content-type-options": "nosniff",
      "referrer-policy": "no-referrer",
      "x-frame-options": "DENY",
    };
    if (request.headers.get("if-none-match") === headers.etag) return new Response(null, { status: 304, headers });
    if (gzip) return new Response(p.gzip, { headers: { ...headers, "content-encoding": "gzip", "content-type": "text/html; charset=utf-8" } });
    return new Response(p.html, { headers: { ...headers, "content-type": "text/html; charset=utf-8" } });
  };
  return new Elysia({ name: "switchyard/console-page" })
    // Elysia answers /console and /console/ alike.
    .get("/console/", ({ request }) => serve(request))
    // A mistyped or shared path under /console (`/console/accounts`) opens the console, not a JSON
    // 404 (its views are chosen by the fragment); the API's unknown paths stay JSON 404s.
    .get("/console/*", ({ request, params }) => (params["*"].startsWith("api/") ? notFound() : serve(request)));
}
