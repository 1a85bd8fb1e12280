"""The one timestamp format of trajledger: RFC 3339 UTC to the second, ``YYYY-MM-DDTHH:MM:SSZ``.

Scope: format and parse it. Log entries, predicates (approvals, expiries, revocations, SLSA run
details) and reports all use this form, so times compare as strings and parse one way.
"""

from __future__ import annotations

import datetime as dt
import re

from .errors import FormatError

__all__ = ["COSIGNATURE_SKEW", "TIME_PATTERN", "format_time", "now", "parse_time"]

COSIGNATURE_SKEW = 300  # seconds a witness's cosignature may be dated ahead of this clock

TIME_PATTERN = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")


def format_time(when: dt.datetime) -> str:
    """``when`` in UTC as ``YYYY-MM-DDTHH:MM:SSZ`` (a naive time is taken as UTC; a year
    below 1000 has its four digits too, which ``strftime("%Y")`` does not write)."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.astimezone(dt.UTC).replace(tzinfo=None, microsecond=0).isoformat() + "Z"


def now() -> str:
    """The current time in the one format."""
    return format_time(dt.datetime.now(dt.UTC))


def parse_time(value: object, what: str = "time") -> dt.datetime:
    """Parse ``YYYY-MM-DDTHH:MM:SSZ`` into an aware UTC datetime.

    Raises:
        FormatError: not a string of exactly that form, or not a valid date and time.
    """
    if not isinstance(value, str) or not TIME_PATTERN.fullmatch(value):
        raise FormatError(f"{what}: time {value!r} is not of the form YYYY-MM-DDTHH:MM:SSZ")
    try:
        return dt.datetime.fromisoformat(value)  # the pattern fixed its shape: Z is UTC
    except ValueError as e:
        raise FormatError(f"{what}: time {value!r} is not a valid UTC date and time") from e
