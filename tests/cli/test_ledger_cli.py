"""``naga run`` and ``naga ledger verify | recover | head | prove | rebuild``.

A few cases run the installed console script in a subprocess (with
``NAGA_HOME`` in its environment); the rest call ``naga_core.cli.main``
in-process. Every ``naga ledger prove SEQ --json`` output of ledgers of
several sizes is checked by ``rfc9162_verifier``, which shares no code with
Naga, and every mutation of one is rejected.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import os
import re
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from naga_core._home import Home
from naga_core._store import blob_store, open_ledger
from tests.cli import rfc9162_verifier as rfc
from tests.cli.conftest import (
    Cli,
    CliResult,
    LedgerHome,
    home_with_fixed_key,
    naga_command,
    read_spans,
)
from tests.ledger_helpers import make_ledger, payload

LEDGER_COMMANDS: list[list[str]] = [
    ["ledger", "verify"],
    ["ledger", "recover"],
    ["ledger", "head"],
    ["ledger", "prove", "0"],
    ["ledger", "rebuild"],
]
ALL_COMMANDS = [["run"], *LEDGER_COMMANDS]


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _naga(home: str, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "NAGA_HOME"}
    env["NAGA_HOME"] = home
    return subprocess.run(
        [*naga_command(), *argv],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return CliResult(proc.returncode, proc.stdout, proc.stderr).json()


# --- the real console script ----------------------------------------------------------


def test_console_script_end_to_end(tmp_path: Path) -> None:
    home = str(tmp_path / "nested" / "home")
    run = _naga(home, "run", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    assert f"Naga home: {home}" in run.stdout
    assert "it serves the WebChat console and prints its URL" in run.stdout
    assert "not built" not in run.stdout

    # Private: every directory 0700, every file 0600 (the public key aside).
    for dirpath, _dirnames, filenames in os.walk(home):
        assert _mode(dirpath) == 0o700, dirpath
        for name in filenames:
            path = os.path.join(dirpath, name)
            if path != Home(home).public_key_path:
                assert _mode(path) == 0o600, path
    assert _mode(Home(home).signing_key_path) == 0o600

    verify = _naga(home, "ledger", "verify", cwd=tmp_path)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert verify.stdout.splitlines()[-1] == "ledger verified"

    as_json = _naga(home, "ledger", "head", "--json", cwd=tmp_path)
    assert as_json.returncode == 0
    assert _json(as_json)["size"] == 0

    # --home overrides $NAGA_HOME.
    other = str(tmp_path / "other")
    missing = _naga(home, "ledger", "verify", "--home", other, cwd=tmp_path)
    assert missing.returncode == 1
    assert missing.stderr == f"naga: no Naga home at {other} (set NAGA_HOME or pass --home)\n"
    assert not os.path.exists(other)


def test_console_script_errors(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    assert _naga(home, "run", cwd=tmp_path).returncode == 0
    past = _naga(home, "ledger", "prove", "0", "--json", cwd=tmp_path)
    assert past.returncode == 1
    assert _json(past) == {
        "ok": False,
        "error": "no inclusion proof for record 0 in a tree of 0 records",
    }
    bad = _naga(home, "ledger", "prove", "-1", cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stdout == ""
    assert "usage: naga ledger prove" in bad.stderr
    assert "-1 is negative" in bad.stderr


# --- naga run --------------------------------------------------------------------------


def test_run_creates_a_private_home(cli: Cli, tmp_path: Path) -> None:
    root = str(tmp_path / "home")
    res = cli("run", "--home", root)
    assert res.code == 0, res.err
    assert "Start the core with `naga daemon start`" in res.out
    assert "foreground): it serves the WebChat console and prints its URL" in res.out
    assert '`naga chat "hello"` talks to the agent' in res.out
    home = Home(root)
    for d in (root, home.keys_dir, home.ledger_dir, os.path.join(home.ledger_dir, "segments")):
        assert _mode(d) == 0o700, d
    assert _mode(home.signing_key_path) == 0o600
    again = cli("run", "--home", root, "--json")
    assert again.code == 0
    doc = again.json()
    assert doc["webchat_url"] is None
    assert doc["home"] == root
    assert doc["records"] == 0


def test_run_refuses_a_home_others_can_read(cli: Cli, tmp_path: Path) -> None:
    root = str(tmp_path / "home")
    assert cli("run", "--home", root).code == 0
    os.chmod(root, 0o755)
    for argv in (["run"], ["ledger", "head"]):
        res = cli(*argv, "--home", root)
        assert res.code == 1
        assert f"(chmod 700 {root})" in res.err


# --- every command, --json ------------------------------------------------------------


@pytest.mark.parametrize("argv", ALL_COMMANDS, ids=" ".join)
def test_every_command_prints_one_json_object(
    cli: Cli, ledger_home: LedgerHome, argv: list[str]
) -> None:
    res = cli(*argv, "--home", ledger_home.root, "--json")
    assert res.code == 0, res.out + res.err
    doc = res.json()  # json.loads: one object, nothing after it
    assert doc
    assert res.out.startswith("{")
    assert res.out.endswith("}\n")


@pytest.mark.parametrize("argv", LEDGER_COMMANDS, ids=" ".join)
def test_errors_are_one_json_object_too(cli: Cli, tmp_path: Path, argv: list[str]) -> None:
    root = str(tmp_path / "absent")
    res = cli(*argv, "--home", root, "--json")
    assert res.code == 1
    assert res.json() == {
        "ok": False,
        "error": f"no Naga home at {root} (set NAGA_HOME or pass --home)",
    }


@pytest.mark.parametrize("argv", LEDGER_COMMANDS, ids=" ".join)
def test_commands_on_a_missing_home_fail_and_create_nothing(
    cli: Cli, tmp_path: Path, argv: list[str]
) -> None:
    root = str(tmp_path / "absent")
    res = cli(*argv, "--home", root)
    assert res.code == 1
    assert res.out == ""
    assert res.err == f"naga: no Naga home at {root} (set NAGA_HOME or pass --home)\n"
    assert not os.path.exists(root)


def test_naga_home_is_the_default(
    cli: Cli, ledger_home: LedgerHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NAGA_HOME", ledger_home.root)
    res = cli("ledger", "head", "--json")
    assert res.code == 0
    assert res.json()["size"] == ledger_home.records


@pytest.mark.parametrize("argv", ALL_COMMANDS, ids=" ".join)
def test_a_key_file_others_can_read_is_refused(
    cli: Cli, ledger_home: LedgerHome, argv: list[str]
) -> None:
    key = ledger_home.home.signing_key_path
    os.chmod(key, 0o644)
    res = cli(*argv, "--home", ledger_home.root)
    assert res.code == 1
    assert res.err == f"naga: {key} has mode 0644; it must be 0600 (chmod 600 {key})\n"


# --- verify, head, prove ----------------------------------------------------------------


def test_verify_a_healthy_home(cli: Cli, ledger_home: LedgerHome) -> None:
    res = cli("ledger", "verify", "--home", ledger_home.root)
    assert res.code == 0, res.out
    lines = res.out.splitlines()
    assert lines[0].startswith(f"records: {ledger_home.records} in ")
    assert lines[-1] == "ledger verified"
    doc = cli("ledger", "verify", "--home", ledger_home.root, "--json").json()
    assert doc["ok"] is True
    assert doc["problems"] == []
    assert doc["records"] == ledger_home.records


def test_head_after_appends(cli: Cli, tmp_path: Path) -> None:
    root = str(tmp_path / "home")
    assert cli("run", "--home", root).code == 0
    empty = cli("ledger", "head", "--home", root, "--json").json()
    assert (empty["size"], empty["last_seq"]) == (0, None)
    home = Home(root)
    with open_ledger(home, create=False) as ledger:
        digest = blob_store(home).put(b"a picture")
        receipts = [
            ledger.append("test.first", b"one"),
            ledger.append("test.blob", b"two", [digest]),
            ledger.append("test.third", b"three"),
        ]
    res = cli("ledger", "head", "--home", root, "--json")
    assert res.code == 0
    doc = res.json()
    assert doc["size"] == 3
    assert doc["last_seq"] == 2
    assert doc["last_leaf_hash"] == receipts[-1].leaf_hash.hex()
    assert doc["sealed_segments"] == 0
    with open(home.public_key_path, encoding="ascii") as f:
        assert doc["vkey"] == f.read().strip()
    name, _key_id, key64 = doc["vkey"].split("+", 2)
    assert name == doc["key_name"]
    public_key = base64.b64decode(key64)[1:]
    text = rfc.verify_signed_note(doc["checkpoint"], doc["key_name"], public_key)
    origin, size, root_hash = rfc.parse_checkpoint(text)
    assert (origin, size, root_hash.hex()) == (doc["key_name"], 3, doc["root"])
    human = cli("ledger", "head", "--home", root)
    assert human.out.splitlines()[:2] == ["records: 3", f"root: {doc['root']}"]
    assert "checkpoint:" in human.out


@pytest.fixture(scope="module")
def small_home(tmp_path_factory: pytest.TempPathFactory) -> Home:
    home = home_with_fixed_key(str(tmp_path_factory.mktemp("small") / "home"))
    make_ledger(home.ledger_dir, 5)
    return home


def test_prove_json_fields(cli: Cli, small_home: Home) -> None:
    res = cli("ledger", "prove", "3", "--home", small_home.root, "--json")
    assert res.code == 0, res.err
    doc = res.json()
    assert {
        "seq",
        "leaf_hash",
        "record",
        "tree_size",
        "root",
        "path",
        "checkpoint",
        "public_key",
        "key_name",
    } <= set(doc)
    assert (doc["seq"], doc["tree_size"]) == (3, 5)
    record = bytes.fromhex(doc["record"])
    assert int.from_bytes(record[:8], "big") == 3  # the body starts with its seq
    assert record.endswith(payload(3))
    assert doc["leaf_hash"] == hashlib.sha256(b"\x00" + record).hexdigest()
    assert len(doc["path"]) == 3  # leaf 3 of 5: its sibling, the 0..1 node, leaf 4
    assert doc["key_name"] == "naga.ledger/v1/test"
    rfc.verify_prove_output(doc)
    head = cli("ledger", "head", "--home", small_home.root, "--json").json()
    # Ed25519 is deterministic: the same checkpoint signs to the same note.
    assert doc["checkpoint"] == head["checkpoint"]
    assert doc["root"] == head["root"]
    human = cli("ledger", "prove", "3", "--home", small_home.root)
    assert human.out.splitlines()[0] == "record 3 of a tree of 5"


def test_prove_past_the_end_is_a_clear_error(cli: Cli, small_home: Home) -> None:
    for seq in ("5", "1000000"):
        res = cli("ledger", "prove", seq, "--home", small_home.root)
        assert res.code == 1
        assert res.out == ""
        assert res.err == f"naga: no inclusion proof for record {seq} in a tree of 5 records\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["ledger", "prove", "-1"], "argument SEQ: -1 is negative"),
        (["ledger", "prove", "abc"], "argument SEQ: 'abc' is not a whole number"),
        (["ledger", "prove", "1.5"], "argument SEQ: '1.5' is not a whole number"),
        (["ledger", "prove"], "the following arguments are required: SEQ"),
        (
            ["ledger", "frobnicate"],
            "unknown action 'frobnicate' (one of: verify, recover, head, rebuild, prove)",
        ),
        (["ledger"], "the following arguments are required: ACTION"),
        ([], "the following arguments are required: COMMAND"),
        (["ledger", "verify", "--jsn"], "unrecognized arguments: --jsn"),
    ],
)
def test_bad_arguments_are_usage_errors(
    cli: Cli, tmp_path: Path, argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NAGA_HOME", str(tmp_path / "home"))
    res = cli(*argv)
    assert res.code == 2
    assert res.out == ""
    assert "usage: naga" in res.err
    assert message in res.err
    assert not os.path.exists(tmp_path / "home")


# --- recover ----------------------------------------------------------------------------


def test_recover_cuts_a_torn_tail_and_the_ledger_then_verifies(
    cli: Cli, ledger_home: LedgerHome
) -> None:
    active = ledger_home.active_log
    size = os.path.getsize(active)
    garbage = b"\x00\x13garbage after the last record" * 3
    with open(active, "ab") as f:
        f.write(garbage)
    before = cli("ledger", "verify", "--home", ledger_home.root, "--json")
    assert before.code == 1
    (problem,) = before.json()["problems"]
    assert (problem["path"], problem["offset"]) == (active, size)
    assert "naga ledger recover" in problem["problem"]

    res = cli("ledger", "recover", "--home", ledger_home.root, "--json")
    assert res.code == 0, res.err
    doc = res.json()
    assert doc["records"] == ledger_home.records
    (cut,) = doc["cut"]
    assert (cut["path"], cut["offset"], cut["bytes"]) == (active, size, len(garbage))
    assert cut["reason"].startswith("bad magic")
    assert os.path.getsize(active) == size

    after = cli("ledger", "verify", "--home", ledger_home.root)
    assert after.code == 0, after.out
    assert after.out.splitlines()[-1] == "ledger verified"
    again = cli("ledger", "recover", "--home", ledger_home.root)
    assert again.code == 0
    assert again.out.splitlines()[-1] == "nothing to recover"


def test_recover_reports_the_cut_in_words(cli: Cli, ledger_home: LedgerHome) -> None:
    active = ledger_home.active_log
    size = os.path.getsize(active)
    with open(active, "ab") as f:
        f.write(b"\xff" * 30)
    res = cli("ledger", "recover", "--home", ledger_home.root)
    assert res.code == 0
    assert f"torn tail cut: {active} at offset {size}, 30 bytes (bad magic ffffffff)" in res.out


def test_recover_refuses_real_damage_naming_file_and_offset(
    cli: Cli, ledger_home: LedgerHome
) -> None:
    active = ledger_home.active_log
    spans = read_spans(active)
    target = spans[len(spans) // 2]
    with open(active, "r+b") as f:
        f.seek(target.offset + 40)
        byte = f.read(1)[0]
        f.seek(target.offset + 40)
        f.write(bytes([byte ^ 0x04]))
    with open(active, "rb") as f:
        damaged = f.read()
    res = cli("ledger", "recover", "--home", ledger_home.root)
    assert res.code == 1
    assert res.out == ""
    assert res.err.startswith(f"naga: ledger corrupt: {active} at offset {target.offset}: ")
    assert "not a torn tail" in res.err
    with open(active, "rb") as f:
        assert f.read() == damaged  # nothing was cut
    as_json = cli("ledger", "recover", "--home", ledger_home.root, "--json")
    assert as_json.code == 1
    assert f"{active} at offset {target.offset}" in as_json.json()["error"]


# --- rebuild ------------------------------------------------------------------------------


def test_rebuild_reports_progress_and_a_stable_digest(
    cli: Cli, ledger_home: LedgerHome, tmp_path: Path
) -> None:
    first = cli("ledger", "rebuild", "--home", ledger_home.root)
    assert first.code == 0, first.err
    n = ledger_home.records
    assert f"rebuilding projection: {n}/{n} (100%)" in first.err
    m = re.fullmatch(
        rf"projection rebuilt: {n} records, digest ([0-9a-f]{{64}})\n"
        + re.escape(ledger_home.projection + "\n"),
        first.out,
    )
    assert m is not None, first.out
    second = cli("ledger", "rebuild", "--home", ledger_home.root, "--json")
    assert second.code == 0
    doc = second.json()
    assert doc["digest"] == m.group(1)
    assert (doc["records"], doc["path"]) == (n, ledger_home.projection)
    # The same log elsewhere rebuilds to the same projection.
    moved = ledger_home.copy_to(str(tmp_path / "moved"))
    third = cli("ledger", "rebuild", "--home", moved.root, "--json")
    assert third.json()["digest"] == m.group(1)
    assert cli("ledger", "verify", "--home", ledger_home.root).code == 0


# --- inclusion proofs, checked independently ------------------------------------------------


@pytest.mark.parametrize("count", [1, 2, 3, 7, 64, 300])
def test_every_proof_passes_an_independent_rfc9162_verifier(
    cli: Cli, tmp_path: Path, count: int
) -> None:
    home = home_with_fixed_key(str(tmp_path / "home"))
    make_ledger(home.ledger_dir, count, segment=4096)
    head = cli("ledger", "head", "--home", home.root, "--json").json()
    assert head["size"] == count
    if count == 300:
        assert head["sealed_segments"] >= 5
    rejected = 0
    for seq in range(count):
        res = cli("ledger", "prove", str(seq), "--home", home.root, "--json")
        assert res.code == 0, res.err
        doc = res.json()
        assert (doc["seq"], doc["tree_size"], doc["root"]) == (seq, count, head["root"])
        rfc.verify_prove_output(doc)
        for what, mutant in mutations(doc):
            try:
                rfc.verify_prove_output(mutant)
            except AssertionError:
                rejected += 1
            else:
                pytest.fail(f"seq {seq} of {count}: mutant accepted: {what}")
    assert rejected >= 20 * count


def _flip_hex(value: str, byte: int = 0) -> str:
    raw = bytearray(bytes.fromhex(value))
    raw[byte % len(raw)] ^= 0x01
    return raw.hex()


def _with(doc: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    out.update(changes)
    return out


def _checkpoint_lines(doc: dict[str, Any]) -> list[str]:
    lines: list[str] = doc["checkpoint"].split("\n")
    return lines


def mutations(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every field of a prove output altered, one way or several."""
    seq: int = doc["seq"]
    size: int = doc["tree_size"]
    path: list[str] = doc["path"]
    yield "seq + 1", _with(doc, seq=seq + 1)
    if seq > 0:
        yield "seq - 1", _with(doc, seq=seq - 1)
    yield "seq as text", _with(doc, seq=str(seq))
    yield "leaf_hash", _with(doc, leaf_hash=_flip_hex(doc["leaf_hash"], 31))
    yield "record byte", _with(doc, record=_flip_hex(doc["record"], 60))
    yield "record longer", _with(doc, record=doc["record"] + "00")
    forged = bytearray(bytes.fromhex(doc["record"]))
    forged[-1] ^= 0x20
    yield (
        "record and its leaf hash",
        _with(
            doc,
            record=forged.hex(),
            leaf_hash=hashlib.sha256(b"\x00" + bytes(forged)).hexdigest(),
        ),
    )
    yield "tree_size + 1", _with(doc, tree_size=size + 1)
    yield "tree_size - 1", _with(doc, tree_size=size - 1)
    yield "root", _with(doc, root=_flip_hex(doc["root"], 7))
    for i in range(len(path)):
        bad = list(path)
        bad[i] = _flip_hex(bad[i], i)
        yield f"path[{i}]", _with(doc, path=bad)
    yield "path + extra", _with(doc, path=[*path, doc["root"]])
    if path:
        yield "path - last", _with(doc, path=path[:-1])
        yield "path - first", _with(doc, path=path[1:])
    if len(path) >= 2:
        yield "path reversed", _with(doc, path=path[::-1])
    lines = _checkpoint_lines(doc)
    origin, size_line, root_line, blank, sig_line = lines[:5]
    assert blank == ""
    yield (
        "checkpoint size",
        _with(doc, checkpoint="\n".join([origin, str(size + 1), *lines[2:]])),
    )
    other_root = base64.b64encode(bytes.fromhex(_flip_hex(doc["root"]))).decode()
    yield (
        "checkpoint root",
        _with(doc, checkpoint="\n".join([origin, size_line, other_root, *lines[3:]])),
    )
    yield (
        "checkpoint origin",
        _with(doc, checkpoint="\n".join([origin + "x", *lines[1:]])),
    )
    prefix, name, sig64 = sig_line.split(" ")
    sig = bytearray(base64.b64decode(sig64))
    for at in (0, 4, 40, 67):
        bad_sig = bytearray(sig)
        bad_sig[at] ^= 0x01
        line = f"{prefix} {name} {base64.b64encode(bytes(bad_sig)).decode()}"
        yield (
            f"signature byte {at}",
            _with(doc, checkpoint="\n".join([*lines[:4], line, *lines[5:]])),
        )
    renamed = f"{prefix} {name}x {sig64}"
    yield (
        "signature key name",
        _with(doc, checkpoint="\n".join([*lines[:4], renamed, *lines[5:]])),
    )
    yield "no signature", _with(doc, checkpoint="\n".join(lines[:4]) + "\n")
    del root_line
    yield "public_key", _with(doc, public_key=_flip_hex(doc["public_key"], 3))
    yield "public_key short", _with(doc, public_key=doc["public_key"][:-2])
    yield "key_name", _with(doc, key_name=doc["key_name"] + "x")


