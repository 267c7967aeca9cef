"""The documentation (README.md as a front page, docs/ as a MkDocs site): it builds strictly, offline;
the configuration reference matches the config model; every relative link points at a file; the
README stays a front page."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# Written by the browser test (tests/e2e); the README shows them once they exist.
SCREENSHOTS = {DOCS / "images" / "chat.png", DOCS / "images" / "console.png"}
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _reference_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("config_reference", ROOT / "scripts" / "config_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _relative_links(page: Path) -> list[tuple[str, Path]]:
    """(link, the file it names) for every relative link and image of a Markdown page, code left out."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    found = []
    for target in _LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL, a mail address, or an anchor on the same page
        path = target.split("#", 1)[0]
        found.append((target, (page.parent / path).resolve()))
    return found


def test_the_configuration_reference_is_generated_from_the_model() -> None:
    script = _reference_script()
    committed = (DOCS / "reference" / "config.md").read_text(encoding="utf-8")
    assert committed == script.render(), (
        "docs/reference/config.md is stale: run `python scripts/config_reference.py` to update it"
    )


def test_every_config_key_has_a_description() -> None:
    missing = _reference_script().undescribed()
    assert not missing, (
        "config keys without a description (add description= to the field, or a comment right above it): "
        + ", ".join(missing)
    )


def test_the_reference_names_nested_keys_by_their_dotted_path() -> None:
    page = (DOCS / "reference" / "config.md").read_text(encoding="utf-8")
    for key in ("`memory.recall.max_chars`", "`channels.<name>.dm_policy`", "`users.<name>.tokens`", "`ai.model`"):
        assert key in page


def test_the_readme_is_a_front_page() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < 250, f"README.md has {len(lines)} lines: move the detail into docs/"


def test_every_relative_link_resolves() -> None:
    pages = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    broken = [
        f"{page.relative_to(ROOT)}: {link}"
        for page in pages
        for link, target in _relative_links(page)
        if not target.exists() and target not in SCREENSHOTS
    ]
    assert not broken, "links to files that do not exist:\n" + "\n".join(broken)


def test_readme_links_stay_in_the_repository() -> None:
    for link, target in _relative_links(ROOT / "README.md"):
        assert target.is_relative_to(ROOT), f"README.md links outside the repository: {link}"


@pytest.mark.timeout(60)
def test_the_site_builds_strictly_and_offline(tmp_path: Path) -> None:
    env = os.environ | {"NO_MKDOCS_2_WARNING": "1"}  # mkdocs.yml has no plugin that fetches, no web font
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=55,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "config" / "index.html").exists()
