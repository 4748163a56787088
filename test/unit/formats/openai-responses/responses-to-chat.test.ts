import { describe, expect, test } from "bun:test";
import { flattenName, responsesToChat, ResponsesRequestError } from "../../../../src/formats/openai-responses/responses-to-chat.ts";

describe("responsesToChat: the conversation", () => {
  test("a string input is one user message; instructions lead as the system prompt", () => {
    const { chat } = responsesToChat({ model: "m", input: "Hi", instructions: "Be brief." });
    expect(chat.messages).toEqual([
      { role: "system", content: "Be brief." },
      { role: "user", content: "Hi" },
    ]);
    expect(chat.model).toBe("m");
  });

  test("items with and without `type`, developer as system, text parts joined into one string only when alone", () => {
    const { chat } = responsesToChat({
      input: [
        { type: "message", role: "developer", content: [{ type: "input_text", text: "Rules." }] },
        { role: "system", content: "More rules." },
        { role: "user", content: [{ type: "input_text", text: "a" }, { type: "input_text", text: "b" }] },
        { type: "message", role: "assistant", id: "msg_1", status: "completed", content: [{ type: "output_text", text: "Yes.", annotations: [] }] },
      ],
    });
    expect(chat.messages).toEqual([
      { role: "system", content: "Rules." },
      { role: "system", content: "More rules." },
      { role: "user", content: [{ type: "text", text: "a" }, { type: "text", text: "b" }] },
      { role: "assistant", content: "Yes." },
    ]);
  });

  test("assistant text then parallel calls: one assistant message with both calls, then the results in order", () => {
    const { chat } = responsesToChat({
      input: [
        { role: "user", content: "Go" },
        { type: "reasoning", id: "rs_1", summary: [], encrypted_content: "opaque" },
        { type: "message", role: "assistant", content: [{ type: "output_text", text: "Checking." }] },
        { type: "function_call", id: "fc_1", call_id: "c1", name: "f", arguments: '{"a":1}', status: "completed" },
        { type: "function_call", id: "fc_2", call_id: "c2", name: "f", arguments: '{"a":2}', status: "completed" },
        { type: "function_call_output", call_id: "c1", output: "one" },
        { type: "function_call_output", call_id: "c2", output: [{ type: "input_text", text: "tw" }, { type: "input_text", text: "o" }] },
        { type: "custom_tool_call", call_id: "c3", name: "apply_patch", input: "*** Begin Patch" },
        { type: "custom_tool_call_output", call_id: "c3", output: "ok" },
      ],
    });
    expect(chat.messages).toEqual([
      { role: "user", content: "Go" },
      {
        role: "assistant",
        content: "Checking.",
        tool_calls: [
          { id: "c1", type: "function", function: { name: "f", arguments: '{"a":1}' } },
          { id: "c2", type: "function", function: { name: "f", arguments: '{"a":2}' } },
        ],
      },
      { role: "tool", tool_call_id: "c1", content: "one" },
      { role: "tool", tool_call_id: "c2", content: "two" },
      { role: "assistant", content: null, tool_calls: [{ id: "c3", type: "function", function: { name: "apply_patch", arguments: '{"input":"*** Begin Patch"}' } }] },
      { role: "tool", tool_call_id: "c3", content: "ok" },
    ]);
  });

  test("images become image_url parts (for the media rule to judge), files become file parts", () => {
    const { chat } = responsesToChat({
      input: [{ role: "user", content: [{ type: "input_text", text: "Look" }, { type: "input_image", image_url: "https://x/y.png", detail: "low" }, { type: "input_file", file_id: "file-1" }] }],
    });
    expect(chat.messages[0]!.content).toEqual([
      { type: "text", text: "Look" },
      { type: "image_url", image_url: { url: "https://x/y.png", detail: "low" } },
      { type: "file", file: { file_id: "file-1" } },
    ]);
  });

  test("items no chat upstream has are dropped and reported; an unresolved item reference and fields of other OpenAI endpoints are refused", () => {
    const plan = responsesToChat({ input: [{ role: "user", content: "x" }, { type: "web_search_call", id: "ws_1", status: "completed" }] });
    expect(plan.chat.messages).toHaveLength(1);
    expect(plan.dropped).toEqual(["item:web_search_call"]);
    // References are resolved before translation (stored-input.ts, test/contract/response-store.test.ts);
    // one left over is refused, never dropped.
    expect(() => responsesToChat({ input: [{ type: "item_reference", id: "msg_1" }] })).toThrow(ResponsesRequestError);
    expect(() => responsesToChat({ input: [{ type: "item_reference", id: "msg_1" }] })).toThrow(/^input item_reference "msg_1" could not be resolved/);
    for (const field of ["conversation", "prompt"]) {
      expect(() => responsesToChat({ input: "x", [field]: "conv_1" })).toThrow(new RegExp(`^${field}`));
    }
    // previous_response_id is resolved before translation too; here it is only echoed.
    expect(responsesToChat({ input: "x", previous_response_id: "resp_1" }).echo.previous_response_id).toBe("resp_1");
    expect(() => responsesToChat({ input: "x", background: true })).toThrow(/background/);
    expect(() => responsesToChat({ input: [{ role: "tool", content: "x" }] })).toThrow(/role "tool"/);
    expect(() => responsesToChat({ input: [{ role: "user", content: [{ type: "input_audio" }] }] })).toThrow(/input_audio/);
  });
});