# --- the verifier itself, against the specifications' own examples -----------------------

# golang.org/x/mod sumdb/note (the C2SP signed-note reference): PeterNeumann's
# key and the note it signed.
GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_NOTE = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
    "\n"
    "\u2014 PeterNeumann "
    "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
)


def test_the_independent_verifier_accepts_the_go_signed_note_vector() -> None:
    name, key_id, key64 = GO_VKEY.split("+")
    key = base64.b64decode(key64)
    assert key[0] == 1
    assert rfc.key_id(name, key[1:]).hex() == key_id
    text = rfc.verify_signed_note(GO_NOTE, name, key[1:])
    assert text.endswith("your problem is.\n")
    with pytest.raises(AssertionError, match="does not verify"):
        rfc.verify_signed_note(GO_NOTE.replace("cryptography", "cryptographz"), name, key[1:])
    with pytest.raises(AssertionError, match="no signature"):
        rfc.verify_signed_note(GO_NOTE, "EnochRoot", key[1:])


def _mth(leaves: list[bytes]) -> bytes:
    """RFC 9162 2.1.1, by the definition: the largest power of two below n."""
    if len(leaves) == 1:
        return rfc.leaf_hash(leaves[0])
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return rfc.node_hash(_mth(leaves[:k]), _mth(leaves[k:]))


