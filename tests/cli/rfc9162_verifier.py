"""An independent checker of ``naga ledger prove SEQ --json`` output.

Written only from the public specifications, and deliberately importing
nothing from ``naga_core`` (a shared bug cannot then cancel itself out):

* RFC 9162 (Certificate Transparency 2.0), section 2.1.1 (leaf and node
  hashes: ``SHA-256(0x00 || leaf)``, ``SHA-256(0x01 || left || right)``) and
  section 2.1.3.2 (verifying an inclusion proof);
* C2SP signed-note (https://c2sp.org/signed-note): a note is text, a blank
  line, then signature lines ``"\u2014 " name " " base64(key id || signature)``;
  an Ed25519 key id is ``SHA-256(name || 0x0A || 0x01 || public key)[:4]``
  and the signature covers the text up to and including its final newline;
* C2SP tlog-checkpoint (https://c2sp.org/tlog-checkpoint): the note text is
  the origin line, the tree size in decimal, the base64 root hash, then
  optional extension lines.

Every failure raises :class:`AssertionError` with the reason.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any, cast

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

HASH_SIZE = 32
_ED25519_ALG = b"\x01"
_SIG_PREFIX = "\u2014 "  # em dash, space


def _fail(reason: str) -> AssertionError:
    return AssertionError(reason)


def leaf_hash(data: bytes) -> bytes:
    """RFC 9162 2.1.1: MTH({d(0)}) = SHA-256(0x00 || d(0))."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 9162 2.1.1: SHA-256(0x01 || MTH(left) || MTH(right))."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def root_from_inclusion_path(
    leaf_index: int, tree_size: int, leaf: bytes, path: list[bytes]
) -> bytes:
    """RFC 9162 2.1.3.2, steps 1-5; returns the root the path leads to."""
    # 1. leaf_index must be inside the tree.
    if leaf_index >= tree_size:
        raise _fail(f"leaf index {leaf_index} is not below tree size {tree_size}")
    # 2. fn = leaf_index, sn = tree_size - 1; 3. r = hash.
    fn, sn, r = leaf_index, tree_size - 1, leaf
    # 4. For each p in the inclusion path:
    for p in path:
        if len(p) != HASH_SIZE:
            raise _fail(f"path element of {len(p)} bytes, not {HASH_SIZE}")
        # a. If sn is 0, stop and fail.
        if sn == 0:
            raise _fail("inclusion path is longer than the tree allows")
        # b. If LSB(fn) is set, or fn == sn:
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            # ... if LSB(fn) is not set, shift both until it is or fn is 0.
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        # c. Shift both once.
        fn >>= 1
        sn >>= 1
    # 5. sn must be 0 (the whole path was needed) and r the root.
    if sn != 0:
        raise _fail("inclusion path is shorter than the tree needs")
    return r


def key_id(key_name: str, public_key: bytes) -> bytes:
    """C2SP signed-note: the Ed25519 key id."""
    return hashlib.sha256(key_name.encode() + b"\n" + _ED25519_ALG + public_key).digest()[:4]


def _b64(text: str, what: str) -> bytes:
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except ValueError:  # binascii.Error and UnicodeEncodeError are ValueErrors
        raise _fail(f"{what} is not base64") from None
    if base64.b64encode(raw).decode("ascii") != text:
        raise _fail(f"{what} is not canonical base64")
    return raw


def verify_signed_note(note: str, key_name: str, public_key: bytes) -> str:
    """C2SP signed-note: the note's text, if a signature line by this key verifies."""
    if len(public_key) != HASH_SIZE:
        raise _fail(f"Ed25519 public key of {len(public_key)} bytes")
    if any(c < " " and c != "\n" for c in note):
        raise _fail("note contains a control character")
    split = note.rfind("\n\n")
    if split < 0:
        raise _fail("note has no blank line before its signatures")
    text, block = note[: split + 1], note[split + 2 :]
    if not block.endswith("\n"):
        raise _fail("signature block does not end with a newline")
    want_id = key_id(key_name, public_key)
    key = Ed25519PublicKey.from_public_bytes(public_key)
    verified = False
    for line in block[:-1].split("\n"):
        if not line.startswith(_SIG_PREFIX):
            raise _fail(f"signature line does not start with an em dash: {line!r}")
        name, sep, sig64 = line[len(_SIG_PREFIX) :].partition(" ")
        if not sep or not name or "+" in name or " " in sig64:
            raise _fail(f"malformed signature line {line!r}")
        blob = _b64(sig64, "signature")
        if name != key_name or blob[:4] != want_id:
            continue  # another key's signature: ignored, as the spec says
        if len(blob) != 4 + 64:
            raise _fail(f"Ed25519 signature line carries {len(blob) - 4} bytes, not 64")
        try:
            key.verify(blob[4:], text.encode())
        except InvalidSignature:
            raise _fail("checkpoint signature does not verify") from None
        verified = True
    if not verified:
        raise _fail(f"no signature by {key_name} ({want_id.hex()})")
    return text