describe("responsesToChat: tools", () => {
  test("function tools keep their schema and strict; custom tools take one string and remember what they were", () => {
    const plan = responsesToChat({
      input: "x",
      tools: [
        { type: "function", name: "f", description: "F.", parameters: { type: "object", properties: {} }, strict: true },
        { type: "custom", name: "apply_patch", description: "Patch.", format: { type: "grammar", syntax: "lark", definition: "start: X" } },
        { type: "custom", name: "free" },
        { type: "web_search" },
        { type: "tool_search", execution: "client" },
      ],
      tool_choice: { type: "custom", name: "apply_patch" },
      parallel_tool_calls: false,
    });
    expect(plan.chat.tools).toEqual([
      { type: "function", function: { name: "f", description: "F.", parameters: { type: "object", properties: {} }, strict: true } },
      { type: "function", function: { name: "apply_patch", description: expect.stringContaining("lark grammar:\nstart: X"), parameters: expect.objectContaining({ required: ["input"] }) } },
      { type: "function", function: { name: "free", description: expect.stringContaining("one argument, `input`"), parameters: expect.objectContaining({ required: ["input"] }) } },
    ]);
    expect((plan.chat.tools![1]!.function!.description as string).startsWith("Patch.\n\n")).toBe(true);
    expect(plan.tools.get("apply_patch")).toEqual({ name: "apply_patch", custom: true });
    expect(plan.tools.has("f")).toBe(false);
    expect(plan.dropped).toEqual(["tool:web_search", "tool:tool_search"]);
    expect(plan.chat.tool_choice).toEqual({ type: "function", function: { name: "apply_patch" } });
    expect(plan.chat.parallel_tool_calls).toBe(false);
  });

  test("namespace tools are flattened; calls in the history and tool_choice use the flat name", () => {
    const plan = responsesToChat({
      input: [{ type: "function_call", call_id: "c", name: "lookup", namespace: "crm", arguments: "{}" }],
      tools: [{ type: "namespace", name: "crm", description: "CRM", tools: [{ type: "function", name: "lookup" }, { type: "custom", name: "note" }] }],
      tool_choice: { type: "function", name: "lookup", namespace: "crm" },
    });
    expect(plan.chat.tools!.map((t) => t.function!.name)).toEqual(["crm__lookup", "crm__note"]);
    expect(plan.tools.get("crm__lookup")).toEqual({ name: "lookup", namespace: "crm", custom: false });
    expect(plan.tools.get("crm__note")).toEqual({ name: "note", namespace: "crm", custom: true });
    expect(plan.chat.messages[0]!.tool_calls![0]!.function!.name).toBe("crm__lookup");
    expect(plan.chat.tool_choice).toEqual({ type: "function", function: { name: "crm__lookup" } });
  });

  test("tools declared in additional_tools input items (Codex's code mode) reach the upstream like `tools`: the default namespace `functions` unprefixed, others flattened, hosted ones dropped", () => {
    const plan = responsesToChat({
      input: [
        {
          type: "additional_tools",
          id: "at_1",
          role: "developer",
          tools: [
            {
              type: "namespace",
              name: "functions",
              description: "",
              tools: [
                { type: "custom", name: "exec", description: "Run JavaScript.", format: { type: "grammar", syntax: "lark", definition: "start: SOURCE" } },
                { type: "function", name: "wait", description: "Wait.", strict: false, parameters: { type: "object", properties: { cell_id: { type: "string" } }, required: ["cell_id"] } },
              ],
            },
            { type: "namespace", name: "clock", description: "Time.", tools: [{ type: "function", name: "sleep", parameters: { type: "object", properties: {} } }] },
            { type: "web_search" },
          ],
        },
        { type: "message", role: "developer", content: [{ type: "input_text", text: "Rules." }] },
        { type: "message", role: "user", content: [{ type: "input_text", text: "Go" }] },
        // Codex sends its calls back as they came, with the namespace of the declaration or without.
        { type: "custom_tool_call", call_id: "c1", name: "exec", input: "text(1)" },
        { type: "custom_tool_call_output", call_id: "c1", output: [{ type: "input_text", text: "1" }] },
        { type: "custom_tool_call", call_id: "c2", name: "exec", namespace: "functions", input: "text(2)" },
        { type: "custom_tool_call_output", call_id: "c2", output: "2" },
        { type: "function_call", call_id: "c3", name: "sleep", namespace: "clock", arguments: "{}" },
        { type: "function_call_output", call_id: "c3", output: "ok" },
      ],
      tool_choice: "auto",
      parallel_tool_calls: false,
    });
    expect(plan.chat.tools).toEqual([
      { type: "function", function: { name: "exec", description: expect.stringMatching(/^Run JavaScript\.\n\n[\s\S]*lark grammar:\nstart: SOURCE$/), parameters: expect.objectContaining({ required: ["input"] }) } },
      { type: "function", function: { name: "wait", description: "Wait.", strict: false, parameters: { type: "object", properties: { cell_id: { type: "string" } }, required: ["cell_id"] } } },
      { type: "function", function: { name: "clock__sleep", parameters: { type: "object", properties: {} } } },
    ]);
    expect([...plan.tools]).toEqual([
      ["exec", { name: "exec", custom: true }],
      ["clock__sleep", { name: "sleep", namespace: "clock", custom: false }],
    ]);
    // The item itself is no message; only the hosted tool inside it is reported as dropped.
    expect(plan.dropped).toEqual(["tool:web_search"]);
    expect(plan.chat.messages.map((m) => m.role)).toEqual(["system", "user", "assistant", "tool", "assistant", "tool", "assistant", "tool"]);
    expect(plan.chat.messages.flatMap((m) => m.tool_calls ?? []).map((c) => [c.id, c.function!.name, c.function!.arguments])).toEqual([
      ["c1", "exec", '{"input":"text(1)"}'],
      ["c2", "exec", '{"input":"text(2)"}'],
      ["c3", "clock__sleep", "{}"],
    ]);
    expect(plan.chat.tool_choice).toBe("auto");
    expect(plan.chat.parallel_tool_calls).toBe(false);
    // The answer echoes `tools` as sent (none at the top level).
    expect(plan.echo.tools).toEqual([]);
  });

  test("additional_tools: with `tools`, in later items too, and a tool declared again is sent once, as declared last; an empty list is no tool, an item without a list is refused", () => {
    const plan = responsesToChat({
      input: [
        { type: "additional_tools", role: "developer", tools: [{ type: "custom", name: "exec" }] },
        { role: "user", content: "Go" },
        { type: "additional_tools", role: "developer", tools: [{ type: "namespace", name: "functions", tools: [{ type: "function", name: "exec", parameters: { type: "object", properties: { code: { type: "string" } } } }] }, { type: "custom", name: "later" }] },
        { type: "additional_tools", role: "developer", tools: [] },
      ],
      tools: [{ type: "function", name: "f" }],
      tool_choice: { type: "function", name: "exec", namespace: "functions" },
    });
    expect(plan.chat.tools!.map((t) => t.function!.name)).toEqual(["f", "exec", "later"]);
    expect(plan.chat.tools![1]!.function!.parameters).toEqual({ type: "object", properties: { code: { type: "string" } } });
    expect(plan.tools.has("exec")).toBe(false);
    expect(plan.tools.get("later")).toEqual({ name: "later", custom: true });
    expect(plan.chat.tool_choice).toEqual({ type: "function", function: { name: "exec" } });
    expect(plan.chat.messages).toEqual([{ role: "user", content: "Go" }]);
    expect(plan.dropped).toEqual([]);
    expect(responsesToChat({ input: [{ type: "additional_tools", role: "developer", tools: [] }, { role: "user", content: "x" }] }).chat.tools).toBeUndefined();
    expect(() => responsesToChat({ input: [{ type: "additional_tools", role: "developer" }, { role: "user", content: "x" }] })).toThrow(/^an input item of type additional_tools needs `tools`/);
  });

  test("a flattened name too long or with other characters still fits OpenAI's rule, and differs per tool", () => {
    const a = flattenName("x".repeat(40), "y".repeat(40));
    const b = flattenName("x".repeat(40), "y".repeat(39) + "z");
    for (const name of [a, b, flattenName("mcp.server", "do it")]) expect(name).toMatch(/^[a-zA-Z0-9_-]{1,64}$/);
    expect(a).not.toBe(b);
    expect(flattenName("ns", "t")).toBe("ns__t");
  });

  test("tool_choice: strings pass, allowed_tools keeps its subset (its mode alone when it names none), hosted choices are dropped", () => {
    const tools = [{ type: "function", name: "f" }];
    expect(responsesToChat({ input: "x", tools, tool_choice: "required" }).chat.tool_choice).toBe("required");
    expect(responsesToChat({ input: "x", tools, tool_choice: { type: "allowed_tools", mode: "required", tools: [] } }).chat.tool_choice).toBe("required");
    // A subset of named tools stays a subset, in chat's form (an OpenAI upstream keeps it; Anthropic reads its mode).
    const two = [{ type: "function", name: "f" }, { type: "function", name: "g" }];
    expect(responsesToChat({ input: "x", tools: two, tool_choice: { type: "allowed_tools", mode: "auto", tools: [{ type: "function", name: "g" }] } }).chat.tool_choice)
      .toEqual({ type: "allowed_tools", allowed_tools: { mode: "auto", tools: [{ type: "function", function: { name: "g" } }] } });
    const hosted = responsesToChat({ input: "x", tools, tool_choice: { type: "web_search_preview" } });
    expect(hosted.chat.tool_choice).toBeUndefined();
    expect(hosted.dropped).toEqual(["tool_choice:web_search_preview"]);
    // Without tools upstream, no tool_choice either: a chat upstream refuses one alone.
    expect(responsesToChat({ input: "x", tool_choice: "auto", tools: [{ type: "web_search" }] }).chat.tool_choice).toBeUndefined();
  });
});

