"""The core's egress proxies, one per plugin that asks: :class:`EgressProxies`.

Each plugin gets its own socket (``$NAGA_HOME/run/egress/<digest of name>.sock``, the
directory 0700, the socket 0600), so the proxy knows who connects from
which socket alone: a plugin cannot claim another's destinations. The
socket is shown in that plugin's sandbox view and nowhere else.

Refusals are journaled (``note``, a ledger entry) at most once per plugin,
target and reason within ``NOTE_WINDOW_S``; the log has every one. A
plugin that hammers a forbidden host cannot grow the ledger.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import logging
import os
from collections.abc import Awaitable, Callable, Iterable

import trio

from naga.plugin import Manifest
from naga_core.egress._errors import EgressError
from naga_core.egress._policy import EgressPolicy, normal_host
from naga_core.egress._proxy import EgressEvent, EgressProxy, Resolver, resolve
from naga_core.errors import NagaError

log = logging.getLogger("naga.egress")

#: Directory under ``$NAGA_HOME/run`` holding the sockets.
EGRESS_DIR = "egress"
#: A refusal of the same plugin, target and reason is journaled once in this window.
NOTE_WINDOW_S = 60.0
_MAX_SOCKET_PATH_BYTES = 107


class EgressProxies:
    """Start with ``await nursery.start(proxies.serve)``; then :meth:`open`."""

    def __init__(
        self,
        run_dir: str,
        *,
        note: Callable[[str], Awaitable[object]] | None = None,
        resolver: Resolver = resolve,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self.directory = os.path.join(run_dir, EGRESS_DIR)
        self._note = note
        self._resolver = resolver
        self._clock = clock
        self._proxies: dict[str, tuple[EgressProxy, trio.CancelScope]] = {}
        self._noted: dict[tuple[str, str, str], float] = {}
        self._nursery: trio.Nursery | None = None
        #: Every connection event, newest last (bounded): for status and tests.
        self.events: list[EgressEvent] = []

    async def serve(self, *, task_status: trio.TaskStatus[EgressProxies]) -> None:
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        os.chmod(self.directory, 0o700)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started(self)
                await trio.sleep_forever()
        finally:
            # Each proxy unlinks its socket as it ends; a clean stop leaves
            # the run directory as it found it. A directory still holding
            # something (a socket a kill left) stays for the next start.
            with contextlib.suppress(OSError):
                os.rmdir(self.directory)

    def socket_path(self, plugin: str) -> str:
        # Named by a digest of the plugin's name, not the name: a socket
        # path has 107 bytes, and a name like ``provider-fake@1`` under a
        # long home went past it (the provider could not start).
        digest = hashlib.sha256(plugin.encode()).hexdigest()[:12]
        path = os.path.join(self.directory, f"{digest}.sock")
        if len(os.fsencode(path)) > _MAX_SOCKET_PATH_BYTES:
            raise EgressError(
                f"the egress socket path {path} is longer than a Unix socket allows "
                f"({_MAX_SOCKET_PATH_BYTES} bytes): use a shorter NAGA_HOME"
            )
        return path

    async def open(self, plugin: str, policy: Callable[[], EgressPolicy]) -> str:
        """The socket of ``plugin``'s proxy, started if it is not running,
        its policy (asked per connection) replaced if it is (on the loop)."""
        running = self._proxies.get(plugin)
        if running is not None:
            running[0].policy = policy
            return running[0].path
        if self._nursery is None:
            raise EgressError("the egress proxies are not serving")
        proxy = EgressProxy(
            self.socket_path(plugin), policy, on_event=self._seen, resolver=self._resolver
        )
        scope = trio.CancelScope()

        async def run(*, task_status: trio.TaskStatus[EgressProxy]) -> None:
            with scope:
                await proxy.serve(task_status=task_status)

        await self._nursery.start(run)
        self._proxies[plugin] = (proxy, scope)
        return proxy.path

    def policy(self, plugin: str) -> EgressPolicy | None:
        running = self._proxies.get(plugin)
        return None if running is None else running[0].policy()

    def close(self, plugin: str) -> None:
        """Stop ``plugin``'s proxy (its open tunnels end with it)."""
        running = self._proxies.pop(plugin, None)
        if running is not None:
            running[1].cancel()

    def _seen(self, event: EgressEvent) -> None:
        self.events.append(event)
        del self.events[:-1000]
        if event.outcome != "refused" or self._note is None or self._nursery is None:
            return
        assert event.reason is not None
        key = (event.plugin, event.target, event.reason.value)
        now = self._clock()
        last = self._noted.get(key)
        if last is not None and now - last < NOTE_WINDOW_S:
            return
        self._noted[key] = now
        self._nursery.start_soon(self._journal, event.line())

    async def _journal(self, text: str) -> None:
        assert self._note is not None
        try:
            await self._note(text)
        except NagaError:  # the core is stopping; the log keeps the line
            log.exception("cannot journal %r", text)

    def opener(
        self,
        loopback_hosts: Callable[[], Iterable[str]],
        open_hosts: Callable[[Manifest], Iterable[str]] = lambda _: (),
    ) -> Callable[[Manifest], Awaitable[str]]:
        """For the plugin host: a manifest's proxy socket, its destinations
        the manifest's egress (and ``open_hosts``: the web tool's allowed
        hosts), the loopback stand-ins read per connection."""

        async def open_for(manifest: Manifest) -> str:
            return await self.open(
                manifest.name,
                lambda: EgressPolicy.for_manifest(
                    manifest, loopback_hosts=loopback_hosts(), open_hosts=open_hosts(manifest)
                ),
            )

        return open_for

    def provider_opener(
        self, loopback_hosts: Callable[[], Iterable[str]]
    ) -> Callable[[str, Manifest], Awaitable[str]]:
        """For the model-provider workers: one proxy per worker (``key``),
        its destination the provider's host and port from providers.json.
        A host the owner wrote there as loopback itself (``localhost``,
        127.0.0.0/8, ``::1``: a local server, the embedded model) may be
        reached on loopback: the owner named that address; a name that only
        resolves to loopback is still refused."""

        async def open_for(key: str, manifest: Manifest) -> str:
            named = [e.host for e in manifest.egress if _names_loopback(e.host)]
            return await self.open(
                key,
                lambda: EgressPolicy.for_manifest(
                    manifest, loopback_hosts=[*loopback_hosts(), *named]
                ),
            )

        return open_for


def _names_loopback(host: str) -> bool:
    host = normal_host(host)
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


__all__ = ["EGRESS_DIR", "NOTE_WINDOW_S", "EgressProxies"]
