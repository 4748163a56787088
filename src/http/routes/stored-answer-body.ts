import type { BodyBudget } from "../../limits/body-budget.ts";

/** What a stored answer is sent in: small enough that a client that stops reading holds little. */
const CHUNK_BYTES = 64 * 1024;

/** The direct stream controller Bun hands a `type: "direct"` stream's pull. */
interface DirectController {
  write(chunk: Uint8Array): number | Promise<number>;
  flush(): number | Promise<number>;
  close(): void;
}

/**
 * A stored Responses answer (`GET /v1/responses/{id}`, free) sent in chunks, as fast as the client
 * reads: a `Response` of the whole JSON had Bun copy all of it into the socket's buffer at once,
 * and a tenant asking for a 9 MB answer ten times a second on connections it never read took the
 * gateway from 170 MB to 3.7 GB in 40 s. Now at most a chunk waits beside the kernel's buffer,
 * the account's answers still being sent may hold `budget`'s share of bytes between them (their
 * sizes; more: 429), and a client that takes nothing for `idleMs` is given up. The share is given
 * back once the answer is sent, given up, or cancelled.
 */
export function storedAnswerBody(json: string, o: { budget: BodyBudget; holder: string; idleMs: number }): { stream: ReadableStream<Uint8Array>; bytes: number } | "busy" {
  const bytes = Buffer.from(json);
  const size = bytes.byteLength;
  if (o.budget.take(o.holder, size) !== undefined) return "busy";
  let given = false;
  const give = () => {
    if (given) return;
    given = true;
    o.budget.give(o.holder, size);
  };
  let offset = 0;
  const stream = new ReadableStream<Uint8Array>({
    type: "direct",
    async pull(controller: DirectController) {
      try {
        while (offset < size) {
          const end = Math.min(size, offset + CHUNK_BYTES);
          const written = controller.write(bytes.subarray(offset, end));
          offset = end;
          if (written instanceof Promise && !(await within(written, o.idleMs))) break;
        }
        const flushed = controller.flush();
        if (flushed instanceof Promise) await within(flushed, o.idleMs);
        controller.close();
      } catch {
        // The client went away mid-answer: nothing more to send.
      } finally {
        give();
      }
    },
    cancel: give,
  } as unknown as ConstructorParameters<typeof ReadableStream<Uint8Array>>[0]);
  return { stream, bytes: size };
}

/** Whether `pending` settled within `ms` (false: the client stopped reading). */
async function within(pending: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const idle = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  const sent = pending.then(() => true, () => true);
  const result = await Promise.race([sent, idle]);
  clearTimeout(timer);
  return result;
}
