#!/usr/bin/env python3
"""Cost of secret redaction per chat message (`memory.trust.redact`), which runs on every message stored.

    .venv/bin/python benchmarks/redact_speed.py                       # about 5 s
    .venv/bin/python benchmarks/redact_speed.py --quick               # about 1 s
    .venv/bin/python benchmarks/redact_speed.py --baseline OLD.py     # also time another version
    .venv/bin/python benchmarks/redact_speed.py --json

A fixed corpus of chat messages of about 50, 300 and 3000 characters, each size in two kinds:
ordinary chat (the common case: nothing is redacted, one pass over the text) and chat with one
secret in it (two passes: the one that redacts and the one that finds nothing more). Each message
is timed with `redact` and `contains_secret`; the figure is the best of seven rounds, in
microseconds per call, averaged over the messages of a row.

Absolute times on a shared machine drift, so `--baseline` loads another copy and times it in the
same run; the ratio is the figure to trust. The copy is a single-file version from before the
package (`git show REV:memory/redact.py > /tmp/old.py`) or a folder holding one of the package
(`mkdir /tmp/old && git archive HEAD memory/redact | tar -x -C /tmp/old`, then
`--baseline /tmp/old/memory/redact`). PRE_CHANGE holds what the detector measured before
its gates, keyword heuristics and natural-language patterns, for reference. The target is a
300-character ordinary message under 150 µs. The "secret" rows of the old detector are not like for
like: it missed most of those secrets, so it made one pass where the new one makes two.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from memory.trust import redact as current  # noqa: E402

TARGET_300_US = 150.0

# `redact` before the gates, the keyword heuristics and the natural-language patterns, in µs per
# call, measured with --baseline on the shared 2-core machine (2026-12-01; runs varied by ±25%).
PRE_CHANGE: dict[str, float] = {
    "50 ordinary": 32.0,
    "50 secret": 34.0,
    "300 ordinary": 216.0,
    "300 secret": 311.0,
    "3000 ordinary": 2134.0,
    "3000 secret": 4012.0,
}

_FAKE_KEY = "ghp_" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv1Wx2"

ORDINARY_50 = [
    "Can you check the deploy logs from last night?",
    "I forgot my password again, how do I reset it?",
    "Meeting moved to 3pm, see JIRA-1234 for details.",
    "Set max_tokens=4096 and retry the summary job.",
]
SECRET_50 = [
    f"here is my token {_FAKE_KEY}",
    "note: password=CorrectHorse88Battery thanks",
    "my password is Tr0ub4dor&3zebra, keep it",
    "mysql -u root -pS3cretPass99 -h db.internal",
]

ORDINARY_300 = [
    (
        "Quick update on the release: the build for v2.14.3 passed on commit 3f2a9c1d4e5b6a79 and the "
        "staging deploy is green. Alice asked whether the token budget (max_tokens: 4096) is enough for "
        "the summary model; I think so. The password reset page still 404s, tracked in OPS-5521. See "
        "https://example.com/docs/release?page=2 for the notes."
    ),
    (
        "Thanks for the review! I renamed SessionStore.append to append_messages, moved the secret "
        "rotation docs into docs/ops/secrets.md and added a test for the key ordering. The uuid in the "
        "fixture is 123e4567-e89b-12d3-a456-426614174000 and the run took 12.4 s on the CI box; let's "
        "merge after lunch unless someone objects, ok?"
    ),
]
SECRET_300 = [
    (
        "Quick update on the release: the build for v2.14.3 passed on commit 3f2a9c1d4e5b6a79 and the "
        "staging deploy is green. For the new box the wifi password is Gr33nTea-Kettle and the admin "
        "page is at https://router.local/admin. The password reset page still 404s, tracked in OPS-5521. "
        "See https://example.com/docs/release?page=2 for the notes."
    ),
    (
        "Thanks for the review! I renamed SessionStore.append to append_messages, moved the secret "
        f"rotation docs into docs/ops/secrets.md and the CI now uses {_FAKE_KEY} for the mirror. The "
        "uuid in the fixture is 123e4567-e89b-12d3-a456-426614174000 and the run took 12.4 s on the CI "
        "box; let's merge after lunch, ok?"
    ),
]


def _long(paragraphs: list[str], extra: str) -> str:
    code = (
        "```python\n"
        "def load(path: str) -> dict[str, str]:\n"
        "    token = os.environ['SLACK_BOT_TOKEN']\n"
        "    with open(path) as f:\n"
        "        return {k: v for k, v in (line.split('=', 1) for line in f)}\n"
        "```\n"
    )
    parts = [paragraphs[0], "", "- [x] ship the fix", "- [ ] write the changelog", "", code]
    parts += [paragraphs[1], "", extra, ""]
    parts += [paragraphs[0].replace("release", "rollout"), paragraphs[1].replace("review", "reviews")]
    text = "\n".join(parts)
    while len(text) < 3000:
        text += "\n" + paragraphs[len(text) % 2]
    return text[:3000]


ORDINARY_3000 = [_long(ORDINARY_300, "Reminder: rotate the staging secret every quarter, the docs say how.")]
SECRET_3000 = [_long(ORDINARY_300, "And the staging db: postgres://app:Pl4inS3cret@db.internal:5432/app")]

CORPUS: dict[str, list[str]] = {
    "50 ordinary": ORDINARY_50,
    "50 secret": SECRET_50,
    "300 ordinary": ORDINARY_300,
    "300 secret": SECRET_300,
    "3000 ordinary": ORDINARY_3000,
    "3000 secret": SECRET_3000,
}


def _time_us(fn: Callable[[str], object], text: str, budget_s: float) -> float:
    fn(text)  # warm the regex caches
    start = time.perf_counter()
    calls = 0
    while time.perf_counter() - start < budget_s / 20:
        fn(text)
        calls += 1
    rounds = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(text)
        rounds.append((time.perf_counter() - t0) / calls * 1e6)
    return min(rounds)  # the least disturbed round: other jobs on the machine only add time


def measure(module: ModuleType, budget_s: float) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for row, texts in CORPUS.items():
        out[row] = {
            "redact": statistics.fmean(_time_us(module.redact, t, budget_s) for t in texts),
            "contains_secret": statistics.fmean(_time_us(module.contains_secret, t, budget_s) for t in texts),
        }
    return out


def _load(path: str) -> ModuleType:
    where = Path(path)
    if where.is_dir() or where.name == "__init__.py":
        return _load_package(where if where.is_dir() else where.parent)
    spec = importlib.util.spec_from_file_location("redact_baseline", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def _load_package(folder: Path) -> ModuleType:
    """A copy of the package. Its modules import each other as memory.trust.redact._…, so while it loads
    it stands in for the current package under that name; the current modules are then put back
    (the copy's functions keep their own module globals, so both run side by side)."""
    name = current.__name__

    def ours() -> list[str]:
        return [key for key in sys.modules if key == name or key.startswith(name + ".")]

    saved = {key: sys.modules.pop(key) for key in ours()}
    try:
        spec = importlib.util.spec_from_file_location(
            name, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )
        if spec is None or spec.loader is None:
            raise SystemExit(f"cannot load {folder}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    finally:
        for key in ours():
            del sys.modules[key]
        sys.modules.update(saved)
    return module


def markdown(now: dict[str, dict[str, float]], base: dict[str, dict[str, float]] | None) -> str:
    head = "| message | redact µs | contains_secret µs |"
    rule = "|---|---:|---:|"
    if base:
        head += " baseline redact µs | ratio |"
        rule += "---:|---:|"
    elif PRE_CHANGE:
        head += " pre-change redact µs |"
        rule += "---:|"
    lines = [head, rule]
    for row, t in now.items():
        line = f"| {row} | {t['redact']:.1f} | {t['contains_secret']:.1f} |"
        if base:
            line += f" {base[row]['redact']:.1f} | {t['redact'] / base[row]['redact']:.2f}x |"
        elif PRE_CHANGE:
            line += f" {PRE_CHANGE.get(row, float('nan')):.1f} |"
        lines.append(line)
    verdict = "met" if now["300 ordinary"]["redact"] < TARGET_300_US else "MISSED"
    lines.append(f"\ntarget: 300-character ordinary message under {TARGET_300_US:.0f} µs: {verdict}")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a shorter run")
    p.add_argument("--baseline", metavar="PATH", help="another redact.py or memory/redact folder to time too")
    p.add_argument("--json", action="store_true", help="JSON instead of Markdown")
    args = p.parse_args()
    budget = 0.05 if args.quick else 0.25
    now = measure(current, budget)
    base = measure(_load(args.baseline), budget) if args.baseline else None
    if args.json:
        print(json.dumps({"current": now, "baseline": base, "pre_change": PRE_CHANGE}, indent=2))
    else:
        print(markdown(now, base))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
