"""The console's JSON API against a running gateway: signing in and out, the cookie and CSRF rules,
roles, privacy of personal memory, review actions, revision undo, Memory.md and administration."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.app import Gateway
from gateway.config.load import ConfigError, parse_config
from gateway.session.memory_service import EVIDENCE_ONLY
from memory.records.model import MemoryClass, MemoryRecord, Provenance, ReviewStatus, Scope
from tests.conftest import ALICE_TOKEN, BOB_TOKEN, ROOT_TOKEN, auth
from tests.fakes.llm import FakeLLM, Reply
from tests.memories import make_memory

API = "/api/v1"


@pytest.fixture
async def browser() -> AsyncIterator[aiohttp.ClientSession]:
    """A client that keeps cookies like a browser (aiohttp ignores cookies of IP hosts by default)."""
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
        yield session


async def sign_in(client: aiohttp.ClientSession, gw: Gateway, token: str = ALICE_TOKEN) -> str:
    r = await client.post(gw.url + API + "/session", json={"token": token})
    assert r.status == 200, await r.text()
    return str((await r.json())["csrf"])


async def pending_global(gw: Gateway, text: str = "Deploys happen on Tuesdays") -> MemoryRecord:
    return await make_memory(gw.storage, text)


async def personal(gw: Gateway, user: str, text: str) -> MemoryRecord:
    """A person's own memory, pending their confirmation."""
    kind = {"memory_class": MemoryClass.DURABLE_FACT, "provenance": Provenance.USER_CONFIRMED}
    return await make_memory(gw.storage, text, f"personal:{user}", author=user, **kind)


async def get_json(http: aiohttp.ClientSession, url: str, token: str | None = None) -> tuple[int, Any]:
    r = await http.get(url, headers=auth(token) if token else None)
    return r.status, await r.json()


# -- signing in ------------------------------------------------------------------------------------


async def test_sign_in_sets_a_strict_http_only_cookie_and_sign_out_ends_it(
    gateway: Gateway, browser: aiohttp.ClientSession
) -> None:
    r = await browser.post(gateway.url + API + "/session", json={"token": "wrong-token"})
    assert r.status == 401
    assert "wrong-token" not in await r.text()
    r = await browser.post(gateway.url + API + "/session", json={"token": ALICE_TOKEN})
    assert r.status == 200
    body = await r.json()
    assert body["user_id"] == "alice" and body["admin"] is False and body["csrf"]
    cookie = r.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    assert ALICE_TOKEN not in cookie  # the cookie is a random session id, not the token
    status, me = await get_json(browser, gateway.url + API + "/session")
    assert status == 200 and me["user_id"] == "alice" and me["csrf"] == body["csrf"]

    r = await browser.delete(gateway.url + API + "/session", headers={"X-CSRF-Token": body["csrf"]})
    assert r.status == 204
    status, _ = await get_json(browser, gateway.url + API + "/session")
    assert status == 401


async def test_a_stolen_cookie_value_stops_working_after_sign_out(
    gateway: Gateway, http: aiohttp.ClientSession
) -> None:
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser:
        csrf = await sign_in(browser, gateway)
        cookie = next(c for c in browser.cookie_jar if c.key == "clawgate_console").value
        r = await http.get(gateway.url + API + "/session", headers={"Cookie": f"clawgate_console={cookie}"})
        assert r.status == 200
        await browser.delete(gateway.url + API + "/session", headers={"X-CSRF-Token": csrf})
    r = await http.get(gateway.url + API + "/session", headers={"Cookie": f"clawgate_console={cookie}"})
    assert r.status == 401


async def test_repeated_failed_sign_ins_are_throttled(gateway: Gateway, browser: aiohttp.ClientSession) -> None:
    statuses = []
    for i in range(10):
        r = await browser.post(gateway.url + API + "/session", json={"token": f"guess-{i}"})
        statuses.append(r.status)
    assert statuses[:6] == [401] * 6 and set(statuses[6:]) == {429}  # five free, then the address waits
    assert int(r.headers["Retry-After"]) >= 1
    assert "too many" in (await r.json())["error"]
    # Whoever guesses from this address (a proxy everyone shares) never locks out a right token.
    r = await browser.post(gateway.url + API + "/session", json={"token": ALICE_TOKEN})
    assert r.status == 200


