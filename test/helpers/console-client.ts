/**
 * A console user for loopback tests: keeps the session cookie and CSRF token a browser would,
 * and sends what the console's page sends (JSON, the site's Origin, x-csrf-token).
 */
export class ConsoleClient {
  cookie = "";
  csrf = "";
  /** Every Set-Cookie the gateway sent this client, as sent. */
  readonly setCookies: string[] = [];

  constructor(readonly base: string) {}

  async call(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Response> {
    const h: Record<string, string> = { origin: this.base, ...headers };
    if (this.cookie) h.cookie = this.cookie;
    if (method !== "GET" && this.csrf && !("x-csrf-token" in headers)) h["x-csrf-token"] = this.csrf;
    if (body !== undefined) h["content-type"] = "application/json";
    const res = await fetch(this.base + path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body), redirect: "manual" });
    const set = res.headers.get("set-cookie");
    if (set) {
      this.setCookies.push(set);
      const [pair] = set.split(";");
      this.cookie = pair!.endsWith("=") ? "" : pair!;
    }
    return res;
  }

  async json<T = any>(method: string, path: string, body?: unknown, expected = 200): Promise<T> {
    const res = await this.call(method, path, body);
    const text = await res.text();
    if (res.status !== expected) throw new Error(`${method} ${path}: ${res.status} ${text}`);
    return JSON.parse(text) as T;
  }

  /** Signs in (operator with a token, holder with login and password) and keeps the CSRF token. */
  async signIn(body: { token: string } | { login: string; password: string }): Promise<any> {
    const session = await this.json("POST", "/console/api/sign-in", body);
    this.csrf = session.csrf;
    return session;
  }

  async acceptInvite(url: string, password: string): Promise<any> {
    const token = new URL(url).hash.replace(/^#invite=/, "");
    const session = await this.json("POST", "/console/api/invites/accept", { token, password });
    this.csrf = session.csrf;
    return session;
  }
}
