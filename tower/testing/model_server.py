"""A loopback OpenAI-compatible model server for tests and demos: real HTTP on 127.0.0.1.

It answers ``POST /v1/chat/completions`` with the project's scripts through a real socket,
and injects faults on demand (``inject``, ``set_down``, or a seeded random rate): 429 with
Retry-After, 500, slow replies, malformed JSON, schema violations, unknown tools, 400s,
refusals, empty replies. ``set_streaming`` answers streaming requests as some servers do.
``tower model-server`` runs one in the foreground.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tower import Message
from tower.contract.wire import AGENT_HEADER, NODE_HEADER, ModelReply, ModelRequest, ToolCallRequest

TOOL_RESULT_PREFIX = "[result of tool "
# What answers a request that gets no fault: the project's scripted model, typically
# (``tower.activities.scripted.scripted_reply`` in Tower's own tests and `tower model-server`).
Replies = Callable[[ModelRequest], ModelReply]
RANDOM_KINDS = ("rate_limit", "server_error", "slow", "malformed", "schema", "unknown_tool")
# How a streaming request is answered: server-sent events (as OpenAI does), one whole JSON
# completion, a 400 when it carries stream_options, a 400 to any streaming one.
STREAMING = ("sse", "json", "no_stream_options", "no_stream")


@dataclass(frozen=True)
class Fault:
    """One injected answer. ``kind`` is one of: rate_limit, server_error, slow,
    malformed, schema, unknown_tool, bad_request, refusal, empty."""

    kind: str
    model: str | None = None  # only requests for this model; None: any
    retry_after: float = 1.0  # rate_limit
    seconds: float = 5.0  # slow: delay before the (good) reply
    content: str = '{"unexpected": true}'  # schema: what the model "says"
    message: str = "Invalid request"  # bad_request: the error body's message

    def __post_init__(self) -> None:
        kinds = {*RANDOM_KINDS, "bad_request", "refusal", "empty"}
        if self.kind not in kinds:
            raise ValueError(f"unknown fault {self.kind!r}; one of: {', '.join(sorted(kinds))}")


@dataclass(frozen=True)
class Served:
    """What the server did with one request: the audit a test asserts on."""

    at: float
    model: str
    agent: str
    node: str
    outcome: str  # "ok", the fault's kind, or "refused streaming"
    last_message: str = ""  # what the model was last told (e.g. a correction)
    stream: bool = False  # the request asked to stream
    stream_options: bool = False  # ... with stream_options


@dataclass
class FaultPlan:
    queue: deque[Fault] = field(default_factory=deque)
    down: dict[str, int] = field(default_factory=dict)  # model -> HTTP status
    rate: float = 0.0
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    slow_seconds: float = 5.0
    delay: float = 0.0  # added to every good reply
    tokens_per_second: float = 0.0  # a streamed reply's pace (0: all at once)
    streaming: str = "sse"  # one of STREAMING

    def refuses(self, body: dict[str, Any]) -> bool:
        """A streaming request this server's streaming mode answers with a 400."""
        return bool(body.get("stream")) and (
            self.streaming == "no_stream"
            or (self.streaming == "no_stream_options" and "stream_options" in body))

    def pick(self, model: str) -> Fault | None:
        if model in self.down:
            return Fault("server_error" if self.down[model] >= 500 else "rate_limit", model)
        for fault in self.queue:
            if fault.model in (None, model):
                self.queue.remove(fault)
                return fault
        if self.rate and self.rng.random() < self.rate:
            return Fault(self.rng.choice(RANDOM_KINDS), seconds=self.slow_seconds)
        return None


