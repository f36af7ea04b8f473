"""A local HTTP server that speaks the OpenAI embeddings and chat-completions protocols, for testing the
real openai client.

Vectors are deterministic functions of the text (so equal texts embed equally). The model name sets the
dimension (``stub-embed-16`` → 16-d). Any input containing ``POISON`` makes the request fail with HTTP
500, and ``fail_all`` makes every request fail: the two ways a real endpoint lets callers down.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np


def stub_vector(text: str, dimension: int) -> list[float]:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(dimension).astype(float).tolist()


class OpenAIStub:
    def __init__(self) -> None:
        self.fail_all = False
        self.requests: list[dict] = []
        # Chat completions are scripted per model: a list of steps consumed in order, the last one repeating.
        # A step is ("reply", text) | ("status", code) | ("sleep", seconds) | ("reject_schema", None or a
        # status: json_schema refused with 400, or that status as llama.cpp's server does) |
        # ("retry_after", seconds): 429 with that Retry-After | ("trickle", seconds): a good reply sent one
        # byte every that many seconds (a server that never times out a per-read timeout) |
        # ("cut_below", tokens): a request whose max_tokens is under that gets the reply cut in half with
        # finish_reason "length".
        self.chat_script: dict[str, list[tuple]] = {}
        self.default_chat_reply: Callable[[dict], str] | None = None
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def _send(self, status: int, body: dict, headers: dict | None = None, trickle: float = 0.0) -> None:
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                # The client gave up (a timeout test): the connection is gone.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    if not trickle:
                        self.wfile.write(payload)
                        return
                    for index in range(len(payload)):
                        self.wfile.write(payload[index:index + 1])
                        self.wfile.flush()
                        time.sleep(trickle)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                stub.requests.append({"path": self.path, "body": body, "at": time.monotonic(),
                                     "authorization": self.headers.get("Authorization")})
                if self.path.endswith("/chat/completions"):
                    return self._chat(body)
                if not self.path.endswith("/embeddings"):
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                inputs = body.get("input")
                inputs = [inputs] if isinstance(inputs, str) else inputs
                if stub.fail_all or any("POISON" in text for text in inputs):
                    return self._send(500, {"error": {"message": "stub failure", "type": "server_error"}})
                match = re.search(r"(\d+)$", body.get("model", ""))
                dimension = int(match.group(1)) if match else 8
                self._send(200, {
                    "object": "list", "model": body.get("model"),
                    "data": [{"object": "embedding", "index": i, "embedding": stub_vector(text, dimension)}
                             for i, text in enumerate(inputs)],
                    "usage": {"prompt_tokens": 0, "total_tokens": 0},
                })

            def _chat(self, body: dict):
                model = body.get("model", "")
                step = stub.next_step(model)
                kind, value = step if step else ("reply", None)
                if kind == "sleep":
                    time.sleep(value)
                    kind, value = "reply", None
                if kind == "status":
                    return self._send(value, {"error": {"message": f"stub status {value}"}})
                if kind == "retry_after":
                    return self._send(429, {"error": {"message": "slow down"}}, headers={"Retry-After": str(value)})
                trickle = value if kind == "trickle" else 0.0
                if kind == "trickle":
                    kind, value = "reply", None
                if kind == "reject_schema" and body.get("response_format", {}).get("type") == "json_schema":
                    if value:  # another shape: llama.cpp's server answers a 500 with a validation error
                        return self._send(value, {"error": {"code": value, "type": "server_error",
                                                            "message": "1 validation error for ChatCompletionRequest"}})
                    return self._send(400, {"error": {"message": "response_format json_schema unsupported"}})
                cut_below = value if kind == "cut_below" else 0
                if value is None or kind in ("reject_schema", "cut_below"):
                    value = stub.default_chat_reply(body) if stub.default_chat_reply else '{"summary": "", "subjects": []}'
                finish = "stop"
                if body.get("max_tokens", 10**9) < cut_below:
                    value, finish = value[:len(value) // 2], "length"
                self._send(200, {
                    "id": "chatcmpl-stub", "object": "chat.completion", "created": 0, "model": model,
                    "choices": [{"index": 0, "finish_reason": finish,
                                 "message": {"role": "assistant", "content": value}}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }, trickle=trickle)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def next_step(self, model: str) -> tuple | None:
        with self._lock:
            steps = self.chat_script.get(model)
            if not steps:
                return None
            return steps.pop(0) if len(steps) > 1 else steps[0]

    def chat_calls(self, model: str | None = None) -> list[dict]:
        return [r["body"] for r in self.requests if r["path"].endswith("/chat/completions")
                and (model is None or r["body"].get("model") == model)]

    def reset(self) -> None:
        self.fail_all = False
        self.requests.clear()
        self.chat_script.clear()
        self.default_chat_reply = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> OpenAIStub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
