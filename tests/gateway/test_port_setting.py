"""``gateway.port`` through a real core: a core started without
``--gateway-port`` serves its gateway on the setting's port, and moves it
when the setting changes (a ledger entry says so once it serves there)."""

from __future__ import annotations

import trio

from naga.v1 import core_pb2 as cpb
from naga.v1 import kernel_pb2 as kpb
from naga_core._doctor import checks_for
from naga_core._home import Home
from naga_core.daemon import GatewayOptions
from naga_core.kernel._kernel import EFFECT_KIND
from tests.daemon.conftest import core_in_thread, home
from tests.gateway._ports import console_answers, free_ports, gateway_row

__all__ = ["home"]  # the fixture, used by name below


def test_the_gateway_follows_the_port_setting_when_no_flag_pins_it(home: str) -> None:
    first, second = free_ports(2)
    # The setting is the core's: set it once with a core that runs no gateway
    # (the default port belongs to the machine, not to the tests).
    with core_in_thread(home) as core, core.client() as c:
        c.set_setting_text("gateway.port", str(first))
        c.shutdown("port set")
        core.join()

    with core_in_thread(home, gateway=GatewayOptions(enabled=True)) as core:
        assert core.info.webchat_url == f"http://127.0.0.1:{first}/"
        trio.run(console_answers, first, home)
        with core.client() as c:
            events = c.subscribe(c.head().size, kinds=[EFFECT_KIND], timeout=30)
            c.set_setting_text("gateway.port", str(second))
            said = ""
            for event in events:  # until the core says the gateway moved
                if event.HasField("record"):
                    said = kpb.Effect.FromString(event.record.payload).description
                    if "moved from port" in said:
                        break
            events.cancel()
            assert said == f"gateway: moved from port {first} to {second} (gateway.port changed)"
            row = gateway_row(list(c.status().processes))
            assert row.state == cpb.PROCESS_STATE_RUNNING
            assert row.detail == f"http://127.0.0.1:{second}/"
            trio.run(console_answers, second, home)
            # `naga doctor` probes where the gateway is now, not the default.
            (port_check,) = [x for x in checks_for(Home(home)) if x.name == "webchat port"]
            probed = port_check.run()
            assert probed.ok, probed
            assert probed.detail == f"127.0.0.1:{second} is served (the running core's gateway)"
            c.shutdown("test done")
        assert not core.join().failed


def test_the_flag_wins_over_the_setting_for_its_run(home: str) -> None:
    pinned, setting = free_ports(2)
    with core_in_thread(home) as core, core.client() as c:
        c.set_setting_text("gateway.port", str(setting))
        c.shutdown("port set")
        core.join()
    with core_in_thread(home, gateway=GatewayOptions(enabled=True, port=pinned)) as core:
        assert core.info.webchat_url == f"http://127.0.0.1:{pinned}/"
        with core.client() as c:
            c.shutdown("test done")
        assert not core.join().failed
