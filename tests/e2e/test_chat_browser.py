"""End to end in a real browser: headless Chromium (Debian's, driven by Playwright) opens the chat page of a
running gateway, chats with the fake model over the WebSocket, and sees the history again after a reload.

Playwright must never download its own browsers here: we always launch /usr/bin/chromium. Waits are
Playwright's auto-waiting expectations with explicit timeouts; the only poll waits for the turn commit."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.app import Gateway
from tests.fakes.llm import FakeLLM, Reply

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
WAIT_MS = 15_000

USER_TEXT = "Hi there, browser test speaking"
REPLY_TEXT = "Hello from the fake model, streamed in pieces"


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


@pytest.mark.skipif(_chromium_missing() and not os.environ.get("CI"), reason=CHROMIUM_MISSING)
async def test_chat_in_browser_streams_reply_and_keeps_history(gateway: Gateway, fake_llm: FakeLLM) -> None:
    if _chromium_missing():  # only reached under CI: there a missing browser is a failure, not a skip
        pytest.fail(CHROMIUM_MISSING, pytrace=False)
    fake_llm.script(Reply(REPLY_TEXT, chunks=5))
    async with _launch_chromium() as browser:
        await _chat(browser, gateway, fake_llm)


async def _chat(browser: Any, gateway: Gateway, fake_llm: FakeLLM) -> None:
    from playwright.async_api import expect

    context = await browser.new_context(viewport={"width": 1000, "height": 700}, locale="en-US")
    page = await context.new_page()
    page_errors: list[str] = []
    console_errors: list[str] = []
    foreign_requests: list[str] = []
    frames: list[dict[str, Any]] = []  # what the page received on its WebSocket
    ws_url = "ws" + gateway.url.removeprefix("http")

    def on_console(msg: Any) -> None:
        if msg.type == "error":
            console_errors.append(f"{msg.text} @ {msg.location.get('url', '')}")

    def on_request(req: Any) -> None:
        if not req.url.startswith((gateway.url + "/", ws_url + "/")):
            foreign_requests.append(req.url)

    def on_websocket(ws: Any) -> None:
        ws.on("framereceived", lambda payload: frames.append(json.loads(payload)) if isinstance(payload, str) else None)

    page.on("pageerror", lambda exc: page_errors.append(str(exc)))
    page.on("console", on_console)
    page.on("request", on_request)
    page.on("websocket", on_websocket)
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    try:
        status = page.locator("#status")
        user_bubbles = page.locator(".msg.user .body")
        assistant_bubbles = page.locator(".msg.assistant .body")

        await page.goto(gateway.url, timeout=WAIT_MS)
        await expect(status).to_have_text("connected as local", timeout=WAIT_MS)

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

        assert len(fake_llm.requests) == 1, fake_llm.requests
        request = fake_llm.requests[0]
        assert request.get("stream") is True
        assert _user_texts(request)[-1] == USER_TEXT

        # The session is stored server-side: a reload shows both messages again, in order. The reply
        # reaches the page just before the turn is committed, so wait for the commit first.
        assert gateway.storage is not None
        async with asyncio.timeout(WAIT_MS / 1000):
            while await gateway.storage.journal.unfinished():  # noqa: ASYNC110
                await asyncio.sleep(0.01)
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

        await page.screenshot(path=str(SCREENSHOT), full_page=True)
        assert SCREENSHOT.stat().st_size > 0

        assert page_errors == [], page_errors
        assert console_errors == [], console_errors
        assert foreign_requests == [], foreign_requests
    except BaseException:
        with contextlib.suppress(Exception):
            await page.screenshot(path=str(SCREENSHOT), full_page=True)
        raise
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