async def test_malformed_sign_in_bodies_get_clear_errors(gateway: Gateway, http: aiohttp.ClientSession) -> None:
    json_type = {"Content-Type": "application/json"}
    for body in (b"not json", b"[1]", b'{"token": 5}', b"{}"):
        r = await http.post(gateway.url + API + "/session", data=body, headers=json_type)
        assert r.status == 400, body
        assert (await r.json())["error"]


async def test_another_site_cannot_sign_a_visitor_in(gateway: Gateway, browser: aiohttp.ClientSession) -> None:
    """Login CSRF: a cross-site form can post text/plain that parses as JSON, never application/json."""
    body = f'{{"token": "{ALICE_TOKEN}"}}'.encode()
    r = await browser.post(gateway.url + API + "/session", data=body, headers={"Content-Type": "text/plain"})
    assert r.status == 403
    r = await browser.post(
        gateway.url + API + "/session", json={"token": ALICE_TOKEN}, headers={"Origin": "http://evil.example"}
    )
    assert r.status == 403
    assert not any(c.key == "clawgate_console" for c in browser.cookie_jar)


async def test_behind_a_tls_proxy_the_public_url_is_our_origin_and_the_cookie_is_secure(
    gateway_factory: Callable[..., Any], fake_llm: FakeLLM
) -> None:
    """A TLS proxy speaks plain HTTP to the gateway, and the browser says Origin: https://…"""
    public = "https://chat.example.com"
    proxied = {"Host": "chat.example.com", "Origin": public, "X-Forwarded-Proto": "https"}
    direct = await gateway_factory(fake_llm)
    async with aiohttp.ClientSession() as http:
        r = await http.post(direct.url + API + "/session", json={"token": ALICE_TOKEN}, headers=proxied)
        assert r.status == 421  # a host it does not know (X-Forwarded-Proto is not trusted either)
    gw = await gateway_factory(fake_llm, channels__web__public_url=public + "/")
    async with aiohttp.ClientSession() as http:
        r = await http.post(gw.url + API + "/session", json={"token": ALICE_TOKEN}, headers=proxied)
        assert r.status == 200
        cookie = r.cookies["clawgate_console"]
        assert cookie["secure"] and cookie["httponly"] and cookie["samesite"] == "Strict"
        csrf = (await r.json())["csrf"]
        headers = {**proxied, "X-CSRF-Token": csrf, "Cookie": f"clawgate_console={cookie.value}"}
        record = await personal(gw, "alice", "I take the night train")
        r = await http.post(gw.url + API + f"/memory/{record.id}/review", json={"action": "confirm"}, headers=headers)
        assert r.status == 200
        evil = {**headers, "Origin": "https://evil.example"}
        r = await http.post(gw.url + API + f"/memory/{record.id}/review", json={"action": "stale"}, headers=evil)
        assert r.status == 403


@pytest.mark.parametrize("bad", ["chat.example.com", "ftp://chat.example.com", "https://chat.example.com/app"])
def test_public_url_must_be_an_http_origin(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"channels": {"web": {"type": "web", "public_url": bad}}}, "config.yaml", env={})
    assert "channels.web.public_url" in str(caught.value)


# -- CSRF ------------------------------------------------------------------------------------------


async def test_cookie_requests_that_change_things_need_the_csrf_token_and_our_origin(
    gateway: Gateway, browser: aiohttp.ClientSession
) -> None:
    record = await personal(gateway, "alice", "I drink my coffee black")
    csrf = await sign_in(browser, gateway)
    url = gateway.url + API + f"/memory/{record.id}/review"
    r = await browser.post(url, json={"action": "confirm"})
    assert r.status == 403
    r = await browser.post(url, json={"action": "confirm"}, headers={"X-CSRF-Token": "x" * 43})
    assert r.status == 403
    r = await browser.post(
        url, json={"action": "confirm"}, headers={"X-CSRF-Token": csrf, "Origin": "http://evil.example"}
    )
    assert r.status == 403
    assert gateway.storage is not None
    unchanged = await gateway.storage.records.get(record.id)
    assert unchanged is not None and unchanged.review_status == ReviewStatus.PENDING

    r = await browser.post(url, json={"action": "confirm"}, headers={"X-CSRF-Token": csrf, "Origin": gateway.url})
    assert r.status == 200
    assert (await r.json())["record"]["grade"] == "instruction"


async def test_bearer_tokens_need_no_csrf(gateway: Gateway, http: aiohttp.ClientSession) -> None:
    record = await personal(gateway, "alice", "My bike is blue")
    r = await http.post(gateway.url + API + f"/memory/{record.id}/review", json={"action": "stale"}, headers=auth())
    assert r.status == 200
    assert (await r.json())["record"]["review_status"] == "stale"


