"""A real webhook receiver on 127.0.0.1 (http.server in a thread): a boundary we do not own
(Slack, Feishu, DingTalk), faked as a real HTTP server, never as a mock of our own code."""

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Receiver:
    url: str
    requests: list[dict] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)  # the Host header of each request
    # What to answer: HTTP status and JSON body; tests change them between deliveries.
    status: int = 200
    answer: dict = field(default_factory=lambda: {"ok": True})
    # Answer 500 to this many requests first (a receiver that is down, then back).
    fail_first: int = 0
    # Further headers of the answer (a Location, with status 302 or 307).
    headers: dict[str, str] = field(default_factory=dict)


def start_receiver(token_path: str = "/hook/T0K3N-SECRET") -> tuple[Receiver, ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    receiver = Receiver(url=f"http://127.0.0.1:{server.server_port}{token_path}?access_token=SECRET-QUERY")
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"null")
            with lock:
                receiver.requests.append(body)
                receiver.paths.append(self.path)
                receiver.hosts.append(self.headers.get("Host", ""))
                status = receiver.status
                if receiver.fail_first > 0:
                    receiver.fail_first -= 1
                    status = 500
            data = json.dumps(receiver.answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in receiver.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):  # keep test output quiet
            pass

    server.RequestHandlerClass = Handler
    # A short poll: shutdown() waits for the loop to look again (0.5 s by default).
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, name="webhook-receiver", daemon=True
    ).start()
    return receiver, server
