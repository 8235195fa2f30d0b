"""trim_heap gives freed C-heap pages back (issue 19: the core's memory stayed
at its start-up peak, which grew with the ledger). Memory, not time."""

from __future__ import annotations

import platform

import pytest

from naga_core.daemon._trim import trim_heap


def _rss_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_freed_heap_below_a_live_block_goes_back() -> None:
    # 64 KB blocks come from the heap (below glibc's mmap threshold); the last
    # one stays alive, so free() alone cannot shrink the heap past it.
    blocks = [bytes(64 * 1024 - 64) + bytes([i % 256]) for i in range(1024)]
    keep = blocks[-1]
    del blocks
    before = _rss_kb()
    assert trim_heap()
    after = _rss_kb()
    assert before - after > 32 * 1024, (before, after)
    assert keep[-1] == 1023 % 256
