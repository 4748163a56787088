import { fieldValue, type ResponseHead } from "./response-parser.ts";

/**
 * The Response our HTTP/1.1 client hands back: a real `Response` whose `Headers` are filled from
 * the parsed fields the first time anyone reads them. The gateway reads most answers for their
 * body alone, and building a `Headers` first cost more than the rest of the Response (~0.9 µs of
 * ~1.1 for an answer with six fields, measured). Whatever reads `headers` (or clones, or reads
 * the body as a Blob or form) sees exactly what an eager one would: the fields go into the
 * Response's own `Headers`.
 */
export class UpstreamResponse extends Response {
  #fields: string[] | undefined;

  constructor(body: Uint8Array | ReadableStream<Uint8Array> | null, head: ResponseHead) {
    super(body, { status: head.status, statusText: head.statusText });
    this.#fields = head.fields.length > 0 ? head.fields : undefined;
  }

  override get headers(): Headers {
    const headers = super.headers;
    const fields = this.#fields;
    if (fields) {
      for (let i = 0; i < fields.length; i += 2) headers.append(fields[i]!, fields[i + 1]!);
      this.#fields = undefined;
    }
    return headers;
  }

  /** One header by name, without building the Headers when they are not built yet (transport.ts, `responseHeader`). */
  header(name: string): string | null {
    const fields = this.#fields;
    return fields ? fieldValue(fields, name.toLowerCase()) : super.headers.get(name);
  }

  // Bun's own readers of a Response's headers do not go through the getter: the ones a caller
  // could use on an answer fill them first (blob and formData below too). An UpstreamResponse is
  // never returned to Bun.serve as it is: that would send the Headers as they stand.
  override clone() {
    void this.headers;
    return super.clone();
  }
}

// Typed as properties of Response in the DOM typings, so set on the prototype rather than overridden.
for (const name of ["blob", "formData"] as const) {
  const read = Response.prototype[name] as (this: Response) => Promise<unknown>;
  Object.defineProperty(UpstreamResponse.prototype, name, {
    value(this: UpstreamResponse) {
      void this.headers;
      return read.call(this);
    },
    writable: true,
    configurable: true,
  });
}
