"""Property-based fuzzing of /api/v1 against its own OpenAPI document (schemathesis), on a live gateway.

Every operation of gateway/web/console/openapi.yaml is called with generated valid and invalid input
(schemathesis' examples, coverage and fuzzing phases) as an administrator's bearer token, an
ordinary user's, and that user's signed-in browser session (cookie and CSRF header). Every answer
must be no server error, a documented status code, the documented content type and a body that
matches the documented schema, along with the other built-in checks: invalid input refused, valid
input accepted, authentication enforced. Seeded records, revisions, a dead job and a pairing
request are given to the generator as parameter examples, so it reaches real paths and not only
"not found". The seed is fixed and no example database is kept: every run sends the same cases.

schemathesis calls the server synchronously (requests), so the gateway and the fake model run on an
event loop of their own in a background thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest
import schemathesis
import schemathesis.engine
import yaml  # type: ignore[import-untyped]
from schemathesis.engine import events

from gateway.app import Gateway
from gateway.session.memory_service import EVIDENCE_ONLY, INSTRUCTION
from gateway.web.auth import AuthThrottle
from gateway.web.console.auth import COOKIE
from memory.records.model import MemoryClass, Provenance, ReviewStatus, Scope
from tests.conftest import ALICE_TOKEN, ROOT_TOKEN, make_config
from tests.fakes.llm import FakeLLM

T = TypeVar("T")
WHO = ("admin", "user", "session")  # root's token, alice's token, alice's signed-in browser session
SEED = 20_608  # fixed: CI replays the same cases


def schemathesis_config(base_url: str, headers: dict[str, str]) -> dict[str, Any]:
    operations: list[dict[str, Any]] = [
        # Each valid message is a whole turn against the fake model: a few are enough.
        {"include-name": "POST /api/v1/messages", "generation": {"max-examples": 5}},
    ]
    if "Cookie" in headers:  # signing out would end the session the rest of the run uses
        operations.append({"include-name": "DELETE /api/v1/session", "enabled": False})
    return {
        "seed": SEED,
        "base-url": base_url,
        "headers": headers,
        "generation": {
            "max-examples": 40,
            "deterministic": True,
            "database": "none",  # no .hypothesis/ replays: the same cases every run
            "with-security-parameters": False,  # the token above is the credential
        },
        "phases": {"stateful": {"enabled": False}},
        "checks": {
            # Invalid input must be refused; 413 (too large) is a refusal too, missing from the default list.
            "negative_data_rejection": {
                "expected-statuses": [400, 401, 403, 404, 405, 406, 409, 413, 415, 422, 428, 429],
            },
        },
        "operations": operations,
    }


class LoopThread:
    """An event loop running in a thread of its own, for the gateway under test."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="gateway-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


@dataclass
class Seeds:
    """Values the generator should try besides random ones: parameter name -> examples."""

    records: dict[str, str] = field(default_factory=dict)
    revisions: dict[str, int] = field(default_factory=dict)
    jobs: dict[str, int] = field(default_factory=dict)
    pairing: dict[str, str] = field(default_factory=dict)


@dataclass
class Live:
    url: str
    seeds: Seeds
    headers: dict[str, dict[str, str]]  # who -> the credentials every request carries


async def browser_session(url: str, token: str) -> dict[str, str]:
    """Sign in as a browser does: the session cookie, and the CSRF token its unsafe requests need."""
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        r = await http.post(url + "/api/v1/session", json={"token": token})
        assert r.status == 200, await r.text()
        csrf = (await r.json())["csrf"]
        cookie = r.cookies[COOKIE].value
    return {"Cookie": f"{COOKIE}={cookie}", "X-CSRF-Token": csrf}


