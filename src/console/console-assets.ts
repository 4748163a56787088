import { clientBundle } from "./client-bundle.ts" with { type: "macro" };

/** The console's page: its HTML with the bundled script and styles inside, and the hashes its CSP allows. */
export interface ConsolePage {
  html: string;
  etag: string;
  csp: string;
}

/** The bundle, inlined here at build time by the macro (console/client-bundle.ts). */
const BUNDLE = clientBundle();

const sha256 = (text: string) => `'sha256-${new Bun.CryptoHasher("sha256").update(text).digest("base64")}'`;

/** The console's one HTML page, with its script and styles inline. Built once per process. */
export function consolePage(): ConsolePage {
  // "</" would end the inline script early; the bundle never needs it unescaped.
  const js = BUNDLE.js.replaceAll("</", "<\\/");
  const css = BUNDLE.css;
  const html = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>Switchyard console</title>
<link rel="icon" href="data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'%3E%3Crect width='16' height='16' rx='3' fill='%2314213d'/%3E%3Cpath d='M4 11h8M4 8h8M4 5h8' stroke='%23fff' stroke-width='1.5'/%3E%3C/svg%3E">
<style>${css}</style>
</head>
<body>
<a class="skip" href="#main">Skip to content</a>
<header class="bar"><span class="brand">Switchyard</span><nav id="nav" aria-label="Console sections"></nav><span id="who" class="who"></span></header>
<main id="main" tabindex="-1"><p>Loading…</p></main>
<div id="status" role="status" aria-live="polite" class="sr-only"></div>
<script>${js}</script>
</body>
</html>`;
  const etag = `"${Bun.hash(html).toString(36)}"`;
  const csp = [
    "default-src 'none'",
    `script-src ${sha256(js)}`,
    // uPlot positions its parts through element.style (CSSOM), which style-src does not govern.
    `style-src ${sha256(css)}`,
    "connect-src 'self'",
    "img-src 'self' data:",
    "form-action 'self'",
    "frame-ancestors 'none'",
    "base-uri 'none'",
  ].join("; ");
  return { html, etag, csp };
}
