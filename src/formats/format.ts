import type { ClientSink, EncodeContext } from "../streaming/client-sink.ts";
import type { StreamEvent } from "../streaming/events.ts";
import type { UpstreamKind } from "./common/wire-types.ts";
import { createOpenAIEncoder, createOpenAIRelay, encodeOpenAIBody } from "./openai-chat/encode-openai.ts";
import { createAnthropicEncoder, createAnthropicRelay, encodeAnthropicBody } from "./anthropic-messages/encode-anthropic.ts";
import { createResponsesEncoder, encodeResponsesBody, type ResponsesAnswerPlan } from "./openai-responses/encode-responses.ts";
import { encodeEmbeddingsBody, type EmbeddingEncoding } from "./openai-embeddings/encode-embeddings.ts";
import type { EmbeddingsThread } from "./openai-embeddings/embeddings-thread.ts";
import type { WholeAnswerReader } from "./common/whole-answer.ts";

/**
 * The client formats: the contract every format keeps, and the registry of the four. A route
 * picks its format; the gateway carries it from the request to the answer and asks it nothing
 * else. Adding a client format adds a folder here and an entry below, never a second pipeline.
 */

/** Which client format a request came in: one folder of formats/ each. */
export type ClientFormatId = "openai-chat" | "anthropic-messages" | "openai-responses" | "openai-embeddings";

/** A client format, as one request uses it. */
export interface ClientFormat {
  readonly id: ClientFormatId;
  /**
   * The wire the request's body travels in through the gateway, where translation to the
   * upstream's kind starts: a chat format's own; the Responses API's request is translated to
   * an OpenAI chat request on arrival (formats/openai-responses/responses-to-chat.ts).
   */
  readonly wire: UpstreamKind;
  /** Prefix of the answer's id; the rest is the usage record's (`req_<id>`). */
  readonly idPrefix: string;
  /** Events → the client's stream frames. */
  encoder(ctx: EncodeContext): ClientSink;
  /**
   * The vendor's own frames passed on (only `model` and `id` change), when the upstream speaks
   * `wire` too. Only a vendor's own format has one: other answers are always encoded.
   */
  readonly relay?: (ctx: EncodeContext) => ClientSink;
  /**
   * A whole answer's body; `upstream` is the vendor's decoded JSON (embeddings carry their vectors
   * there), or what `wholeAnswer` made of it. A `JsonText` (common/json-text.ts) is sent as it is.
   */
  body(events: StreamEvent[], ctx: EncodeContext, upstream: unknown): unknown;
  /** Whole answers past its threshold are read by it, away from the request thread (embeddings only). */
  readonly wholeAnswer?: WholeAnswerReader;
  /**
   * The request field that bounds the answer's length in this format, which a 402 tells the
   * client to lower; none for embeddings, whose cost is their input.
   */
  readonly lengthField?: string;
}

export const openaiChat: ClientFormat = {
  id: "openai-chat",
  wire: "openai",
  idPrefix: "chatcmpl-",
  encoder: createOpenAIEncoder,
  relay: createOpenAIRelay,
  body: encodeOpenAIBody,
  lengthField: "max_tokens",
};

export const anthropicMessages: ClientFormat = {
  id: "anthropic-messages",
  wire: "anthropic",
  idPrefix: "msg_",
  encoder: createAnthropicEncoder,
  relay: createAnthropicRelay,
  body: encodeAnthropicBody,
  lengthField: "max_tokens",
};

/**
 * The Responses API for one request: its answer is written from the same events as chat's, with
 * what the request declared (its tools, the fields echoed back, where a finished answer is kept).
 * `resp_<id>` names the usage record `req_<id>`.
 */
export function openaiResponses(plan: ResponsesAnswerPlan): ClientFormat {
  return {
    id: "openai-responses",
    wire: "openai",
    idPrefix: "resp_",
    encoder: (ctx) => createResponsesEncoder(ctx, plan),
    body: (events, ctx) => encodeResponsesBody(events, ctx, plan),
    // Its request became a chat request on arrival, but its client knows the field by this name.
    lengthField: "max_output_tokens",
  };
}

/**
 * The embeddings list, in the encoding the client asked for (OpenAI's default is float). One body,
 * never a stream; a large one is read and written on `thread` when there is one.
 */
export function openaiEmbeddings(encoding: EmbeddingEncoding, thread?: EmbeddingsThread): ClientFormat {
  return {
    id: "openai-embeddings",
    wire: "openai",
    idPrefix: "",
    encoder: () => {
      // Refused before the gateway's stages (see gateway/handle-embeddings.ts): nothing streams here.
      throw new Error("embeddings do not stream");
    },
    body: (events, ctx, upstream) => encodeEmbeddingsBody(upstream, events, ctx, encoding),
    wholeAnswer: thread?.reader(encoding),
  };
}

/** The registry: each format by its id; the two that depend on the request are built per request. */
export const CLIENT_FORMATS = {
  "openai-chat": openaiChat,
  "anthropic-messages": anthropicMessages,
  "openai-responses": openaiResponses,
  "openai-embeddings": openaiEmbeddings,
} as const satisfies Record<ClientFormatId, ClientFormat | ((...args: never[]) => ClientFormat)>;
