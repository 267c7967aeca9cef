"""The web console in a real browser (docs/console.md): headless Debian Chromium, driven by Playwright, against
a running gateway and the fake model.

One browser for the module, one test in clear steps (each person has their own browser context):
  a) an administrator signs in with the form, confirms a pending global memory in the review queue,
     and the next turn's prompt carries it as instruction-grade, which it did not before;
  b) a user edits their memory on its page, sees the word diff, undoes it, and sees the original;
  c) another user opening that memory by URL gets 403 and none of its content, and their session
     cookie opens no administrator page or endpoint;
  d) a screenshot of every page goes to artifacts/screenshots/console-<page>.png; no page logs an
     error or asks anything of another server.

Playwright never downloads a browser here: it launches /usr/bin/chromium (see test_chat_browser)."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.app import Gateway
from gateway.recall.prompt import FOLLOW, WEIGH
from memory.records.model import MemoryClass, Provenance, ReviewStatus
from tests.conftest import ALICE_TOKEN, BOB_TOKEN, ROOT_TOKEN, auth
from tests.e2e.test_chat_browser import (
    CHROMIUM_MISSING,
    REPO_ROOT,
    WAIT_MS,
    _chromium_missing,
    _launch_chromium,
    readme_screenshot,
)
from tests.fakes.llm import FakeLLM
from tests.memories import make_memory
from tests.prompts import memory_of

pytestmark = pytest.mark.browser

SCREENSHOTS = REPO_ROOT / "artifacts" / "screenshots"
GLOBAL_FACT = "The staging server is called falcon-seven"
QUESTION = "What is the staging server called?"
BIKE = "My bike is blue and old"
BIKE_EDITED = "My bike is red and old"


@dataclass
class Watched:
    """One person's browser tab, with what it must never do: log errors or reach another server."""

    page: Any
    errors: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)

    def clean(self) -> None:
        assert self.errors == [], self.errors
        assert self.foreign == [], self.foreign


@contextlib.asynccontextmanager
async def person(browser: Any, gw: Gateway, width: int = 1100) -> AsyncIterator[Watched]:
    context = await browser.new_context(viewport={"width": width, "height": 800}, locale="en-US")
    tab = Watched(await context.new_page())
    tab.page.set_default_timeout(WAIT_MS)

    def on_console(msg: Any) -> None:
        if msg.type in ("error", "warning"):
            tab.errors.append(f"{msg.type}: {msg.text} @ {msg.location.get('url', '')}")

    tab.page.on("console", on_console)
    tab.page.on("pageerror", lambda exc: tab.errors.append(str(exc)))
    tab.page.on("request", lambda req: None if req.url.startswith(gw.url + "/") else tab.foreign.append(req.url))
    try:
        yield tab
    finally:
        await context.close()


# Basic accessibility of a rendered page, checked in the browser (what a screen reader announces):
# a language, one h1 and no skipped heading level, a name for every control and link, alt text.
A11Y_PROBLEMS = """() => {
  const problems = [];
  if (!document.documentElement.lang) problems.push("html has no lang");
  const levels = [...document.querySelectorAll("h1,h2,h3,h4,h5,h6")].map(h => +h.tagName[1]);
  if (levels.filter(l => l === 1).length !== 1) problems.push("not exactly one h1");
  levels.forEach((l, i) => { if (i && l > levels[i - 1] + 1) problems.push("heading level skipped: h" + l); });
  const named = el => (el.labels && el.labels.length) || el.getAttribute("aria-label")
    || el.getAttribute("aria-labelledby") || (el.textContent || "").trim() || el.value;
  for (const el of document.querySelectorAll("input:not([type=hidden]),textarea,select,button,a[href]")) {
    if (!named(el)) problems.push("no accessible name: " + el.outerHTML.slice(0, 80));
  }
  for (const img of document.querySelectorAll("img:not([alt])")) problems.push("img without alt");
  return problems;
}"""


async def shot(tab: Watched, name: str) -> None:
    """A screenshot of the whole page as an artifact, after checking the page's basic accessibility."""
    assert await tab.page.evaluate(A11Y_PROBLEMS) == [], name
    path = SCREENSHOTS / f"console-{name}.png"
    await tab.page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 0


