"""Field checks more than one config model shares: time zones, durations, cron expressions."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Literal

# Who someone is to the gateway: users.<name>.roles, memory.write_access.allowed_roles.
Role = Literal["admin", "system", "user", "public"]


def check_zone(value: str) -> str:
    """An IANA time zone name; ValueError in plain words otherwise."""
    from zoneinfo import ZoneInfo

    try:
        ZoneInfo(value)
    except Exception:
        raise ValueError("unknown IANA time zone, e.g. 'Europe/Berlin'") from None
    return value


_DURATION = re.compile(r"^\s*(\d+)\s*(s|m|h|d|w)\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MIN_INTERVAL = timedelta(minutes=1)  # nothing runs more often than this


def parse_duration(text: str) -> timedelta:
    """`30m`, `2h`, `1d`, `90s`, `1w` as a duration; ValueError in plain words otherwise."""
    m = _DURATION.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not a duration: write a number and a unit, such as 30m, 2h or 1d")
    return timedelta(seconds=int(m.group(1)) * _UNIT_SECONDS[m.group(2)])


def check_cron(expr: str) -> str:
    """A standard five-field cron expression (minute hour day-of-month month day-of-week), checked
    by croniter; ValueError in plain words otherwise."""
    from croniter import croniter

    fields = expr.split()
    if len(fields) != 5:
        raise ValueError(
            f"a cron expression has five fields (minute hour day month weekday), {len(fields)} given: {expr!r}"
        )
    if not croniter.is_valid(expr):
        raise ValueError(f"{expr!r} is not a valid cron expression (e.g. '30 8 * * 1-5': 08:30 on weekdays)")
    return " ".join(fields)
