/**
 * An answer's JSON already written as text (a large embeddings answer, written on its own thread):
 * sent as it is, with the headers `Response.json` gives, so the request thread neither parses nor
 * serialises it.
 */
export class JsonText {
  constructor(readonly text: string) {}
}