async def sign_in(tab: Watched, gw: Gateway, token: str, *, keyboard: bool = False) -> None:
    """Sign in with the login form, by mouse, or by keyboard alone (Tab to the field, Enter)."""
    from playwright.async_api import expect

    page = tab.page
    await page.goto(gw.url + "/console")  # not signed in: the console sends the browser to sign in
    await expect(page).to_have_url(re.compile(r"/console/login\?next="))
    if keyboard:
        for _ in range(6):
            await page.keyboard.press("Tab")
            if await page.evaluate("document.activeElement.id") == "token":
                break
        await page.keyboard.type(token)
        await page.keyboard.press("Enter")
    else:
        await page.get_by_label("Your access token").fill(token)
        await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("heading", level=1)).to_have_text("Overview")


def section(prompt: str, title: str) -> str:
    """The text of one memory section of a prompt ('' when it is not there)."""
    found = re.search(rf"^## {re.escape(title)}\n(.*?)(?=\n\n## |\Z)", prompt, re.S | re.M)
    return found[1] if found else ""


async def ask(http: aiohttp.ClientSession, gw: Gateway, fake: FakeLLM) -> str:
    """One chat turn as alice; the memory its prompt carried (the system prompt, then the recall
    before the newest message)."""
    r = await http.post(gw.url + "/api/v1/messages", json={"text": QUESTION}, headers=auth(ALICE_TOKEN))
    assert r.status == 200, await r.text()
    assert fake.requests[-1]["messages"][0]["role"] == "system"
    return memory_of(fake.requests[-1])


