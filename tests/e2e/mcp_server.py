"""A minimal MCP server over streamable HTTP (standard library only), for the compose e2e test:
one tool, `put_note`, that stores a note in the `notes` service by its service name."""

import json
import os
import sys
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NOTES = os.environ.get("NOTES_URL", "http://notes:8080")
TOOLS = [{
    "name": "put_note",
    "description": "Store a note in the notes service.",
    "inputSchema": {"type": "object", "required": ["key", "text"],
                    "properties": {"key": {"type": "string"}, "text": {"type": "string"}}},
}]


class Mcp(BaseHTTPRequestHandler):
    def _json(self, code, body=None):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            return self._json(200, {"ok": True})
        self._json(405)  # no server-initiated stream

    def do_DELETE(self):
        self._json(200)

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0)))
                             or b"{}")
        method = request.get("method")
        print(f"mcp: {method}", flush=True)
        if "id" not in request:  # a notification
            return self._json(202)
        params = request.get("params") or {}
        if method == "initialize":
            result = {"protocolVersion": params.get("protocolVersion", "2025-03-26"),
                      "capabilities": {"tools": {}},
                      "serverInfo": {"name": "notes-mcp", "version": "1.0"}}
        elif method == "tools/list":
            result = {"tools": TOOLS}
        elif method == "tools/call":
            args = params.get("arguments") or {}
            urllib.request.urlopen(urllib.request.Request(
                f"{NOTES}/notes/{args['key']}", data=args["text"].encode(), method="PUT"),
                timeout=10)
            print(f"mcp: stored {args['key']}", flush=True)
            result = {"content": [{"type": "text", "text": f"stored {args['key']}"}]}
        elif method == "ping":
            result = {}
        else:
            return self._json(200, {"jsonrpc": "2.0", "id": request["id"], "error": {
                "code": -32601, "message": f"no method {method}"}})
        self._json(200, {"jsonrpc": "2.0", "id": request["id"], "result": result})


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
    ThreadingHTTPServer(("0.0.0.0", port), Mcp).serve_forever()
