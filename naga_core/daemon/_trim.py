"""Give the C heap's free pages back to the system once the start is done.

The start parses the start-up snapshot, folds the ledger's tail and reads
segments whole: megabytes that are freed right after but that glibc keeps
in its arenas (the main one and one per thread that allocated) as free
pages, so the core's resident memory stayed at its start-up peak, which
grows with the ledger (issue 19: +11 MB of "not Python heap" from 10k to
100k records). ``malloc_trim(0)`` returns them (every arena since glibc
2.8); elsewhere (musl, macOS) it is a no-op.
"""

from __future__ import annotations

import ctypes


def trim_heap() -> bool:
    """Release the C heap's free pages; whether any were released."""
    try:
        # The interpreter's own symbols, libc's among them (no library
        # search: ctypes.util.find_library runs ldconfig, 40 ms).
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return bool(trim(0))


__all__ = ["trim_heap"]
