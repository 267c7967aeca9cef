"""End to end in a real browser: headless Chromium (Debian's, driven by Playwright) opens the chat page of a
running gateway, chats with the fake model over the WebSocket, and sees the history again after a reload.

Playwright must never download its own browsers here: we always launch /usr/bin/chromium. Waits are
Playwright's auto-waiting expectations with explicit timeouts; the only poll waits for the turn commit."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.app import Gateway
from tests.fakes.llm import FakeLLM, Gate, Reply

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_MISSING = "chromium missing: make test installs it via scripts/install-chromium.sh"
CHROMIUM_ARGS = [
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    # Without these, Chromium tries to reach the internet on its own.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
REPO_ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = REPO_ROOT / "artifacts" / "screenshots" / "chat.png"
DOC_IMAGES = REPO_ROOT / "docs" / "images"
WAIT_MS = 15_000

USER_TEXT = "Hi there, browser test speaking"
REPLY_TEXT = "Hello from the fake model, streamed in pieces"
MARKDOWN_QUESTION = "How do I add up a list in Python?"
CODE = (
    "def total(numbers: list[int]) -> int:\n"
    '    """Add them up, the long way round, one by one, for a line wider than a phone."""\n'
    "    return sum(numbers)"
)
MARKDOWN_REPLY = (
    "There are **two ways**, both in `builtins`:\n\n"
    f"```python\n{CODE}\n```\n\n"
    "| way | speed |\n|---|---|\n| loop | slower |\n| `sum()` | faster |\n\n"
    "- `sum()` is clearer\n- a loop lets you *filter* as you go\n\n"
    "See [the docs](https://docs.python.org/3/library/functions.html#sum)."
)
# A reply trying to run script in the page: shown as text.
INJECTION = 'Look: <img src=x onerror="window.pwned=1"><script>window.pwned=1</script> [run](javascript:window.pwned=1)'

PARTIAL = "Counting: one, two, three"
# What a person sees of each message: who said it, its text (rendered), and how it is marked.
SHOWN = "els => els.map(e => [e.className, e.innerText])"


def _chromium_missing() -> bool:
    return not CHROMIUM.exists()


@contextlib.asynccontextmanager
async def _launch_chromium(*args: str) -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=[*CHROMIUM_ARGS, *args], timeout=WAIT_MS
        )
        try:
            yield browser
        finally:
            await browser.close()


def _user_texts(request: dict[str, Any]) -> list[str]:
    out = []
    for m in request.get("messages", []):
        if m.get("role") != "user":
            continue
        content = m.get("content")
        if isinstance(content, list):  # content parts
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        out.append(str(content))
    return out


@pytest.mark.timeout(120)
@pytest.mark.skipif(_chromium_missing() and not os.environ.get("CI"), reason=CHROMIUM_MISSING)
async def test_chat_in_browser_streams_reply_and_keeps_history(
    gateway: Gateway, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """One browser, a few pages: the desktop chat (streaming, Markdown, copy, conversations, Stop,
    history after reload, themes, the README screenshot), the same chat at 390 px, a refused token."""
    if _chromium_missing():  # only reached under CI: there a missing browser is a failure, not a skip
        pytest.fail(CHROMIUM_MISSING, pytrace=False)
    fake_llm.script(Reply(REPLY_TEXT, chunks=5))
    async with _launch_chromium() as browser:
        hash_ = await _chat(browser, gateway, fake_llm, tmp_path)
        await _narrow(browser, gateway, hash_)
        await _refused_token(browser, gateway)


async def readme_screenshot(page: Any, name: str, tmp_path: Path) -> Path:
    """A screenshot for the README: always to tmp_path, and to docs/images/<name>.png as well when
    CLAWGATE_UPDATE_SCREENSHOTS=1 (take them at 1280x800 in the light theme)."""
    path = tmp_path / f"{name}.png"
    await page.screenshot(path=str(path))
    assert path.stat().st_size > 0
    if os.environ.get("CLAWGATE_UPDATE_SCREENSHOTS") == "1":
        DOC_IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, DOC_IMAGES / f"{name}.png")
    return path


async def _committed(gateway: Gateway) -> None:
    """A reply reaches the page just before its turn is committed: wait for the commit."""
    assert gateway.storage is not None
    async with asyncio.timeout(WAIT_MS / 1000):
        while await gateway.storage.journal.unfinished():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


async def _new_page(browser: Any, gateway: Gateway, **context: Any) -> tuple[Any, Any, dict[str, list[Any]]]:
    """A page in a context of its own, with what it must never do recorded (errors, other servers)."""
    ctx = await browser.new_context(locale="en-US", color_scheme="light", **context)
    page = await ctx.new_page()
    ws_url = "ws" + gateway.url.removeprefix("http")
    seen: dict[str, list[Any]] = {"errors": [], "foreign": [], "frames": [], "sockets": []}

    def on_console(msg: Any) -> None:
        if msg.type == "error":
            seen["errors"].append(f"{msg.text} @ {msg.location.get('url', '')}")

    def on_request(req: Any) -> None:
        if not req.url.startswith((gateway.url + "/", ws_url + "/")):
            seen["foreign"].append(req.url)

    def on_websocket(ws: Any) -> None:
        seen["sockets"].append(ws)
        ws.on(
            "framereceived",
            lambda payload: seen["frames"].append(json.loads(payload)) if isinstance(payload, str) else None,
        )

    page.on("pageerror", lambda exc: seen["errors"].append(str(exc)))
    page.on("console", on_console)
    page.on("request", on_request)
    page.on("websocket", on_websocket)
    return ctx, page, seen


def _clean(seen: dict[str, list[Any]]) -> None:
    assert seen["errors"] == [], seen["errors"]
    assert seen["foreign"] == [], seen["foreign"]


async def _no_horizontal_scroll(page: Any) -> None:
    overflow = await page.evaluate("() => [document.scrollingElement.scrollWidth, window.innerWidth]")
    assert overflow[0] <= overflow[1], overflow


async def _chat(browser: Any, gateway: Gateway, fake_llm: FakeLLM, tmp_path: Path) -> str:
    """The desktop page, step by step; returns the URL hash of the conversation with Markdown in it."""
    from playwright.async_api import expect

    context, page, seen = await _new_page(browser, gateway, viewport={"width": 1280, "height": 800})
    await context.grant_permissions(["clipboard-read", "clipboard-write"], origin=gateway.url)
    page.set_default_timeout(WAIT_MS)
    frames = seen["frames"]
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    try:
        status = page.locator("#status")
        user_bubbles = page.locator(".msg.user .body")
        assistant_bubbles = page.locator(".msg.assistant .body")

        await page.goto(gateway.url, timeout=WAIT_MS)
        await expect(status).to_have_text("connected as local", timeout=WAIT_MS)
        await expect(page.get_by_role("link", name="Console")).to_have_attribute("href", "/console")

        # Type like a person: focus the textarea, type, press Enter.
        composer = page.locator("#input")
        await composer.click()
        await page.keyboard.type(USER_TEXT)
        await page.keyboard.press("Enter")

        await expect(assistant_bubbles).to_have_text([REPLY_TEXT], timeout=WAIT_MS)
        await expect(user_bubbles).to_have_text([USER_TEXT], timeout=WAIT_MS)
        await expect(composer).to_have_value("", timeout=WAIT_MS)
        await expect(status).to_have_text("connected as local", timeout=WAIT_MS)  # "thinking…" went away
        await expect(page.locator(".msg.notice")).to_have_count(0)
        await expect(page.locator("#stop")).to_be_hidden()

        assert len(fake_llm.requests) == 1, fake_llm.requests
        request = fake_llm.requests[0]
        assert request.get("stream") is True
        assert _user_texts(request)[-1] == USER_TEXT

        # The session is stored server-side: a reload shows both messages again, in order.
        await _committed(gateway)
        await page.reload(timeout=WAIT_MS)
        await expect(status).to_have_text("connected as local", timeout=WAIT_MS)
        await expect(page.locator(".msg .body")).to_have_text([USER_TEXT, REPLY_TEXT], timeout=WAIT_MS)
        await expect(page.locator(".msg.user .body")).to_have_text([USER_TEXT])
        await expect(page.locator(".msg.assistant .body")).to_have_text([REPLY_TEXT])
        assert len(fake_llm.requests) == 1, "a reload must not call the model"

        # The reply really streamed: a first partial frame, then edits of the same bubble, then the final
        # one. Checked only now, after the reload, so every frame event of the first page has arrived.
        replies = [f for f in frames if f.get("type") == "reply"]
        assert len(replies) >= 2, replies
        assert len({f["id"] for f in replies}) == 1, replies
        assert [f["final"] for f in replies] == [False] * (len(replies) - 1) + [True], replies
        assert all(REPLY_TEXT.startswith(f["text"]) for f in replies), replies
        assert len(replies[0]["text"]) < len(REPLY_TEXT) and replies[-1]["text"] == REPLY_TEXT, replies

        # -- a new conversation, with a Markdown answer; the list shows both ----------------------------
        await page.get_by_role("button", name="New conversation").click()
        await expect(page.locator(".msg")).to_have_count(0)
        assert re.fullmatch(r"#c=[A-Za-z0-9-]+", await page.evaluate("location.hash"))
        fake_llm.script(Reply(MARKDOWN_REPLY, chunks=4))
        await composer.fill(MARKDOWN_QUESTION)
        await page.keyboard.press("Enter")
        answer = assistant_bubbles.last
        await expect(answer.locator("pre code")).to_have_text(CODE, timeout=WAIT_MS)
        await expect(answer.locator("strong")).to_have_text("two ways")
        await expect(answer.locator("td").first).to_have_text("loop")
        await expect(answer.get_by_role("link", name="the docs")).to_have_attribute("target", "_blank")
        await expect(user_bubbles.last).to_have_text(MARKDOWN_QUESTION)
        copy = answer.get_by_role("button", name="Copy python code")
        await copy.click()
        await expect(copy).to_have_text("Copied")
        assert await page.evaluate("navigator.clipboard.readText()") == CODE + "\n"
        await expect(copy).to_have_text("Copy", timeout=WAIT_MS)
        listed = page.locator("#conversations a")
        await expect(listed).to_have_text([MARKDOWN_QUESTION, USER_TEXT], timeout=WAIT_MS)
        await expect(listed.first).to_have_attribute("aria-current", "page")
        await _committed(gateway)
        await readme_screenshot(page, "chat", tmp_path)
        markdown_hash = str(await page.evaluate("location.hash"))

        # -- Stop: the partial reply stays, marked stopped -------------------------------------------
        fake_llm.script(Gate(then=Reply("never shown"), before=PARTIAL))
        await composer.fill("Count slowly to a hundred")
        await page.keyboard.press("Enter")
        await expect(assistant_bubbles.last).to_have_text(PARTIAL, timeout=WAIT_MS)
        stop = page.get_by_role("button", name="Stop")
        await stop.click()
        await expect(page.locator(".msg.assistant.stopped .body")).to_have_text(PARTIAL + " (stopped)")
        await expect(stop).to_be_hidden()
        await _committed(gateway)

        # -- a reply with HTML in it stays text; a command and its answer; a reload shows exactly
        # what was shown ---------------------------------------------------------------------------
        fake_llm.script(Reply(INJECTION, chunks=2))
        await composer.fill("Show me some HTML")
        await page.keyboard.press("Enter")
        await expect(assistant_bubbles.last).to_contain_text("<script>window.pwned=1</script>", timeout=WAIT_MS)
        await expect(assistant_bubbles.last.locator("script, img, a")).to_have_count(0)
        assert await page.evaluate("() => window.pwned === undefined")
        await _committed(gateway)
        await composer.fill("/help")
        await page.keyboard.press("Enter")
        await expect(page.locator(".msg")).to_have_count(8, timeout=WAIT_MS)
        await _committed(gateway)
        shown = await page.locator(".msg").evaluate_all(SHOWN)
        await page.reload(timeout=WAIT_MS)
        await expect(status).to_have_text("connected as local", timeout=WAIT_MS)
        await expect(page.locator(".msg")).to_have_count(8)
        assert await page.locator(".msg").evaluate_all(SHOWN) == shown
        await expect(listed.first).to_have_attribute("aria-current", "page")

        # -- the other conversation from the list; then the theme, remembered -----------------------
        await listed.nth(1).click()
        await expect(page.locator(".msg .body")).to_have_text([USER_TEXT, REPLY_TEXT], timeout=WAIT_MS)
        await page.go_back()
        await expect(page.locator(".msg")).to_have_count(8, timeout=WAIT_MS)
        assert await page.evaluate("document.documentElement.dataset.theme || 'system'") == "system"
        await page.get_by_role("button", name="Switch to dark theme").click()
        await page.reload(timeout=WAIT_MS)
        assert await page.evaluate("document.documentElement.dataset.theme") == "dark"
        background = await page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(22, 24, 29)", background
        await page.get_by_role("button", name="Switch to light theme").click()
        assert await page.evaluate("localStorage.getItem('clawgate.theme')") == "light"

        await page.screenshot(path=str(SCREENSHOT), full_page=True)
        _clean(seen)
        return markdown_hash
    except BaseException:
        with contextlib.suppress(Exception):
            await page.screenshot(path=str(SCREENSHOT), full_page=True)
        raise
    finally:
        fake_llm.release()
        await context.close()


async def _narrow(browser: Any, gateway: Gateway, hash_: str) -> None:
    """At 390x844 (a phone): nothing scrolls sideways, the composer is in reach, the list slides in."""
    from playwright.async_api import expect

    context, page, seen = await _new_page(
        browser, gateway, viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True
    )
    page.set_default_timeout(WAIT_MS)
    try:
        await page.goto(gateway.url + "/" + hash_, timeout=WAIT_MS)
        await expect(page.locator(".msg.assistant pre code").first).to_have_text(CODE)
        await _no_horizontal_scroll(page)
        for control in ("#input", "#send", "#attach"):
            await expect(page.locator(control)).to_be_in_viewport()
        sidebar = page.locator("#sidebar")
        await expect(sidebar).to_be_hidden()
        await page.get_by_role("button", name="Conversations").click()
        await expect(sidebar).to_be_visible()
        await _no_horizontal_scroll(page)
        await page.locator("#conversations a").nth(1).click()
        await expect(sidebar).to_be_hidden()
        await expect(page.locator(".msg .body")).to_have_text([USER_TEXT, REPLY_TEXT], timeout=WAIT_MS)
        await _no_horizontal_scroll(page)
        await page.go_back()
        await expect(page.locator(".msg.assistant pre code").first).to_have_text(CODE)
        await page.screenshot(path=str(SCREENSHOT.with_name("chat-narrow.png")))
        _clean(seen)
    finally:
        await context.close()


async def _refused_token(browser: Any, gateway: Gateway) -> None:
    """A wrong token: one clear notice, no reconnecting until another token is saved (the same wrong
    one saved again: still one notice)."""
    from playwright.async_api import expect

    context, page, seen = await _new_page(browser, gateway, viewport={"width": 1000, "height": 700})
    await context.add_init_script("localStorage.setItem('clawgate.token', 'not-a-valid-token-123')")
    page.set_default_timeout(WAIT_MS)
    try:
        await page.goto(gateway.url, timeout=WAIT_MS)
        notices = page.locator(".msg.notice")
        await expect(notices).to_have_count(1)
        await expect(notices).to_contain_text("unauthorized")
        await expect(page.locator("#status")).to_contain_text("not connected")
        await expect(page.locator("#token")).to_be_visible()  # the token field is open to fix it
        await page.get_by_role("button", name="Save").click()
        await expect(page.locator("#status")).to_contain_text("not connected")
        async with asyncio.timeout(WAIT_MS / 1000):
            while len(seen["sockets"]) < 2:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        await expect(notices).to_have_count(1)
        # Longer than the first reconnect delay (at most 0.625 s): no socket opens on its own.
        await page.wait_for_timeout(1000)
        assert len(seen["sockets"]) == 2, seen["sockets"]
        await expect(notices).to_have_count(1)
        assert seen["foreign"] == [], seen["foreign"]
        assert seen["errors"] == [] or all("WebSocket" in e for e in seen["errors"]), seen["errors"]
    finally:
        await context.close()


@pytest.mark.skipif(_chromium_missing() and not os.environ.get("CI"), reason=CHROMIUM_MISSING)
async def test_a_dns_rebinding_page_cannot_reach_the_local_gateway(gateway: Gateway, fake_llm: FakeLLM) -> None:
    """The attack as a browser makes it: a name of the attacker's resolves to 127.0.0.1 (here by
    Chromium's resolver rules), so its page is same-origin with the gateway under that name."""
    if _chromium_missing():
        pytest.fail(CHROMIUM_MISSING, pytrace=False)
    port = gateway.url.rsplit(":", 1)[1]
    async with _launch_chromium("--host-resolver-rules=MAP rebind.example 127.0.0.1") as browser:
        page = await browser.new_page()
        response = await page.goto(f"http://rebind.example:{port}/", timeout=WAIT_MS)
        assert response is not None and response.status == 421
        assert "does not answer to the host" in await page.content()
        # Its script talks to the gateway as a page on that name would: every door answers 421.
        outcome = await page.evaluate(
            """async () => {
                const api = await fetch("/api/v1/messages?conversation=x");
                const ws = await new Promise((done) => {
                    const socket = new WebSocket(`ws://${location.host}/ws`);
                    socket.onopen = () => done("open");
                    socket.onerror = () => done("refused");
                });
                return { api: api.status, ws };
            }"""
        )
        assert outcome == {"api": 421, "ws": "refused"}
    assert fake_llm.requests == []
