"""The console's HTML pages against a running gateway, driven like a browser without JavaScript:
the sign-in form, every page for an administrator and a user, the CSRF and Origin rules of forms,
where a form may send the browser back to, fixed notices, and escaping of memory content."""

from __future__ import annotations

import html
import re
import time
from collections.abc import AsyncIterator
from datetime import timedelta

import aiohttp
import pytest
from yarl import URL

from gateway.app import Gateway
from gateway.web.console.pages import console_path, with_notice
from memory.records.model import MemoryRecord, Provenance, ReviewStatus
from tests.conftest import ALICE_TOKEN, BOB_TOKEN, ROOT_TOKEN
from tests.memories import make_memory

USER_PAGES = ["/console", "/console/review", "/console/memory", "/console/traces", "/console/core"]
ADMIN_PAGES = ["/console/users", "/console/jobs"]


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    """Keeps cookies like a browser (aiohttp ignores cookies of IP hosts unless told otherwise)."""
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
        yield session


async def sign_in(client: aiohttp.ClientSession, gw: Gateway, token: str) -> str:
    """Sign in through the login form; the session's CSRF token."""
    r = await client.post(gw.url + "/console/login", data={"token": token, "next": "/console"}, allow_redirects=False)
    assert r.status == 303, await r.text()
    r = await client.get(gw.url + "/api/v1/session")
    assert r.status == 200
    return str((await r.json())["csrf"])


async def page(client: aiohttp.ClientSession, gw: Gateway, path: str) -> tuple[int, str]:
    r = await client.get(gw.url + path, allow_redirects=False)
    return r.status, await r.text()


async def post_form(
    client: aiohttp.ClientSession, gw: Gateway, path: str, data: dict[str, str], origin: str | None = None
) -> aiohttp.ClientResponse:
    headers = {"Origin": origin if origin is not None else gw.url}
    return await client.post(gw.url + path, data=data, headers=headers, allow_redirects=False)


async def record(
    gw: Gateway, text: str, scope: str = "global", *, pending: bool = True, provenance: Provenance = Provenance.INFERRED
) -> MemoryRecord:
    return await make_memory(gw.storage, text, scope, pending=pending, provenance=provenance)


