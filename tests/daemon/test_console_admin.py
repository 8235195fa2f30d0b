"""ConsoleAdminService on a real core (docs/adr/0029-console-owner-changes.md):
every method is refused to the gateway's token without the owner's console
login, with a forged or revoked one, and to other roles; with the owner's
login (redeemed by the gateway, as the console does) or the owner
credential it acts, and bad input is refused by name."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from google.protobuf.message import Message

from naga.sdk import Client, errors
from naga.tokens import RejectReason, Risk, TrustLevel
from naga.v1 import console_admin_pb2 as capb
from naga.v1 import console_pb2 as cnpb
from naga.v1 import core_pb2 as cpb
from naga.v1 import plugin_install_pb2 as ipb
from naga.v1 import skills_pb2 as skpb
from naga.v1 import wechat_pb2 as wpb
from naga.v1.status_pb2 import Refusal
from naga_core.daemon import POLICY
from tests.daemon.token_helpers import TokenCore, refused, token_core

_ADMIN = "/naga.v1.ConsoleAdminService/"

#: Every method with a request that is otherwise valid and its answer type.
CALLS: dict[str, tuple[Callable[[str], Message], type[Message]]] = {
    "RenameSession": (
        lambda s: capb.RenameSessionRequest(console_session=s, session="main", title="x"),
        capb.SessionChangeResponse,
    ),
    "ArchiveSession": (
        lambda s: capb.ArchiveSessionRequest(console_session=s, session="main", archived=True),
        capb.SessionChangeResponse,
    ),
    "ReadLog": (lambda s: capb.ReadLogRequest(console_session=s), capb.ReadLogResponse),
    "ChangeSetting": (
        lambda s: capb.ChangeSettingRequest(
            console_session=s, change=cpb.SetSettingRequest(name="agent.max_steps", text="7")
        ),
        cpb.SetSettingResponse,
    ),
    "SetPluginEnabled": (
        lambda s: capb.SetPluginEnabledRequest(console_session=s, name="fs", enabled=False),
        capb.SetPluginEnabledResponse,
    ),
    "ListProviders": (
        lambda s: capb.ListProvidersRequest(console_session=s),
        capb.ListProvidersResponse,
    ),
    "SetDefaultProvider": (
        lambda s: capb.SetDefaultProviderRequest(console_session=s, name="local"),
        capb.ListProvidersResponse,
    ),
    "WechatBind": (
        lambda s: capb.ConsoleWechatBindRequest(console_session=s, bind=wpb.WechatBindRequest()),
        wpb.WechatBindResponse,
    ),
    "WechatList": (
        lambda s: capb.ConsoleWechatListRequest(console_session=s),
        wpb.WechatListResponse,
    ),
    "PreviewInstall": (
        lambda s: capb.PreviewInstallRequest(console_session=s, source="/no/such/plugin"),
        capb.PreviewInstallResponse,
    ),
    "InstallPlugin": (
        lambda s: capb.ConsoleInstallRequest(
            console_session=s, source="/no/such/plugin", code_hash="0" * 64
        ),
        ipb.InstallPluginResponse,
    ),
    "SetTrust": (
        lambda s: capb.ConsoleSetTrustRequest(
            console_session=s,
            change=cpb.SetTrustRequest(peer="wechat:bot/amy", level=cpb.TRUST_LEVEL_KNOWN),
        ),
        cpb.SetTrustResponse,
    ),
    # skills17 (docs/adr/0044-console-skills-view.md)
    "ConsoleListSkills": (
        lambda s: capb.ConsoleListSkillsRequest(console_session=s, list=skpb.ListSkillsRequest()),
        skpb.ListSkillsResponse,
    ),
    "ConsoleShowSkill": (
        lambda s: capb.ConsoleShowSkillRequest(
            console_session=s, show=skpb.ShowSkillRequest(name="tidy-notes")
        ),
        skpb.ShowSkillResponse,
    ),
    "ConsoleSkillLog": (
        lambda s: capb.ConsoleSkillLogRequest(
            console_session=s, log=skpb.SkillLogRequest(name="tidy-notes")
        ),
        skpb.SkillLogResponse,
    ),
    # memory18 (docs/adr/0045-console-memory-delete.md)
    "ConsoleListMemory": (
        lambda s: capb.ConsoleListMemoryRequest(console_session=s),
        capb.ConsoleListMemoryResponse,
    ),
    "ConsoleDeleteMemory": (
        lambda s: capb.ConsoleDeleteMemoryRequest(console_session=s, id="mi-" + "0" * 16),
        capb.ConsoleDeleteMemoryResponse,
    ),
}


def test_every_admin_method_is_listed_here() -> None:
    assert {m for m in POLICY if m.startswith(_ADMIN)} == {_ADMIN + m for m in CALLS}


def _gateway(c: TokenCore) -> Client:
    return c.holder(c.mint("gateway", trust=TrustLevel.OWNER, risk=Risk.R4))


def _login(c: TokenCore, gateway: Client) -> str:
    code = c.owner.console_login().code
    answer = gateway.call(
        "/naga.v1.ConsoleService/RedeemLogin",
        cnpb.RedeemLoginRequest(code=code),
        cnpb.RedeemLoginResponse,
    )
    assert answer.verdict == cnpb.CONSOLE_VERDICT_OWNER
    return answer.session


@pytest.mark.parametrize("method", sorted(CALLS))
def test_the_gateway_without_the_owners_login_is_refused(home: str, method: str) -> None:
    make, answer = CALLS[method]
    with token_core(home) as c, _gateway(c) as gateway:
        real = _login(c, gateway)
        forged = real[:-4] + ("AAAA" if not real.endswith("AAAA") else "BBBB")
        size = c.owner.head().size
        for session, words in (
            ("", "the console must be logged in as the owner"),
            (forged, "is not the owner's now"),
        ):
            with pytest.raises(errors.PermissionDenied) as info:
                gateway.call(_ADMIN + method, make(session), answer)
            assert words in info.value.detail, info.value
            assert info.value.refusal == Refusal.REFUSAL_OWNER_REQUIRED
        assert c.owner.head().size == size  # nothing was written
        # A revoked login (a new console key) is refused too.
        c.owner.revoke_console_sessions("test")
        with pytest.raises(errors.PermissionDenied, match="is not the owner's now"):
            gateway.call(_ADMIN + method, make(real), answer)
        # Another role is refused by the policy before anything is read.
        with (
            c.holder(c.mint("executor")) as executor,
            refused(errors.TokenDenied, "PERMISSION_DENIED", RejectReason.WRONG_ROLE),
        ):
            executor.call(_ADMIN + method, make(real), answer)


def test_with_the_owners_login_the_gateway_changes_a_setting(home: str) -> None:
    with token_core(home) as c, _gateway(c) as gateway:
        login = _login(c, gateway)
        make, answer = CALLS["ChangeSetting"]
        done = gateway.call(_ADMIN + "ChangeSetting", make(login), answer)
        assert isinstance(done, cpb.SetSettingResponse)
        assert done.HasField("seq")
        assert c.owner.get_setting("agent.max_steps").value.integer == 7
        # The setting's rule still decides: a clear error, nothing written.
        bad = capb.ChangeSettingRequest(
            console_session=login, change=cpb.SetSettingRequest(name="agent.max_steps", text="-3")
        )
        with pytest.raises(
            errors.InvalidArgument, match=re.escape("setting agent.max_steps = -3 refused: must be")
        ):
            gateway.call(_ADMIN + "ChangeSetting", bad, cpb.SetSettingResponse)
        unknown = capb.ChangeSettingRequest(
            console_session=login, change=cpb.SetSettingRequest(name="no.such", text="1")
        )
        with pytest.raises(errors.NotFound, match=r"no\.such"):
            gateway.call(_ADMIN + "ChangeSetting", unknown, cpb.SetSettingResponse)


def test_with_the_owners_login_the_gateway_raises_a_peer_as_the_cli_does(home: str) -> None:
    """The console's trust change is KernelService.SetTrust as the owner:
    the same ledger effect (description and reason) as `naga trust set`,
    raising allowed (INV-6), and the trust table's rule for bad peers."""
    with token_core(home) as c, _gateway(c) as gateway:
        login = _login(c, gateway)
        change = cpb.SetTrustRequest(
            peer="wechat:bot/amy", level=cpb.TRUST_LEVEL_KNOWN, reason="met in person"
        )
        req = capb.ConsoleSetTrustRequest(console_session=login, change=change)
        done = gateway.call(_ADMIN + "SetTrust", req, cpb.SetTrustResponse)
        assert (done.entry.peer, done.entry.level, done.entry.explicit) == (
            "wechat:bot/amy",
            cpb.TRUST_LEVEL_KNOWN,
            True,
        )
        assert done.HasField("seq")
        assert c.owner.get_trust("wechat:bot/amy").level == cpb.TRUST_LEVEL_KNOWN
        by_cli = c.owner.set_trust("wechat:bot/bob", "known", by_owner=True, reason="met in person")
        entries = {e.seq: e for e in c.owner.history(10).entries}
        console, cli = entries[done.seq], entries[by_cli.seq]
        assert (console.kind, console.form) == (cli.kind, cli.form)
        assert console.description == cli.description.replace("bob", "amy")
        assert "met in person" in console.description
        # The same level again: no entry.
        again = gateway.call(_ADMIN + "SetTrust", req, cpb.SetTrustResponse)
        assert not again.HasField("seq")
        # The gateway's own by_owner is not the proof; a request without the
        # login asserting it is refused like any other.
        forged = capb.ConsoleSetTrustRequest(
            change=cpb.SetTrustRequest(
                peer="wechat:bot/eve", level=cpb.TRUST_LEVEL_OWNER, by_owner=True
            )
        )
        with pytest.raises(errors.PermissionDenied, match="logged in as the owner"):
            gateway.call(_ADMIN + "SetTrust", forged, cpb.SetTrustResponse)
        assert c.owner.get_trust("wechat:bot/eve").level == cpb.TRUST_LEVEL_UNTRUSTED
        bad = capb.ConsoleSetTrustRequest(
            console_session=login,
            change=cpb.SetTrustRequest(peer="no colon", level=cpb.TRUST_LEVEL_GUEST),
        )
        with pytest.raises(errors.InvalidArgument, match=r"is not <channel>:<id>"):
            gateway.call(_ADMIN + "SetTrust", bad, cpb.SetTrustResponse)
        no_level = capb.ConsoleSetTrustRequest(
            console_session=login, change=cpb.SetTrustRequest(peer="wechat:bot/amy")
        )
        with pytest.raises(errors.InvalidArgument, match="level"):
            gateway.call(_ADMIN + "SetTrust", no_level, cpb.SetTrustResponse)


