import Ajv2020 from "ajv/dist/2020.js";

/** An answer as a client saw it: what the document must allow. */
export interface SeenAnswer {
  method: string;
  /** The request's path (a query string is ignored). */
  path: string;
  status: number;
  contentType: string;
  body: string;
}

/**
 * Checks real answers against a served /openapi.json, as a client generated from it would read
 * them (ajv, JSON Schema 2020-12, which OpenAPI 3.1 uses): the operation exists, it documents the
 * status, and a JSON body is valid against that status's schema. Returns what is wrong, or
 * undefined. Formats (date-time) are not checked: the gateway's schemas name them for readers.
 */
export function openApiChecker(doc: any): (answer: SeenAnswer) => string | undefined {
  const ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: true });
  // The document's own $refs (#/components/…) resolve inside a schema registered under an id.
  const rewritten = JSON.parse(JSON.stringify(doc).replaceAll('"#/components/', '"openapi#/components/'));
  ajv.addSchema({ $id: "openapi", components: rewritten.components });
  const templates = Object.entries<Record<string, any>>(rewritten.paths).map(([template, ops]) => ({
    template,
    ops,
    // {model_id} takes the rest of the path (ids hold a slash); other parameters one segment.
    pattern: new RegExp(`^${template.replace("{model_id}", ".+").replace(/\{[^}]+\}/g, "[^/]+")}$`),
    params: (template.match(/\{/g) ?? []).length,
  }));
  // The most literal template first: /v1/responses/input_tokens before /v1/responses/{id}.
  templates.sort((a, b) => a.params - b.params);
  return (answer) => {
    const path = answer.path.split("?")[0]!;
    const method = answer.method.toLowerCase();
    const found = templates.find((t) => t.pattern.test(path) && t.ops[method]);
    if (!found) return `${answer.method} ${path}: no operation in the document`;
    const documented = found.ops[method].responses[String(answer.status)];
    if (!documented) return `${answer.method} ${found.template}: status ${answer.status} not documented (${Object.keys(found.ops[method].responses).join(", ")})`;
    const content: Record<string, { schema?: object }> | undefined = documented.content;
    if (!content) return undefined;
    const type = answer.contentType.split(";")[0]!.trim();
    const media = content[type];
    if (!media) return `${answer.method} ${found.template} ${answer.status}: content type ${type} not documented (${Object.keys(content).join(", ")})`;
    if (!type.includes("json") || !media.schema) return undefined;
    const validate = ajv.compile(media.schema);
    if (validate(JSON.parse(answer.body))) return undefined;
    return `${answer.method} ${found.template} ${answer.status}: ${ajv.errorsText(validate.errors, { separator: "; " })} in ${answer.body.slice(0, 300)}`;
  };
}

/** Sends a request and reads the whole answer as a SeenAnswer. */
export async function seen(url: string, method: string, path: string, init: { headers?: Record<string, string>; body?: unknown; raw?: string } = {}): Promise<SeenAnswer> {
  const res = await fetch(url + path, { method, headers: init.headers, body: init.raw ?? (init.body === undefined ? undefined : JSON.stringify(init.body)) });
  return { method, path, status: res.status, contentType: res.headers.get("content-type") ?? "", body: await res.text() };
}
