"""The sandbox's egress-proxy option for plugins: no network of its own
(private network namespace, no TCP socket, no Landlock port), the proxy's
socket in its view and its path in the environment."""

from __future__ import annotations

import os
import tempfile

import sandbox
from sandbox import NetworkPolicy, Profile
from sandbox._plan import plan  # pyright: ignore[reportPrivateUsage]


def test_a_proxied_plugin_gets_a_private_netns_and_the_socket_in_its_view() -> None:
    with tempfile.TemporaryDirectory() as work, tempfile.TemporaryDirectory() as run:
        proxy = os.path.join(run, "p.sock")
        direct = Profile.plugin(work_dir=work, egress=[sandbox.Egress("api.example", 443)])
        proxied = Profile.plugin(
            work_dir=work, egress=[sandbox.Egress("api.example", 443)], egress_socket=proxy
        )
        assert direct.network is NetworkPolicy.EGRESS
        assert proxied.network is NetworkPolicy.CORE_ONLY
        assert proxied.network.private_netns
        assert proxied.connect_ports == ()
        assert proxied.egress_hosts == ("api.example",)
        assert proxied.egress_socket == proxy
        # No AF_INET socket: the seccomp policy of a plugin without egress.
        assert proxied.seccomp == Profile.plugin(work_dir=work).seccomp
        assert proxied.seccomp != direct.seccomp
        report = sandbox.detect()
        spec, _ = plan(proxied, report, target="m:f", args=[])
        if spec.HasField("view"):
            assert proxy in [p.path for p in spec.view.paths]
        assert spec.unshare_net == report.net_namespaces
        assert not spec.landlock.connect_ports
