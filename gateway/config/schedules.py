"""The config of runs nobody typed: `schedules:` (agent runs on a cron expression or an interval),
`hooks:` (agent runs when a signed HTTP request comes) and `reminders:` (what people may set in
chat). Each run answers in one target conversation (docs/schedules.md)."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from datetime import UTC, date, datetime, time, timedelta
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from gateway.config.fields import MIN_INTERVAL, check_cron, check_zone, parse_duration
from gateway.core.channel_config import Strict


class TargetConfig(Strict):
    """Where a run answers: a channel, and in it a person's direct conversation (`user`) or a
    conversation by its id on the platform (`conversation`, with `thread` inside it)."""

    channel: str = Field(description="The channel's name under `channels:`.")
    user: str | None = None  # a user id from `users:`: their DM on this channel
    conversation: str | None = None  # the platform's chat / channel id
    thread: str | None = Field(default=None, description="A thread or topic inside `conversation`.")
    # What `conversation` is; a `user` target is always a DM.
    kind: Literal["dm", "group", "channel"] = "group"

    @model_validator(mode="after")
    def _one_place(self) -> TargetConfig:
        if (self.user is None) == (self.conversation is None):
            raise ValueError("give either user (their direct conversation) or conversation (a chat id), not both")
        if self.thread is not None and self.conversation is None:
            raise ValueError("a thread lives in a conversation: give conversation as well")
        return self


Until = datetime | date


class ScheduleConfig(Strict):
    """An agent run on a schedule: `cron` or `every`, the `prompt` the agent gets, the `target`."""

    cron: str | None = None  # five fields, in `timezone`
    every: str | None = None  # 30m, 2h, 1d: from the gateway's first start with this schedule
    timezone: str | None = None  # default: the config's top-level timezone
    agent: str | None = None  # default: the first agent
    prompt: Annotated[str, Field(min_length=1, max_length=8000)] = Field(
        description="What the agent is asked each run."
    )
    target: TargetConfig = Field(description="The conversation the run answers in.")
    until: Until | None = None  # no run after this (a date: after that day), in `timezone`
    enabled: bool = Field(default=True, description="false: the schedule does not run.")

    @field_validator("timezone")
    @classmethod
    def _tz(cls, value: str | None) -> str | None:
        return check_zone(value) if value is not None else None

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        return None if value is None else check_cron(value)

    @field_validator("every")
    @classmethod
    def _every(cls, value: str | None) -> str | None:
        if value is not None and parse_duration(value) < MIN_INTERVAL:
            raise ValueError(f"runs at most once a minute: {value!r} is shorter")
        return value

    @model_validator(mode="after")
    def _one_rule(self) -> ScheduleConfig:
        if (self.cron is None) == (self.every is None):
            raise ValueError("give either cron (e.g. '0 8 * * 1-5') or every (e.g. 2h), not both")
        return self

    @property
    def interval(self) -> timedelta | None:
        return parse_duration(self.every) if self.every is not None else None

    def until_utc(self, zone: str) -> datetime | None:
        """`until` as a UTC instant: a date means the end of that day in the schedule's time zone."""
        from zoneinfo import ZoneInfo

        if self.until is None:
            return None
        if isinstance(self.until, datetime):
            at = self.until
        else:
            at = datetime.combine(self.until, time.max)
        if at.tzinfo is None:
            at = at.replace(tzinfo=ZoneInfo(self.timezone or zone))
        return at.astimezone(UTC)


class HookConfig(Strict):
    """An inbound webhook, `POST /hooks/<name>`: a request signed with `secret` runs `agent` with
    `prompt` and the request's body (as data, never as instructions), answering in `target`."""

    secret: Annotated[SecretStr, Field(min_length=16)] = Field(
        description="The shared secret requests are signed with (16+ characters)."
    )
    agent: str | None = Field(default=None, description="The agent that runs; unset: the first agent.")
    prompt: Annotated[str, Field(min_length=1, max_length=8000)] = Field(
        description="What the agent is asked; the request's body follows it, as data."
    )
    target: TargetConfig = Field(description="The conversation the run answers in.")
    max_bytes: Annotated[int, Field(ge=1, le=5 * 1024 * 1024)] = Field(
        default=256 * 1024, description="Largest request body accepted."
    )
    enabled: bool = Field(default=True, description="false: the hook answers 404.")


class RemindersConfig(Strict):
    """Reminders people set in chat (`/remind`) or through the model (the schedule_reminder tool)."""

    enabled: bool = Field(default=True, description="false: no /remind and no schedule_reminder tool.")
    max_per_user: Annotated[int, Field(ge=1, le=1000)] = Field(
        default=50, description="Reminders one person may have waiting."
    )
    # A repeating reminder runs at most this often.
    min_interval: str = "5m"

    @field_validator("min_interval")
    @classmethod
    def _interval(cls, value: str) -> str:
        parse_duration(value)
        return value


def schedule_problems(
    schedules: Mapping[str, ScheduleConfig],
    hooks: Mapping[str, HookConfig],
    channels: Mapping[str, Any],
    users: Collection[str],
    agents: Collection[str],
) -> list[tuple[str, object, str]]:
    """Cross-references of `schedules:` and `hooks:`: their channels, users and agents exist."""
    problems: list[tuple[str, object, str]] = []
    runs: list[tuple[str, ScheduleConfig | HookConfig]] = [
        *((f"schedules.{n}", s) for n, s in schedules.items()),
        *((f"hooks.{n}", h) for n, h in hooks.items()),
    ]
    for path, run in runs:
        target = run.target
        channel = channels.get(target.channel)
        if channel is None:
            known = ", ".join(sorted(channels)) or "none"
            problems.append((f"{path}.target.channel", target.channel, f"no such channel (known: {known})"))
        elif not getattr(channel, "enabled", True):
            problems.append((f"{path}.target.channel", target.channel, "that channel is disabled"))
        if target.user is not None and target.user not in users:
            problems.append((f"{path}.target.user", target.user, "no such user in users:"))
        if run.agent is not None and run.agent not in agents:
            problems.append((f"{path}.agent", run.agent, f"no such agent (known: {', '.join(sorted(agents))})"))
        if isinstance(run, HookConfig) and not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", path.split(".", 1)[1]):
            problems.append((path, path.split(".", 1)[1], "a hook's name is its URL: letters, digits, . _ - only"))
    return problems
