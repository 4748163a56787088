/** What a paced body is sent in: small enough that a client that stops reading holds little. */
export const PACED_CHUNK_BYTES = 64 * 1024;

/** The direct stream controller Bun hands a `type: "direct"` stream's pull. */
interface DirectController {
  write(chunk: Uint8Array): number | Promise<number>;
  flush(): number | Promise<number>;
  close(): void;
}

/**
 * A body already made, sent in chunks as fast as its client reads. A `Response` of the whole text
 * has Bun copy all of it into the socket's buffer at once, where it waits for a client that may
 * never read: a 33 MB embeddings answer or a 9 MB stored answer asked for on connections left
 * unread took the gateway to 4 GB within a minute (hostile-tenant probes). Paced, at most a chunk
 * waits beside the kernel's buffer; a client that takes nothing for `idleMs` is given up (its
 * connection closed). `done` runs once, when the body was sent, given up or cancelled: whoever
 * counted the body's bytes gives them back then.
 */
export function pacedBody(bytes: Uint8Array, o: { idleMs: number; done?: () => void }): ReadableStream<Uint8Array> {
  const size = bytes.byteLength;
  let finished = false;
  const finish = () => {
    if (finished) return;
    finished = true;
    o.done?.();
  };
  let offset = 0;
  return new ReadableStream<Uint8Array>({
    type: "direct",
    async pull(controller: DirectController) {
      let gaveUp = false;
      try {
        while (offset < size) {
          const end = Math.min(size, offset + PACED_CHUNK_BYTES);
          const written = controller.write(bytes.subarray(offset, end));
          offset = end;
          if (written instanceof Promise && !(await within(written, o.idleMs))) {
            gaveUp = true;
            break;
          }
        }
        if (!gaveUp) {
          const flushed = controller.flush();
          gaveUp = flushed instanceof Promise && !(await within(flushed, o.idleMs));
        }
        if (!gaveUp) controller.close();
      } catch {
        // The client went away mid-answer: nothing more to send.
      } finally {
        finish();
      }
      if (gaveUp) throw CUT_CONNECTION;
    },
    cancel: finish,
  } as unknown as ConstructorParameters<typeof ReadableStream<Uint8Array>>[0]);
}

/**
 * Thrown by a direct stream's pull to cut its client's connection: a client given up for taking
 * nothing. Closing the stream instead ends the body gracefully, which waits for the client to take
 * what the server still holds; it never does, and the connection stayed open (200 s seen with
 * client_idle_ms at 3 s), its descriptor and socket buffers held past every bound: the request had
 * ended, so it held no concurrency place and no share of unread answers (a hostile-tenant probe,
 * twenty-fourth session). Bun ends the response of a pull that rejects by closing its connection;
 * `undefined`, since it prints any other reason as an uncaught error.
 */
export const CUT_CONNECTION = undefined;

/** Whether `pending` settled within `ms` (false: the client stopped reading). */
async function within(pending: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const idle = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  const sent = pending.then(() => true, () => true);
  const result = await Promise.race([sent, idle]);
  clearTimeout(timer);
  return result;
}
