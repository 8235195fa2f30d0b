"""Reading back a media file the WeChat plugin wrote into its work directory.

The core (privileged) reads a file whose name, size and hash the plugin
(sandboxed, and possibly turned by what it received) chose. Before, it
opened ``work/plugins/wechat/<name>`` as given, read ``size + 1`` bytes and
unlinked the path before checking anything: a name ``../../keys/token.key``
deleted the core's key; a symlink to ``/dev/zero`` with a huge size made the
core allocate it; a FIFO blocked one of its threads for good. Now the name
must be a relative path of plain components, each opened relative to the work directory without
following a symlink and without blocking, and it must be a regular file of
its own (one link) of exactly the size claimed, within the media limit,
before a byte is read or anything is unlinked.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat

#: The largest media file the core reads back (the plugin's own limit, 20 MiB).
MAX_MEDIA_BYTES = 20 << 20


class MediaFileRefused(ValueError):
    """The plugin's file is not one the core reads; the message says why."""


def _open_dir(parent: int, name: str) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.open(name, flags, dir_fd=parent)


def read_media_file(work_dir: str, name: str, size: int, sha256: str) -> bytes:
    """The bytes of the plugin's file ``name`` (relative to ``work_dir``, plain
    components only) checked against the ``size`` and ``sha256`` it claimed;
    the file is removed once read."""
    parts = name.split("/")
    if "\0" in name or any(part in ("", ".", "..") for part in parts):
        raise MediaFileRefused(f"the plugin named no file of its own: {name!r}")
    if not 0 <= size <= MAX_MEDIA_BYTES:
        raise MediaFileRefused(f"{size} bytes is past the media limit of {MAX_MEDIA_BYTES}")
    directory = os.open(work_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            for part in parts[:-1]:  # each directory as it is, no symlink followed
                inner = _open_dir(directory, part)
                os.close(directory)
                directory = inner
            fd = os.open(parts[-1], flags, dir_fd=directory)
        except OSError as exc:
            raise MediaFileRefused(
                f"cannot open the plugin's file {name!r}: {exc.strerror}"
            ) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                raise MediaFileRefused(f"{name!r} is not a regular file of the plugin's own")
            if st.st_size != size:
                raise MediaFileRefused(
                    f"{name!r} holds {st.st_size} bytes, not the {size} described"
                )
            data = b""
            while len(data) <= size and (chunk := os.read(fd, size + 1 - len(data))):
                data += chunk
        finally:
            os.close(fd)
        os.unlink(parts[-1], dir_fd=directory)  # never follows a link: only this name goes
    finally:
        os.close(directory)
    if len(data) != size or hashlib.sha256(data).hexdigest() != sha256:
        raise MediaFileRefused(f"the media file is not the {size} bytes the plugin described")
    return data


def _outbox_dir(work_dir: str, name: str) -> tuple[int, str]:
    """The directory of ``name`` (plain components, under ``work_dir``),
    opened without following a symlink and made where missing; its last part."""
    parts = name.split("/")
    if "\0" in name or any(part in ("", ".", "..") for part in parts):
        raise MediaFileRefused(f"not a file of the plugin's work directory: {name!r}")
    directory = os.open(work_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o700, dir_fd=directory)
            inner = _open_dir(directory, part)  # a symlink there: ELOOP/ENOTDIR
            os.close(directory)
            directory = inner
    except BaseException:
        os.close(directory)
        raise
    return directory, parts[-1]


def write_outbox_file(work_dir: str, name: str, data: bytes) -> None:
    """Write ``data`` as ``name`` in the plugin's work directory for it to
    upload. Whatever the plugin left at that name (a symlink to a key of the
    core's, a FIFO) is removed, not followed: the file is made fresh
    (``O_EXCL``), never opened through a link."""
    directory, last = _outbox_dir(work_dir, name)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(last, dir_fd=directory)  # unlink never follows a link
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(last, flags, 0o600, dir_fd=directory)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    finally:
        os.close(directory)


def remove_outbox_file(work_dir: str, name: str) -> None:
    """Remove ``name`` again (only that name: a link is not followed)."""
    try:
        directory, last = _outbox_dir(work_dir, name)
    except (OSError, MediaFileRefused):
        return
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(last, dir_fd=directory)
    finally:
        os.close(directory)


__all__ = [
    "MAX_MEDIA_BYTES",
    "MediaFileRefused",
    "read_media_file",
    "remove_outbox_file",
    "write_outbox_file",
]
