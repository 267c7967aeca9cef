"""The doctor's framework (checks run in order, skips carry their reason, a broken or hung check is a
failure, never a crash), its table and JSON, and its pure helpers: disk thresholds, URL masking."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from gateway.doctor import checks as doctor
from gateway.doctor import report
from gateway.doctor.checks import disk_status, human_bytes, mask_url, run_checks
from gateway.doctor.context import Context, Result, Skipped
from gateway.doctor.report import render_table

MiB = 1 << 20


@pytest.mark.parametrize(
    ("free", "status"),
    [
        (0, "fail"),
        (100 * MiB - 1, "fail"),
        (100 * MiB, "warn"),
        (1024 * MiB - 1, "warn"),
        (1024 * MiB, "ok"),
        (500 * 1024 * MiB, "ok"),
    ],
)
def test_disk_thresholds(free: int, status: str) -> None:
    assert disk_status(free) == status


@pytest.mark.parametrize(
    ("n", "shown"),
    [(0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (100 * MiB, "100.0 MiB"), (3 << 40, "3072.0 GiB")],
)
def test_human_bytes(n: int, shown: str) -> None:
    assert human_bytes(n) == shown


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql+asyncpg://app:s3cret@db.internal:5432/clawgate",
            "postgresql+asyncpg://app:***@db.internal:5432/clawgate",
        ),
        ("postgresql://app@db/clawgate", "postgresql://app@db/clawgate"),
        ("sqlite:///data/clawgate.db", "sqlite:///data/clawgate.db"),
        ("not a url://u:pw@x", "not a url://u:***@x"),
    ],
)
def test_mask_url(url: str, shown: str) -> None:
    assert mask_url(url) == shown


async def test_checks_run_in_order_and_a_skip_says_why(tmp_path: Path) -> None:
    seen: list[str] = []

    async def first(ctx: Context) -> Result:
        seen.append("first")
        ctx.lack("config", "config.yaml did not load")
        return Result("fail", "broken", "fix it")

    async def needs_config(ctx: Context) -> Result:
        seen.append("second")
        ctx.config()
        raise AssertionError("unreachable: there is no config")

    async def needs_embedder(ctx: Context) -> Result:
        seen.append("third")
        ctx.embedder()
        raise AssertionError("unreachable: there is no embedder")

    ctx = Context(tmp_path / "config.yaml")
    results = await run_checks(ctx, [("a", first), ("b", needs_config), ("c", needs_embedder)])
    assert seen == ["first", "second", "third"]
    assert [(r.name, r.status, r.detail) for r in results] == [
        ("a", "fail", "broken"),
        ("b", "skip", "skipped: config.yaml did not load"),
        ("c", "skip", "skipped: config.yaml did not load"),  # the root cause, not "no embedder"
    ]
    assert report.failed(results)


async def test_a_broken_or_hung_check_fails_and_the_rest_still_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(doctor, "CHECK_TIMEOUT_S", 0.05)
    never = asyncio.Event()

    async def broken(ctx: Context) -> Result:
        raise KeyError("surprise")

    async def hung(ctx: Context) -> Result:
        await never.wait()
        raise AssertionError("unreachable")

    async def skipped(ctx: Context) -> Result:
        raise Skipped("nothing to look at")

    async def fine(ctx: Context) -> Result:
        return Result("ok", "all good")

    results = await run_checks(
        Context(tmp_path / "c.yaml"), [("broken", broken), ("hung", hung), ("skipped", skipped), ("fine", fine)]
    )
    by_name = {r.name: r for r in results}
    assert by_name["broken"].status == "fail" and "KeyError" in by_name["broken"].detail
    assert by_name["hung"].status == "fail" and by_name["hung"].detail == "no answer within 0.05 s"
    assert by_name["skipped"].status == "skip" and by_name["skipped"].detail == "skipped: nothing to look at"
    assert by_name["fine"].status == "ok"
    assert report.summary(results) == "1 ok, 2 fail, 1 skip: something failed"


def test_the_table_is_aligned_with_hints_under_the_detail() -> None:
    results = [
        Result("ok", "fine", name="config"),
        Result("warn", "behind", "run it once", name="database schema"),
        Result("fail", "2 problems", "fix them", lines=("a: bad", "b: worse"), name="x"),
        Result("info", "keyword only", "set a provider", name="embeddings"),
        Result("ok", "no hint shown for ok", "ignored", name="disk"),
    ]
    text = render_table(results)
    lines = text.splitlines()
    assert lines[0].split() == ["CHECK", "STATUS", "DETAIL"]
    detail_at = lines[0].index("DETAIL")
    status_at = lines[0].index("STATUS")
    rows = [line for line in lines[1:-2] if not line.startswith(" ")]  # the summary ends the table
    assert [row.split()[0] for row in rows] == ["config", "database", "x", "embeddings", "disk"]
    for row in rows:
        assert row[status_at - 1] == " " and row[status_at] != " "
        assert row[detail_at - 1] == " " and row[detail_at] != " "
    assert f"{' ' * detail_at}fix: run it once" in lines
    assert f"{' ' * detail_at}- a: bad" in lines and f"{' ' * detail_at}- b: worse" in lines
    assert f"{' ' * detail_at}note: set a provider" in lines
    assert "ignored" not in text
    assert lines[-1] == "2 ok, 1 info, 1 warn, 1 fail: something failed"


def test_json_is_one_object_with_every_check() -> None:
    results = [Result("ok", "fine", name="config", data={"path": "c.yaml"}), Result("warn", "w", "h", name="disk")]
    out = json.loads(report.render_json(results, Path("c.yaml")))
    assert out["ok"] is True and out["config"] == "c.yaml"
    assert out["counts"] == {"ok": 1, "info": 0, "warn": 1, "fail": 0, "skip": 0}
    assert out["checks"] == [
        {"name": "config", "status": "ok", "detail": "fine", "data": {"path": "c.yaml"}},
        {"name": "disk", "status": "warn", "detail": "w", "hint": "h"},
    ]


async def test_memory_off_and_a_local_model_that_cannot_run(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        f"storage: {{data_dir: {tmp_path / 'data'}}}\nmemory: {{enabled: false, search: {{provider: local}}}}\n"
        "channels: {web: {port: 0}}\n"
    )
    by_name = {r.name: r for r in await doctor.run_checks(Context(config))}
    assert by_name["embeddings"].status == "info" and by_name["embeddings"].detail.startswith("memory is off")
    assert by_name["recall floor"].detail == by_name["vector coverage"].detail == "skipped: memory is off"

    config.write_text(
        f"storage: {{data_dir: {tmp_path / 'data'}}}\nmemory: {{search: {{provider: local, model: BAAI/bge-small}}}}\n"
        "channels: {web: {port: 0}}\n"
    )
    results = await doctor.run_checks(Context(config))
    by_name = {r.name: r for r in results}
    assert by_name["embeddings"].status == "fail" and "nothing is downloaded" in by_name["embeddings"].detail
    assert by_name["embeddings"].hint == "fix memory.search.model"
    assert by_name["recall floor"].detail == "skipped: the embedding model is not usable"
    assert report.failed(results)