def test_no_providers_file_is_said_apart_from_a_refused_one(home: str) -> None:
    """A new home has no providers.json: the embedded model answers, and
    the console shows that as the normal state, not as an error."""
    with token_core(home) as c:
        got = c.owner.providers()
        assert (got.no_file, got.in_use, list(got.providers)) == (True, "local", [])
        creds = Path(home, "credentials")
        creds.mkdir(mode=0o700, exist_ok=True)
        (creds / "providers.json").write_text("not json")
        os.chmod(creds / "providers.json", 0o600)
        refused = c.owner.providers()
        assert (refused.no_file, refused.in_use) == (False, "local")
        assert refused.problem


def test_providers_are_listed_without_keys_and_a_bad_choice_is_refused(home: str) -> None:
    Path(home).mkdir(mode=0o700, exist_ok=True)
    creds = Path(home, "credentials")
    creds.mkdir(mode=0o700)
    secret = "sk-never-shown-0123456789"
    path = creds / "providers.json"
    path.write_text(
        '{"default": "a", "providers": {'
        f'"a": {{"api": "openai", "base_url": "https://api.example.com/v1", "api_key": "{secret}", '
        '"model": "m1"}, '
        '"b": {"api": "anthropic", "base_url": "https://b.example.org", "api_key": "k2", '
        '"model": "m2", "context_window": 200000, "vision": true}}}'
    )
    os.chmod(path, 0o600)
    with token_core(home) as c:
        got = c.owner.providers()
        assert secret not in str(got)
        assert [(p.name, p.host, p.in_use, p.file_default) for p in got.providers] == [
            ("a", "api.example.com", True, True),
            ("b", "b.example.org", False, False),
        ]
        assert [p.vision for p in got.providers] == [False, True]
        assert (got.in_use, got.problem, got.no_file) == ("a", "", False)
        switched = c.owner.call(
            _ADMIN + "SetDefaultProvider",
            capb.SetDefaultProviderRequest(name="b"),
            capb.ListProvidersResponse,
        )
        assert switched.in_use == "b"
        assert c.owner.get_setting("model.provider").value.text == "b"
        with pytest.raises(errors.InvalidArgument, match="'nosuch' is not a provider of"):
            c.owner.call(
                _ADMIN + "SetDefaultProvider",
                capb.SetDefaultProviderRequest(name="nosuch"),
                capb.ListProvidersResponse,
            )
        assert c.owner.get_setting("model.provider").value.text == "b"


