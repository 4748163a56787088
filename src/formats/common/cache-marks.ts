/**
 * The prompt-cache marks of a request as sent upstream (`cache_control: {type: "ephemeral", ttl}`):
 * the top level's automatic caching, system, tools, message blocks (a chat message's parts) and
 * tool results' blocks. How many there are, and how many asked for an hour. Pure.
 */
function cacheMarks(sent: unknown): { marks: number; hours: number } {
  let marks = 0;
  let hours = 0;
  const mark = (node: unknown) => {
    if (!isRecord(node) || !isRecord(node.cache_control)) return;
    marks++;
    if (node.cache_control.ttl === "1h") hours++;
  };
  const blocks = (list: unknown) => {
    if (!Array.isArray(list)) return;
    for (const block of list) {
      mark(block);
      if (isRecord(block) && Array.isArray(block.content)) for (const inner of block.content) mark(inner);
    }
  };
  if (!isRecord(sent)) return { marks, hours };
  mark(sent);
  blocks(sent.system);
  blocks(sent.tools);
  if (Array.isArray(sent.messages)) for (const message of sent.messages) if (isRecord(message)) blocks(message.content);
  return { marks, hours };
}

/**
 * Whether the request sent upstream marked its prompt for caching and every mark asked for an hour.
 * Anthropic splits its writes by lifetime; a compatible server that reports only their total (a
 * proxy in front of Bedrock or Vertex, OpenRouter's `cache_write_tokens`) wrote them for the hour all
 * the same, and priced at the 5-minute rate they were billed at 1.25× the input price for the
 * vendor's 2× (a bill audit). Read only when such a total comes.
 */
export function onlyHourMarks(sent: unknown): boolean {
  const { marks, hours } = cacheMarks(sent);
  return marks > 0 && hours === marks;
}

/** Whether any mark of the request asked for an hour: its writes may be 1-hour writes, which its hold must cover (gateway/plan.ts). */
export function carriesHourMark(sent: unknown): boolean {
  return cacheMarks(sent).hours > 0;
}

function isRecord(value: unknown): value is Record<string, any> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
