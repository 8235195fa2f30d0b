"""C2SP signed notes and tlog checkpoints, against the Go reference vectors."""

from __future__ import annotations

import base64
import hashlib

import pytest

from naga_core.errors import ProofError
from naga_core.ledger._checkpoint import Checkpoint, CheckpointSigner, CheckpointVerifier
from naga_core.ledger._merkle import leaf_hash

# golang.org/x/mod sumdb/note, note.go package doc and note_test.go
# (TestNewVerifier, TestSign, TestOpen): the PeterNeumann key pair, the note
# it signed, and the EnochRoot key that co-signed it. Ed25519 is deterministic
# (RFC 8032), so signing the same text must reproduce the signature exactly.
GO_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
GO_TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
GO_PETER_SIG = (
    "— PeterNeumann "
    "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
)
GO_ENOCH_SIG = (
    "— EnochRoot "
    "rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=\n"
)
GO_NOTE = GO_TEXT + "\n" + GO_PETER_SIG

# golang.org/x/mod sumdb/tlog note_test.go TestFormatTree: the same
# origin / decimal size / base64 root layout C2SP tlog-checkpoint adopted.
GO_TREE_BODY = "go.sum database tree\n123456789012\nTszzRgjTG6xce+z2AG31kAXYKBgQVtCSCE40HmuwBb0=\n"

# The example body of c2sp.org/tlog-checkpoint.
C2SP_BODY = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"


def _go_seed() -> bytes:
    # PRIVATE+KEY+<name>+<id>+base64(0x01 || seed); the base64 may hold '+'.
    raw = base64.b64decode(GO_SKEY.split("+", 4)[4])
    assert raw[0] == 1
    return raw[1:]


@pytest.fixture(scope="module")
def peter() -> CheckpointSigner:
    return CheckpointSigner.from_private_bytes("PeterNeumann", _go_seed())


@pytest.fixture(scope="module")
def signer() -> CheckpointSigner:
    return CheckpointSigner.generate("naga.test/ledger")


@pytest.fixture(scope="module")
def checkpoint() -> Checkpoint:
    return Checkpoint("naga.test/ledger", 1234, leaf_hash(b"root"))


# --- the published vectors --------------------------------------------------


def test_go_key_vector(peter: CheckpointSigner) -> None:
    verifier = peter.verifier()
    assert verifier.vkey() == GO_VKEY
    assert verifier.key_id == bytes.fromhex("c74f20a3")
    # The key ID rule of c2sp.org/signed-note, spelled out.
    digest = hashlib.sha256(b"PeterNeumann\n\x01" + peter.public_key).digest()
    assert verifier.key_id == digest[:4]
    parsed = CheckpointVerifier.from_vkey(GO_VKEY)
    assert (parsed.key_name, parsed.public_key) == ("PeterNeumann", peter.public_key)
    assert peter.private_bytes == _go_seed()


def test_go_signature_vector(peter: CheckpointSigner) -> None:
    assert peter.sign_text(GO_TEXT) == GO_NOTE
    assert CheckpointVerifier.from_vkey(GO_VKEY).verify_text(GO_NOTE) == GO_TEXT


def test_go_cosigned_note() -> None:
    note = GO_TEXT + "\n" + GO_PETER_SIG + GO_ENOCH_SIG
    # Each verifier finds its own line and ignores the other, as C2SP requires.
    assert CheckpointVerifier.from_vkey(GO_VKEY).verify_text(note) == GO_TEXT
    assert CheckpointVerifier.from_vkey(GO_ENOCH_VKEY).verify_text(note) == GO_TEXT


def test_go_tampered_note() -> None:
    verifier = CheckpointVerifier.from_vkey(GO_VKEY)
    with pytest.raises(ProofError, match="does not verify"):
        verifier.verify_text(GO_NOTE.replace("cryptography", "cryptographY"))
    # note_test.go "Invalid signature": four characters spliced into the blob.
    spliced = GO_TEXT + "\n" + GO_PETER_SIG[:60] + "ABCD" + GO_PETER_SIG[60:]
    with pytest.raises(ProofError, match="is 67 bytes, not 64"):
        verifier.verify_text(spliced)


