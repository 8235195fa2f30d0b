"""Bad input to the authorization package gets a clear, specific error:
caveats, requests and mint arguments that cannot be built, and the token
root key file (created once 0600, refused when it is anything else)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from naga_core._home import Home
from naga_core.authz import (
    AuthzError,
    BudgetCeiling,
    ExpiresAt,
    InvalidCaveat,
    InvalidRequest,
    Request,
    Risk,
    RiskCeiling,
    RoleIs,
    RootKey,
    SessionIs,
    TokenKeyError,
    ToolsAllowed,
    TrustCeiling,
    load_token_key,
    token_key_path,
)
from naga_core.authz._token import mint_token
from naga_core.errors import ConfigError
from naga_core.kernel import TrustLevel
from tests.authz_helpers import KEY, World

# --- building caveats and requests -------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda: ExpiresAt(-1),
        lambda: ExpiresAt(True),  # type: ignore[arg-type]
        lambda: RoleIs(""),
        lambda: RoleIs("Gateway"),
        lambda: SessionIs(""),
        lambda: SessionIs("a\tb"),
        lambda: SessionIs("x" * 129),
        lambda: ToolsAllowed.of(["ok", "not ok"]),
        lambda: ToolsAllowed.of([f"t{i}" for i in range(33)]),
        lambda: ToolsAllowed(("b", "a")),
        lambda: ToolsAllowed.of(["x" * 65]),
        lambda: RiskCeiling(3),  # type: ignore[arg-type]
        lambda: TrustCeiling(Risk.R1),  # type: ignore[arg-type]
        lambda: BudgetCeiling(-1),
        lambda: BudgetCeiling(1 << 63),
    ],
)
def test_a_bad_caveat_cannot_be_built(build: object) -> None:
    with pytest.raises(InvalidCaveat):
        build()  # type: ignore[operator]


@pytest.mark.parametrize(
    "fields",
    [
        {"role": "Bad Role"},
        {"session": ""},
        {"tool": "a b"},
        {"budget": -1},
        {"budget": 1.5},
        {"now_ns": -5},
        {"risk": 2},
    ],
)
def test_a_bad_request_cannot_be_built(fields: dict[str, object]) -> None:
    base: dict[str, object] = {
        "role": "executor",
        "session": None,
        "tool": None,
        "risk": Risk.R0,
        "budget": 0,
        "now_ns": 0,
    }
    with pytest.raises(InvalidRequest, match="bad request"):
        Request(**{**base, **fields})  # type: ignore[arg-type]


def test_minting_refuses_bad_arguments() -> None:
    authority = World().authority()
    with pytest.raises(InvalidCaveat, match="principal"):
        authority.mint("executor", trust=TrustLevel.GUEST, risk=Risk.R0, principal="bob")
    with pytest.raises(InvalidCaveat, match="lifetime"):
        authority.mint("executor", trust=TrustLevel.GUEST, risk=Risk.R0, ttl_ns=0)


# --- the root key file -------------------------------------------------------------------


def test_the_root_key_is_created_once_0600_and_read_back(tmp_path: Path) -> None:
    home = Home(str(tmp_path / "home"))
    home.ensure()
    with pytest.raises(TokenKeyError, match="no token root key"):
        load_token_key(home, create=False)
    key = load_token_key(home, create=True)
    path = token_key_path(home)
    assert path == os.path.join(home.root, "keys", "token.key")
    st = os.stat(path)
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_size == 32
    assert load_token_key(home, create=True) == key == load_token_key(home, create=False)
    assert key.secret not in repr(key).encode()
    assert key.secret.hex() not in repr(key)
    assert [n for n in os.listdir(home.keys_dir) if n.endswith(".tmp")] == []


def test_a_root_key_file_that_others_can_read_is_refused(tmp_path: Path) -> None:
    home = Home(str(tmp_path))
    load_token_key(home, create=True)
    os.chmod(token_key_path(home), 0o640)
    with pytest.raises(TokenKeyError, match=r"mode 0640.*chmod 600") as info:
        load_token_key(home, create=True)
    assert isinstance(info.value, ConfigError)


def test_a_root_key_file_of_the_wrong_size_is_refused(tmp_path: Path) -> None:
    home = Home(str(tmp_path))
    os.makedirs(home.keys_dir, mode=0o700)
    for size in (0, 31, 33, 64):
        fd = os.open(token_key_path(home), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, b"k" * size)
        os.close(fd)
        with pytest.raises(TokenKeyError, match=f"holds {size} bytes"):
            load_token_key(home, create=True)


def test_a_root_key_symlink_is_refused(tmp_path: Path) -> None:
    home = Home(str(tmp_path / "home"))
    os.makedirs(home.keys_dir, mode=0o700)
    target = tmp_path / "elsewhere.key"
    target.write_bytes(b"k" * 32)
    target.chmod(0o600)
    os.symlink(target, token_key_path(home))
    with pytest.raises(TokenKeyError, match="cannot open"):
        load_token_key(home, create=True)


def test_a_root_key_must_be_32_bytes() -> None:
    with pytest.raises(TokenKeyError, match="32 bytes"):
        RootKey(b"short")
    with pytest.raises(AuthzError, match="a token id is 16 bytes, not 3"):
        mint_token(KEY, token_id=b"abc", principal=None, lineage=(), caveats=())
    assert RootKey.generate() != RootKey.generate()
