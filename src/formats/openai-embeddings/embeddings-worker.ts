/**
 * The embeddings thread (see embeddings-thread.ts): takes a large answer's bytes as they arrive,
 * then parses, checks and writes it as the request thread would have (check-embeddings.ts,
 * encode-embeddings.ts), and answers with the client's JSON text. 2,048 vectors of 1,400 floats
 * are ~60 MB of JSON, about 1.4 s of parsing, checking and printing numbers: here it holds up no
 * other request.
 */
import { withoutKnownSecrets } from "../../log/scrub.ts";
import { embeddingsFault, reportedPromptTokens } from "./check-embeddings.ts";
import { embeddingsList, embeddingsUsage } from "./encode-embeddings.ts";
import type { EmbeddingsCommand, EmbeddingsReply } from "./embeddings-thread.ts";

declare const self: Worker;

/** Answers still arriving, by id: decoded as their bytes come, so the text is ready when the last does. */
const arriving = new Map<number, { decoder: TextDecoder; text: string[] }>();

/**
 * As the request thread decodes a body (gateway/attempt.ts), a piece at a time: a BOM is kept, so
 * JSON.parse refuses it here as there, and a character split between pieces is decoded whole.
 */
const decoder = () => new TextDecoder("utf-8", { ignoreBOM: true });

function write(text: string, command: EmbeddingsCommand & { type: "end" }): EmbeddingsReply {
  // The vendor's own fields go out with the list: a key it echoes there goes nowhere.
  const body: unknown = JSON.parse(command.known ? withoutKnownSecrets(text, command.known.split("\n")) : text);
  const fault = embeddingsFault(body, command.expected);
  if (fault) return { id: command.id, type: "fault", ...fault };
  const reported = reportedPromptTokens(body);
  // Without a usable count the meter estimates one: written with 0 here, replaced once known.
  const usage = embeddingsUsage(reported ?? 0);
  const list = embeddingsList(body, command.model, command.encoding, usage);
  // One string, as one JSON.stringify writes it: a string pieced together from several is copied
  // whole again when it is sent to the request thread (~0.3 s for 60 MB here).
  const written = JSON.stringify(list);
  const [start, end] = usageSpan(list, written, JSON.stringify(usage));
  return { id: command.id, type: "written", text: written, reported, start, end };
}

/**
 * Where `usage` sits in `written` (JSON.stringify of `list`): what follows it is the members after
 * it, which JSON.stringify writes the same alone (`{…}` there, `,…}` here). Usually nothing follows.
 */
function usageSpan(list: Record<string, unknown>, written: string, usage: string): [number, number] {
  const keys = Object.keys(list);
  const after = keys.slice(keys.indexOf("usage") + 1);
  const end = after.length === 0 ? written.length - 1 : written.length - JSON.stringify(Object.fromEntries(after.map((k) => [k, list[k]]))).length;
  const start = end - usage.length;
  if (written.slice(start, end) !== usage) throw new Error("the embeddings answer's usage was not where it was written");
  return [start, end];
}

self.onmessage = (event: MessageEvent<EmbeddingsCommand>) => {
  const command = event.data;
  switch (command.type) {
    case "bytes": {
      let answer = arriving.get(command.id);
      if (!answer) arriving.set(command.id, (answer = { decoder: decoder(), text: [] }));
      answer.text.push(answer.decoder.decode(new Uint8Array(command.bytes), { stream: true }));
      return;
    }
    case "drop":
      arriving.delete(command.id);
      return;
    case "end": {
      const answer = arriving.get(command.id) ?? { decoder: decoder(), text: [] };
      arriving.delete(command.id);
      let reply: EmbeddingsReply;
      try {
        answer.text.push(answer.decoder.decode());
        reply = write(answer.text.join(""), command);
      } catch (err) {
        // Not JSON (or not an answer the list can be written from): unreadable, as on the request thread.
        const e = err instanceof Error ? err : new Error(String(err));
        reply = { id: command.id, type: "failed", name: e.name, message: e.message };
      }
      self.postMessage(reply);
      return;
    }
    case "splice": {
      const { text, start, end, usage } = command;
      self.postMessage({ id: command.id, type: "spliced", text: text.slice(0, start) + usage + text.slice(end) } satisfies EmbeddingsReply);
      return;
    }
  }
};

// Loaded: a thread that fails from here on failed at its work, not at its start.
self.postMessage({ type: "ready", id: 0 } satisfies EmbeddingsReply);
