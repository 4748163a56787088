import type { Json } from "../common/wire-types.ts";
import { answerIdOfItem, StoredTooLargeError, type ResponseStore, type StoredResponse } from "./response-store.ts";
import { ResponsesRequestError } from "./responses-to-chat.ts";

/**
 * What a Responses request refers to by id, replaced by what it names, before translation:
 * `item_reference` input items become the stored items, `previous_response_id` becomes the
 * earlier turns' input and output items in front of this request's input. Pure apart from the
 * store's lookups (which count as uses of what they find).
 */
export interface StoredInput {
  /** This request's own input as items, references replaced; what is kept if its answer is. */
  input: Json[];
  /** The turns `previous_response_id` continues (each turn's input, then its output), oldest first. */
  history: Json[];
  /** The request's `previous_response_id`, kept with its answer to link the chain. */
  previous?: string;
  /** The id of the chain's first answer: the conversation, for vendor key affinity. */
  root?: string;
  /**
   * Whether stored items were added (references resolved, or a history): what goes upstream is
   * then larger than the request, and its size, not the request's, bounds the prompt (the hold).
   */
  expanded: boolean;
}

/** How a client avoids references the gateway cannot resolve; every refusal below ends with it. */
const SEND_WHOLE =
  "clients that refer to earlier answers by id send them whole with `store: false` (the AI SDK's openai() provider: `providerOptions: { openai: { store: false } }`).";

/** Why a reference may miss; said in every refusal of an unknown id. */
const WHY_MISSING =
  "answers are kept for a limited time after their last use and within a byte quota per account (the account's least recently used answers go first; an answer larger than the per-answer limit is not kept), and without a shared store only by the gateway process that wrote them, so it may have expired, been evicted or deleted, been too large to keep, been written before a restart or by another gateway process, or belong to another account.";

/** Most `item_reference` items one request may hold: far more than a long agent conversation names. */
export const MAX_REFERENCES = 10_000;

/**
 * `maxReferencedBytes`: the most JSON the `item_reference` items may bring in all (each named item
 * measured once, counted each time it is named), so a reference cannot amplify a request beyond
 * what its client could have sent itself: one stored 40 KB answer named 5,000 times by a 380 KB
 * request became 205 MB to copy and serialise on the request thread (three such requests stalled
 * every tenant for 13 s, and 10,000 references ran the process out of memory; a probe, 2026-11-30).
 */
export async function resolveStoredInput(body: Json, scope: string, store: ResponseStore, maxReferencedBytes = Number.POSITIVE_INFINITY, maxChainBytes = Number.POSITIVE_INFINITY): Promise<StoredInput> {
  const raw = body.input;
  const items: Json[] = typeof raw === "string" ? [{ type: "message", role: "user", content: raw }] : Array.isArray(raw) ? (raw as Json[]) : [];
  let count = 0;
  for (const item of items) if (isReference(item)) count++;
  if (count > MAX_REFERENCES) throw new ResponsesRequestError(`input holds ${count} item_reference items; at most ${MAX_REFERENCES} are taken in one request. ${SEND_WHOLE}`);
  // Each stored answer is read (and parsed) once per request, however many of its items are named:
  // a reference each time re-read the whole answer (9 MB of instructions, 60,000 references: the
  // request thread held 54 s, every tenant with it).
  const answers = new Map<string, Promise<Map<string, Json> | undefined>>();
  // Each named item's size, measured once; what the references bring in all, checked before any copy is made.
  const sizes = new Map<string, number>();
  let added = 0;
  const sized = (id: string, found: Json): void => {
    let size = sizes.get(id);
    if (size === undefined) sizes.set(id, (size = Buffer.byteLength(JSON.stringify(found))));
    added += size;
    if (added > maxReferencedBytes) {
      throw new ResponsesRequestError(`input's item_reference items name more than ${maxReferencedBytes} bytes of stored items; at most that many are taken in one request (an item named twice counts twice). ${SEND_WHOLE}`);
    }
  };
  // One after another: each stored answer read is weighed against what is left before it is parsed.
  const read = { left: maxReferencedBytes };
  let input = items;
  if (count > 0) {
    input = [];
    for (const item of items) input.push(isReference(item) ? await referenced(item, scope, store, answers, sized, read) : item);
  }
  // Reasoning items sent back whole without their encrypted content, by the ids of a kept answer's
  // items (the openai SDK's `input: [...input, ...response.output, output]`, LangChain's
  // Responses API): OpenAI restores a stored item's reasoning from its id, so does the gateway.
  const restored = store.enabled ? await restoreReasoning(input, scope, store, answers, read, maxReferencedBytes - added) : undefined;
  if (restored) input = restored;
  const references = count > 0 || restored !== undefined;

  const previous = body.previous_response_id;
  if (previous === undefined || previous === null) return { input, history: [], expanded: references };
  if (typeof previous !== "string" || previous === "") throw new ResponsesRequestError("previous_response_id must be a response id (`resp_…`).");
  if (!store.enabled) {
    throw new ResponsesRequestError("previous_response_id is not supported: this gateway is configured to store no responses. Send the whole conversation in `input` (as with `store: false`).");
  }
  const { history, root } = await chain(previous, scope, store, maxChainBytes);
  return { input, history, previous, root, expanded: true };
}

