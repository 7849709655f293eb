#!/usr/bin/env python3
"""A scripted model server for tests and the demo (standard library only).

Serves the Anthropic Messages API (`/v1/messages`), the OpenAI Responses API (`/v1/responses`),
Chat Completions (`/v1/chat/completions`) and the Gemini API
(`/v1beta/models/M:generateContent`, `:streamGenerateContent`), streamed (SSE) or not. What it
answers depends on the requested model's name, so one server serves every scenario:

- `*solve*`: first a tool call running the command given by `--solve` (in whatever shell tool
  the agent offers: claude-code's `Bash`, codex's `exec_command`/`shell`, a chat `bash`
  function), then, once a tool result comes back, a final text answer;
- `*run-NAME*`: the same with the command given by `--command NAME=COMMAND`;
- `*mcp*`: the same with a call of the MCP tool given by `--mcp-call TOOL=JSON` (the offered
  tool whose name ends with TOOL, e.g. claude-code's `mcp__notes__put_note`, with JSON as its
  arguments; Anthropic Messages API only);
- `*nothing*`: a final text answer at once (the agent does nothing);
- `*429*`: HTTP 429, a rate-limit error (told not to retry); `*401*`: HTTP 401, an
  authentication error.

Every answered request reports `usage` of USAGE_IN input and USAGE_OUT output tokens. `GET /stats`
returns, per model, the requests answered and the usage reported, and whether each request
carried an API key (never the key itself).

    python3 llmstub.py --port 8000 --solve 'echo "Hello, world!" > /app/hello.txt'
"""

from __future__ import annotations

import argparse
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

USAGE_IN, USAGE_OUT = 120, 30
SHELL_TOOLS = ("Bash", "bash", "exec_command", "shell_command", "shell", "run_shell_command")


class Ledger:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.models: dict[str, dict[str, int]] = {}

    def add(self, model: str, keyed: bool, answered: bool) -> None:
        with self.lock:
            m = self.models.setdefault(model, {"requests": 0, "input_tokens": 0,
                                               "output_tokens": 0, "with_key": 0,
                                               "errors": 0})
            m["requests"] += 1
            m["with_key"] += int(keyed)
            if answered:
                m["input_tokens"] += USAGE_IN
                m["output_tokens"] += USAGE_OUT
            else:
                m["errors"] += 1


LEDGER = Ledger()
SOLVE = "true"
COMMANDS: dict[str, str] = {}
MCP_CALL: tuple[str, dict[str, Any]] | None = None


def command_for(model: str) -> str | None:
    """The shell command a tool call runs for `model`, or None (a plain answer)."""
    for name, command in COMMANDS.items():
        if f"run-{name}" in model:
            return command
    return SOLVE if "solve" in model else None


def tool_args(name: str, command: str) -> dict[str, Any]:
    if name == "exec_command":
        return {"cmd": command}
    if name == "shell":
        return {"command": ["bash", "-lc", command]}
    return {"command": command}


def pick_tool(names: list[str]) -> str:
    for candidate in SHELL_TOOLS:
        if candidate in names:
            return candidate
    return names[0] if names else "bash"


