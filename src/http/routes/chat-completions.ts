import { Elysia } from "elysia";
import type { Catalogue } from "../../catalogue/catalogue.ts";
import { handleChat } from "../../gateway/handle-chat.ts";
import type { ForwardDeps } from "../../gateway/forward.ts";
import { openaiChat } from "../../formats/format.ts";
import type { Principals } from "../plugins/admission.ts";
import { ChatRequest } from "../../formats/openai-chat/schema.ts";

export function chatCompletionsRoute(deps: ForwardDeps & { catalogue: Catalogue; principals: Principals }) {
  return new Elysia({ name: "switchyard/chat-completions" }).post(
    "/v1/chat/completions",
    ({ body, request, server, set }) =>
      handleChat(deps, { format: openaiChat, body: body as Record<string, unknown>, request, principal: deps.principals.of(request), server, set }),
    { body: ChatRequest },
  );
}
