"""The console's login codes and session credentials (naga_core.daemon
ConsoleLogins) against a virtual clock: a code logs in once and only in
time; a session is the owner's until it expires or the key changes; any
change to its bytes makes it nobody's."""

from __future__ import annotations

import os
import secrets
import stat

import pytest
from hypothesis import given
from hypothesis import strategies as st

from naga.v1 import console_pb2 as cnpb
from naga_core._home import Home
from naga_core.daemon import ConsoleKeyError, ConsoleLogins, console_key_path
from naga_core.daemon._console_login import (
    CODE_TTL_NS,
    SESSION_TTL_NS,
    load_console_key,
    write_console_key,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000 * 10**9

    def __call__(self) -> int:
        return self.now


def _logins() -> tuple[ConsoleLogins, Clock]:
    clock = Clock()
    return ConsoleLogins(secrets.token_bytes(32), clock=clock), clock


def test_a_code_logs_in_once_and_only_in_time() -> None:
    logins, clock = _logins()
    code, expires = logins.issue()
    assert expires == clock.now + CODE_TTL_NS
    first = logins.redeem(code)
    assert first.verdict == cnpb.CONSOLE_VERDICT_OWNER
    assert first.expires_ns == clock.now + SESSION_TTL_NS
    assert logins.redeem(code).verdict == cnpb.CONSOLE_VERDICT_UNKNOWN
    late, _ = logins.issue()
    clock.now += CODE_TTL_NS
    assert logins.redeem(late).verdict == cnpb.CONSOLE_VERDICT_EXPIRED
    assert logins.redeem("x").verdict == cnpb.CONSOLE_VERDICT_MALFORMED
    assert logins.redeem("a" * 32).verdict == cnpb.CONSOLE_VERDICT_UNKNOWN


def test_a_session_is_the_owners_until_it_expires_or_the_key_changes() -> None:
    logins, clock = _logins()
    session = logins.redeem(logins.issue()[0]).session
    assert logins.check(session) == cnpb.CONSOLE_VERDICT_OWNER
    # Another instance (another key) does not take it.
    assert _logins()[0].check(session) == cnpb.CONSOLE_VERDICT_UNKNOWN
    clock.now += SESSION_TTL_NS - 1
    assert logins.check(session) == cnpb.CONSOLE_VERDICT_OWNER
    clock.now += 1
    assert logins.check(session) == cnpb.CONSOLE_VERDICT_EXPIRED
    clock.now -= SESSION_TTL_NS
    pending, _ = logins.issue()
    logins.rekey(secrets.token_bytes(32))
    assert logins.check(session) == cnpb.CONSOLE_VERDICT_UNKNOWN
    assert logins.redeem(pending).verdict == cnpb.CONSOLE_VERDICT_UNKNOWN, "codes end too"


@given(st.data())
def test_any_change_to_a_session_makes_it_nobodys(data: st.DataObject) -> None:
    logins, _ = _logins()
    session = logins.redeem(logins.issue()[0]).session
    at = data.draw(st.integers(0, len(session) - 1), label="position")
    ch = data.draw(st.sampled_from("ABCxyz019-_."), label="character")
    changed = session[:at] + ch + session[at + 1 :]
    if changed != session:
        assert logins.check(changed) != cnpb.CONSOLE_VERDICT_OWNER


def test_the_key_file_is_0600_and_a_loose_one_is_refused(tmp_path: os.PathLike[str]) -> None:
    home = Home(str(tmp_path))
    key = load_console_key(home)
    path = console_key_path(home)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert load_console_key(home) == key
    assert write_console_key(home, replace=True) != key
    os.chmod(path, 0o644)
    with pytest.raises(ConsoleKeyError, match="must be 0600"):
        load_console_key(home)
