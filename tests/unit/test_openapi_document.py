"""The OpenAPI document of /api/v1 (gateway/web/console/openapi.yaml): valid OpenAPI 3.1, every route the
gateway mounts under /api/v1 described and nothing else, and the code's vocabularies (classes,
provenances, review states and actions, job states, trace reasons) spelled as the code spells them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import cache
from importlib import resources
from typing import Any

import aiohttp
import schemathesis
import yaml  # type: ignore[import-untyped]
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

from gateway.app import Gateway
from gateway.web.console.api import openapi_document
from gateway.web.console.service import ACTION_ARGUMENT, REVIEW_ACTIONS
from memory.records.model import MemoryClass, Provenance, RecordStatus, ReviewStatus, ScopeKind
from memory.store.jobs import STATUSES
from memory.store.traces import REASONS

METHODS = ("get", "put", "post", "delete", "patch")


@cache
def document() -> dict[str, Any]:
    text = resources.files("gateway.web.console").joinpath("openapi.yaml").read_text(encoding="utf-8")
    doc: dict[str, Any] = yaml.safe_load(text)
    return doc


def schemas() -> dict[str, Any]:
    found: dict[str, Any] = document()["components"]["schemas"]
    return found


def operations() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in document()["paths"].items():
        for method in METHODS:
            if method in item:
                yield method.upper(), path, item[method]


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


def test_the_document_is_valid_openapi_3_1() -> None:
    doc = document()
    assert doc["openapi"].startswith("3.1")
    schemathesis.openapi.from_dict(doc).validate()  # the OpenAPI 3.1 meta-schema
    for schema in schemas().values():
        Draft202012Validator.check_schema(schema)


def test_every_reference_resolves() -> None:
    doc = document()
    for ref in set(refs(doc)):
        assert ref.startswith("#/"), ref
        node: Any = doc
        for part in ref[2:].split("/"):
            assert isinstance(node, dict) and part in node, f"{ref} does not resolve"
            node = node[part]


def test_the_served_json_is_the_yaml_file() -> None:
    assert json.loads(openapi_document()) == document()


def test_every_operation_says_who_may_call_it_and_what_it_answers() -> None:
    ids = set()
    for method, path, op in operations():
        where = f"{method} {path}"
        assert op.get("summary") and op.get("description"), where
        assert op.get("operationId") and op["operationId"] not in ids, where
        ids.add(op["operationId"])
        responses = op["responses"]
        assert any(code.startswith("2") for code in responses), where
        public = op.get("security") == []
        assert public == (where in ("GET /api/v1/openapi.json", "POST /api/v1/session")), where
        if not public:
            assert "401" in responses, f"{where} can answer 401"
        if method in ("POST", "PUT", "DELETE") and not public and path != "/api/v1/messages":
            assert {"sessionCookie": [], "csrfToken": []} in op["security"], f"{where} needs the CSRF token"
            assert "403" in responses, f"{where} can refuse a request without its CSRF token"
        if "requestBody" in op:
            assert "400" in responses, f"{where} can answer 400 to a malformed body"
            assert "413" in responses, f"{where} can answer 413 to a body too large"


def test_every_api_route_the_gateway_mounts_is_documented_and_nothing_else(gateway: Gateway) -> None:
    runner = gateway._runner
    assert runner is not None
    mounted = {
        (route.method, route.resource.canonical)
        for route in runner.app.router.routes()
        if route.resource is not None
        and route.resource.canonical.startswith("/api/v1/")
        and route.method not in ("HEAD", "*")
    }
    documented = {(method, path) for method, path, _ in operations()}
    assert len(documented) == 20 and mounted == documented


async def test_the_gateway_serves_the_document(gateway: Gateway) -> None:
    async with aiohttp.ClientSession() as http:
        r = await http.get(gateway.url + "/api/v1/openapi.json")
        assert r.status == 200 and r.content_type == "application/json"
        assert await r.json() == document()


def enum(name: str) -> list[str]:
    values: list[str] = schemas()[name]["enum"]
    return values


def test_the_vocabularies_are_the_codes() -> None:
    assert enum("MemoryClass") == [m.value for m in MemoryClass]
    assert enum("Provenance") == [p.value for p in Provenance]
    assert enum("ReviewStatus") == [r.value for r in ReviewStatus]
    assert enum("RecordStatus") == [r.value for r in RecordStatus]
    assert enum("ReviewAction") == list(REVIEW_ACTIONS)
    assert enum("JobStatus") == list(STATUSES)
    for name, values in (
        ("MemoryClassFilter", enum("MemoryClass")),
        ("ProvenanceFilter", enum("Provenance")),
        ("ReviewStatusFilter", enum("ReviewStatus")),
    ):
        assert enum(name) == ["", *values], name
    trace_item = schemas()["Trace"]["properties"]["items"]["items"]
    assert trace_item["properties"]["reason"]["enum"] == list(REASONS)


def test_the_review_body_asks_for_an_argument_exactly_where_the_code_does() -> None:
    plain, with_arg = schemas()["ReviewRequest"]["oneOf"]
    assert set(with_arg["properties"]["action"]["enum"]) == set(ACTION_ARGUMENT)
    assert "arg" in with_arg["required"] and "arg" not in plain["required"]
    assert set(plain["properties"]["action"]["enum"]) | set(ACTION_ARGUMENT) == set(REVIEW_ACTIONS)


def test_the_scope_filter_pattern_knows_every_scope_kind() -> None:
    memory = document()["paths"]["/api/v1/memory"]["get"]
    scope = next(p for p in memory["parameters"] if p["name"] == "scope")
    pattern = re.compile(scope["schema"]["pattern"])
    for kind in ScopeKind:
        assert pattern.search(kind.value), kind
    assert pattern.search("personal:alice") and pattern.search("channel:web:group:ops")
    assert not pattern.search("global:x") and not pattern.search("personal: ") and not pattern.search("team")
