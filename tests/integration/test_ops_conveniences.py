"""Operator conveniences on the shared web server: the access log, and JSON answers for unknown
routes of the JSON APIs. A real aiohttp server on a loopback port, a real client."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass

import aiohttp
import pytest
from aiohttp import web

from gateway.app import Gateway
from gateway.core.logs import ACCESS_LOGGER, JsonFormatter, RedactingFilter
from gateway.web.server import HostPolicy, build_app
from tests.conftest import ROOT_TOKEN, auth
from tests.fakes.llm import FakeLLM
from tests.fakes.serve import serve_loopback


@dataclass
class Server:
    url: str
    http: aiohttp.ClientSession


async def _ok(_request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def _refused(_request: web.Request) -> web.Response:
    raise web.HTTPForbidden(text="no")


async def _no_record(_request: web.Request) -> web.Response:
    raise web.HTTPNotFound(text='{"error": "no memory 7"}', content_type="application/json")


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    app = build_app(64 * 1024, HostPolicy.build(["127.0.0.1"], []))
    app.router.add_get("/api/v1/status", _ok)
    app.router.add_post("/api/v1/session", _ok)
    app.router.add_get("/v1/models", _ok)
    app.router.add_get("/api/v1/memory/{id}", _no_record)
    app.router.add_get("/forbidden", _refused)
    app.router.add_get("/", _ok)
    runner, url = await serve_loopback(app)
    async with aiohttp.ClientSession() as http:
        yield Server(url, http)
    await runner.cleanup()


@pytest.fixture
def access_lines() -> Iterator[io.StringIO]:
    """The access logger's lines as JSON, through the redacting filter; the logger's level (the
    `logging.access_log` switch) restored afterwards."""
    logger = logging.getLogger(ACCESS_LOGGER)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    handler.setFormatter(JsonFormatter())
    level = logger.level
    logger.addHandler(handler)
    yield stream
    logger.removeHandler(handler)
    logger.setLevel(level)


async def test_the_access_log_writes_one_line_per_request_only_when_enabled(
    server: Server, access_lines: io.StringIO
) -> None:
    logging.getLogger(ACCESS_LOGGER).setLevel(logging.WARNING)  # logging.access_log: false
    async with server.http.get(server.url + "/?token=off-secret-123") as resp:
        assert resp.status == 200
    assert access_lines.getvalue() == ""

    logging.getLogger(ACCESS_LOGGER).setLevel(logging.INFO)  # logging.access_log: true
    query = "/?token=query-secret-123&x=1"
    async with server.http.get(server.url + query, headers={"Authorization": "Bearer header-secret-1234"}) as resp:
        assert resp.status == 200
    async with server.http.get(server.url + "/forbidden?k=v") as resp:
        assert resp.status == 403
    async with server.http.get(server.url + "/", headers={"Host": "evil.example"}) as resp:
        assert resp.status == 421

    text = access_lines.getvalue()
    for leaked in ("query-secret-123", "token=", "?", "header-secret-1234", "Bearer", "k=v"):
        assert leaked not in text
    lines = [json.loads(line) for line in text.splitlines()]
    assert [(x["event"], x["method"], x["path"], x["status"]) for x in lines] == [
        ("http_request", "GET", "/", 200),
        ("http_request", "GET", "/forbidden", 403),
        ("http_request", "GET", "/", 421),
    ]
    assert all(x["client"] == "127.0.0.1" and isinstance(x["ms"], float) and x["ms"] >= 0 for x in lines)


@pytest.mark.parametrize(
    ("method", "path", "status", "allow"),
    [
        ("GET", "/api/v1/nothing-here", 404, None),
        ("GET", "/api/v1", 404, None),
        ("DELETE", "/api/v1/status", 405, "GET,HEAD"),
        ("GET", "/api/v1/session", 405, "POST"),
    ],
)
async def test_unknown_console_api_routes_answer_a_json_error(
    server: Server, method: str, path: str, status: int, allow: str | None
) -> None:
    async with server.http.request(method, server.url + path + "?q=1") as resp:
        assert resp.status == status
        assert resp.content_type == "application/json"
        body = await resp.json()
        assert set(body) == {"error"} and isinstance(body["error"], str)
        assert path in body["error"] and "q=1" not in body["error"]
        if allow is not None:
            assert set(resp.headers["Allow"].split(",")) == set(allow.split(","))
            assert all(m in body["error"] for m in allow.split(","))


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/v1/chat/nothing", 404, "not_found"),
        ("POST", "/v1/models", 405, "method_not_allowed"),
    ],
)
async def test_unknown_openai_api_routes_answer_the_openai_error_shape(
    server: Server, method: str, path: str, status: int, code: str
) -> None:
    async with server.http.request(method, server.url + path) as resp:
        assert resp.status == status and resp.content_type == "application/json"
        error = (await resp.json())["error"]
        assert error["code"] == code and error["type"] == "invalid_request_error" and path in error["message"]


async def test_other_unknown_routes_and_handler_errors_are_left_as_they_were(server: Server) -> None:
    async with server.http.get(server.url + "/nothing-here") as resp:
        assert resp.status == 404 and resp.content_type != "application/json"
    async with server.http.get(server.url + "/v1x") as resp:  # not under /v1
        assert resp.status == 404 and resp.content_type != "application/json"
    async with server.http.get(server.url + "/api/v1/status") as resp:
        assert resp.status == 200 and await resp.json() == {"ok": True}
    async with server.http.get(server.url + "/api/v1/memory/7") as resp:  # a route's own 404 is its own
        assert resp.status == 404 and await resp.json() == {"error": "no memory 7"}


# -- the whole gateway -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("agents", "listed"),
    [
        (None, ["default"]),  # the shipped single agent is named default
        ([{"name": "default"}, {"name": "helper"}], ["default", "helper"]),
        ([{"name": "helper"}, {"name": "coder"}], ["default", "helper", "coder"]),
    ],
)
async def test_v1_models_lists_default_once(
    gateway_factory: Callable[..., Awaitable[Gateway]],
    fake_llm: FakeLLM,
    http: aiohttp.ClientSession,
    agents: list[dict[str, str]] | None,
    listed: list[str],
) -> None:
    overrides = {} if agents is None else {"agents__list": agents}
    gw = await gateway_factory(fake_llm, **overrides)
    async with http.get(gw.url + "/v1/models", headers=auth()) as resp:
        assert resp.status == 200
        assert [m["id"] for m in (await resp.json())["data"]] == listed
    # ...and an unknown route beside it answers in JSON, on the real server too.
    async with http.get(gw.url + "/v1/nothing", headers=auth()) as resp:
        assert resp.status == 404 and (await resp.json())["error"]["code"] == "not_found"
    async with http.get(gw.url + "/api/v1/nothing", headers=auth(ROOT_TOKEN)) as resp:
        assert resp.status == 404 and "no such route" in (await resp.json())["error"]