/**
 * Whether the request brings in stored answers (a previous answer's chain, items by reference, bare
 * reasoning to restore): work of a large body's size that its own small body does not show.
 */
export function expandsStored(body: Json): boolean {
  const previous = body.previous_response_id;
  if (typeof previous === "string" && previous !== "") return true;
  const input = body.input;
  if (!Array.isArray(input)) return false;
  for (const item of input as Json[]) if (isReference(item) || isBareReasoning(item)) return true;
  return false;
}

/** `{type: "item_reference", id}`; OpenAI also takes a bare `{id}` (its `type` is optional, or null). */
function isReference(item: Json): boolean {
  if (!item || typeof item !== "object") return false;
  if (item.type === "item_reference") return true;
  if (item.type != null || typeof item.id !== "string") return false;
  for (const field in item) if (field !== "id" && field !== "type") return false;
  return true;
}

/** An answer's output items by id (the first of an id, as `find` took). */
function itemsById(output: Json[] | undefined): Map<string, Json> {
  const byId = new Map<string, Json>();
  for (const item of output ?? []) if (typeof item?.id === "string" && !byId.has(item.id)) byId.set(item.id, item);
  return byId;
}

async function referenced(
  item: Json,
  scope: string,
  store: ResponseStore,
  answers: Map<string, Promise<Map<string, Json> | undefined>>,
  sized: (id: string, found: Json) => void,
  /** What stored answers read whole may still weigh: parsing them is the cost, whatever few items are named. */
  read: { left: number },
): Promise<Json> {
  const id = item.id;
  if (typeof id !== "string" || id === "") throw new ResponsesRequestError("an input item of type item_reference needs the `id` of the item it refers to.");
  if (!store.enabled) {
    throw new ResponsesRequestError(`input items of type item_reference are not supported: this gateway is configured to store no responses. Send the item itself: ${SEND_WHOLE}`);
  }
  const answer = answerIdOfItem(id);
  let found: Json | undefined;
  if (answer === undefined) {
    found = await store.item(scope, id);
    if (found) sized(id, found);
  } else {
    // Each stored answer is read once a request, and its items found by id in a map made once: a
    // `find` per reference made 10,000 references into 10,000 items a second's work (an audit).
    let items = answers.get(answer);
    if (!items) answers.set(answer, (items = readAnswer(store, scope, answer, read)));
    const item = (await items)?.get(id);
    if (item !== undefined) sized(id, item);
    // A copy each: one item named twice is two items of the conversation.
    found = item === undefined ? undefined : structuredClone(item);
  }
  if (!found) throw new ResponsesRequestError(`input item_reference ${quote(id)} names no item this gateway holds: ${WHY_MISSING} Send the item itself instead: ${SEND_WHOLE}`);
  return found;
}

/** A reasoning item without its encrypted content, named as one of the gateway's answers' items (`rs_<answer>_<n>`). */
function isBareReasoning(item: Json): boolean {
  if (!item || typeof item !== "object" || item.type !== "reasoning" || typeof item.id !== "string") return false;
  const sealed = item.encrypted_content;
  return (sealed === undefined || sealed === null || sealed === "") && answerIdOfItem(item.id) !== undefined;
}

/** Most kept answers one request's bare reasoning items are looked up in (a tool loop's steps since the user spoke). */
export const MAX_RESTORED_ANSWERS = 64;

/**
 * The input with each bare reasoning item (`isBareReasoning`) of the current turn (after the last
 * user message: Anthropic wants the signed thinking of the turn that continues tool calls, and
 * ignores earlier turns') given the encrypted content its kept answer holds (Anthropic's signed
 * thinking, sealed: carried-thinking.ts), as OpenAI puts a stored reasoning item back from its id;
 * undefined when none was. Only a convenience: an item the account does not hold (not kept,
 * expired, another account's, another vendor's reasoning), a store that fails, and items past
 * `maxBytes` or `MAX_RESTORED_ANSWERS` answers are left as they came, and the turn goes on without
 * thinking, as before.
 */
