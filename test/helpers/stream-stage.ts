import type { StreamAnswerOptions } from "../../src/gateway/stream-answer.ts";
import { createOpenAIRelay } from "../../src/formats/openai-chat/encode-openai.ts";
import { openaiAdapter } from "../../src/providers/openai/openai-adapter.ts";
import { UsageMeter } from "../../src/billing/usage-meter.ts";
import { createTicker } from "../../src/streaming/ticker.ts";
import { Deadline } from "../../src/gateway/deadline.ts";
import { createTokenizer } from "../../src/billing/token-estimate.ts";

export const stageTokenizer = createTokenizer();

/**
 * The stream stage's options (gateway/stream-answer.ts) for an OpenAI chat stream relayed as it
 * is over `upstream`, told how it ended (`onDone`), every limit far off; `more` adds or replaces.
 */
export function relayStageOptions(upstream: StreamAnswerOptions["upstream"], onDone: StreamAnswerOptions["onDone"], more: Partial<StreamAnswerOptions> = {}): StreamAnswerOptions {
  return {
    upstream,
    decode: openaiAdapter.createStreamDecoder(),
    sink: createOpenAIRelay({ id: "chatcmpl-ours", created: 1, model: "ours/model", includeUsage: false }),
    meter: new UsageMeter(stageTokenizer.count),
    ticker: createTicker(),
    deadline: new Deadline({ firstByteMs: 60_000, idleMs: 60_000, totalMs: 60_000 }),
    estimateUsage: async () => undefined,
    keepAliveMs: 60_000,
    clientIdleMs: 60_000,
    maxFrameBytes: 1 << 20,
    onDone,
    ...more,
  };
}