@pytest.mark.parametrize(
    "note",
    [
        # note_test.go TestOpen "Invalid encoded message syntax".
        GO_TEXT,
        GO_TEXT + "\n",
        GO_TEXT + "\n" + GO_PETER_SIG[:-1],
        "\x01" + GO_TEXT + "\n" + GO_PETER_SIG,
        GO_TEXT
        + "\n"
        + "— Bad Name x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXg"
        "KvqfqdngotpRZb6KE6RyyBwJnAM=",
        GO_TEXT + "\n" + GO_PETER_SIG + "Unexpected line.\n",
        # note_test.go "Check too many signatures".
        GO_TEXT + "\n" + GO_PETER_SIG * 101,
    ],
)
def test_go_malformed_notes(note: str) -> None:
    with pytest.raises(ProofError, match="malformed note"):
        CheckpointVerifier.from_vkey(GO_VKEY).verify_text(note)


def test_go_vkey_manglings_are_rejected() -> None:
    # note_test.go TestNewVerifier: every proper substring and every
    # single-character increment of the key must be refused.
    for i in range(len(GO_VKEY) + 1):
        for j in range(i + 1, len(GO_VKEY) + 1):
            if (i, j) != (0, len(GO_VKEY)):
                with pytest.raises(ValueError):
                    CheckpointVerifier.from_vkey(GO_VKEY[i:j])
    for i in range(len(GO_VKEY)):
        bumped = GO_VKEY[:i] + chr(ord(GO_VKEY[i]) + 1) + GO_VKEY[i + 1 :]
        with pytest.raises(ValueError):
            CheckpointVerifier.from_vkey(bumped)
    # Wrong key length and unknown algorithm, each with a matching key hash.
    for vkey in (
        "PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY==",
        "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
    ):
        with pytest.raises(ValueError):
            CheckpointVerifier.from_vkey(vkey)


def test_go_tree_body_vector(peter: CheckpointSigner) -> None:
    cp = Checkpoint("go.sum database tree", 123456789012, leaf_hash(b"hello world"))
    assert cp.body().decode() == GO_TREE_BODY
    assert peter.verifier().verify(peter.sign(cp)) == cp


def test_c2sp_example_body(peter: CheckpointSigner) -> None:
    cp = peter.verifier().verify(peter.sign_text(C2SP_BODY))
    assert (cp.origin, cp.size) == ("example.com/behind-the-sofa", 20852163)
    assert cp.body().decode() == C2SP_BODY


# --- round trips --------------------------------------------------------------


def test_sign_verify_round_trip(signer: CheckpointSigner, checkpoint: Checkpoint) -> None:
    note = signer.sign(checkpoint)
    assert note.startswith(checkpoint.body().decode() + "\n— naga.test/ledger ")
    assert signer.verifier().verify(note) == checkpoint
    # Same seed, same signature: the seed is all there is to the key.
    again = CheckpointSigner.from_private_bytes(signer.key_name, signer.private_bytes)
    assert again.public_key == signer.public_key
    assert again.sign(checkpoint) == note
    empty = Checkpoint("naga.test/ledger", 0, hashlib.sha256(b"").digest())
    assert signer.verifier().verify(signer.sign(empty)) == empty
    largest = Checkpoint("naga.test/ledger", (1 << 64) - 1, bytes(32))
    assert signer.verifier().verify(signer.sign(largest)) == largest


@pytest.mark.parametrize("name", ["naga.test/ledger", "PeterNeumann", "例え.jp/ログ", "a"])
def test_vkey_round_trip(name: str) -> None:
    verifier = CheckpointSigner.generate(name).verifier()
    parsed = CheckpointVerifier.from_vkey(verifier.vkey())
    assert (parsed.key_name, parsed.public_key, parsed.key_id) == (
        verifier.key_name,
        verifier.public_key,
        verifier.key_id,
    )
    assert parsed.vkey() == verifier.vkey()


def test_vkey_accepts_uppercase_key_id() -> None:
    # Go parses the id with strconv.ParseUint(_, 16, 32): case-insensitive.
    upper = GO_VKEY.replace("c74f20a3", "C74F20A3")
    assert CheckpointVerifier.from_vkey(upper).vkey() == GO_VKEY


def test_repr_never_shows_the_seed(signer: CheckpointSigner) -> None:
    text = repr(signer)
    seed = signer.private_bytes
    assert seed.hex() not in text
    assert base64.b64encode(seed).decode() not in text
    assert signer.verifier().vkey() in text


# --- tampering and other keys --------------------------------------------------


def test_every_tampered_body_character_is_rejected(
    signer: CheckpointSigner, checkpoint: Checkpoint
) -> None:
    note = signer.sign(checkpoint)
    body_len = len(checkpoint.body())
    verifier = signer.verifier()
    accepted: list[str] = []
    for i in range(body_len):
        for variant in (
            note[:i] + chr(ord(note[i]) ^ 1) + note[i + 1 :],
            note[:i] + ("B" if note[i] == "A" else "A") + note[i + 1 :],
            note[:i] + note[i + 1 :],
            note[:i] + "x" + note[i:],
        ):
            try:
                verifier.verify(variant)
            except ProofError:
                continue
            accepted.append(repr(variant))
    assert accepted == []


