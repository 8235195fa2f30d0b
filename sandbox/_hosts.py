"""Name resolution for a child on the host network (an egress plugin)
without DNS: its view's ``/etc/hosts`` holds the hosts its manifest
declares, resolved by the launcher, and its ``/etc/nsswitch.conf`` says
to look nowhere else.

Why: Landlock's network rules cover TCP only, so a child that may make a
UDP socket may send datagrams to any host and port, loopback included.
DNS was the one reason such a child had UDP; with its names resolved
here it has none (seccomp refuses every AF_INET/AF_INET6 socket but TCP).
An address is resolved once per launch: a worker restarted sees a moved
host's new address, a long-lived one keeps the address it started with
(docs/adr/0035-sec11-udp-and-shell-cgroups.md).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable, Sequence

#: Written over the child's view: hosts from /etc/hosts only, never DNS.
NSSWITCH = b"passwd: files\ngroup: files\nhosts: files\n"
HOSTS_PATH = "/etc/hosts"
NSSWITCH_PATH = "/etc/nsswitch.conf"

Lookup = Callable[..., Sequence[tuple[object, object, object, object, tuple[object, ...]]]]


def _addresses(host: str, lookup: Lookup) -> list[str]:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return []  # an address needs no entry: it resolves to itself
    try:
        found = lookup(host, None, 0, socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []  # unresolvable now: the child's lookup fails, as it would have
    addresses: list[str] = []
    for *_, sockaddr in found:
        address = str(sockaddr[0]).partition("%")[0]  # no IPv6 zone in /etc/hosts
        if address not in addresses:
            addresses.append(address)
    return addresses


def hosts_file(hosts: Iterable[str], *, lookup: Lookup = socket.getaddrinfo) -> bytes:
    """``/etc/hosts`` for a child allowed ``hosts``: localhost, then each
    declared name with the addresses it resolves to now (none: left out)."""
    lines = ["127.0.0.1 localhost", "::1 localhost"]
    for host in dict.fromkeys(hosts):
        if any(c.isspace() or c == "#" for c in host):
            raise ValueError(f"egress host {host!r} cannot be written into /etc/hosts")
        lines += [f"{address} {host}" for address in _addresses(host, lookup)]
    return ("\n".join(lines) + "\n").encode("utf-8")


def view_files(
    hosts: Iterable[str], *, lookup: Lookup = socket.getaddrinfo
) -> list[tuple[str, bytes]]:
    """The files a host-network child's view gets: its hosts and nsswitch."""
    return [(HOSTS_PATH, hosts_file(hosts, lookup=lookup)), (NSSWITCH_PATH, NSSWITCH)]


__all__ = ["HOSTS_PATH", "NSSWITCH", "NSSWITCH_PATH", "hosts_file", "view_files"]