def text_of(page_html: str) -> str:
    """What a person reads: the page without tags, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", " ", page_html))


# -- the pure helpers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("/console", "/console"),
        ("/console/review", "/console/review"),
        ("/console/memory?q=tea&scope=global", "/console/memory?q=tea&scope=global"),
        ("", "/console"),
        ("https://evil.example/console", "/console"),
        ("//evil.example/console", "/console"),
        ("/consoleevil", "/console"),
        ("/console/\\evil.example", "/console"),
        ("/console/x\r\nSet-Cookie: a=b", "/console"),
        ("/api/v1/status", "/console"),
        ("javascript:alert(1)", "/console"),
        ("/console/" + "a" * 3000, "/console"),
    ],
)
def test_console_path_keeps_only_console_paths(value: str, expected: str) -> None:
    assert console_path(value) == expected


def test_with_notice_replaces_a_notice_the_path_had() -> None:
    assert with_notice("/console/review", "confirm") == "/console/review?done=confirm"
    assert with_notice("/console/jobs?status=dead&done=x", "retried") == "/console/jobs?status=dead&done=retried"


# -- signing in ------------------------------------------------------------------------------------


async def test_sign_in_form(gateway: Gateway, client: aiohttp.ClientSession) -> None:
    r = await client.get(gateway.url + "/console/memory?q=tea", allow_redirects=False)
    assert r.status == 303
    location = URL(r.headers["Location"])
    assert location.path == "/console/login" and location.query["next"] == "/console/memory?q=tea"

    status, body = await page(client, gateway, "/console/login?next=%2Fconsole%2Fmemory%3Fq%3Dtea")
    assert status == 200
    assert '<label for="token">' in body and 'value="/console/memory?q=tea"' in body

    r = await client.post(gateway.url + "/console/login", data={"token": "wrong-token-0000000000", "next": "/console"})
    assert r.status == 401
    assert "That token is not valid here" in await r.text()
    assert not any(c.key == "clawgate_console" for c in client.cookie_jar)

    data = {"token": ALICE_TOKEN, "next": "/console/memory?q=tea"}
    r = await client.post(gateway.url + "/console/login", data=data, allow_redirects=False)
    assert r.status == 303
    assert r.headers["Location"] == "/console/memory?q=tea"
    cookie = r.cookies["clawgate_console"]
    assert cookie["httponly"] and cookie["samesite"] == "Strict" and cookie["path"] == "/"

    status, body = await page(client, gateway, "/console")
    assert status == 200
    assert "<h1>Overview</h1>" in body and "alice" in body
    r = await client.get(gateway.url + "/console/login?next=/console/traces", allow_redirects=False)
    assert r.status == 303 and r.headers["Location"] == "/console/traces"  # signed in already
    assert "default-src 'self'" in (await client.get(gateway.url + "/console")).headers["Content-Security-Policy"]


@pytest.mark.parametrize("target", ["https://evil.example/", "//evil.example/console", "/api/v1/status"])
async def test_sign_in_never_sends_the_browser_elsewhere(
    gateway: Gateway, client: aiohttp.ClientSession, target: str
) -> None:
    r = await client.post(
        gateway.url + "/console/login", data={"token": ALICE_TOKEN, "next": target}, allow_redirects=False
    )
    assert r.status == 303 and r.headers["Location"] == "/console"


async def test_sign_in_from_a_foreign_page_is_refused(gateway: Gateway, client: aiohttp.ClientSession) -> None:
    r = await post_form(client, gateway, "/console/login", {"token": ALICE_TOKEN}, origin="https://evil.example")
    assert r.status == 403
    assert not any(c.key == "clawgate_console" for c in client.cookie_jar)


async def test_sign_out(gateway: Gateway, client: aiohttp.ClientSession) -> None:
    csrf = await sign_in(client, gateway, ALICE_TOKEN)
    r = await post_form(client, gateway, "/console/logout", {"csrf": csrf})
    assert r.status == 303 and r.headers["Location"] == "/console/login"
    status, _ = await page(client, gateway, "/console")
    assert status == 303


# -- pages and roles -------------------------------------------------------------------------------


async def test_every_page_renders_for_an_administrator(gateway: Gateway, client: aiohttp.ClientSession) -> None:
    shared = await record(gateway, "The wiki lives at wiki.example.internal")
    assert gateway.storage is not None
    await gateway.storage.pairing.request("telegram:77", "telegram", "Carol")
    await sign_in(client, gateway, ROOT_TOKEN)
    for path in [*USER_PAGES, *ADMIN_PAGES, f"/console/memory/{shared.id}", "/console/core?which=global"]:
        status, body = await page(client, gateway, path)
        assert status == 200, (path, body)
        assert 'href="/console/users"' in body and 'href="/console/jobs"' in body
    status, body = await page(client, gateway, "/console")
    assert "Gateway health" in body and '<th scope="row">web</th>' in body and "openai/fake-model" in body
    status, body = await page(client, gateway, "/console/users")
    assert "telegram:77" in body and "Carol" in body and "Approve" in body
    assert '<th scope="row">alice</th>' in body and "telegram:1" in body
    status, body = await page(client, gateway, "/console/review")
    assert "wiki.example.internal" in body and 'value="confirm"' in body
    for action in ("edit", "scope", "merge", "supersede"):
        assert f'name="action" value="{action}"' in body
    status, body = await page(client, gateway, "/console/memory?q=wiki&status=any")
    assert status == 200 and "wiki.example.internal" in body and "Score" in body


async def test_a_user_sees_their_pages_and_not_the_administrators(
    gateway: Gateway, client: aiohttp.ClientSession
) -> None:
    mine = await record(gateway, "I prefer green tea", "personal:alice")
    await sign_in(client, gateway, ALICE_TOKEN)
    for path in [*USER_PAGES, f"/console/memory/{mine.id}", "/console/core?which=global"]:
        status, body = await page(client, gateway, path)
        assert status == 200, (path, body)
        assert 'href="/console/users"' not in body and 'href="/console/jobs"' not in body
    status, body = await page(client, gateway, "/console")
    assert "Gateway health" not in body
    assert "1</strong> memory waits for your review" in body
    status, body = await page(client, gateway, "/console/core?which=global")
    assert "readonly" in body and 'action="/console/core"' not in body
    for path in ADMIN_PAGES:
        status, body = await page(client, gateway, path)
        assert status == 403, path
        assert "only administrators" in body
    status, body = await page(client, gateway, "/console/no-such-page")
    assert status == 404


async def test_the_current_page_is_marked_in_the_navigation(gateway: Gateway, client: aiohttp.ClientSession) -> None:
    await sign_in(client, gateway, ALICE_TOKEN)
    _, body = await page(client, gateway, "/console/traces")
    assert re.findall(r'<a href="([^"]+)" aria-current="page">', body) == ["/console/traces"]


async def test_another_persons_memory_is_refused_without_its_content(
    gateway: Gateway, client: aiohttp.ClientSession
) -> None:
    secret = await record(gateway, "Alice's doctor is Dr Quill", "personal:alice")
    await sign_in(client, gateway, BOB_TOKEN)
    status, body = await page(client, gateway, f"/console/memory/{secret.id}")
    assert status == 403
    assert "Quill" not in body and "doctor" not in body
    status, missing = await page(client, gateway, "/console/memory/mem-doesnotexist")
    assert status == 403
    # The same answer as for someone else's memory: the page tells nothing about other people's ids.
    assert missing.replace("mem-doesnotexist", "ID") == body.replace(secret.id, "ID")


async def test_bad_filters_give_an_error_page(gateway: Gateway, client: aiohttp.ClientSession) -> None:
    await sign_in(client, gateway, ROOT_TOKEN)
    status, body = await page(client, gateway, "/console/memory?memory_class=nonsense")
    assert status == 400 and "memory_class must be one of" in body
    status, body = await page(client, gateway, "/console/jobs?status=nonsense")
    assert status == 400
    status, body = await page(client, gateway, "/console/core?which=../../etc")
    assert status == 400


# -- forms -----------------------------------------------------------------------------------------


async def test_a_review_form_needs_the_csrf_token_and_our_origin(
    gateway: Gateway, client: aiohttp.ClientSession
) -> None:
    assert gateway.storage is not None
    pending = await record(gateway, "Standups start at 9:30")
    csrf = await sign_in(client, gateway, ROOT_TOKEN)
    url = f"/console/memory/{pending.id}/review"
    form = {"action": "confirm", "back": "/console/review"}

    r = await post_form(client, gateway, url, form)
    assert r.status == 403 and "did not come from this console" in await r.text()
    r = await post_form(client, gateway, url, {**form, "csrf": "not-the-token"})
    assert r.status == 403
    r = await post_form(client, gateway, url, {**form, "csrf": csrf}, origin="https://evil.example")
    assert r.status == 403
    stored = await gateway.storage.records.get(pending.id)
    assert stored is not None and stored.review_status == ReviewStatus.PENDING

    r = await post_form(client, gateway, url, {**form, "csrf": csrf})
    assert r.status == 303
    assert r.headers["Location"] == "/console/review?done=confirm"
    stored = await gateway.storage.records.get(pending.id)
    assert stored is not None and stored.review_status == ReviewStatus.CONFIRMED
    status, body = await page(client, gateway, r.headers["Location"])
    assert status == 200 and "Confirmed: this memory may now be followed" in body


@pytest.mark.parametrize(
    ("back", "expected"),
    [
        ("https://evil.example/steal", "/console/memory/{id}?done=stale"),
        ("//evil.example", "/console/memory/{id}?done=stale"),
        ("/console/review?done=pwned", "/console/review?done=stale"),
        ("/console/memory?q=x", "/console/memory?q=x&done=stale"),
    ],
)
async def test_a_form_returns_only_to_console_pages(
    gateway: Gateway, client: aiohttp.ClientSession, back: str, expected: str
) -> None:
    pending = await record(gateway, "The VPN needs a token")
    csrf = await sign_in(client, gateway, ROOT_TOKEN)
    form = {"action": "stale", "back": back, "csrf": csrf}
    r = await post_form(client, gateway, f"/console/memory/{pending.id}/review", form)
    assert r.status == 303
    assert r.headers["Location"] == expected.format(id=pending.id)


async def test_notices_are_fixed_texts_never_the_query(gateway: Gateway, client: aiohttp.ClientSession) -> None:
    await sign_in(client, gateway, ALICE_TOKEN)
    _, body = await page(client, gateway, "/console/review?done=%3Cscript%3Ealert(1)%3C/script%3E")
    assert "alert(1)" not in body and 'class="notice"' not in body


async def test_a_refused_action_shows_why(gateway: Gateway, client: aiohttp.ClientSession) -> None:
    mine = await record(gateway, "My locker is 42", "personal:alice")
    csrf = await sign_in(client, gateway, ALICE_TOKEN)
    form = {"action": "scope", "arg": "global", "csrf": csrf, "back": f"/console/memory/{mine.id}"}
    r = await post_form(client, gateway, f"/console/memory/{mine.id}/review", form)
    assert r.status == 403
    body = await r.text()
    assert "scope may only narrow" in body and f'href="/console/memory/{mine.id}"' in body
    r = await post_form(client, gateway, f"/console/memory/{mine.id}/review", {**form, "action": "fly"})
    assert r.status == 400


async def test_edit_then_undo_from_the_record_page(gateway: Gateway, client: aiohttp.ClientSession) -> None:
    assert gateway.storage is not None
    mine = await record(
        gateway, "My bike is blue", "personal:alice", pending=False, provenance=Provenance.USER_CONFIRMED
    )
    csrf = await sign_in(client, gateway, ALICE_TOKEN)
    path = f"/console/memory/{mine.id}"
    form = {"action": "edit", "arg": "My bike is red\r\nand fast", "csrf": csrf, "back": path}
    r = await post_form(client, gateway, path + "/review", form)
    assert r.status == 303 and r.headers["Location"] == path + "?done=edit"
    stored = await gateway.storage.records.get(mine.id)
    assert stored is not None and stored.content == "My bike is red\nand fast"

    _, body = await page(client, gateway, path + "?done=edit")
    assert re.search(r"<del>.*blue.*</del>", body, re.S) and re.search(r"<ins>.*red\nand fast.*</ins>", body, re.S)
    assert "[removed: </span>" in body and "[added: </span>" in body
    revision = re.search(r'action="/console/revisions/(\d+)/undo"', body)
    assert revision is not None

    r = await post_form(client, gateway, f"/console/revisions/{revision[1]}/undo", {"csrf": csrf, "back": path})
    assert r.status == 303 and r.headers["Location"] == path + "?done=undo"
    stored = await gateway.storage.records.get(mine.id)
    assert stored is not None and stored.content == "My bike is blue"
    _, body = await page(client, gateway, r.headers["Location"])
    assert 'id="record-content">My bike is blue</p>' in body and "Undone:" in body


async def test_memory_content_is_shown_as_text(gateway: Gateway, client: aiohttp.ClientSession) -> None:
    evil = '<script>alert("x")</script> & <b>bold</b> "quoted"'
    found = await record(gateway, evil)
    await sign_in(client, gateway, ROOT_TOKEN)
    for path in ["/console/review", "/console/memory", f"/console/memory/{found.id}", "/console"]:
        status, body = await page(client, gateway, path)
        assert status == 200, path
        assert "<script>alert" not in body and "<b>bold" not in body, path
        assert "&lt;script&gt;alert(" in body, path
        assert '<script>alert("x")</script>' in text_of(body), path


async def test_memory_md_editor_saves_and_keeps_text_on_a_conflict(
    gateway: Gateway, client: aiohttp.ClientSession
) -> None:
    csrf = await sign_in(client, gateway, ALICE_TOKEN)
    _, body = await page(client, gateway, "/console/core")
    etag = re.search(r'name="etag" value="([0-9a-f]+)"', body)
    assert etag is not None
    assert "0 characters; a prompt carries 0 of at most 20000" in body
    form = {"which": "personal", "text": "- I like tea\r\n- Call me Al", "etag": etag[1], "csrf": csrf}
    r = await post_form(client, gateway, "/console/core", form)
    assert r.status == 303 and r.headers["Location"] == "/console/core?which=personal&done=saved"
    _, body = await page(client, gateway, r.headers["Location"])
    assert "Memory.md saved." in body and "- I like tea\n- Call me Al" in body

    # Someone else saved meanwhile: the old etag no longer matches.
    r = await post_form(client, gateway, "/console/core", {**form, "text": "my <new> text"})
    assert r.status == 409
    body = await r.text()
    assert "changed since you opened it" in body
    assert "\nmy &lt;new&gt; text</textarea>" in body
    assert "What is saved now" in body and "- I like tea" in body

    r = await post_form(client, gateway, "/console/core", {**form, "which": "global"})
    assert r.status == 403


async def test_a_long_memory_md_fits_in_a_form(gateway: Gateway, client: aiohttp.ClientSession) -> None:
    """A form may be longer than a chat message (the app's body limit), up to the console's own cap."""
    csrf = await sign_in(client, gateway, ALICE_TOKEN)
    _, body = await page(client, gateway, "/console/core")
    etag = re.search(r'name="etag" value="([0-9a-f]+)"', body)
    assert etag is not None
    text = "- une note accentuée, é è à\n" * 6_000  # 168,000 characters, about 400 KB percent-encoded
    form = {"which": "personal", "text": text, "etag": etag[1], "csrf": csrf}
    r = await post_form(client, gateway, "/console/core", form)
    assert r.status == 303, await r.text()
    _, body = await page(client, gateway, "/console/core")
    assert f"{len(text)} characters; a prompt carries 20000 of at most 20000" in body
    assert "Too long:" in body

    r = await post_form(client, gateway, "/console/core", {**form, "text": "x" * (5 * 1024 * 1024)})
    assert r.status == 413 and "body is larger than 4,096 KiB" in await r.text()
    # aiohttp goes on reading a refused body for up to 10 s; the gateway's stop does not wait that out.
    started = time.monotonic()
    await gateway.stop()
    assert time.monotonic() - started < 5


async def test_administrators_approve_pairing_and_retry_jobs(gateway: Gateway, client: aiohttp.ClientSession) -> None:
    storage = gateway.storage
    assert storage is not None
    code = await storage.pairing.request("telegram:88", "telegram", "Dana")
    await storage.jobs.enqueue("console_probe", "probe-1")
    job = await storage.jobs.claim("test", timedelta(minutes=1), ["console_probe"])
    assert job is not None
    await storage.jobs.failed(job, "boom", permanent=True)
    csrf = await sign_in(client, gateway, ROOT_TOKEN)

    _, body = await page(client, gateway, "/console/jobs?status=dead")
    assert "console_probe" in body and "boom" in body and f'action="/console/jobs/{job.id}/retry"' in body
    form = {"csrf": csrf, "back": "/console/jobs?status=dead"}
    r = await post_form(client, gateway, f"/console/jobs/{job.id}/retry", form)
    assert r.status == 303 and r.headers["Location"] == "/console/jobs?status=dead&done=retried"
    again = await storage.jobs.get(job.id)
    assert again is not None and again.status == "pending"
    r = await post_form(client, gateway, f"/console/jobs/{job.id}/retry", form)
    assert r.status == 409

    r = await post_form(client, gateway, f"/console/pairing/{code}/approve", {"csrf": csrf, "back": "/console/users"})
    assert r.status == 303 and r.headers["Location"] == "/console/users?done=approved"
    assert await storage.pairing.pending() == []
    r = await post_form(client, gateway, "/console/pairing/NOSUCH/approve", {"csrf": csrf})
    assert r.status == 404


async def test_a_user_cannot_use_the_administrators_forms(gateway: Gateway, client: aiohttp.ClientSession) -> None:
    assert gateway.storage is not None
    code = await gateway.storage.pairing.request("telegram:89", "telegram", None)
    csrf = await sign_in(client, gateway, ALICE_TOKEN)
    r = await post_form(client, gateway, f"/console/pairing/{code}/approve", {"csrf": csrf})
    assert r.status == 403
    assert len(await gateway.storage.pairing.pending()) == 1
