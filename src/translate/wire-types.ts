/**
 * Loose shapes of the two request formats, as far as the gateway reads them. Bodies are
 * kept open: every field we do not name here travels through untouched when formats match.
 */
export type Json = Record<string, unknown>;

/** A request's wire format, and an upstream's: OpenAI chat completions or Anthropic messages. */
export type WireFormat = "openai" | "anthropic";

export interface OpenAIMessage extends Json {
  role: string;
  content?: unknown;
  tool_calls?: { id: string; type?: string; function: { name: string; arguments?: string } }[];
  tool_call_id?: string;
  name?: string;
}

export interface OpenAIChatBody extends Json {
  model?: string;
  messages: OpenAIMessage[];
  stream?: boolean;
  stream_options?: Json | null;
  max_tokens?: number | null;
  max_completion_tokens?: number | null;
  temperature?: number | null;
  top_p?: number | null;
  stop?: string | string[] | null;
  tools?: { type: string; function?: { name: string; description?: string; parameters?: Json; strict?: boolean } }[];
  tool_choice?: unknown;
  parallel_tool_calls?: boolean;
  user?: string;
  response_format?: Json | null;
  reasoning_effort?: string | null;
}

export interface AnthropicBlock extends Json {
  type: string;
}

export interface AnthropicMessage extends Json {
  role: string;
  content: string | AnthropicBlock[];
}

export interface AnthropicBody extends Json {
  model?: string;
  messages: AnthropicMessage[];
  system?: string | AnthropicBlock[];
  max_tokens?: number;
  stream?: boolean;
  temperature?: number;
  top_p?: number;
  top_k?: number;
  stop_sequences?: string[];
  tools?: { name: string; description?: string; input_schema?: Json; type?: string }[];
  tool_choice?: { type: string; name?: string; disable_parallel_tool_use?: boolean };
  metadata?: { user_id?: string };
  thinking?: Json;
  output_config?: Json;
}

/**
 * What a translation decided beside the body, filled in by the translator for its caller:
 * the answer's handling and the log.
 */
export interface TranslationNotes {
  /** A tool forced to carry a JSON answer: its call is the answer's text (streaming/answer-tool.ts). */
  answerTool?: string;
  /** Fields the client sent that the upstream does not get, and why; for the log. */
  dropped?: string[];
}
