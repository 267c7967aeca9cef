"""The chat page's attachments in a real browser (headless Chromium, as tests/e2e/test_chat_browser.py
drives it): a file chosen with the Attach button and one dropped on the page go with the message,
and the model reads them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway.app import Gateway
from tests.e2e.test_chat_browser import CHROMIUM_MISSING, WAIT_MS, _chromium_missing, _launch_chromium
from tests.fakes import media
from tests.fakes.llm import FakeLLM, user_text

pytestmark = pytest.mark.browser


@pytest.mark.skipif(_chromium_missing() and not os.environ.get("CI"), reason=CHROMIUM_MISSING)
async def test_files_chosen_or_dropped_go_with_the_message(gateway: Gateway, fake_llm: FakeLLM, tmp_path: Path) -> None:
    if _chromium_missing():
        pytest.fail(CHROMIUM_MISSING, pytrace=False)
    from playwright.async_api import expect

    notes = tmp_path / "notes.md"
    notes.write_text("# Plan\nShip the media work on Thursday.\n")
    picture = tmp_path / "dot.png"
    picture.write_bytes(media.png())
    async with _launch_chromium() as browser:
        page = await browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        await page.goto(gateway.url, timeout=WAIT_MS)
        await expect(page.locator("#status")).to_have_text("connected as local", timeout=WAIT_MS)

        await page.locator("#files").set_input_files([str(notes), str(picture)])
        await expect(page.locator("#attached li")).to_have_count(2)
        await page.locator("#attached li button").first.click()  # changed my mind about the notes
        await expect(page.locator("#attached li")).to_contain_text(["dot.png ("])
        await page.locator("#files").set_input_files([str(notes)])
        dropped = await page.evaluate_handle(
            """() => {
                const dt = new DataTransfer();
                dt.items.add(new File(["dropped words: blue whale"], "dropped.txt", { type: "text/plain" }));
                return dt;
            }"""
        )
        await page.dispatch_event("main", "drop", {"dataTransfer": dropped})
        await expect(page.locator("#attached li")).to_have_count(3)
        await page.locator("#input").fill("what is in these?")
        await page.keyboard.press("Enter")

        await expect(page.locator(".msg.assistant .body")).to_have_count(1, timeout=WAIT_MS)
        await expect(page.locator("#attached li")).to_have_count(0)
        text = user_text(fake_llm.requests[-1])
        assert "what is in these?" in text
        assert "Ship the media work on Thursday." in text and "dropped words: blue whale" in text
        assert "dot.png" in text and "not shown to you" in text  # the fake model cannot see
        assert errors == []