def test_every_tampered_signature_character_is_rejected(
    signer: CheckpointSigner, checkpoint: Checkpoint
) -> None:
    note = signer.sign(checkpoint)
    verifier = signer.verifier()
    start = note.rindex(" ") + 1
    accepted: list[int] = []
    for i in range(start, len(note) - 1):
        replacement = "B" if note[i] == "A" else "A"
        try:
            verifier.verify(note[:i] + replacement + note[i + 1 :])
        except ProofError:
            continue
        accepted.append(i)
    assert accepted == []


def test_signature_by_another_key_is_rejected(
    signer: CheckpointSigner, checkpoint: Checkpoint
) -> None:
    impostor = CheckpointSigner.generate(signer.key_name)
    with pytest.raises(ProofError, match=r"no signature by naga\.test/ledger\+"):
        signer.verifier().verify(impostor.sign(checkpoint))
    stranger = CheckpointSigner.generate("someone.else/log")
    with pytest.raises(ProofError, match="no signature by"):
        signer.verifier().verify(stranger.sign(checkpoint))


def test_unknown_signatures_are_ignored(signer: CheckpointSigner, checkpoint: Checkpoint) -> None:
    witness = CheckpointSigner.generate("witness.example/w1")
    note = signer.sign(checkpoint)
    cosigned = note + witness.sign(checkpoint).split("\n\n", 1)[1]
    assert signer.verifier().verify(cosigned) == checkpoint
    assert witness.verifier().verify(cosigned) == checkpoint


def test_a_bad_signature_claiming_our_key_is_fatal(
    signer: CheckpointSigner, checkpoint: Checkpoint
) -> None:
    note = signer.sign(checkpoint)
    good_line = note.split("\n\n", 1)[1]
    blob = bytearray(base64.b64decode(good_line.split(" ")[2]))
    blob[-1] ^= 1
    bad_line = f"— {signer.key_name} {base64.b64encode(bytes(blob)).decode()}\n"
    for doubled in (note + bad_line, note.replace(good_line, bad_line + good_line)):
        with pytest.raises(ProofError, match="does not verify"):
            signer.verifier().verify(doubled)


# --- malformed notes and bodies -------------------------------------------------


@pytest.mark.parametrize(
    ("note", "match"),
    [
        ("", "no blank line"),
        ("origin\n1\nroot\n— naga.test/ledger AAAA\n", "no blank line"),
        ("origin\n1\nroot\n\n", "does not end with a newline"),
        ("origin\n1\nroot\n\n— naga.test/ledger AAAAAAAA", "does not end with a newline"),
        ("origin\n1\nroot\n\n- naga.test/ledger AAAAAAAA\n", "does not start with"),
        ("origin\n1\nroot\n\n—naga.test/ledger AAAAAAAA\n", "does not start with"),
        ("origin\n1\nroot\n\n— naga.test/ledger\n", "no valid key name"),
        ("origin\n1\nroot\n\n—  AAAAAAAA\n", "no valid key name"),
        ("origin\n1\nroot\n\n— a+b AAAAAAAA\n", "no valid key name"),
        ("origin\n1\nroot\n\n— naga.test/ledger !!!!!!!!\n", "not valid base64"),
        ("origin\n1\nroot\n\n— naga.test/ledger AAAAAAA\n", "not valid base64"),
        ("origin\n1\nroot\n\n— naga.test/ledger AAAAAAB=\n", "not valid base64"),
        ("origin\n1\nroot\n\n— naga.test/ledger AAAA AAAA\n", "not valid base64"),
        ("origin\n1\nroot\n\n— naga.test/ledger AAAAAA==\n", "too short"),
        ("origin\r\n1\nroot\n\n— naga.test/ledger AAAAAAAA\n", "control character"),
        ("origin\t\n1\nroot\n\n— naga.test/ledger AAAAAAAA\n", "control character"),
        ("origin\ud800\n1\nroot\n\n— naga.test/ledger AAAAAAAA\n", "UTF-8"),
    ],
)
def test_malformed_notes(signer: CheckpointSigner, note: str, match: str) -> None:
    with pytest.raises(ProofError, match=match):
        signer.verifier().verify(note)


