/**
 * `switchyard --health-check`: asks the gateway on this host whether it is ready (`GET /ready`)
 * and exits 0 when it is, 1 otherwise. The container's HEALTHCHECK runs the binary itself, so the
 * image needs no curl.
 */
export async function healthCheck({ url, timeoutMs }: { url: string; timeoutMs: number }): Promise<number> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    const body = await res.text();
    if (res.status !== 200) console.error(`switchyard: not ready (${res.status}): ${body.slice(0, 500)}`);
    return res.status === 200 ? 0 : 1;
  } catch (err) {
    console.error(`switchyard: ${url} does not answer: ${err instanceof Error ? err.message : String(err)}`);
    return 1;
  }
}
