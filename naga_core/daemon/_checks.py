"""Field rules shared by the servicers. Each refusal names the field, the
value (shortened) and the rule, as INVALID_ARGUMENT or OUT_OF_RANGE."""

from __future__ import annotations

from naga.constants import MAX_KIND_BYTES, MAX_PAGE_ENTRIES
from naga_core.daemon._errors import RequestRefused


def shown(value: str, limit: int = 40) -> str:
    """``value`` for an error message: repr'd, cut to ``limit`` characters."""
    return repr(value) if len(value) <= limit else repr(value[:limit]) + "..."


def text(field: str, value: str, *, max_chars: int, required: bool = True) -> str:
    """Printable text of at most ``max_chars`` characters (empty only if not required)."""
    if not value:
        if required:
            raise RequestRefused.invalid(f"{field} is required")
        return value
    if len(value) > max_chars:
        raise RequestRefused.invalid(
            f"{field} has {len(value)} characters; at most {max_chars} are accepted"
        )
    if not value.isprintable():
        raise RequestRefused.invalid(f"{field} {shown(value)} contains control characters")
    return value


def page_limit(field: str, value: int, *, default: int) -> int:
    """A page size: 0 means ``default``; at most MAX_PAGE_ENTRIES."""
    if value == 0:
        return default
    if value > MAX_PAGE_ENTRIES:
        raise RequestRefused.invalid(f"{field} {value} is above the maximum of {MAX_PAGE_ENTRIES}")
    return value


def seq_at_most(field: str, value: int, size: int) -> int:
    """A position in a ledger of ``size`` records: 0 .. size."""
    if value > size:
        raise RequestRefused.out_of_range(
            f"{field} {value} is past the ledger's end (it has {size} records)"
        )
    return value


def record_kind(field: str, value: str) -> str:
    """A ledger record kind: printable ASCII without spaces, 1..MAX_KIND_BYTES."""
    if not value or len(value) > MAX_KIND_BYTES:
        raise RequestRefused.invalid(
            f"{field} {shown(value)} must be 1 to {MAX_KIND_BYTES} characters"
        )
    if not all(33 <= ord(c) <= 126 for c in value):
        raise RequestRefused.invalid(
            f"{field} {shown(value)} must be printable ASCII without spaces"
        )
    return value


__all__ = ["page_limit", "record_kind", "seq_at_most", "shown", "text"]
