"""Pure parts of the filesystem view (the mounting itself is exercised by
every launch in the penetration suite)."""

from __future__ import annotations

import os

from sandbox import _mounts


def test_top_level_drops_paths_that_show_through_a_parent() -> None:
    paths = [
        ("/work/src/.venv", False),
        ("/usr", False),
        ("/usr2", False),
        ("/work/src", False),
        ("/usr/lib", False),
        ("/usr", False),
        ("/tmp/w", True),
    ]
    assert _mounts.top_level(paths) == [
        ("/usr", False),
        ("/usr2", False),
        ("/tmp/w", True),
        ("/work/src", False),
    ]


def test_read_only_remount_keeps_devices_usable() -> None:
    fd = os.open("/dev/null", os.O_PATH)
    try:
        flags = _mounts.remount_flags(fd, os.fstat(fd).st_mode)
    finally:
        os.close(fd)
    assert flags & _mounts.MS_RDONLY
    assert flags & _mounts.MS_NOSUID
    assert not flags & _mounts.MS_NODEV
    fd = os.open("/usr", os.O_PATH)
    try:
        flags = _mounts.remount_flags(fd, os.fstat(fd).st_mode)
    finally:
        os.close(fd)
    assert flags & _mounts.MS_NODEV
    assert flags & _mounts.MS_BIND
    assert flags & _mounts.MS_REMOUNT