async def seed(gw: Gateway) -> Seeds:
    storage = gw.storage
    assert storage is not None
    records = storage.records
    seeds = Seeds()

    async def record(name: str, text: str, scope: Scope, author: str, pending: bool) -> str:
        made = await records.create(
            text,
            memory_class=MemoryClass.EVIDENCE if pending else MemoryClass.DURABLE_FACT,
            provenance=Provenance.INFERRED if pending else Provenance.USER_CONFIRMED,
            use_policy=EVIDENCE_ONLY if pending else INSTRUCTION,
            scope=scope,
            author=author,
            review_status=ReviewStatus.PENDING if pending else ReviewStatus.CONFIRMED,
        )
        seeds.records[name] = made.id
        return made.id

    alice = await record("alice", "Alice prefers short answers", Scope.personal("alice"), "alice", False)
    await record("alice_pending", "Alice is learning Rust", Scope.personal("alice"), "agent:main", True)
    await record("bob", "Bob's locker code is in the wiki", Scope.personal("bob"), "bob", False)
    await record("global", "Releases go out on Tuesdays", Scope.parse("global"), "root", False)
    await record("global_pending", "The staging host is flaky", Scope.parse("global"), "agent:main", True)
    await record("project", "Atlas uses PostgreSQL", Scope.parse("project:atlas"), "root", False)
    await record("channel", "This group plans the offsite", Scope.parse("channel:web:group:ops"), "agent:main", True)

    edited = await records.update(
        alice, actor="alice", action="edit", expected_revision=1, content="Alice likes brevity"
    )
    history = await records.revisions(edited.id)
    seeds.revisions = {"edit": history[-1].id, "create": history[0].id}

    jobs = storage.jobs
    dead = await jobs.enqueue("fuzz.never_registered", "seed")
    assert dead is not None
    claimed = await jobs.claim("fuzz", timedelta(minutes=5), ["fuzz.never_registered"])
    assert claimed is not None and claimed.id == dead
    await jobs.failed(claimed, "seeded failure", permanent=True)
    seeds.jobs["dead"] = dead

    seeds.pairing["pending"] = await storage.pairing.request("telegram:4242", "telegram", "Fuzzy Visitor")
    return seeds


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    tmp: Path = tmp_path_factory.mktemp("fuzz")
    loop = LoopThread()
    fake = loop.run(FakeLLM().start())  # answers every prompt (it echoes the last message)
    gw = Gateway(make_config(tmp, fake))
    # schemathesis' ignored_auth check sends wrong tokens to every operation and wants each refused
    # with 401; the throttle would answer 429 (documented) after a few. It has tests of its own.
    gw.auth.throttle = AuthThrottle(free=1_000_000)
    try:
        loop.run(gw.start())
        loop.run(gw.llm.ready())
        headers = {
            "admin": {"Authorization": f"Bearer {ROOT_TOKEN}"},
            "user": {"Authorization": f"Bearer {ALICE_TOKEN}"},
            "session": loop.run(browser_session(gw.url, ALICE_TOKEN)),
        }
        yield Live(gw.url, loop.run(seed(gw)), headers)
    finally:
        loop.run(gw.stop())
        loop.run(fake.stop())
        loop.close()


def document_with_examples(seeds: Seeds) -> dict[str, Any]:
    """The served document, with the seeded ids as examples of the parameters that take them."""
    text = resources.files("gateway.web.console").joinpath("openapi.yaml").read_text(encoding="utf-8")
    doc: dict[str, Any] = yaml.safe_load(text)

    def examples(values: dict[str, Any]) -> dict[str, Any]:
        return {name: {"value": value} for name, value in values.items()}

    doc["components"]["parameters"]["RecordId"]["examples"] = examples(seeds.records)
    paths = doc["paths"]
    for path, values in (
        ("/api/v1/revisions/{id}/undo", seeds.revisions),
        ("/api/v1/jobs/{id}/retry", seeds.jobs),
        ("/api/v1/pairing/{code}/approve", seeds.pairing),
    ):
        for param in paths[path]["post"]["parameters"]:
            param["examples"] = examples(values)
    return doc


def run_schemathesis(schema: schemathesis.BaseSchema) -> tuple[list[str], dict[str, int]]:
    """Every phase of a schemathesis run (as its CLI runs them): the failures found, each with a curl
    line to replay it, and how many requests each operation got."""
    failures: list[str] = []
    calls: dict[str, int] = {}
    for ev in schemathesis.engine.from_schema(schema).execute():
        if isinstance(ev, events.ScenarioFinished):
            label = ev.label or "?"
            calls[label] = calls.get(label, 0) + len(ev.recorder.interactions)
            for checks in ev.recorder.checks.values():
                for check in checks:
                    if check.failure_info is not None:
                        failure = check.failure_info.failure
                        replay = check.failure_info.code_sample
                        failures.append(
                            f"{label} [{ev.phase.value}] {check.name}: {failure.title}\n{failure.message}\n"
                            + (replay if len(replay) < 800 else replay[:800] + " …")
                        )
        elif isinstance(ev, events.NonFatalError):
            failures.append(f"{ev.label}: error {ev.info.title}: {ev.info.message}")
        elif isinstance(ev, events.FatalError):
            failures.append(f"schemathesis failed: {ev.exception!r}")
        elif isinstance(ev, events.EngineFinished):
            failures += [f"after the run: {f.title}: {f.message}" for f in ev.failures]
    return failures, calls


@pytest.mark.timeout(120)
@pytest.mark.parametrize("who", WHO)
def test_every_operation_keeps_to_the_document(live: Live, who: str) -> None:
    doc = document_with_examples(live.seeds)
    config = schemathesis.Config.from_dict(schemathesis_config(live.url, live.headers[who]))
    failures, calls = run_schemathesis(schemathesis.openapi.from_dict(doc, config=config))
    assert not failures, "\n\n".join(dict.fromkeys(failures))
    operations = {
        f"{method.upper()} {path}"
        for path, item in doc["paths"].items()
        for method in item
        if method in ("get", "put", "post", "delete", "patch")
    }
    if who == "session":
        operations.discard("DELETE /api/v1/session")
    untested = sorted(op for op in operations if calls.get(op, 0) == 0)
    assert not untested, f"never called: {untested}"