def test_wrong_length_signature_for_our_key(signer: CheckpointSigner) -> None:
    blob = base64.b64encode(signer.verifier().key_id + bytes(63)).decode()
    note = f"o\n1\n{base64.b64encode(bytes(32)).decode()}\n\n— {signer.key_name} {blob}\n"
    with pytest.raises(ProofError, match="63 bytes, not 64"):
        signer.verifier().verify(note)


_ROOT64 = base64.b64encode(bytes(range(32))).decode()


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ("\n", "1 lines"),
        ("origin\n5\n", "2 lines"),
        (f"\n5\n{_ROOT64}\n", "empty origin"),
        (f"origin\n5\n{_ROOT64}\nextension\n", "extension lines"),
        (f"origin\n\n5\n{_ROOT64}\n", "extension lines"),
        (f"origin\n05\n{_ROOT64}\n", "canonical decimal"),
        (f"origin\n+5\n{_ROOT64}\n", "canonical decimal"),
        (f"origin\n-5\n{_ROOT64}\n", "canonical decimal"),
        (f"origin\n 5\n{_ROOT64}\n", "canonical decimal"),
        (f"origin\n5 \n{_ROOT64}\n", "canonical decimal"),
        (f"origin\n1_0\n{_ROOT64}\n", "canonical decimal"),
        (f"origin\n\u0665\n{_ROOT64}\n", "canonical decimal"),
        (f"origin\n0x10\n{_ROOT64}\n", "canonical decimal"),
        (f"origin\n\n{_ROOT64}\n", "canonical decimal"),
        (f"origin\n{1 << 64}\n{_ROOT64}\n", "does not fit"),
        (f"origin\n5\n{base64.b64encode(bytes(31)).decode()}\n", "31 bytes"),
        (f"origin\n5\n{base64.b64encode(bytes(33)).decode()}\n", "33 bytes"),
        (f"origin\n5\n{_ROOT64.rstrip('=')}\n", "not canonical base64"),
        (f"origin\n5\n{_ROOT64[:-2]}B=\n", "not canonical base64"),
        (f"origin\n5\n{_ROOT64.replace('A', '-')}\n", "not canonical base64"),
        ("origin\n5\n\n", "root is 0 bytes"),
    ],
)
def test_malformed_bodies(peter: CheckpointSigner, body: str, match: str) -> None:
    # Properly signed, so only the checkpoint parser stands in the way.
    note = peter.sign_text(body)
    assert peter.verifier().verify_text(note) == body
    with pytest.raises(ProofError, match=match):
        peter.verifier().verify(note)


# --- argument contract ------------------------------------------------------------


@pytest.mark.parametrize(
    ("origin", "size", "root"),
    [
        ("", 1, bytes(32)),
        ("a\nb", 1, bytes(32)),
        ("a\tb", 1, bytes(32)),
        ("o", -1, bytes(32)),
        ("o", 1 << 64, bytes(32)),
        ("o", 1, bytes(31)),
        ("o", 1, bytes(33)),
    ],
)
def test_checkpoint_rejects_bad_fields(origin: str, size: int, root: bytes) -> None:
    with pytest.raises(ValueError):
        Checkpoint(origin, size, root)


@pytest.mark.parametrize("name", ["", "a b", "a+b", "a\nb", "a\tb", "a\u00a0b", "a\u2003b"])
def test_key_names_follow_c2sp(name: str) -> None:
    with pytest.raises(ValueError, match="invalid key name"):
        CheckpointSigner.generate(name)
    with pytest.raises(ValueError, match="invalid key name"):
        CheckpointVerifier(name, bytes(32))


def test_key_material_lengths() -> None:
    with pytest.raises(ValueError, match="seed is 31 bytes"):
        CheckpointSigner.from_private_bytes("n", bytes(31))
    with pytest.raises(ValueError, match="public key is 33 bytes"):
        CheckpointVerifier("n", bytes(33))


@pytest.mark.parametrize(
    "vkey",
    [
        "",
        "PeterNeumann",
        "PeterNeumann+c74f20a3",
        "PeterNeumann+c74f20a+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+c74f20g3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+c74f20a3+",
        "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10T",
        "PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeuman+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
    ],
)
def test_malformed_vkeys(vkey: str) -> None:
    with pytest.raises(ValueError):
        CheckpointVerifier.from_vkey(vkey)


@pytest.mark.parametrize("text", ["", "no newline", "a\x00b\n", "a\rb\n"])
def test_sign_text_refuses_unsignable_text(peter: CheckpointSigner, text: str) -> None:
    with pytest.raises(ValueError):
        peter.sign_text(text)