def test_the_log_page_filters_by_level_and_component_and_pages(home: str) -> None:
    with token_core(home) as c:
        log = Path(home, "run", "core.log")
        lines = [
            "2026-12-01 10:00:00,000 INFO naga.core serving",
            "2026-12-01 10:00:01,000 WARNING naga.gateway slow client",
            "2026-12-01 10:00:02,000 ERROR naga.core.agent a turn failed",
            "Traceback (most recent call last):",
            '  File "x.py", line 1',
            "2026-12-01 10:00:03,000 INFO naga.supervisor plugin:fs: started",
            "2026-12-01 10:00:04 an older line of another shape",
        ]
        log.write_text("\n".join(lines) + "\n")
        every = c.owner.core_log(capb.ReadLogRequest())
        assert every.total == 7
        assert [ln.number for ln in every.lines] == [7, 6, 5, 4, 3, 2, 1]
        errs = c.owner.core_log(capb.ReadLogRequest(min_level=capb.LOG_LEVEL_ERROR))
        # The traceback stays with its error.
        assert [ln.message for ln in errs.lines] == [
            '  File "x.py", line 1',
            "Traceback (most recent call last):",
            "a turn failed",
        ]
        core = c.owner.core_log(capb.ReadLogRequest(component="naga.core"))
        assert {ln.component for ln in core.lines} == {"naga.core", "naga.core.agent"}
        page = c.owner.core_log(capb.ReadLogRequest(limit=2))
        assert [ln.number for ln in page.lines] == [7, 6]
        assert page.more
        nxt = c.owner.core_log(capb.ReadLogRequest(limit=2, before=page.next_before))
        assert [ln.number for ln in nxt.lines] == [5, 4]
        assert "naga.gateway" in every.components
        with pytest.raises(errors.InvalidArgument, match="limit 501 is above"):
            c.owner.core_log(capb.ReadLogRequest(limit=501))
        with pytest.raises(errors.InvalidArgument, match="min_level 99"):
            c.owner.core_log(capb.ReadLogRequest(min_level=99))  # type: ignore[arg-type]


def test_rename_and_archive_refuse_unknown_sessions_and_bad_titles(home: str) -> None:
    with token_core(home) as c:
        with pytest.raises(errors.InvalidArgument, match="no session named 'nosuch'"):
            c.owner.rename_session("nosuch", "x")
        with pytest.raises(errors.InvalidArgument, match="control characters"):
            c.owner.rename_session("main", "two\nlines")
        with pytest.raises(errors.InvalidArgument, match="at most 80"):
            c.owner.rename_session("main", "x" * 81)
        with pytest.raises(errors.InvalidArgument, match="is not a session name"):
            c.owner.archive_session("Bad Name")
