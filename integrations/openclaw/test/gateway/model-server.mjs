// A scripted OpenAI-compatible model on 127.0.0.1 (/v1/chat/completions, streaming and not):
// every turn answers with one `read` tool call of the same missing file, until a tool result
// it was shown carries LoopGuard's block (or `maxCalls` is reached); then it answers in text.
// It records what the model was shown, so a test can check what reached it.
import { createServer } from "node:http";

const BLOCKED = /LoopGuard|CRITICAL/;

/** Start the server; `requests` holds every request body, `calls` the tool calls answered. */
export async function startModelServer({ maxCalls = 40, path = "/nonexistent/loopguard-probe.txt" } = {}) {
  const state = { requests: [], calls: 0, url: "" };
  const server = createServer(async (req, res) => {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    if (req.method !== "POST" || !req.url.endsWith("/chat/completions")) {
      res.writeHead(404).end();
      return;
    }
    const body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
    state.requests.push(body);
    const textOf = (m) => (typeof m.content === "string" ? m.content : JSON.stringify(m.content ?? ""));
    const blocked = body.messages.some((m) => m.role === "tool" && BLOCKED.test(textOf(m)));
    const done = blocked || state.calls >= maxCalls;
    const message = done
      ? { role: "assistant", content: "I keep failing to read that file, so I stop here." }
      : { role: "assistant", content: null, tool_calls: [{ id: `call_${++state.calls}`, type: "function", function: { name: "read", arguments: JSON.stringify({ path }) } }] };
    const finish = done ? "stop" : "tool_calls";
    const base = { id: `chatcmpl-${state.requests.length}`, created: 0, model: body.model };
    if (!body.stream) {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ ...base, object: "chat.completion", choices: [{ index: 0, message, finish_reason: finish }],
        usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 } }));
      return;
    }
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    const send = (delta, finishReason = null, extra = {}) => res.write(`data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason: finishReason }], ...extra })}\n\n`);
    send({ role: "assistant" });
    if (done) send({ content: message.content });
    else send({ tool_calls: message.tool_calls.map((c, index) => ({ index, ...c })) });
    send({}, finish, { usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 } });
    res.end("data: [DONE]\n\n");
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  state.url = `http://127.0.0.1:${server.address().port}/v1`;
  state.close = () => new Promise((resolve) => { server.closeAllConnections(); server.close(resolve); });
  return state;
}