@pytest.mark.timeout(120)
@pytest.mark.skipif(_chromium_missing() and not os.environ.get("CI"), reason=CHROMIUM_MISSING)
async def test_console_in_a_browser(gateway: Gateway, fake_llm: FakeLLM, tmp_path: Path) -> None:
    if _chromium_missing():  # only reached under CI: there a missing browser is a failure, not a skip
        pytest.fail(CHROMIUM_MISSING, pytrace=False)
    storage = gateway.storage
    assert storage is not None
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    fact = await make_memory(storage, GLOBAL_FACT, author="agent:default")
    other = await make_memory(storage, "Release notes are written on Fridays", author="agent:default")
    bike = await make_memory(
        storage,
        BIKE,
        "personal:alice",
        pending=False,
        memory_class=MemoryClass.DURABLE_FACT,
        provenance=Provenance.USER_CONFIRMED,
        author="alice",
    )
    # Something for the administrators' pages to show: a pairing request and a dead job.
    await storage.pairing.request("telegram:4242", "telegram", "Carol")
    await storage.jobs.enqueue("console_probe", "probe")
    job = await storage.jobs.claim("browser-test", timedelta(minutes=1), ["console_probe"])
    assert job is not None
    await storage.jobs.failed(job, "the probe failed on purpose", permanent=True)

    async with aiohttp.ClientSession() as http, _launch_chromium() as browser:
        # -- a) confirming a pending memory makes it instruction-grade in the next prompt ---------
        before = await ask(http, gateway, fake_llm)
        assert "falcon-seven" not in section(before, FOLLOW), before
        assert "falcon-seven" in section(before, WEIGH), before  # recall found it: as evidence only

        async with person(browser, gateway) as admin:
            from playwright.async_api import expect

            page = admin.page
            await page.goto(gateway.url + "/console/login")
            await shot(admin, "login")
            await sign_in(admin, gateway, ROOT_TOKEN)
            await expect(page.get_by_role("heading", name="Gateway health")).to_be_visible()
            await shot(admin, "overview-admin")

            await page.get_by_role("navigation", name="Console").get_by_role("link", name="Review").click()
            await expect(page.get_by_role("link", name="Review")).to_have_attribute("aria-current", "page")
            fact_card = page.locator("article", has_text=GLOBAL_FACT)
            other_card = page.locator("article", has_text="Release notes are written on Fridays")
            await expect(fact_card).to_be_visible()
            await shot(admin, "review")

            # console.js asks before rejecting; Playwright dismisses the question, so nothing happens.
            await other_card.get_by_role("button", name="Reject").click()
            await expect(other_card).to_be_visible()
            kept = await storage.records.get(other.id)
            assert kept is not None and kept.review_status == ReviewStatus.PENDING

            await fact_card.get_by_role("button", name="Confirm").click()
            await expect(page.get_by_role("status")).to_contain_text("Confirmed")
            await expect(page.locator("article", has_text=GLOBAL_FACT)).to_have_count(0)
            confirmed = await storage.records.get(fact.id)
            assert confirmed is not None and confirmed.review_status == ReviewStatus.CONFIRMED

            after = await ask(http, gateway, fake_llm)
            assert "falcon-seven" in section(after, FOLLOW), after
            assert "falcon-seven" not in section(after, WEIGH), after

            await page.goto(gateway.url + "/console/memory?q=staging+server&status=any")
            await expect(page.get_by_role("link", name=GLOBAL_FACT)).to_be_visible()
            await shot(admin, "memory")
            await page.set_viewport_size({"width": 1280, "height": 800})  # the README's picture
            await readme_screenshot(page, "console", tmp_path)
            await page.set_viewport_size({"width": 1100, "height": 800})
            await page.goto(gateway.url + "/console/users")
            await expect(page.get_by_role("cell", name="telegram:4242")).to_be_visible()
            await shot(admin, "users")
            await page.goto(gateway.url + "/console/jobs")
            await expect(page.get_by_role("button", name=f"Retry job {job.id}")).to_be_visible()
            await shot(admin, "jobs")
            admin.clean()

        # -- b) a user edits their memory, sees the diff, undoes the edit -------------------------
        async with person(browser, gateway) as alice:
            page = alice.page
            await sign_in(alice, gateway, ALICE_TOKEN, keyboard=True)
            await expect(page.get_by_role("link", name="Users")).to_have_count(0)
            await shot(alice, "overview-user")

            await page.get_by_role("link", name="Memory", exact=True).click()
            await page.get_by_role("link", name=BIKE).click()
            await expect(page.locator("#record-content")).to_have_text(BIKE)
            await page.locator("summary", has_text="Edit").click()
            await page.get_by_label("New text of the memory").fill(BIKE_EDITED)
            await page.get_by_role("button", name="Save edit").click()
            await expect(page.get_by_role("status")).to_contain_text("Edited")
            await expect(page.locator("#record-content")).to_have_text(BIKE_EDITED)
            await expect(page.locator(".revision del").first).to_contain_text("blue")
            await expect(page.locator(".revision ins").first).to_contain_text("red")
            await shot(alice, "memory-detail")

            await page.get_by_role("button", name="Undo revision 2").click()
            await expect(page.get_by_role("status")).to_contain_text("Undone")
            await expect(page.locator("#record-content")).to_have_text(BIKE)
            stored = await storage.records.get(bike.id)
            assert stored is not None and stored.content == BIKE

            await page.get_by_role("link", name="Traces").click()
            await expect(page.get_by_role("heading", name=QUESTION).first).to_be_visible()
            await expect(page.get_by_role("link", name=fact.id).first).to_be_visible()
            await shot(alice, "traces")

            await page.get_by_role("link", name="Memory.md").click()
            editor = page.get_by_label("Your own Memory.md")
            notes = "- Alice prefers short answers\n- Alice is in Berlin"
            await editor.fill(notes)
            await expect(page.locator("#core-count")).to_have_text(f"{len(notes)} characters now.")  # console.js
            await page.get_by_role("button", name="Save").click()
            await expect(page.get_by_role("status")).to_have_text("Memory.md saved.")
            await expect(editor).to_have_value(notes + "\n")
            await shot(alice, "core")

            await page.set_viewport_size({"width": 390, "height": 800})
            await page.goto(gateway.url + f"/console/memory/{bike.id}")
            await shot(alice, "memory-detail-narrow")
            alice.clean()

        # -- c) another user: 403 for alice's memory, and for every administrator page and endpoint --
        async with person(browser, gateway) as bob:
            page = bob.page
            await sign_in(bob, gateway, BOB_TOKEN)
            response = await page.goto(gateway.url + f"/console/memory/{bike.id}")
            assert response is not None and response.status == 403
            shown = await page.content()
            assert "bike" not in shown.lower() and "blue" not in shown
            await shot(bob, "forbidden")
            response = await page.goto(gateway.url + "/console/users")
            assert response is not None and response.status == 403
            api = await page.request.get(gateway.url + "/api/v1/status")
            assert api.status == 403
            fetched = await page.evaluate("fetch('/api/v1/status').then(r => r.status)")
            assert fetched == 403
            # Chromium logs each refused load itself ("status of 403"): expected here, nothing else is.
            bob.errors = [e for e in bob.errors if "status of 403" not in e]
            bob.clean()
