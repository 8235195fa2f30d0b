"""What one plugin may reach: :class:`EgressPolicy`.

Two checks, in this order. The *target* (before any lookup): the host and
port named in the CONNECT must be one of the plugin's destinations (its
manifest's egress, which the owner consented to by enabling that plugin,
or the core's own settings for the plugins it writes). The *addresses*
(after the lookup): every address the name resolves to is checked, and
only addresses a plugin may reach are dialled; the proxy connects to the
address it checked, never to the name again (no DNS rebinding between the
check and the connect). Loopback, private, link-local, shared, multicast,
reserved and unspecified addresses are refused, except for host names the
owner listed as loopback stand-ins (``egress.loopback_hosts``: a test or
a local server the owner points a plugin at), which may resolve to
loopback only.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from naga.plugin import Manifest
from naga_core.egress._errors import EgressRefused, RefusalReason

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def normal_host(host: str) -> str:
    """Lower case, no trailing dot, IPv6 without brackets."""
    host = host.strip().lower().rstrip(".")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host


@dataclass(frozen=True, slots=True)
class Destination:
    host: str
    port: int

    @classmethod
    def of(cls, host: str, port: int) -> Destination:
        return cls(normal_host(host), port)

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def forbidden(address: IPAddress) -> str | None:
    """Why a plugin may not reach ``address``, or None."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return forbidden(address.ipv4_mapped)
    checks = (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
        ("shared (CGNAT)", address in ipaddress.ip_network("100.64.0.0/10")),
    )
    for name, hit in checks:
        if hit:
            return name
    if not address.is_global:
        return "not globally routable"
    return None


#: The ports an open host (``open_hosts``) may be reached on.
OPEN_PORTS = frozenset({80, 443})


def _matches(pattern: str, host: str) -> bool:
    """``*`` is any host; ``*.example.com`` its subdomains; else the host itself."""
    if pattern == "*":
        return True
    if pattern.startswith("*."):
        return host.endswith(pattern[1:])
    return host == pattern


@dataclass(frozen=True, slots=True)
class EgressPolicy:
    """The destinations of one plugin and the loopback stand-ins."""

    plugin: str
    destinations: frozenset[Destination]
    loopback_hosts: frozenset[str] = frozenset()
    #: Host patterns reachable on :data:`OPEN_PORTS` beyond the destinations
    #: (``*`` any host, ``example.com``, ``*.example.com``): the web tool's
    #: ``web.allowed_hosts``. The address checks apply all the same.
    open_hosts: frozenset[str] = frozenset()

    @classmethod
    def of(
        cls,
        plugin: str,
        destinations: Iterable[tuple[str, int]],
        *,
        loopback_hosts: Iterable[str] = (),
        open_hosts: Iterable[str] = (),
    ) -> EgressPolicy:
        return cls(
            plugin,
            frozenset(Destination.of(h, p) for h, p in destinations),
            frozenset(normal_host(h) for h in loopback_hosts if h.strip()),
            frozenset(normal_host(h) for h in open_hosts if h.strip()),
        )

    @classmethod
    def for_manifest(
        cls,
        manifest: Manifest,
        *,
        loopback_hosts: Iterable[str] = (),
        open_hosts: Iterable[str] = (),
    ) -> EgressPolicy:
        """A plugin's declared egress: the destinations the owner consented
        to when enabling it (the manifest installed is the one enabled)."""
        return cls.of(
            manifest.name,
            [(e.host, e.port) for e in manifest.egress],
            loopback_hosts=loopback_hosts,
            open_hosts=open_hosts,
        )

    def _open(self, target: Destination) -> bool:
        """An open host on a web port; a loopback stand-in (a test's or the
        owner's local server standing in for a public host) on any port."""
        if not any(_matches(p, target.host) for p in self.open_hosts):
            return False
        return target.port in OPEN_PORTS or target.host in self.loopback_hosts

    def check_target(self, host: str, port: int) -> Destination:
        """The destination, if this plugin may ask for it; else refused."""
        wanted = Destination.of(host, port)
        if wanted in self.destinations or self._open(wanted):
            return wanted
        if any(_matches(p, wanted.host) for p in self.open_hosts):
            raise EgressRefused(
                RefusalReason.PORT_NOT_ALLOWED,
                f"plugin {self.plugin} may reach {wanted.host} only on port(s) "
                f"{', '.join(map(str, sorted(OPEN_PORTS)))}, not {port}",
            )
        if any(d.host == wanted.host for d in self.destinations):
            ports = sorted(d.port for d in self.destinations if d.host == wanted.host)
            raise EgressRefused(
                RefusalReason.PORT_NOT_ALLOWED,
                f"plugin {self.plugin} may reach {wanted.host} only on port(s) "
                f"{', '.join(map(str, ports))}, not {port}",
            )
        allowed = (
            ", ".join([*sorted(map(str, self.destinations)), *sorted(self.open_hosts)]) or "nothing"
        )
        raise EgressRefused(
            RefusalReason.HOST_NOT_ALLOWED,
            f"plugin {self.plugin} may not reach {wanted} (its egress: {allowed})",
        )

    def reachable(self, target: Destination, addresses: Iterable[str]) -> list[str]:
        """The resolved ``addresses`` the plugin may be connected to, in
        order; refused when none is."""
        stand_in = target.host in self.loopback_hosts
        ok: list[str] = []
        why: list[str] = []
        for text in addresses:
            try:
                address = ipaddress.ip_address(text.split("%", 1)[0])
            except ValueError:
                why.append(f"{text} (not an address)")
                continue
            reason = forbidden(address)
            # A stand-in may reach loopback only; any other host, no range.
            if (reason == "loopback") if stand_in else (reason is None):
                ok.append(text)
            elif stand_in:
                why.append(f"{text} (a loopback stand-in resolves to loopback only)")
            else:
                why.append(f"{text} ({reason})")
        if not ok:
            raise EgressRefused(
                RefusalReason.ADDRESS_FORBIDDEN,
                f"{target} resolves only to addresses plugin {self.plugin} may not reach: "
                + ", ".join(why),
            )
        return ok


__all__ = ["OPEN_PORTS", "Destination", "EgressPolicy", "IPAddress", "forbidden", "normal_host"]
