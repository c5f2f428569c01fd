"""A fake model provider at a boundary we do not own: a real HTTP server on 127.0.0.1 that speaks
the chat-completions format, answering from a script of responses.

A scripted body may echo what it was sent: `{authorization}` is the Authorization header, and
`{key:<form>}` the Bearer token in one of the forms of tests/support/secret_forms.py (`{key:json_u}`,
`{key:basic}`...), as a careless provider's error page or log echo would."""

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.support.secret_forms import forms


@dataclass
class Reply:
    status: int = 200
    body: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    # Seconds to wait before answering (a hung provider); released early by server.release().
    hang: float = 0.0


def completion(content: str, *, prompt_tokens: int = 11, completion_tokens: int = 7) -> Reply:
    body = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
    return Reply(200, json.dumps(body), {"Content-Type": "application/json"})


def json_completion(obj: object, **kw) -> Reply:
    return completion(json.dumps(obj), **kw)


class _Server(ThreadingHTTPServer):
    # Thousands of runs may call at once (tests/bench/agents.py): the default backlog of 5 would
    # turn a burst of connects into SYN retries, a second or more each, measured as model latency.
    request_queue_size = 4096
    connections = 0  # accepted so far: a client that keeps its connections alive opens few

    def process_request(self, request, client_address) -> None:
        self.connections += 1  # serve_forever's one thread accepts
        super().process_request(request, client_address)


class FakeModelServer:
    """Answers POST …/chat/completions with the next scripted Reply (the last one repeats)."""

    def __init__(self) -> None:
        self.script: deque[Reply] = deque()
        self.requests: list[dict] = []
        self._released = threading.Event()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real providers

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode()
                with server._lock:
                    server.requests.append(
                        {
                            "path": self.path,
                            "headers": dict(self.headers),
                            "body": json.loads(raw) if raw else None,
                            "at": time.time(),  # when it arrived, for pacing tests
                        }
                    )
                    reply = server.script.popleft() if len(server.script) > 1 else server.script[0]
                if reply.hang:
                    server._released.wait(reply.hang)
                authorization = self.headers.get("Authorization", "")
                text = reply.body.replace("{authorization}", authorization)
                for name, value in forms(authorization.removeprefix("Bearer ")).items():
                    text = text.replace("{key:" + name + "}", value)
                body = text.encode()
                try:
                    self.send_response(reply.status)
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (read timeout): expected in the hang tests

            def log_message(self, *args) -> None:
                pass

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        # shutdown() waits for the loop to look again: 0.5 s by default, on every test's teardown.
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def connections(self) -> int:
        return self.httpd.connections

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def respond(self, *replies: Reply) -> None:
        with self._lock:
            self.script.clear()
            self.script.extend(replies)

    def release(self) -> None:
        self._released.set()

    def hold(self) -> None:
        """Hanging replies hang again, until the next release()."""
        self._released.clear()

    def start(self) -> "FakeModelServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.release()
        self.httpd.shutdown()
        self.httpd.server_close()