class LoopbackModelServer:
    """Start with ``with LoopbackModelServer(replies=...) as server:``; ``server.base_url``
    is the ``OPENAI_BASE_URL`` to use (any API key works)."""

    def __init__(self, port: int = 0, *, replies: Replies, fault_rate: float = 0.0,
                 seed: int = 0, slow_seconds: float = 5.0) -> None:
        self.replies = replies
        self.plan = FaultPlan(rate=fault_rate, rng=random.Random(seed), slow_seconds=slow_seconds)
        self.served: list[Served] = []
        # time.time() at which each streamed reply's first word went out: when the model
        # "emitted" its first token (the streaming benchmark measures from there).
        self.first_token_at: list[float] = []
        self.holding: threading.Event | None = None  # see hold()
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True,
                                        name="loopback-model-server")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def start(self) -> LoopbackModelServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():  # shutdown() waits for serve_forever: only if it runs
            self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> LoopbackModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def inject(self, *faults: Fault) -> None:
        """The next matching requests get these faults, in order."""
        with self._lock:
            self.plan.queue.extend(faults)

    def set_down(self, model: str, status: int = 503) -> None:
        with self._lock:
            self.plan.down[model] = status

    def set_delay(self, seconds: float) -> None:
        with self._lock:
            self.plan.delay = seconds

    def set_rate(self, tokens_per_second: float) -> None:
        """Streamed replies go out a word at a time at this pace (0: at once)."""
        with self._lock:
            self.plan.tokens_per_second = tokens_per_second

    def set_streaming(self, mode: str) -> None:
        """Answer streaming requests this way from now on (one of ``STREAMING``)."""
        if mode not in STREAMING:
            raise ValueError(f"unknown streaming mode {mode!r}; one of: {', '.join(STREAMING)}")
        with self._lock:
            self.plan.streaming = mode

    def hold(self) -> threading.Event:
        """Streamed text replies stop after their first word until the event is set: a test
        sees a reply while it forms, whatever the load."""
        with self._lock:
            self.holding = threading.Event()
            return self.holding

    def outcomes(self) -> list[str]:
        with self._lock:
            return [s.outcome for s in self.served]

    def answer(self, body: dict[str, Any], agent: str, node: str) -> tuple[int, dict[str, str],
                                                                          bytes, float]:
        """(status, headers, body, delay before sending) for one request."""
        model = str(body.get("model") or "unknown")
        with self._lock:
            refused = self.plan.refuses(body)
            fault = None if refused else self.plan.pick(model)
            delay = self.plan.delay
            messages = body.get("messages") or [{}]
            outcome = "refused streaming" if refused else fault.kind if fault else "ok"
            self.served.append(Served(time.monotonic(), model, agent, node, outcome,
                                      str(messages[-1].get("content") or "")[:500],
                                      stream=bool(body.get("stream")),
                                      stream_options="stream_options" in body))
        if refused:  # as OpenAI's own API words an argument it does not know
            what = "stream_options" if "stream_options" in body else "stream"
            return 400, {}, _error(f"Unrecognized request argument supplied: {what}",
                                   "invalid_request_error"), 0.0
        def scripted() -> bytes:
            raw = body.get("messages", [])
            # The node's prompt, as a model reads it: a reply may depend on it (evals).
            system = "\n".join(str(m.get("content") or "") for m in raw
                                if m.get("role") == "system")
            reply = self.replies(ModelRequest(agent=agent, node=node, system=system,
                                              messages=_messages(raw)))
            return _completion(model, reply.content, reply.tool_calls)

        if fault is None:
            return 200, {}, scripted(), delay
        return _fault_response(fault, model, scripted)


def _fault_response(fault: Fault, model: str, scripted: Callable[[], bytes],
                    ) -> tuple[int, dict[str, str], bytes, float]:
    if fault.kind == "rate_limit":
        return 429, {"Retry-After": f"{fault.retry_after:g}"}, _error(
            "Rate limit reached, retry later", "rate_limit_exceeded"), 0.0
    if fault.kind == "server_error":
        return 500, {}, _error("The server had an error", "server_error"), 0.0
    if fault.kind == "bad_request":
        return 400, {}, _error(fault.message, "invalid_request_error"), 0.0
    if fault.kind == "slow":
        return 200, {}, scripted(), fault.seconds
    if fault.kind == "malformed":
        return 200, {}, b'{"id": "chatcmpl-broken", "choices": [{"message": ', 0.0
    if fault.kind == "schema":
        return 200, {}, _completion(model, fault.content, []), 0.0
    if fault.kind == "empty":  # 200, and nothing in it
        return 200, {}, _completion(model, None, []), 0.0
    if fault.kind == "unknown_tool":
        return 200, {}, _completion(model, None, [ToolCallRequest(
            name="transfer_all_funds", arguments={"to": "attacker"})]), 0.0
    return 200, {}, _completion(model, None, [], refusal="I can't help with that."), 0.0


