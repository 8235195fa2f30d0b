"""The core reads back a media file the WeChat plugin wrote (issue 11, the
attacker's pass): the plugin names the file, its size and its hash, so a
plugin turned by its input must not steer the privileged core with them.

Before: ``work/plugins/wechat/<name>`` was opened as named, ``size + 1``
bytes read and the path unlinked before any check, so ``../../keys/...``
deleted the core's key, a symlink to /dev/zero with a huge size made the
core allocate it, and a FIFO blocked a core thread for good. Each is
refused here with the core's files intact; a real file still reads."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from naga_core.wechat import (
    MAX_MEDIA_BYTES,
    MediaFileRefused,
    read_media_file,
    remove_outbox_file,
    write_outbox_file,
)

KEY = b"the core's token key\n"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "token.key").write_bytes(KEY)
    (tmp_path / "work" / "plugins" / "wechat").mkdir(parents=True)
    return tmp_path


def _work(home: Path) -> Path:
    return home / "work" / "plugins" / "wechat"


def _refused(home: Path, name: str, size: int, match: str) -> None:
    digest = hashlib.sha256(KEY).hexdigest()  # as if the plugin knew it
    with pytest.raises(MediaFileRefused, match=match):
        read_media_file(str(_work(home)), name, size, digest)
    assert (home / "keys" / "token.key").read_bytes() == KEY


def test_a_name_out_of_the_work_directory_is_refused(home: Path) -> None:
    for name in ("../../../keys/token.key", "media/../../../keys/token.key", "/etc/passwd"):
        _refused(home, name, len(KEY), "no file of its own")
    for name in ("..", ".", "", "a\0b", "media//x"):
        _refused(home, name, len(KEY), "no file of its own")


def test_a_symlink_is_not_followed(home: Path) -> None:
    (_work(home) / "image").symlink_to(home / "keys" / "token.key")
    _refused(home, "image", len(KEY), "cannot open")
    (_work(home) / "zeros").symlink_to("/dev/zero")
    _refused(home, "zeros", 1000, "cannot open")


def test_a_symlinked_directory_is_not_followed(home: Path) -> None:
    (_work(home) / "media").symlink_to(home / "keys")
    _refused(home, "media/token.key", len(KEY), "cannot open")


def test_a_huge_size_is_refused_before_anything_is_opened(home: Path) -> None:
    (_work(home) / "zeros").symlink_to("/dev/zero")
    _refused(home, "zeros", 10**12, "past the media limit")
    _refused(home, "zeros", MAX_MEDIA_BYTES + 1, "past the media limit")


def test_a_fifo_does_not_block_the_core(home: Path) -> None:
    os.mkfifo(_work(home) / "pipe")
    _refused(home, "pipe", 10, "not a regular file")


def test_a_hard_link_to_another_file_is_refused(home: Path) -> None:
    os.link(home / "keys" / "token.key", _work(home) / "linked")
    _refused(home, "linked", len(KEY), "not a regular file of the plugin's own")
    assert (_work(home) / "linked").exists()  # nothing unlinked on refusal


def test_a_size_other_than_the_files_is_refused(home: Path) -> None:
    (_work(home) / "image").write_bytes(b"12345")
    _refused(home, "image", 4, "holds 5 bytes, not the 4 described")


def test_the_plugins_own_file_is_read_and_removed(home: Path) -> None:
    body = b"\x89PNG not really"
    (_work(home) / "image").write_bytes(body)
    got = read_media_file(str(_work(home)), "image", len(body), hashlib.sha256(body).hexdigest())
    assert got == body
    assert not (_work(home) / "image").exists()
    (_work(home) / "media").mkdir()
    (_work(home) / "media" / "x").write_bytes(body)
    digest = hashlib.sha256(body).hexdigest()
    assert read_media_file(str(_work(home)), "media/x", len(body), digest) == body
    (_work(home) / "other").write_bytes(body)
    with pytest.raises(MediaFileRefused, match="not the 15 bytes"):
        read_media_file(str(_work(home)), "other", len(body), "0" * 64)


# --- the outbox: the core writes a file for the plugin to upload ------------------------


def test_an_outbox_name_the_plugin_planted_as_a_symlink_is_replaced_not_followed(
    home: Path,
) -> None:
    # Before: open(O_TRUNC) followed it and overwrote the core's key.
    outbox = _work(home) / "outbox"
    outbox.mkdir()
    (outbox / "abc").symlink_to(home / "keys" / "token.key")
    write_outbox_file(str(_work(home)), "outbox/abc", b"an image")
    assert (home / "keys" / "token.key").read_bytes() == KEY
    assert not (outbox / "abc").is_symlink()
    assert (outbox / "abc").read_bytes() == b"an image"
    remove_outbox_file(str(_work(home)), "outbox/abc")
    assert not (outbox / "abc").exists()


def test_an_outbox_directory_planted_as_a_symlink_is_refused(home: Path) -> None:
    (_work(home) / "outbox").symlink_to(home / "keys")
    with pytest.raises(OSError):
        write_outbox_file(str(_work(home)), "outbox/token.key", b"an image")
    assert (home / "keys" / "token.key").read_bytes() == KEY
    remove_outbox_file(str(_work(home)), "outbox/token.key")  # nothing removed through it
    assert (home / "keys" / "token.key").read_bytes() == KEY
    with pytest.raises(MediaFileRefused):
        write_outbox_file(str(_work(home)), "../../keys/token.key", b"x")
    assert (home / "keys" / "token.key").read_bytes() == KEY
