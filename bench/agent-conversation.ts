/** An agent-sized conversation (what coding agents send on every turn): 200 messages, about 210 KB of JSON. */
export function agentConversation(messages = 200): { role: string; content: string }[] {
  return Array.from({ length: messages }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: "A switchyard sorts wagons by destination, track by track. ".repeat(18) }));
}