def has_tool_result(api: str, body: dict[str, Any]) -> bool:
    if api == "messages":
        for message in body.get("messages", []):
            content = message.get("content")
            if isinstance(content, list) and any(
                    isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
                return True
        return False
    if api == "responses":
        items = body.get("input")
        return isinstance(items, list) and any(
            isinstance(i, dict) and i.get("type", "").endswith("_call_output") for i in items)
    if api == "gemini":
        return any("functionResponse" in part for c in body.get("contents", [])
                   for part in c.get("parts", []))
    return any(m.get("role") == "tool" for m in body.get("messages", []))


def tool_names(api: str, body: dict[str, Any]) -> list[str]:
    names = []
    for tool in body.get("tools") or []:
        if api == "gemini":
            names += [d.get("name", "") for d in tool.get("functionDeclarations") or []]
        elif api == "chat":
            names.append((tool.get("function") or {}).get("name", ""))
        else:
            names.append(tool.get("name", ""))
    return [n for n in names if n]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: Any) -> None:  # one short line per request
        print(f"{self.command} {self.path} -> {args[1] if len(args) > 1 else ''}", flush=True)

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _sse(self, events: list[tuple[str | None, dict[str, Any]]]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        for name, data in events:
            chunk = (f"event: {name}\n" if name else "") + f"data: {json.dumps(data)}\n\n"
            self.wfile.write(chunk.encode())
        if events and events[-1][0] is None and "object" in events[-1][1]:
            self.wfile.write(b"data: [DONE]\n\n")  # Chat Completions' end marker
        self.wfile.flush()
        self.close_connection = True

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/stats":
            with LEDGER.lock:
                self._send(200, LEDGER.models)
        elif self.headers.get("upgrade", "").lower() == "websocket":
            # No WebSocket transport here: codex then falls back to HTTPS at once.
            self._send(426, {"error": {"message": "websockets are not served"}})
        elif self.path.startswith("/v1/models"):
            self._send(200, {"object": "list", "data": [], "models": []})
        else:
            self._send(200, {"ok": True})

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            body = {}
        path = self.path.split("?")[0].rstrip("/")
        if path.endswith(":countTokens"):
            self._send(200, {"totalTokens": USAGE_IN})
            return
        if ":generateContent" in path or ":streamGenerateContent" in path:
            # Gemini names the model in the path and streams when asked by the method.
            body["model"] = path.rsplit("/", 1)[-1].split(":")[0]
            body["stream"] = ":streamGenerateContent" in path
            path = "gemini"
        api = {"gemini": "gemini", "/v1/messages": "messages", "/v1/responses": "responses",
               "/v1/chat/completions": "chat", "/chat/completions": "chat",
               "/responses": "responses", "/messages": "messages"}.get(path)
        if path.endswith("/count_tokens"):
            self._send(200, {"input_tokens": USAGE_IN})
            return
        if api is None:
            self._send(404, {"error": {"message": f"no such endpoint {path}"}})
            return
        model = str(body.get("model") or "")
        keyed = bool(self.headers.get("x-api-key") or self.headers.get("authorization")
                     or self.headers.get("x-goog-api-key"))
        if "429" in model:
            LEDGER.add(model, keyed, answered=False)
            self._send(429, error_body(api, "rate_limit_error", "Rate limit exceeded: too many "
                                       "requests"),
                       {"retry-after": "0", "x-should-retry": "false"})
            return
        if "401" in model:
            LEDGER.add(model, keyed, answered=False)
            self._send(401, error_body(api, "authentication_error", "invalid x-api-key"),
                       {"x-should-retry": "false"})
            return
        LEDGER.add(model, keyed, answered=True)
        command = command_for(model)
        call = command is not None and not has_tool_result(api, body)
        tool = pick_tool(tool_names(api, body)) if call else None
        arguments = None
        if "mcp" in model and MCP_CALL is not None and not has_tool_result(api, body):
            tool = next((n for n in tool_names(api, body) if n.endswith(MCP_CALL[0])), None)
            arguments = MCP_CALL[1]
            if tool is None:
                print(f"llmstub: no tool ending with {MCP_CALL[0]} among "
                      f"{tool_names(api, body)}", flush=True)
        stream = bool(body.get("stream"))
        builder = {"messages": anthropic, "responses": responses, "chat": chat,
                   "gemini": gemini}[api]
        events, whole = (anthropic(model, tool, command or "true", arguments)
                         if arguments is not None and api == "messages"
                         else builder(model, tool, command or "true"))
        if stream:
            self._sse(events)
        else:
            self._send(200, whole)


def error_body(api: str, kind: str, message: str) -> dict[str, Any]:
    if api == "messages":
        return {"type": "error", "error": {"type": kind, "message": message}}
    code = "rate_limit_exceeded" if kind == "rate_limit_error" else "invalid_api_key"
    return {"error": {"type": kind, "code": code, "message": message}}


def anthropic(model: str, tool: str | None, command: str,
              arguments: dict[str, Any] | None = None):
    msg_id = f"msg_{uuid.uuid4().hex[:20]}"
    usage = {"input_tokens": USAGE_IN, "output_tokens": USAGE_OUT,
             "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    if tool:
        block = {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:20]}", "name": tool,
                 "input": tool_args(tool, command) if arguments is None else arguments}
        stop = "tool_use"
    else:
        block = {"type": "text", "text": "Done."}
        stop = "end_turn"
    whole = {"id": msg_id, "type": "message", "role": "assistant", "model": model,
             "content": [block], "stop_reason": stop, "stop_sequence": None, "usage": usage}
    start = {**whole, "content": [], "stop_reason": None,
             "usage": {**usage, "output_tokens": 1}}
    if tool:
        first = {**block, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
    else:
        first = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": block["text"]}
    events = [
        ("message_start", {"type": "message_start", "message": start}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": first}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta",
                           "delta": {"stop_reason": stop, "stop_sequence": None},
                           "usage": {"output_tokens": USAGE_OUT}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return events, whole


def responses(model: str, tool: str | None, command: str):
    resp_id = f"resp_{uuid.uuid4().hex[:20]}"
    if tool:
        item = {"type": "function_call", "id": f"fc_{uuid.uuid4().hex[:20]}",
                "call_id": f"call_{uuid.uuid4().hex[:20]}", "name": tool,
                "arguments": json.dumps(tool_args(tool, command)), "status": "completed"}
    else:
        item = {"type": "message", "id": f"msg_{uuid.uuid4().hex[:20]}", "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Done.", "annotations": []}]}
    usage = {"input_tokens": USAGE_IN, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": USAGE_OUT, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": USAGE_IN + USAGE_OUT}
    base = {"id": resp_id, "object": "response", "model": model, "status": "in_progress",
            "output": []}
    whole = {**base, "status": "completed", "output": [item], "usage": usage}
    events = [
        ("response.created", {"type": "response.created", "response": base}),
        ("response.output_item.added", {"type": "response.output_item.added",
                                        "output_index": 0, "item": item}),
        ("response.output_item.done", {"type": "response.output_item.done",
                                       "output_index": 0, "item": item}),
        ("response.completed", {"type": "response.completed", "response": whole}),
    ]
    return events, whole


def chat(model: str, tool: str | None, command: str):
    chat_id = f"chatcmpl-{uuid.uuid4().hex[:20]}"
    if tool:
        message = {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{uuid.uuid4().hex[:20]}", "type": "function",
            "function": {"name": tool, "arguments": json.dumps(tool_args(tool, command))}}]}
        finish = "tool_calls"
    else:
        message = {"role": "assistant", "content": "Done."}
        finish = "stop"
    usage = {"prompt_tokens": USAGE_IN, "completion_tokens": USAGE_OUT,
             "total_tokens": USAGE_IN + USAGE_OUT}
    whole = {"id": chat_id, "object": "chat.completion", "model": model,
             "choices": [{"index": 0, "message": message, "finish_reason": finish}],
             "usage": usage}
    chunk = {"id": chat_id, "object": "chat.completion.chunk", "model": model,
             "choices": [{"index": 0, "delta": message, "finish_reason": finish}],
             "usage": usage}
    return [(None, chunk)], whole