async function restoreReasoning(
  input: Json[],
  scope: string,
  store: ResponseStore,
  answers: Map<string, Promise<Map<string, Json> | undefined>>,
  read: { left: number },
  maxBytes: number,
): Promise<Json[] | undefined> {
  let out: Json[] | undefined;
  let added = 0;
  let looked = 0;
  const turn = input.findLastIndex((item) => item?.role === "user" && (item.type === undefined || item.type === "message")) + 1;
  for (let i = turn; i < input.length; i++) {
    const item = input[i]!;
    if (!isBareReasoning(item)) continue;
    const answer = answerIdOfItem(item.id as string)!;
    let items = answers.get(answer);
    if (!items) {
      if (looked++ >= MAX_RESTORED_ANSWERS || read.left <= 0) break;
      answers.set(answer, (items = readAnswer(store, scope, answer, read)));
    }
    let failed = false;
    const found = await items.then(
      (byId) => byId?.get(item.id as string),
      () => void (failed = true),
    );
    // A store that cannot answer (Redis down or slow) is not asked again for this request.
    if (failed) break;
    const sealed = found?.encrypted_content;
    if (typeof sealed !== "string" || sealed === "") continue;
    // What the restored content adds, bounded as references are (each item counted each time it comes).
    added += sealed.length;
    if (added > maxBytes) break;
    out ??= [...input];
    out[i] = { ...item, encrypted_content: sealed };
  }
  return out;
}

/** A stored answer's output items by id, read once a request and weighed against what is left to read. */
function readAnswer(store: ResponseStore, scope: string, answer: string, read: { left: number }): Promise<Map<string, Json> | undefined> {
  return store.response(scope, answer, read.left).then(
    (stored) => {
      read.left -= stored?.bytes ?? 0;
      return stored && itemsById(stored.response.output);
    },
    (err) => {
      if (err instanceof StoredTooLargeError) throw new ResponsesRequestError(`input's item_reference items name stored answers of more than ${read.left} bytes left to read; ${SEND_WHOLE}`);
      throw err;
    },
  );
}

/**
 * Each turn from the first to `id`: a stored answer names the one it continued, so the chain is
 * walked back and replayed forward. A missing link (expired, evicted) fails the whole request:
 * continuing without part of the conversation would answer a different one.
 */
async function chain(id: string, scope: string, store: ResponseStore, maxBytes: number): Promise<{ history: Json[]; root: string }> {
  const turns = [];
  const seen = new Set<string>();
  let root = id;
  // What the chain may bring in, weighed before each answer is parsed: a request of 80 bytes made
  // the gateway parse 28 MB of stored answers (padded with fields nothing reads) on the request
  // thread, every tenant stalled (a hostile-tenant probe).
  let left = maxBytes;
  for (let at: string | undefined = id; at !== undefined && !seen.has(at); ) {
    seen.add(at);
    root = at;
    let stored;
    try {
      stored = await store.response(scope, at, left);
    } catch (err) {
      if (!(err instanceof StoredTooLargeError)) throw err;
      throw new ChainTooLargeError(maxBytes);
    }
    left -= stored?.bytes ?? 0;
    if (!stored) {
      const which = at === id ? "" : ` (an earlier response in its chain, ${quote(at)}, is gone)`;
      throw new ResponsesRequestError(
        `previous_response_id ${quote(id)} names no response this gateway holds${which}: ${WHY_MISSING} Send the whole conversation in \`input\` instead, as with \`store: false\`.`,
      );
    }
    turns.push(stored);
    at = stored.previous;
  }
  const history: Json[] = [];
  for (let i = turns.length - 1; i >= 0; i--) history.push(...turns[i]!.input, ...turns[i]!.response.output);
  return { history, root };
}

/** A `previous_response_id` whose conversation weighs more than the request may bring in. */
export class ChainTooLargeError extends ResponsesRequestError {
  constructor(readonly maxBytes: number) {
    super(`previous_response_id names a conversation of more than ${maxBytes} bytes of stored answers; at most that many are taken in one request. Start a new conversation, or send what it needs in \`input\`.`);
  }
}

/** An id as the client sent it, bounded: it is echoed in an error message. */
function quote(id: string): string {
  return JSON.stringify(id.length > 200 ? `${id.slice(0, 200)}…` : id);
}
