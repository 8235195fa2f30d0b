"""Settings (the ``setting`` family) and the trust table (the ``trust``
family, INV-6 mode ratchet), by example and by property."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Generator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from naga.trust import UnknownTrustLevel
from naga_core.kernel._kernel import Actions, Change, Kernel, replay
from naga_core.kernel._settings import (
    DEFAULT_SETTINGS,
    SETTING_FAMILY,
    InvalidSetting,
    SettingError,
    Settings,
    SettingSpec,
    UnknownSetting,
)
from naga_core.kernel._state import KernelError, Scalar
from naga_core.kernel._trust import (
    TRUST_FAMILY,
    InvalidPeer,
    TrustEntry,
    TrustError,
    TrustLevel,
    TrustRaiseRefused,
    TrustTable,
    check_peer,
    trust_raises,
)
from naga_core.ledger import Ledger, SimulatedFileSystem
from tests.ledger_helpers import fixed_signer

_fast = hsettings(max_examples=200, derandomize=True, database=None, deadline=None)


@contextlib.contextmanager
def sim_kernel() -> Generator[tuple[Kernel, Ledger]]:
    """A kernel over a ledger on an in-memory disk (fast enough for hypothesis)."""
    with Ledger.open("/ledger", fixed_signer(), fs=SimulatedFileSystem()) as ledger:
        yield Kernel.open(ledger, Actions()), ledger


# --- settings, by example ----------------------------------------------------------------


def test_unset_settings_read_their_defaults() -> None:
    with sim_kernel() as (k, _):
        s = Settings(k)
        assert s.get("gateway.port") == 18789
        assert s.get_int("agent.max_steps") == 25
        assert s.get_text("model.provider") == ""  # unset: providers.json's default, else local
        assert s.get_text("lanes.queue_mode") == "followup"
        assert s.get_real("model.timeout_s") == 120.0
        assert [row.name for row in s.describe()] == sorted(spec.name for spec in DEFAULT_SETTINGS)
        assert not any(row.explicit for row in s.describe())


def test_set_journals_a_registration_and_reset_restores_the_default(tmp_path: Path) -> None:
    d = str(tmp_path / "ledger")
    with Ledger.open(d, fixed_signer()) as ledger:
        s = Settings(Kernel.open(ledger, Actions()))
        seq = s.set("agent.max_steps", 40)
        assert seq == 0
        assert s.get("agent.max_steps") == 40
        assert s.set("agent.max_steps", 40) is None  # already so: nothing journaled
        assert ledger.size == 1
        assert s.set("gateway.port", 18789) == 1  # the default, pinned explicitly
        assert {r.name: r.explicit for r in s.describe()}["gateway.port"]
    with Ledger.open(d, fixed_signer()) as ledger:  # the values live in the ledger
        k = Kernel.open(ledger, Actions())
        s = Settings(k)
        assert s.get("agent.max_steps") == 40
        assert s.reset("agent.max_steps") == 2
        assert s.get("agent.max_steps") == 25
        assert s.reset("agent.max_steps") is None
        k.rollback(1)  # undo the reset
        assert s.get("agent.max_steps") == 40


def test_a_real_setting_takes_an_int_and_stores_a_float() -> None:
    with sim_kernel() as (k, _):
        s = Settings(k)
        s.set("model.timeout_s", 30)
        assert k.state[(SETTING_FAMILY, "model.timeout_s")] == 30.0
        assert isinstance(s.get("model.timeout_s"), float)


@pytest.mark.parametrize(
    ("name", "value", "rule"),
    [
        ("agent.max_steps", 0, "an integer in 1..100"),
        ("agent.max_steps", 101, "an integer in 1..100"),
        ("agent.max_steps", True, "an integer in 1..100"),  # a bool is not an integer
        ("agent.max_steps", "10", "an integer in 1..100"),
        ("gateway.port", 80, "an integer in 1024..65535"),
        ("model.timeout_s", math.nan, "a finite real number in 1.0..3600.0"),
        ("model.timeout_s", math.inf, "a finite real number in 1.0..3600.0"),
        ("model.timeout_s", 10**400, "a finite real number in 1.0..3600.0"),
        ("model.provider", "Open AI", "matching ([A-Za-z0-9][A-Za-z0-9_.-]*)?"),
        ("model.provider", ".hidden", "matching ([A-Za-z0-9][A-Za-z0-9_.-]*)?"),
        ("model.provider", "a\nb", "printable text"),
        ("model.provider", "x" * 65, "at most 64 characters"),
        ("lanes.queue_mode", "later", "one of steer, followup, collect, interrupt"),
    ],
)
def test_an_invalid_value_is_refused_naming_setting_value_and_rule(
    name: str, value: Scalar, rule: str
) -> None:
    with sim_kernel() as (k, ledger):
        s = Settings(k)
        with pytest.raises(InvalidSetting) as info:
            s.set(name, value)
        message = str(info.value)
        assert name in message
        assert repr(value)[:20] in message
        assert rule in message
        assert (info.value.name, info.value.rule) == (name, s.spec(name).rule)
        assert isinstance(info.value, KernelError)
        assert ledger.size == 0
        assert s.get(name) == s.spec(name).default


def test_an_unknown_setting_is_refused_and_named() -> None:
    with sim_kernel() as (k, _):
        s = Settings(k)
        for call in (lambda: s.get("agent.max_stpes"), lambda: s.set("agent.max_stpes", 3)):
            with pytest.raises(UnknownSetting, match=r"'agent\.max_stpes'.*agent\.max_steps"):
                call()
        with pytest.raises(SettingError, match="is a integer, not a text or choice"):
            s.get_text("agent.max_steps")


def test_a_stored_value_that_breaks_the_rule_is_reported_and_the_default_applies() -> None:
    with sim_kernel() as (k, _):
        k.register(SETTING_FAMILY, "agent.max_steps", 1000)  # a raw write, bypassing Settings
        k.register(SETTING_FAMILY, "model.timeout_s", 30)  # an int where a real belongs
        s = Settings(k)
        assert s.get("agent.max_steps") == 25
        rows = {r.name: r for r in s.describe()}
        assert rows["agent.max_steps"].problem == (
            "setting agent.max_steps = 1000 refused: must be an integer in 1..100"
        )
        assert not rows["agent.max_steps"].explicit
        assert rows["model.timeout_s"].problem == "stored 30 is not a real"
        assert s.set("agent.max_steps", 30) is not None  # repairs it


def test_parse_reads_command_line_text() -> None:
    specs = {spec.name: spec for spec in DEFAULT_SETTINGS}
    assert specs["agent.max_steps"].parse("42") == 42
    assert specs["model.timeout_s"].parse("2.5") == 2.5
    assert specs["lanes.queue_mode"].parse("steer") == "steer"
    flag = SettingSpec.flag("agent.debug", False)
    assert [flag.parse(w) for w in ("on", "TRUE", "0", "no")] == [True, True, False, False]
    for spec, text in [
        (specs["agent.max_steps"], "4.0"),
        (specs["agent.max_steps"], "9" * 5000),
        (specs["model.timeout_s"], "nan"),
        (specs["model.timeout_s"], "fast"),
        (flag, "maybe"),
    ]:
        with pytest.raises(InvalidSetting):
            spec.parse(text)


def test_bad_spec_definitions_fail_at_definition() -> None:
    with pytest.raises(ValueError, match="dotted lowercase"):
        SettingSpec.integer("MaxSteps", 1)
    with pytest.raises(ValueError, match="the default breaks the rule"):
        SettingSpec.integer("agent.max_steps", 0, min=1)
    with pytest.raises(ValueError, match="min 5 > max 1"):
        SettingSpec.integer("agent.max_steps", 1, min=5, max=1)
    with pytest.raises(ValueError, match="non-empty and distinct"):
        SettingSpec.choice("lanes.queue_mode", "a", ["a", "a"])
    with sim_kernel() as (k, _), pytest.raises(ValueError, match="defined twice"):
        Settings(k, [DEFAULT_SETTINGS[0]] * 2)


def test_the_default_table_is_immutable() -> None:
    assert isinstance(DEFAULT_SETTINGS, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_SETTINGS[0].default = "other"  # type: ignore[misc]


# --- settings, by property ------------------------------------------------------------------

_SPECS = (
    *DEFAULT_SETTINGS,
    SettingSpec.flag("agent.debug", False),
    SettingSpec.integer("test.unbounded", 0),
    SettingSpec.real("test.ratio", 0.5, min=0.0, max=1.0),
)
_NAMES = tuple(spec.name for spec in _SPECS)
_ANY_VALUE = st.one_of(
    st.integers(min_value=-(1 << 70), max_value=1 << 70),
    st.integers(min_value=-5, max_value=70000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=80),
    st.sampled_from(["local", "openai", "steer", "collect", "Bad Name", ""]),
    st.binary(max_size=4),
)
_OPS = st.lists(
    st.tuples(
        st.sampled_from(("set", "set", "set", "reset")),
        st.sampled_from((*_NAMES, "no.such")),
        _ANY_VALUE,
    ),
    max_size=25,
)


@_fast
@given(_OPS)
def test_settings_round_trip_and_nothing_invalid_reaches_state(
    ops: list[tuple[str, str, Scalar]],
) -> None:
    with sim_kernel() as (k, ledger):
        s = Settings(k, _SPECS)
        model: dict[str, Scalar] = {}
        for op, name, value in ops:
            before = dict(k.state)
            try:
                if op == "set":
                    s.set(name, value)
                else:
                    s.reset(name)
            except SettingError:
                assert dict(k.state) == before  # a refusal changes nothing
                continue
            if op == "set":
                model[name] = s.spec(name).check(value)
            else:
                model.pop(name, None)
            assert s.get(name) == model.get(name, s.spec(name).default)
        stored = k.state.family(SETTING_FAMILY)
        assert stored == model
        for name, value in stored.items():
            spec = s.spec(name)
            assert type(spec.check(value)) is type(value)
            assert s.get(name) == value
            assert spec.parse(str(value)) == value  # what `naga config get` shows reads back
        assert replay(ledger).family(SETTING_FAMILY) == model


# --- trust, by example ----------------------------------------------------------------------


def test_trust_levels_are_ordered_and_named() -> None:
    assert TrustLevel.UNTRUSTED < TrustLevel.GUEST < TrustLevel.KNOWN < TrustLevel.OWNER
    assert [lvl.label for lvl in TrustLevel] == ["untrusted", "guest", "known", "owner"]
    assert TrustLevel.parse("known") is TrustLevel.KNOWN
    with pytest.raises(UnknownTrustLevel, match="'admin' is not a trust level"):
        TrustLevel.parse("admin")


def test_an_unknown_peer_is_untrusted_and_only_the_owner_raises_trust() -> None:
    with sim_kernel() as (k, ledger):
        t = TrustTable(k)
        assert t.level("wechat:wxid_abc") is TrustLevel.UNTRUSTED
        with pytest.raises(TrustRaiseRefused, match="from untrusted to known needs the owner"):
            t.set("wechat:wxid_abc", TrustLevel.KNOWN, by_owner=False)
        assert ledger.size == 0
        seq = t.set("wechat:wxid_abc", TrustLevel.KNOWN, by_owner=True, reason="my sister")
        assert t.level("wechat:wxid_abc") is TrustLevel.KNOWN
        assert k.state[(TRUST_FAMILY, "wechat:wxid_abc")] == "known"  # words in the ledger
        assert seq == 0
        assert t.set("wechat:wxid_abc", TrustLevel.KNOWN, by_owner=True) is None
        t.set("wechat:wxid_abc", TrustLevel.GUEST, by_owner=False)  # lowering needs nobody
        assert t.level("wechat:wxid_abc") is TrustLevel.GUEST


def test_lower_only_lowers_and_keeps_its_reason() -> None:
    with sim_kernel() as (k, _):
        t = TrustTable(k)
        t.set("webchat:loopback", TrustLevel.OWNER, by_owner=True)
        t.set("wechat:bob", TrustLevel.KNOWN, by_owner=True)
        with pytest.raises(TrustError, match="needs a reason"):
            t.lower("wechat:bob", TrustLevel.GUEST, " ")
        seq = t.lower("wechat:bob", TrustLevel.GUEST, "asked for the owner's files")
        assert seq is not None
        assert k.preview_rollback(seq - 1).changes == (
            Change(TRUST_FAMILY, "wechat:bob", "guest", "known"),
        )
        with pytest.raises(TrustRaiseRefused, match="cannot raise"):
            t.lower("wechat:bob", TrustLevel.KNOWN, "oops")
        assert t.lower("wechat:bob", TrustLevel.GUEST, "again") is None
        assert t.entries() == [
            TrustEntry("webchat:loopback", TrustLevel.OWNER),
            TrustEntry("wechat:bob", TrustLevel.GUEST),
        ]


def test_an_explicit_untrusted_entry_is_kept_and_garbage_reads_untrusted() -> None:
    with sim_kernel() as (k, _):
        t = TrustTable(k)
        assert t.set("wechat:spam", TrustLevel.UNTRUSTED, by_owner=False) is not None
        assert t.entries() == [TrustEntry("wechat:spam", TrustLevel.UNTRUSTED)]
        k.register(TRUST_FAMILY, "wechat:odd", "OWNER")  # not a label: fails closed
        assert t.level("wechat:odd") is TrustLevel.UNTRUSTED


@pytest.mark.parametrize(
    "peer",
    ["", "loopback", ":x", "WeChat:x", "wechat:", "wechat:a b", "wechat:a\x00", "w:" + "x" * 199],
)
def test_a_malformed_peer_id_is_refused(peer: str) -> None:
    with sim_kernel() as (k, _), pytest.raises(InvalidPeer):
        TrustTable(k).level(peer)


def test_valid_peer_ids() -> None:
    for peer in ("webchat:loopback", "wechat:wxid_abc", "wechat:名字", "w:" + "x" * 198):
        assert check_peer(peer) == peer


def test_trust_raises_finds_the_raises_in_a_list_of_changes() -> None:
    changes = [
        Change(TRUST_FAMILY, "wechat:a", None, "guest"),
        Change(TRUST_FAMILY, "wechat:b", "owner", "known"),
        Change(TRUST_FAMILY, "wechat:c", "known", None),
        Change(SETTING_FAMILY, "agent.max_steps", 1, 2),
    ]
    assert trust_raises(changes) == [changes[0]]


# --- trust, by property: the INV-6 ratchet -------------------------------------------------

_PEERS = ("webchat:loopback", "wechat:a", "wechat:b")
_LEVELS = st.sampled_from(list(TrustLevel))
_TRUST_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.sampled_from(_PEERS), _LEVELS, st.booleans()),
        st.tuples(st.just("lower"), st.sampled_from(_PEERS), _LEVELS, st.just(False)),
    ),
    max_size=30,
)


@_fast
@given(_TRUST_OPS)
def test_inv6_trust_never_rises_without_the_owner(
    ops: list[tuple[str, str, TrustLevel, bool]],
) -> None:
    with sim_kernel() as (k, ledger):
        t = TrustTable(k)
        for op, peer, level, by_owner in ops:
            before = {p: t.level(p) for p in _PEERS}
            size = ledger.size
            try:
                if op == "set":
                    t.set(peer, level, by_owner=by_owner)
                else:
                    t.lower(peer, level, "automatic")
            except TrustRaiseRefused:
                assert level > before[peer]
                assert not by_owner
                assert ledger.size == size
                continue
            after = {p: t.level(p) for p in _PEERS}
            for p in _PEERS:
                if p != peer:
                    assert after[p] == before[p]
            assert after[peer] == level
            if not by_owner:
                assert after[peer] <= before[peer]
        assert {e.peer: e.level for e in t.entries()} == {
            p: lvl for p, lvl in ((p, t.level(p)) for p in _PEERS) if (TRUST_FAMILY, p) in k.state
        }