# -- roles and privacy -----------------------------------------------------------------------------

ADMIN_ONLY = ["/status", "/users", "/pairing", "/jobs"]


@pytest.mark.parametrize("path", ADMIN_ONLY)
async def test_a_users_session_cookie_does_not_open_admin_endpoints(
    gateway: Gateway, browser: aiohttp.ClientSession, http: aiohttp.ClientSession, path: str
) -> None:
    await sign_in(browser, gateway, BOB_TOKEN)
    status, body = await get_json(browser, gateway.url + API + path)
    assert status == 403 and "administrators" in body["error"]
    status, _ = await get_json(http, gateway.url + API + path, ROOT_TOKEN)
    assert status == 200


async def test_nobody_opens_another_users_personal_memory(gateway: Gateway, http: aiohttp.ClientSession) -> None:
    record = await personal(gateway, "alice", "Alice's doctor appointment is on Friday")
    status, body = await get_json(http, gateway.url + API + f"/memory/{record.id}", ALICE_TOKEN)
    assert status == 200 and body["record"]["content"] == record.content
    for token in (BOB_TOKEN, ROOT_TOKEN):  # administrators neither
        r = await http.get(gateway.url + API + f"/memory/{record.id}", headers=auth(token))
        assert r.status == 403
        assert "doctor" not in await r.text()
        r = await http.post(
            gateway.url + API + f"/memory/{record.id}/review", json={"action": "reject"}, headers=auth(token)
        )
        assert r.status == 403
    # A record that does not exist answers the same way: ids cannot be probed.
    missing = await http.get(gateway.url + API + "/memory/mem-doesnotexist0000", headers=auth(BOB_TOKEN))
    theirs = await http.get(gateway.url + API + f"/memory/{record.id}", headers=auth(BOB_TOKEN))
    assert missing.status == theirs.status == 403
    # Nor does it show up in their lists and searches.
    for token in (BOB_TOKEN, ROOT_TOKEN):
        for query in ("", "?q=doctor+appointment"):
            status, found = await get_json(http, gateway.url + API + "/memory" + query, token)
            assert status == 200 and record.id not in {i["id"] for i in found["items"]}
    status, found = await get_json(http, gateway.url + API + "/memory?q=doctor+appointment", ALICE_TOKEN)
    assert status == 200, found
    assert record.id in {i["id"] for i in found["items"]}


async def test_unauthenticated_requests_get_401(gateway: Gateway, http: aiohttp.ClientSession) -> None:
    for path in ["/memory", "/review", "/traces", "/core/personal", "/status"]:
        r = await http.get(gateway.url + API + path)
        assert r.status == 401, path
        r = await http.get(gateway.url + API + path, headers=auth("not-a-token"))
        assert r.status == 401, path


# -- reviewing -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "arg", "expect"),
    [
        ("confirm", "", {"review_status": "confirmed", "grade": "instruction"}),
        ("edit", "Deploys happen on Wednesdays", {"content": "Deploys happen on Wednesdays", "grade": "instruction"}),
        ("evidence", "", {"grade": "evidence"}),
        ("scope", "project:ops", {"scope": "project:ops"}),
        ("stale", "", {"review_status": "stale"}),
        ("reject", "", {"review_status": "rejected"}),
        ("dispute", "", {"review_status": "disputed", "provenance": "disputed"}),
    ],
)
async def test_admin_review_actions(
    gateway: Gateway, http: aiohttp.ClientSession, action: str, arg: str, expect: dict[str, str]
) -> None:
    record = await pending_global(gateway)
    r = await http.post(
        gateway.url + API + f"/memory/{record.id}/review", json={"action": action, "arg": arg}, headers=auth(ROOT_TOKEN)
    )
    assert r.status == 200, await r.text()
    after = (await r.json())["record"]
    assert {k: after[k] for k in expect} == expect
    status, queue = await get_json(http, gateway.url + API + "/review", ROOT_TOKEN)
    assert status == 200
    assert (record.id in {i["id"] for i in queue["items"]}) == (action in ("evidence", "scope"))