def _path(m: int, leaves: list[bytes]) -> list[bytes]:
    """RFC 9162 2.1.3.1 PATH(m, D[n]), by the definition."""
    if len(leaves) == 1:
        return []
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    if m < k:
        return [*_path(m, leaves[:k]), _mth(leaves[k:])]
    return [*_path(m - k, leaves[k:]), _mth(leaves[:k])]


def test_the_independent_verifier_walks_paths_built_from_the_rfc_definitions() -> None:
    for n in range(1, 34):
        leaves = [f"leaf {i}".encode() for i in range(n)]
        root = _mth(leaves)
        for m in range(n):
            path = _path(m, leaves)
            got = rfc.root_from_inclusion_path(m, n, rfc.leaf_hash(leaves[m]), path)
            assert got == root, (n, m)
            for wrong in {m + 1, m - 1, n} - {m}:
                if wrong >= 0:
                    try:
                        other = rfc.root_from_inclusion_path(
                            wrong, n, rfc.leaf_hash(leaves[m]), path
                        )
                    except AssertionError:
                        continue
                    assert other != root, (n, m, wrong)


def test_the_independent_verifier_shares_no_code_with_naga() -> None:
    import ast

    tree = ast.parse(Path(rfc.__file__).read_text(encoding="utf-8"))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    assert imported == {
        "__future__",
        "base64",
        "hashlib",
        "typing",
        "cryptography.exceptions",
        "cryptography.hazmat.primitives.asymmetric.ed25519",
    }


@pytest.mark.parametrize("argv", ALL_COMMANDS, ids=" ".join)
def test_an_unreadable_key_file_is_an_error_not_a_traceback(
    cli: Cli, ledger_home: LedgerHome, argv: list[str]
) -> None:
    key = ledger_home.home.signing_key_path
    os.remove(key)
    os.mkdir(key, 0o700)
    res = cli(*argv, "--home", ledger_home.root, "--json")
    assert res.code == 1
    assert res.json() == {"ok": False, "error": f"[Errno 21] Is a directory: '{key}'"}
    assert res.err == f"naga: [Errno 21] Is a directory: '{key}'\n"
