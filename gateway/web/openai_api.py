"""OpenAI-compatible API: POST /v1/chat/completions (JSON and SSE) and GET /v1/models.

The bearer token names the person; every request is a turn of that person's assistant, prepared as
a chat turn is (gateway/turn/prepare.py): Memory.md, recall for the newest user message, the memory
tools, a recall trace. With the request's `user` field set, the conversation lives on the gateway,
in a direct conversation of its own (`api:dm:<person>:<user>`): only the newest user message is new
input, and the session is summarized and forms memory as any chat's does. Without it, each request
is its own session built from its messages, and nothing of it is kept.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any

from aiohttp import web

from gateway.config.model import AgentConfig, Config
from gateway.core.http_input import BadJson, BodyTooLarge, parse_json, read_body
from gateway.core.logs import event
from gateway.core.metrics import Metrics
from gateway.core.ports import STORAGE_RETRY_SECONDS, SessionBusy, Throttled, retry_after
from gateway.llm.client import Restart, TextDelta
from gateway.session.budget import FlushTarget
from gateway.turn.engine import TurnEngine, TurnResult
from gateway.turn.prepare import PreparedTurn
from gateway.turn.router import Router
from gateway.web.auth import TokenAuth
from gateway.web.server import cannot_save
from memory.store.db import StorageUnwritable
from memory.store.identities import User
from memory.store.sessions import Message
from memory.store.storage import Storage
from memory.tokens import estimate_tokens

log = logging.getLogger("clawgate.openai_api")
_ROLES = {"system", "user", "assistant", "developer"}


def _error(
    status: int, message: str, kind: str, code: str | None = None, headers: dict[str, str] | None = None
) -> web.HTTPException:
    body = json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}})
    exc = web.HTTPException(text=body, content_type="application/json", headers=headers)
    exc.set_status(status)
    return exc


def _content(value: Any) -> str:
    """Message content: a string, or OpenAI content parts of which the text parts are kept."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(p.get("text", "") for p in value if isinstance(p, dict) and p.get("type") == "text")
    if value is None:
        return ""
    raise ValueError("content must be a string or a list of content parts")


