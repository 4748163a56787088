import { OPENAI_MODEL } from "./gateway.ts";

/**
 * Clients of a gateway that may die under them (kill -9, a worker killed, a store cut): each
 * request's outcome is what its client saw, filled in as the answer arrives, so a request the
 * gateway died under still says how far it got.
 */
export interface Outcome {
  /** What was asked (`AskOptions.kind`), to name it in a failure. */
  kind?: string;
  /** When it was sent (performance.now()). */
  at: number;
  status?: number;
  /** The answer's id (`chatcmpl-…` / `msg_…`), from the body or the first frame. */
  id?: string;
  retryAfter?: string;
  /** JSON: status 200 and the whole body parsed. Stream: the last frame (`[DONE]` / `message_stop`) arrived. */
  completed: boolean;
}

export interface AskOptions {
  kind?: string;
  /** Default: the standard test gateway's OpenAI model. */
  model?: string;
  stream?: boolean;
  /** /v1/messages instead of /v1/chat/completions. */
  anthropic?: boolean;
  /** `stream_options.include_usage` (chat). */
  includeUsage?: boolean;
  /** `connection: close`: a new connection each, so the kernel spreads them over workers. */
  close?: boolean;
  maxTokens?: number;
  text?: string;
}

/** One request; never throws (a connection that died is in the outcome). */
export async function ask(url: string, key: string, o: AskOptions = {}, outcome: Outcome = { kind: o.kind, at: performance.now(), completed: false }): Promise<Outcome> {
  const body: Record<string, unknown> = { model: o.model ?? OPENAI_MODEL, max_tokens: o.maxTokens ?? 16, messages: [{ role: "user", content: o.text ?? "alpha beta gamma" }] };
  if (o.stream) body.stream = true;
  if (o.includeUsage) body.stream_options = { include_usage: true };
  try {
    const res = await fetch(`${url}${o.anthropic ? "/v1/messages" : "/v1/chat/completions"}`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "anthropic-version": "2023-06-01", ...(o.close ? { connection: "close" } : {}) },
      body: JSON.stringify(body),
    });
    outcome.status = res.status;
    if (res.status !== 200) {
      outcome.retryAfter = res.headers.get("retry-after") ?? undefined;
      await res.text();
      return outcome;
    }
    if (!o.stream) {
      outcome.id = ((await res.json()) as { id: string }).id;
      outcome.completed = true;
      return outcome;
    }
    const decoder = new TextDecoder();
    let buffer = "";
    for await (const chunk of res.body!) {
      buffer += decoder.decode(chunk, { stream: true });
      for (let cut = buffer.indexOf("\n\n"); cut !== -1; cut = buffer.indexOf("\n\n")) {
        const lines = buffer.slice(0, cut).split("\n");
        buffer = buffer.slice(cut + 2);
        const event = lines.find((l) => l.startsWith("event: "))?.slice(7);
        const data = lines.find((l) => l.startsWith("data: "))?.slice(6);
        if (data === undefined) continue;
        if (!o.anthropic) {
          if (data === "[DONE]") outcome.completed = true;
          else outcome.id ??= (JSON.parse(data) as { id?: string }).id;
        } else if (event === "message_start") outcome.id = (JSON.parse(data) as { message: { id: string } }).message.id;
        else if (event === "message_stop") outcome.completed = true;
      }
    }
  } catch {
    // The gateway died under this request: what the client saw so far is in `outcome`.
  }
  return outcome;
}

/**
 * `clients` clients, each sending one request after another (`request(client, n)`) until stopped;
 * every outcome is listed from the moment it is sent. A client whose request was refused or cut
 * waits `pauseAfterRefusalMs` before the next.
 */
export function load(url: string, key: string, clients: number, request: (client: number, n: number) => AskOptions, pauseAfterRefusalMs = 0) {
  const outcomes: Outcome[] = [];
  let stopped = false;
  const running = Array.from({ length: clients }, async (_, i) => {
    for (let n = 0; !stopped; n++) {
      const o = request(i, n);
      const outcome: Outcome = { kind: o.kind, at: performance.now(), completed: false };
      outcomes.push(outcome);
      await ask(url, key, o, outcome);
      if (outcome.status !== 200 && pauseAfterRefusalMs > 0) await Bun.sleep(pauseAfterRefusalMs);
    }
  });
  return {
    outcomes,
    /** No client sends another request; resolves when every client's last one has ended. */
    async stop() {
      stopped = true;
      await Promise.all(running);
    },
  };
}