def gemini(model: str, tool: str | None, command: str):
    if tool:
        part: dict[str, Any] = {"functionCall": {"name": tool, "args": tool_args(tool, command)}}
    else:
        part = {"text": "Done."}
    whole = {"candidates": [{"content": {"role": "model", "parts": [part]},
                             "finishReason": "STOP", "index": 0}],
             "usageMetadata": {"promptTokenCount": USAGE_IN, "candidatesTokenCount": USAGE_OUT,
                               "totalTokenCount": USAGE_IN + USAGE_OUT},
             "modelVersion": model}
    return [(None, whole)], whole


def main() -> None:
    global SOLVE, MCP_CALL
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--solve", default="true", help="the shell command a solve run calls")
    parser.add_argument("--command", action="append", default=[], metavar="NAME=COMMAND",
                        help="the shell command a run-NAME model calls (repeatable)")
    parser.add_argument("--mcp-call", default=None, metavar="TOOL=JSON",
                        help="the MCP tool an mcp model calls, and its arguments")
    args = parser.parse_args()
    SOLVE = args.solve
    if args.mcp_call:
        name, _, arguments = args.mcp_call.partition("=")
        MCP_CALL = (name, json.loads(arguments))
    for spec in args.command:
        name, _, command = spec.partition("=")
        COMMANDS[name] = command
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    print(f"llmstub listening on {args.host}:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
