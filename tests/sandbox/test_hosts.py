"""The /etc/hosts an egress child gets in place of DNS (sandbox._hosts),
and the view's own files: made in the view's root, never through a shown
path into the host's directory."""

from __future__ import annotations

import socket

import pytest

from sandbox import _hosts, _mounts


def _lookup(table: dict[str, list[str]]) -> _hosts.Lookup:
    """A resolver answering from ``table`` (the peer: DNS), as getaddrinfo does."""

    def lookup(host: str, port: object, family: int = 0, kind: int = 0) -> list[tuple[object, ...]]:
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [
            (socket.AF_INET6 if ":" in a else socket.AF_INET, kind, 6, "", (a, 0))
            for a in table[host]
        ]

    return lookup  # pyright: ignore[reportReturnType]


def test_declared_names_get_the_addresses_resolved_at_launch() -> None:
    lookup = _lookup({"api.example.com": ["192.0.2.7", "2001:db8::7%eth0", "192.0.2.7"]})
    text = _hosts.hosts_file(["api.example.com", "203.0.113.9", "gone.example"], lookup=lookup)
    assert text.decode().splitlines() == [
        "127.0.0.1 localhost",
        "::1 localhost",
        "192.0.2.7 api.example.com",
        "2001:db8::7 api.example.com",
    ]


def test_a_name_that_would_break_the_file_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot be written"):
        _hosts.hosts_file(["evil.example #"], lookup=_lookup({}))


def test_the_view_gets_hosts_and_an_nsswitch_without_dns() -> None:
    files = dict(_hosts.view_files([], lookup=_lookup({})))
    assert set(files) == {"/etc/hosts", "/etc/nsswitch.conf"}
    assert b"dns" not in files["/etc/nsswitch.conf"]
    assert b"hosts: files\n" in files["/etc/nsswitch.conf"]


@pytest.mark.parametrize("path", ["/etc", "/usr/lib/planted", "relative", "/etc/../usr/x", "/"])
def test_a_view_file_inside_a_shown_path_is_refused(path: str) -> None:
    # Checked before anything is written: a file inside a bind-mounted path
    # would land in the host's directory.
    shown = [("/usr", False), ("/etc/ld.so.cache", False), ("/etc", False)]
    with pytest.raises(OSError, match="view file"):
        _mounts._write_file(path, b"x", shown)  # pyright: ignore[reportPrivateUsage]
