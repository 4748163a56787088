import { Elysia } from "elysia";
import type { Catalogue } from "../../catalogue/catalogue.ts";
import { handleChat } from "../../gateway/handle-chat.ts";
import type { ForwardDeps } from "../../gateway/forward.ts";
import { principalOf } from "../plugins/admission.ts";
import { ChatRequest } from "./schemas.ts";

export function chatCompletionsRoute(deps: ForwardDeps & { catalogue: Catalogue }) {
  return new Elysia({ name: "switchyard/chat-completions" }).post(
    "/v1/chat/completions",
    ({ body, request, server, set }) =>
      handleChat(deps, { format: "openai", body: body as Record<string, unknown>, request, principal: principalOf(request), server, set }),
    { body: ChatRequest },
  );
}