describe("responsesToChat: parameters", () => {
  test("sampling, limits, formats and caching hints in chat's words; the echo keeps the client's", () => {
    const plan = responsesToChat({
      input: "x",
      stream: true,
      max_output_tokens: 100,
      temperature: 0.5,
      top_p: 0.8,
      reasoning: { effort: "high", summary: "auto" },
      text: { format: { type: "json_object" }, verbosity: "low" },
      user: "u1",
      safety_identifier: "s1",
      prompt_cache_key: "k1",
      metadata: { a: "b" },
      store: false,
      include: ["reasoning.encrypted_content"],
      models: ["m2"],
    });
    expect(plan.chat).toEqual({
      messages: [{ role: "user", content: "x" }],
      models: ["m2"],
      stream: true,
      max_tokens: 100,
      temperature: 0.5,
      top_p: 0.8,
      reasoning_effort: "high",
      response_format: { type: "json_object" },
      verbosity: "low",
      user: "u1",
      safety_identifier: "s1",
      prompt_cache_key: "k1",
    });
    expect(plan.echo).toMatchObject({ max_output_tokens: 100, temperature: 0.5, top_p: 0.8, metadata: { a: "b" }, reasoning: { effort: "high", summary: "auto" }, text: { format: { type: "json_object" }, verbosity: "low" }, safety_identifier: "s1", truncation: "disabled" });
    // A verbosity without a format is echoed too (beside the default text format); truncation as asked.
    expect(responsesToChat({ input: "x", text: { verbosity: "low" }, truncation: "auto" }).echo).toMatchObject({ text: { format: { type: "text" }, verbosity: "low" }, truncation: "auto", safety_identifier: null });
    expect(() => responsesToChat({ input: "x", text: { format: { type: "yaml" } } })).toThrow(/text.format.type "yaml"/);
  });
});
