"""A tiny HTTP key-value store: PUT /notes/KEY stores the body, GET /notes/KEY returns it."""

import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

DATA = Path(os.environ.get("NOTES_DIR", "/data"))


class Notes(BaseHTTPRequestHandler):
    def _key(self):
        prefix = "/notes/"
        if self.path.startswith(prefix) and self.path[len(prefix):].isidentifier():
            return self.path[len(prefix):]
        return None

    def _reply(self, code, body=b""):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            return self._reply(200, b"ok")
        key = self._key()
        if key is None or not (DATA / key).is_file():
            return self._reply(404)
        self._reply(200, (DATA / key).read_bytes())

    def do_PUT(self):
        key = self._key()
        if key is None:
            return self._reply(400)
        (DATA / key).write_bytes(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        print(f"stored {key}")
        self._reply(204)


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8080
    print("notes: warming up")
    time.sleep(2)  # not ready at once: main must wait for the healthcheck
    DATA.mkdir(parents=True, exist_ok=True)
    print(f"notes: listening on {port}")
    ThreadingHTTPServer(("0.0.0.0", port), Notes).serve_forever()
