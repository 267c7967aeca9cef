"""Global options go on either side of the subcommand (`clawgate run --config my.yaml`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli.main import _parser


@pytest.mark.parametrize(
    "argv",
    [
        ["--config", "my.yaml", "run"],
        ["run", "--config", "my.yaml"],
        ["config", "check", "--config", "my.yaml"],
        ["memory", "search", "--config", "my.yaml", "--user", "alice", "trains"],
        ["schedules", "run", "standup", "--config", "my.yaml"],
        ["--config", "other.yaml", "status", "--config", "my.yaml"],  # given twice: the later one wins
    ],
)
def test_config_is_taken_before_or_after_the_subcommand(argv: list[str]) -> None:
    assert _parser().parse_args(argv).config == Path("my.yaml")


def test_without_it_the_default_stays() -> None:
    assert _parser().parse_args(["run"]).config is None