def _messages(raw: list[dict[str, Any]]) -> list[Message]:
    """The conversation back in Tower's shape (tool results travel as user text)."""
    out = []
    for m in raw:
        role, content = m.get("role"), str(m.get("content") or "")
        if role == "system":
            continue
        if role == "user" and content.startswith(TOOL_RESULT_PREFIX):
            name, _, rest = content[len(TOOL_RESULT_PREFIX):].partition("]\n")
            out.append(Message(role="tool", name=name, content=rest))
        elif role in ("user", "assistant"):
            out.append(Message(role=role, content=content))
    return out


def _completion(model: str, content: str | None, calls: list[ToolCallRequest],
                refusal: str | None = None) -> bytes:
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": refusal}
    if calls:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for i, c in enumerate(calls)]
    text = (content or "") + json.dumps(message.get("tool_calls", []))
    return json.dumps({
        "id": "chatcmpl-loopback", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": message,
                     "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": len(text) // 4 + 1,
                  "total_tokens": 10 + len(text) // 4 + 1},
    }).encode()


def sse_chunks(payload: bytes) -> list[bytes]:
    """A complete chat completion as the chunks a streamed one arrives in: its text a word
    at a time, a refusal and each tool call whole, the finish, the usage, then [DONE]. A
    body that is not JSON (a "malformed" fault) goes out as is, for the client to reject."""
    try:
        done = json.loads(payload)
        message, finish = done["choices"][0]["message"], done["choices"][0]["finish_reason"]
    except (ValueError, KeyError, IndexError, TypeError):
        return [payload, b"[DONE]"]
    head = {"id": done["id"], "object": "chat.completion.chunk", "created": 0,
            "model": done["model"]}

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        return json.dumps({**head, "choices": [{"index": 0, "delta": delta,
                                                "finish_reason": finish_reason}]}).encode()

    out = [chunk({"role": "assistant", "content": ""})]
    words = re.findall(r"\S+\s*|\s+", message.get("content") or "")
    out += [chunk({"content": piece}) for piece in words]
    if message.get("refusal"):
        out.append(chunk({"refusal": message["refusal"]}))
    for i, call in enumerate(message.get("tool_calls") or []):
        out.append(chunk({"tool_calls": [{"index": i, **call}]}))
    out.append(chunk({}, finish))
    out.append(json.dumps({**head, "choices": [], "usage": done["usage"]}).encode())
    return [*out, b"[DONE]"]


def _error(message: str, code: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": code, "code": code}}).encode()


def _handler_for(server: LoopbackModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if not self.path.rstrip("/").endswith("/chat/completions"):
                return self._send(404, {}, _error(f"no route {self.path}", "not_found"))
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                return self._send(400, {}, _error("body is not JSON", "invalid_request_error"))
            status, headers, payload, delay = server.answer(
                body, self.headers.get(AGENT_HEADER, ""), self.headers.get(NODE_HEADER, ""))
            if delay:
                time.sleep(delay)
            if body.get("stream") and status == 200 and server.plan.streaming != "json":
                return self._stream(payload, server.plan.tokens_per_second)
            self._send(status, headers, payload)

        def _stream(self, payload: bytes, rate: float) -> None:
            """The completion as server-sent events, as the OpenAI API streams it."""
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i, event in enumerate(sse_chunks(payload)):
                    if rate and i:
                        time.sleep(1 / rate)
                    data = b"data: " + event + b"\n\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                    if i == 1:  # the first chunk with text (the first is the role)
                        server.first_token_at.append(time.time())
                        # (a word of text, as sse_chunks writes it: not a tool call)
                        if server.holding is not None and b'"delta": {"content"' in event:
                            server.holding.wait(timeout=600)
                self.wfile.write(b"0\r\n\r\n")

        def _send(self, status: int, headers: dict[str, str], payload: bytes) -> None:
            # The client may have given up (a "slow" fault): nothing to tell it then.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass  # the audit is ``server.served``; stderr stays quiet

    return Handler