async def test_merge_and_supersede(gateway: Gateway, http: aiohttp.ClientSession) -> None:
    a = await pending_global(gateway, "The build server is ci-1")
    b = await pending_global(gateway, "ci-1 runs Debian")
    url = gateway.url + API
    r = await http.post(url + f"/memory/{a.id}/review", json={"action": "merge", "arg": b.id}, headers=auth(ROOT_TOKEN))
    assert r.status == 200
    assert (await r.json())["record"]["content"] == "The build server is ci-1 ci-1 runs Debian"
    status, merged = await get_json(http, url + f"/memory/{b.id}", ROOT_TOKEN)
    assert merged["record"]["status"] == "superseded" and merged["record"]["superseded_by"] == a.id

    r = await http.post(
        url + f"/memory/{a.id}/review",
        json={"action": "supersede", "arg": "The build server is ci-2"},
        headers=auth(ROOT_TOKEN),
    )
    new = (await r.json())["record"]
    assert new["content"] == "The build server is ci-2" and new["id"] != a.id
    status, old = await get_json(http, url + f"/memory/{a.id}", ROOT_TOKEN)
    assert status == 200, old
    assert old["record"]["superseded_by"] == new["id"]


async def test_review_errors_are_clear(gateway: Gateway, http: aiohttp.ClientSession) -> None:
    record = await pending_global(gateway)
    url = gateway.url + API + f"/memory/{record.id}/review"
    cases = [
        ({"action": "explode"}, 400, "action must be one of"),
        ({"action": "edit"}, 400, "edit needs a text"),
        ({"action": "scope", "arg": "nonsense"}, 403, ""),
        ({"action": 3}, 400, "action must be a string"),
    ]
    for body, status, words in cases:
        r = await http.post(url, json=body, headers=auth(ROOT_TOKEN))
        assert r.status == status, body
        assert words in (await r.json())["error"]
    # A user may not review global memory.
    r = await http.post(url, json={"action": "confirm"}, headers=auth(ALICE_TOKEN))
    assert r.status == 403


async def test_an_edit_shows_its_diff_and_undo_by_revision_restores_it(
    gateway: Gateway, http: aiohttp.ClientSession
) -> None:
    record = await personal(gateway, "alice", "I like tea")
    url = gateway.url + API
    await http.post(
        url + f"/memory/{record.id}/review", json={"action": "edit", "arg": "I like green tea"}, headers=auth()
    )
    status, detail = await get_json(http, url + f"/memory/{record.id}", ALICE_TOKEN)
    assert status == 200, detail
    newest = detail["revisions"][0]
    assert newest["action"] == "edit" and newest["undoable"] is True
    assert {"op": "insert", "text": "green "} in newest["content_diff"]
    assert {"field": "content", "before": "I like tea", "after": "I like green tea"} in newest["changes"]
    assert detail["revisions"][1]["undoable"] is False  # only the newest change can be undone

    # Bob cannot undo Alice's revision, and an older revision cannot be undone.
    r = await http.post(url + f"/revisions/{newest['id']}/undo", headers=auth(BOB_TOKEN))
    assert r.status == 403
    r = await http.post(url + f"/revisions/{detail['revisions'][1]['id']}/undo", headers=auth())
    assert r.status == 409

    r = await http.post(url + f"/revisions/{newest['id']}/undo", headers=auth())
    assert r.status == 200, await r.text()
    assert (await r.json())["records"][0]["content"] == "I like tea"
    assert gateway.storage is not None
    now = await gateway.storage.records.get(record.id)
    assert now is not None and now.content == "I like tea"


async def test_bad_path_values_are_client_errors(gateway: Gateway, http: aiohttp.ClientSession) -> None:
    url = gateway.url + API
    for path in ["/revisions/abc/undo", "/revisions/0/undo", "/jobs/x/retry", "/jobs/99999999999999999999999/retry"]:
        r = await http.post(url + path, headers=auth(ROOT_TOKEN))
        assert r.status == 400, path
    for query in ["?limit=abc", "?limit=100000", "?memory_class=nope", "?scope=nope", "?status=gone", "?offset=-1"]:
        r = await http.get(url + "/memory" + query, headers=auth(ROOT_TOKEN))
        assert r.status == 400, query
        assert (await r.json())["error"]


# -- browsing --------------------------------------------------------------------------------------


