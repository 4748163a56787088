import { Elysia } from "elysia";
import type { Catalogue } from "../../catalogue/catalogue.ts";
import { countMessageTokens } from "../../gateway/count-tokens.ts";
import { handleChat } from "../../gateway/handle-chat.ts";
import type { ForwardDeps } from "../../gateway/forward.ts";
import { anthropicMessages } from "../../formats/format.ts";
import type { CountQueue } from "../../limits/count-queue.ts";
import type { Principals } from "../plugins/admission.ts";
import { CountTokensRequest, MessagesRequest } from "../../formats/anthropic-messages/schema.ts";

export function messagesRoute(deps: ForwardDeps & { catalogue: Catalogue; principals: Principals; counts: CountQueue }) {
  return new Elysia({ name: "switchyard/messages" })
    .post(
      "/v1/messages",
      ({ body, request, server, set }) =>
        handleChat(deps, { format: anthropicMessages, body: body as Record<string, unknown>, request, principal: deps.principals.of(request), server, set }),
      { body: MessagesRequest },
    )
    .post(
      "/v1/messages/count_tokens",
      async ({ body, request }) => {
        const principal = deps.principals.of(request);
        const response = await countMessageTokens(deps, body as Record<string, unknown>, request.headers, request.signal, principal, principal.models);
        // Registered before the app's after-response hook (the chat routes close their own traces).
        deps.tracker?.responded(request, response.status);
        return response;
      },
      { body: CountTokensRequest },
    );
}
