"""The service's wall clock and the one timestamp format every stored ``*_at`` uses.

ISO-8601 in UTC with milliseconds and a ``Z`` (``2026-05-01T09:30:00.123Z``): fixed width, so the
strings compare in time order in DynamoDB key conditions and in code alike. Components take the
clock as a parameter (tests pass a fake one); these are the defaults the wiring gives them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def utc_datetime() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def utc_now() -> str:
    """Now, as stored."""
    return iso(utc_datetime())


def parse_iso(timestamp: str) -> datetime:
    """A stored timestamp back as an aware datetime; ValueError when it is not one."""
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