def parse_checkpoint(text: str) -> tuple[str, int, bytes]:
    """C2SP tlog-checkpoint: (origin, size, root) of a note's text."""
    lines = text[:-1].split("\n")
    if len(lines) < 3:
        raise _fail(f"checkpoint has {len(lines)} lines, at least 3 needed")
    origin, size_line, root_line = lines[:3]
    if not origin:
        raise _fail("checkpoint origin is empty")
    # The size is decimal ASCII without leading zeros (one spelling per value).
    digits = size_line.isascii() and size_line.isdigit()
    if not digits or (size_line[0] == "0" and size_line != "0") or int(size_line) >= 1 << 64:
        raise _fail(f"checkpoint size {size_line!r} is not a u64 in decimal")
    root = _b64(root_line, "checkpoint root")
    if len(root) != HASH_SIZE:
        raise _fail(f"checkpoint root is {len(root)} bytes")
    return origin, int(size_line), root


def _hex(doc: dict[str, Any], field: str, size: int | None = HASH_SIZE) -> bytes:
    return _hexval(doc.get(field), field, size)


def _hexval(value: object, field: str, size: int | None = HASH_SIZE) -> bytes:
    if not isinstance(value, str):
        raise _fail(f"{field} is not a string")
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raise _fail(f"{field} is not hex") from None
    if size is not None and len(raw) != size:
        raise _fail(f"{field} is {len(raw)} bytes, not {size}")
    return raw


def _uint(doc: dict[str, Any], field: str) -> int:
    value = doc.get(field)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _fail(f"{field} is not a non-negative integer")
    return value


def verify_prove_output(doc: dict[str, Any]) -> None:
    """Check one ``naga ledger prove SEQ --json`` object end to end."""
    seq = _uint(doc, "seq")
    tree_size = _uint(doc, "tree_size")
    record = _hex(doc, "record", None)
    claimed_leaf = _hex(doc, "leaf_hash")
    claimed_root = _hex(doc, "root")
    public_key = _hex(doc, "public_key")
    key_name = doc.get("key_name")
    checkpoint = doc.get("checkpoint")
    raw_path: object = doc.get("path")
    if not isinstance(key_name, str) or not key_name:
        raise _fail("key_name is not a non-empty string")
    if not isinstance(checkpoint, str):
        raise _fail("checkpoint is not a string")
    if not isinstance(raw_path, list):
        raise _fail("path is not a list")
    path: list[bytes] = []
    items = cast("list[object]", raw_path)
    for i, item in enumerate(items):
        path.append(_hexval(item, f"path[{i}]"))

    if leaf_hash(record) != claimed_leaf:
        raise _fail("leaf_hash is not SHA-256(0x00 || record)")
    computed = root_from_inclusion_path(seq, tree_size, claimed_leaf, path)
    if computed != claimed_root:
        raise _fail("the audit path does not lead to root")

    text = verify_signed_note(checkpoint, key_name, public_key)
    _origin, cp_size, cp_root = parse_checkpoint(text)
    if cp_root != computed:
        raise _fail("checkpoint root differs from the proof's root")
    if cp_size != tree_size:
        raise _fail(f"checkpoint size {cp_size} differs from tree_size {tree_size}")

    # Redundant fields, when present, must agree with the checked ones.
    if "leaf_index" in doc and doc["leaf_index"] != seq:
        raise _fail("leaf_index differs from seq")
    if "root_base64" in doc and doc["root_base64"] != base64.b64encode(computed).decode():
        raise _fail("root_base64 differs from root")
    if "vkey" in doc:
        vkey = doc["vkey"]
        expected = (
            f"{key_name}+{key_id(key_name, public_key).hex()}+"
            + base64.b64encode(_ED25519_ALG + public_key).decode()
        )
        if vkey != expected:
            raise _fail("vkey does not name this key")
