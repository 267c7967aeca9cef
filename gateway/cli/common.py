"""What several `clawgate` subcommands share: the config (every problem reported), the database for
one command and a memory record as JSON."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import sys
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from gateway.config.load import ConfigError, load_config, parse_config
from gateway.config.model import Config

if TYPE_CHECKING:
    from memory.store.storage import Storage


def limit_type(high: int) -> Callable[[str], int]:
    """An argparse `type` for a whole number from 1 to `high`, refusing anything else in plain words."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not 1 <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from 1 to {high}, not {value}")
        return value

    return parse


# Where `emit` writes while a --json command runs: the real standard output (see json_stdout).
_OUTPUT: ContextVar[TextIO | None] = ContextVar("clawgate_cli_output", default=None)


@contextlib.contextmanager
def json_stdout(active: bool) -> Iterator[None]:
    """While a --json command runs, whatever else writes to standard output (a library's print, a
    progress bar) is sent to standard error, and only what the command `emit`s reaches standard
    output: its JSON stays parseable whatever the libraries it loads decide to print."""
    if not active:
        yield
        return
    token = _OUTPUT.set(sys.stdout)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _OUTPUT.reset(token)


def emit(text: str) -> None:
    """One piece of a command's own output, on standard output (also under json_stdout), flushed so
    a reader of a pipe has it at once."""
    print(text, file=_OUTPUT.get() or sys.stdout, flush=True)


def load_or_report(path: Path) -> Config | None:
    """The config at `path`; None after every problem was printed on stderr (the command then exits
    with 2, the code for a config that did not load)."""
    try:
        return load_config(path)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return None


class Problem(Protocol):
    def render(self) -> str: ...


def report(source: str, problems: Sequence[Problem]) -> None:
    """Problems on stderr as a config that did not load shows them: a heading, one line each."""
    lines = [f"{source}: {len(problems)} problem(s):"] + [f"  - {p.render()}" for p in problems]
    print("\n".join(lines), file=sys.stderr)


def data_dir_of(path: Path) -> tuple[Path, bool] | None:
    """storage.data_dir of the config at `path`, and whether the whole file loaded. A file that does
    not validate still names it (the running gateway is asked to reload that file and says what is
    wrong); one that says nothing of it gets the default. None after a file that cannot be read
    at all, or a data_dir that is not valid, was reported on stderr."""
    import yaml  # type: ignore[import-untyped]

    try:
        return load_config(path).storage.data_dir, True
    except ConfigError as exc:
        if any(p.path == "(file)" for p in exc.problems):  # missing or unreadable
            print(exc, file=sys.stderr)
            return None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        data = None
    storage = data.get("storage") if isinstance(data, dict) else None
    named = storage.get("data_dir") if isinstance(storage, dict) else None
    try:
        config = parse_config({"storage": {"data_dir": named}} if named is not None else {}, str(path))
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return None
    return config.storage.data_dir, False


def with_storage(config: Config, work: Callable[[Storage], Coroutine[Any, Any, int]]) -> int:
    """Open the database (migrated to the newest schema), run `work` on it, close it: its exit code."""
    from memory.store.storage import Storage

    async def main() -> int:
        storage = await Storage.open(config.storage.resolved_database_url)
        try:
            return await work(storage)
        finally:
            await storage.close()

    return asyncio.run(main())


def record_json(record: Any, score: float | None = None, *, full: bool = False) -> dict[str, Any]:
    """A long-term memory as `memory export` writes it and `memory search --json` shows it; `full`:
    every field a revision records, and its grade, as `memory show` and `memory review` print it."""
    if full:
        from memory.records.rows import snapshot
        from memory.trust import policy

        # The revision snapshot, so a field added to records shows here without a second list.
        whole = snapshot(record)
        whole["grade"] = "instruction" if policy.instruction_grade(record) else "evidence"
        return whole
    out = {
        "id": record.id,
        "content": record.content,
        "scope": str(record.scope),
        "memory_class": record.memory_class.value,
        "provenance": record.provenance.value,
        "use_policy": dataclasses.asdict(record.use_policy),
        "review_status": record.review_status.value,
        "created_at": record.created_at.isoformat(),
        "source": record.source,
    }
    if score is not None:
        out["score"] = score
    return out