async def test_memory_browser_filters(gateway: Gateway, http: aiohttp.ClientSession) -> None:
    pending = await pending_global(gateway, "Release notes go to the wiki")
    mine = await personal(gateway, "alice", "My standup is at nine")
    url = gateway.url + API + "/memory"

    async def ids(query: str, token: str = ALICE_TOKEN) -> set[str]:
        status, body = await get_json(http, url + query, token)
        assert status == 200, body
        return {i["id"] for i in body["items"]}

    assert await ids("") == {pending.id, mine.id}
    assert await ids("?scope=global") == {pending.id}
    assert await ids("?scope=personal") == {mine.id}
    assert await ids("?memory_class=evidence") == {pending.id}
    assert await ids("?provenance=user_confirmed") == {mine.id}
    assert await ids("?review_status=pending") == {pending.id, mine.id}
    assert await ids("?expiring=1") == set()  # evidence lives 30 days: not within the week
    assert await ids("?q=standup") == {mine.id}
    assert await ids("?q=standup&scope=global") == set()
    r = await http.get(url + "?scope=channel", headers=auth())
    assert r.status == 403  # conversations' memory is for administrators
    assert await ids("?scope=channel", ROOT_TOKEN) == set()
    assert await ids("", ROOT_TOKEN) == {pending.id}

    # Project memory is shared with everyone; an exact scope narrows to it.
    assert gateway.storage is not None
    project = await gateway.storage.records.create(
        "Atlas ships in March",
        memory_class=MemoryClass.DURABLE_FACT,
        provenance=Provenance.USER_CONFIRMED,
        use_policy=EVIDENCE_ONLY,
        scope=Scope.parse("project:atlas"),
        author="root",
        review_status=ReviewStatus.NONE,
    )
    assert await ids("") == {pending.id, mine.id, project.id}
    assert await ids("?scope=project:atlas") == {project.id}
    assert await ids("?scope=project:other") == set()
    assert await ids("?scope=personal:alice") == {mine.id}
    assert await ids("?q=atlas+ships&scope=project:atlas") == {project.id}
    r = await http.get(url + "?scope=personal:alice", headers=auth(BOB_TOKEN))
    assert r.status == 403  # not even how many there are


# -- Memory.md -------------------------------------------------------------------------------------


