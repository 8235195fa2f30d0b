"""Every shipped setting says when a change takes effect, and the
daemon's --gateway-port help says that it wins over gateway.port."""

from __future__ import annotations

import pytest

from naga_core.cli import main as cli_main
from naga_core.cli._kernel_cmds import TAKES_EFFECT
from naga_core.kernel import DEFAULT_SETTINGS


def test_every_setting_says_when_it_takes_effect() -> None:
    assert sorted(TAKES_EFFECT) == sorted(spec.name for spec in DEFAULT_SETTINGS)


def test_the_gateway_port_flag_says_it_wins_over_the_setting(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        cli_main(["daemon", "start", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "it wins over the gateway.port setting" in help_text
