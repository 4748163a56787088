import { Elysia } from "elysia";
import type { Catalogue } from "../../catalogue/catalogue.ts";
import { countMessageTokens } from "../../gateway/count-tokens.ts";
import { handleChat } from "../../gateway/handle-chat.ts";
import type { ForwardDeps } from "../../gateway/forward.ts";
import type { CountQueue } from "../../limits/count-queue.ts";
import { principalOf } from "../plugins/admission.ts";
import { CountTokensRequest, MessagesRequest } from "./schemas.ts";

export function messagesRoute(deps: ForwardDeps & { catalogue: Catalogue; counts: CountQueue }) {
  return new Elysia({ name: "switchyard/messages" })
    .post(
      "/v1/messages",
      ({ body, request, server, set }) =>
        handleChat(deps, { format: "anthropic", body: body as Record<string, unknown>, request, principal: principalOf(request), server, set }),
      { body: MessagesRequest },
    )
    .post(
      "/v1/messages/count_tokens",
      async ({ body, request }) => {
        const principal = principalOf(request);
        const response = await countMessageTokens(deps, body as Record<string, unknown>, request.headers, request.signal, principal.keyId, principal.models);
        // Registered before the app's after-response hook (the chat routes close their own traces).
        deps.tracker?.responded(request, response.status);
        return response;
      },
      { body: CountTokensRequest },
    );
}