async def test_memory_md_editing_with_conflicts_secrets_and_roles(
    gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    url = gateway.url + API + "/core"
    status, core = await get_json(http, url + "/personal", ALICE_TOKEN)
    assert status == 200 and core["text"] == "" and core["editable"] is True and core["max_chars"] == 20000

    r = await http.put(url + "/personal", json={"text": "Call me Ali.", "etag": core["etag"]}, headers=auth())
    assert r.status == 200
    saved = await r.json()
    assert saved["text"] == "Call me Ali.\n" and saved["injected_chars"] == len("Call me Ali.")
    # Someone saving over a version they did not see gets a conflict, not a silent overwrite.
    r = await http.put(url + "/personal", json={"text": "Other", "etag": core["etag"]}, headers=auth())
    assert r.status == 409
    r = await http.put(
        url + "/personal",
        json={"text": "key sk-live-abcdefghijklmnop0123456789", "etag": saved["etag"]},
        headers=auth(),
    )
    assert r.status == 400 and "secret" in (await r.json())["error"]
    assert "sk-live" not in await r.text()

    status, glob = await get_json(http, url + "/global", ALICE_TOKEN)
    assert status == 200, glob
    assert glob["editable"] is False
    r = await http.put(url + "/global", json={"text": "x", "etag": glob["etag"]}, headers=auth())
    assert r.status == 403
    r = await http.put(
        url + "/global", json={"text": "Answer in English.", "etag": glob["etag"]}, headers=auth(ROOT_TOKEN)
    )
    assert r.status == 200
    r = await http.get(url + "/elsewhere", headers=auth())
    assert r.status == 400

    # The very next turn carries both files.
    fake_llm.script(Reply("ok"))
    await http.post(gateway.url + API + "/messages", json={"text": "hello"}, headers=auth())
    system = fake_llm.requests[-1]["messages"][0]["content"]
    assert "Call me Ali." in system and "Answer in English." in system


async def test_memory_md_reports_what_a_prompt_carries(
    gateway_factory: Any, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    gw = await gateway_factory(fake_llm, memory__bootstrap_max_chars=100)
    status, core = await get_json(http, gw.url + API + "/core/personal", ALICE_TOKEN)
    assert status == 200, core
    r = await http.put(gw.url + API + "/core/personal", json={"text": "a" * 150, "etag": core["etag"]}, headers=auth())
    body = await r.json()
    assert body["chars"] == 151 and body["truncated"] is True and body["injected_chars"] <= 100


# -- administration --------------------------------------------------------------------------------


async def test_status_users_pairing_and_jobs(gateway: Gateway, http: aiohttp.ClientSession) -> None:
    assert gateway.storage is not None
    url = gateway.url + API
    status, body = await get_json(http, url + "/status", ROOT_TOKEN)
    assert status == 200, body
    assert body["channels"]["web"]["ok"] is True
    assert body["models"][0]["model"] == "openai/fake-model"
    assert set(body["jobs"]) >= {"pending", "running", "done", "dead"}
    assert "review_backlog" in body and "last_consolidation" in body

    status, users = await get_json(http, url + "/users", ROOT_TOKEN)
    assert status == 200, users
    alice = next(u for u in users["items"] if u["id"] == "alice")
    assert "telegram:1" in alice["identities"] and alice["roles"] == ["user"]

    code = await gateway.storage.pairing.request("telegram:77", "telegram", "Carol")
    status, pairing = await get_json(http, url + "/pairing", ROOT_TOKEN)
    assert status == 200, pairing
    assert [p["identity"] for p in pairing["items"]] == ["telegram:77"]
    r = await http.post(url + f"/pairing/{code}/approve", headers=auth(ROOT_TOKEN))
    assert r.status == 200
    assert await gateway.storage.pairing.is_approved("telegram:77")
    r = await http.post(url + "/pairing/NOSUCHCODE/approve", headers=auth(ROOT_TOKEN))
    assert r.status == 404

    job_id = await gateway.storage.jobs.enqueue("console-test", "k", max_attempts=1)
    job = await gateway.storage.jobs.claim("test", timedelta(minutes=1), ["console-test"])
    assert job is not None and job.id == job_id
    await gateway.storage.jobs.failed(job, "it broke", permanent=True)
    status, jobs = await get_json(http, url + "/jobs?status=dead", ROOT_TOKEN)
    assert status == 200, jobs
    assert [(j["id"], j["last_error"]) for j in jobs["items"]] == [(job_id, "it broke")]
    r = await http.post(url + f"/jobs/{job_id}/retry", headers=auth(ROOT_TOKEN))
    assert r.status == 200
    r = await http.post(url + f"/jobs/{job_id}/retry", headers=auth(ROOT_TOKEN))
    assert r.status == 409
    r = await http.post(url + "/jobs/424242/retry", headers=auth(ROOT_TOKEN))
    assert r.status == 404
    r = await http.get(url + "/jobs?status=sleeping", headers=auth(ROOT_TOKEN))
    assert r.status == 400


async def test_traces_are_the_viewers_own(gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession) -> None:
    await personal(gateway, "alice", "Alice plays the cello")
    fake_llm.script(Reply("ok"))
    await http.post(
        gateway.url + API + "/messages", json={"text": "what instrument do I play, the cello?"}, headers=auth()
    )
    assert gateway.traces is not None
    await gateway.traces.settle()
    status, mine = await get_json(http, gateway.url + API + "/traces", ALICE_TOKEN)
    assert status == 200 and mine["items"] and mine["items"][0]["session"] == "web:dm:alice"
    status, session = await get_json(http, gateway.url + API + "/traces?session=web:dm:alice", ALICE_TOKEN)
    assert status == 200, session
    assert [t["id"] for t in session["items"]] == [t["id"] for t in mine["items"]]
    for token in (BOB_TOKEN, ROOT_TOKEN):
        status, theirs = await get_json(http, gateway.url + API + "/traces?session=web:dm:alice", token)
        assert status == 200 and theirs["items"] == []


async def test_the_review_queue_pages_and_counts(gateway: Gateway, http: aiohttp.ClientSession) -> None:
    made = [await pending_global(gateway, f"Shared note number {i}") for i in range(3)]
    mine = await personal(gateway, "alice", "My own pending note")
    url = gateway.url + API + "/review"
    status, first = await get_json(http, url + "?limit=2", ROOT_TOKEN)
    assert status == 200 and first["total"] == 3 and len(first["items"]) == 2
    status, rest = await get_json(http, url + "?limit=2&offset=2", ROOT_TOKEN)
    assert status == 200 and len(rest["items"]) == 1
    assert {i["id"] for i in first["items"] + rest["items"]} == {r.id for r in made}  # never alice's own
    status, hers = await get_json(http, url, ALICE_TOKEN)
    assert status == 200 and hers["total"] == 1 and [i["id"] for i in hers["items"]] == [mine.id]