class OpenAIApi:
    def __init__(
        self,
        config: Config,
        storage: Storage,
        engine: TurnEngine,
        router: Router,
        metrics: Metrics,
        authenticate: TokenAuth,
        max_bytes: int,
    ) -> None:
        self.config = config
        self.storage = storage
        self.engine = engine
        self.router = router
        self.metrics = metrics
        self.authenticate = authenticate
        self.max_bytes = max_bytes

    def mount(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_get("/v1/models", self.models)

    def _user(self, request: web.Request) -> str:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        try:
            user = self.authenticate(token.strip(), request.remote) if scheme.lower() == "bearer" else None
        except Throttled as exc:
            wait = retry_after(exc.retry_after)
            raise _error(429, str(exc), "rate_limit_error", "too_many_failed_attempts", wait) from None
        if user is None:
            raise _error(401, "missing or invalid bearer token", "invalid_request_error", "invalid_api_key")
        return str(user)

    async def models(self, request: web.Request) -> web.Response:
        self._user(request)
        created = int(time.time())
        # `default` always names the first agent (Config.agent), whatever that agent is called; an
        # agent named default is that same name, listed once.
        names = ["default"] + [a.name for a in self.config.agents.list if a.name != "default"]
        data = [{"id": name, "object": "model", "created": created, "owned_by": "clawgate"} for name in names]
        return web.json_response({"object": "list", "data": data})

    async def _body(self, request: web.Request) -> dict[str, Any]:
        try:
            body = parse_json(await read_body(request, self.max_bytes))
        except BodyTooLarge:
            message = f"request too large: the limit is {self.max_bytes} bytes"
            raise _error(413, message, "invalid_request_error") from None
        except BadJson as exc:
            raise _error(400, str(exc), "invalid_request_error") from None
        if not isinstance(body, dict):
            raise _error(400, "the body must be a JSON object", "invalid_request_error")
        return body

    def _parse_messages(self, raw: Any) -> list[Message]:
        if not isinstance(raw, list) or not raw:
            raise _error(400, "'messages' must be a non-empty list", "invalid_request_error")
        out = []
        for i, m in enumerate(raw):
            if not isinstance(m, dict) or m.get("role") not in _ROLES | {"tool"}:
                raise _error(
                    400, f"messages[{i}] needs a role of system, user, assistant or developer", "invalid_request_error"
                )
            if m["role"] == "tool":
                continue  # client-side tool results belong to the client's tools, not ours
            try:
                content = _content(m.get("content"))
            except ValueError as exc:
                raise _error(400, f"messages[{i}].content: {exc}", "invalid_request_error") from None
            role = "system" if m["role"] == "developer" else m["role"]
            out.append(Message(role=role, content=content))
        return out

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._chat_completions(request)
        except StorageUnwritable as exc:
            wait = retry_after(STORAGE_RETRY_SECONDS)
            raise _error(503, cannot_save(exc.reason), "service_unavailable", "storage_unwritable", wait) from None

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        user_id = self._user(request)
        body = await self._body(request)
        model_name = body.get("model") or "default"
        agent = self.config.agent(model_name) if isinstance(model_name, str) else None
        if agent is None:
            raise _error(
                404,
                f"model {model_name!r} does not exist; GET /v1/models lists the agents",
                "invalid_request_error",
                "model_not_found",
            )
        msgs = self._parse_messages(body.get("messages"))
        if sum(len(m.content.encode()) for m in msgs) > self.max_bytes:
            raise _error(413, f"messages too large: the limit is {self.max_bytes} bytes", "invalid_request_error")
        session_user = body.get("user")
        if session_user is not None and (not isinstance(session_user, str) or not 0 < len(session_user) <= 128):
            raise _error(400, "'user' must be a string of 1-128 characters", "invalid_request_error")
        stream = bool(body.get("stream"))
        started = time.perf_counter()
        cid = f"chatcmpl-{uuid.uuid4().hex}"
        person = await self._person(user_id)
        if session_user:
            key = f"api:dm:{user_id}:{session_user}"
            try:
                async with self.router.session_slot(key):
                    response = await self._kept_session(request, agent, person, key, msgs, stream, model_name, cid)
            except SessionBusy:
                raise _error(429, "too many requests waiting in this session", "rate_limit_error") from None
        else:
            turns = self.router.turns
            turn = await turns.prepare_ephemeral(agent, person, f"api:ephemeral:{uuid.uuid4().hex}", msgs)
            response, result = await self._respond(request, turn, stream, model_name, cid)
            if result is not None:
                await turns.finish(turn, result.produced)  # keeps nothing but the recall trace
        self.metrics.turn_latency.labels("api").observe(time.perf_counter() - started)
        return response

    async def _person(self, user_id: str) -> User:
        """The token's person as stored (their roles, as every turn reads them); the config's word
        when the store does not know them yet."""
        stored = await self.storage.identities.get_user(user_id)
        if stored is not None:
            return stored
        declared = self.config.users.get(user_id)
        return User(user_id, tuple(str(r) for r in declared.roles) if declared else ("user",))

    async def _kept_session(
        self,
        request: web.Request,
        agent: AgentConfig,
        person: User,
        key: str,
        msgs: list[Message],
        stream: bool,
        model_name: str,
        cid: str,
    ) -> web.StreamResponse:
        newest = next((m for m in reversed(msgs) if m.role == "user"), None)
        if newest is None:
            raise _error(400, "no user message to answer", "invalid_request_error")
        state = await self.storage.sessions.active(key, agent.name, person.id, "personal")
        # The completion's id stands for the inbound event: formation finds the turn's trace by it.
        user_msg = Message("user", newest.content, author=f"api:{person.id}", event_id=cid)
        target = FlushTarget.of(True, person.id, key, "personal")
        turns = self.router.turns
        turn = await turns.prepare(agent, person, "personal", state, user_msg, target)
        response, result = await self._respond(request, turn, stream, model_name, cid)
        if result is not None:
            for message in result.produced:
                message.event_id = cid
            await turns.finish(turn, result.produced)
        return response

    async def _respond(
        self,
        request: web.Request,
        turn: PreparedTurn,
        stream: bool,
        model_name: str,
        cid: str,
    ) -> tuple[web.StreamResponse, TurnResult | None]:
        created = int(time.time())
        prompt = turn.prompt
        run = self.engine.run(turn.agent, prompt, turn.ctx, stream)
        if not stream:
            result: TurnResult | None = None
            async for item in run:
                if isinstance(item, TurnResult):
                    result = item
            assert result is not None
            self._count(result)
            if result.error is not None:
                raise _error(502, result.text, "upstream_error", result.error.kind)
            return web.json_response(self._completion(cid, created, model_name, prompt, result)), result

        resp: web.StreamResponse | None = None

        async def open_stream() -> web.StreamResponse:
            r = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            await r.prepare(request)
            await _sse(r, _chunk(cid, created, model_name, {"role": "assistant", "content": ""}, None))
            return r

        result = None
        async for item in run:
            if isinstance(item, TextDelta):
                resp = resp or await open_stream()
                await _sse(resp, _chunk(cid, created, model_name, {"content": item.text}, None))
            elif isinstance(item, Restart):
                event(log, "api_stream_restarted", logging.WARNING, session=turn.key)
            elif isinstance(item, TurnResult):
                result = item
        assert result is not None
        self._count(result)
        if resp is None:
            if result.error is not None:
                raise _error(502, result.text, "upstream_error", result.error.kind)
            resp = await open_stream()
            await _sse(resp, _chunk(cid, created, model_name, {"content": result.text}, None))
        elif result.error is not None:
            await _sse(resp, {"error": {"message": result.text, "type": "upstream_error", "code": result.error.kind}})
        await _sse(resp, _chunk(cid, created, model_name, {}, "stop"))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp, result

    def _count(self, result: TurnResult) -> None:
        self.metrics.turns.labels("api", "ok" if result.error is None else "llm_error").inc()

    @staticmethod
    def _completion(
        cid: str, created: int, model: str, prompt: list[dict[str, Any]], result: TurnResult
    ) -> dict[str, Any]:
        prompt_tokens = sum(estimate_tokens(str(m.get("content") or "")) for m in prompt)
        completion_tokens = estimate_tokens(result.text)
        return {
            "id": cid,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": result.text},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


def _chunk(cid: str, created: int, model: str, delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    return {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }


async def _sse(resp: web.StreamResponse, payload: dict[str, Any]) -> None:
    await resp.write(b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n")
