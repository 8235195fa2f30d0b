"""The model's files: assembly refuses anything but the pinned bytes, the
cache is where the XDG spec says, and the GGUF header reader reads what a
writer wrote and refuses what is not GGUF. No real model is needed."""

from __future__ import annotations

import contextlib
import hashlib
import io
import struct
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import BinaryIO

import pytest
from hypothesis import given
from hypothesis import strategies as st

from naga_core._localmodel_assets import (
    DEFAULT_MODEL,
    ChecksumMismatch,
    GgufError,
    GgufValue,
    ModelMissing,
    ModelPart,
    ModelSpec,
    assemble,
    cache_root,
    model_path,
    read_gguf_metadata,
    require_model,
)

PIECES = (b"GGUF" + b"a" * 3000, b"b" * 2048, b"c" * 17)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _spec(pieces: tuple[bytes, ...] = PIECES, whole: bytes | None = None) -> ModelSpec:
    joined = b"".join(pieces) if whole is None else whole
    parts = tuple(
        ModelPart(f"fake-part{i}", "1.0", f"fake/part{i}.bin", len(p), _sha(p))
        for i, p in enumerate(pieces, 1)
    )
    return ModelSpec(
        name="fake-model",
        size=len(joined),
        sha256=_sha(joined),
        parts=parts,
        gguf_name="Fake",
        license="MIT",
        origin="this test",
    )


def _opener(served: Mapping[str, bytes]):  # -> PartOpener
    @contextlib.contextmanager
    def open_part(part: ModelPart) -> Generator[BinaryIO]:
        yield io.BytesIO(served[part.member])

    return open_part


def _served(pieces: tuple[bytes, ...] = PIECES) -> dict[str, bytes]:
    return {f"fake/part{i}.bin": p for i, p in enumerate(pieces, 1)}


def test_assembles_the_parts_in_order_with_progress(tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    dest = assemble(
        _spec(), _opener(_served()), tmp_path / "m" / "fake.gguf", lambda d, t: seen.append((d, t))
    )
    assert dest.read_bytes() == b"".join(PIECES)
    assert seen[-1] == (len(b"".join(PIECES)), len(b"".join(PIECES)))
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert sorted(p.name for p in dest.parent.iterdir()) == ["fake.gguf"]


@pytest.mark.parametrize(
    ("label", "bad"),
    [
        ("one byte flipped", b"b" * 2047 + b"X"),
        ("truncated", b"b" * 2000),
        ("too long", b"b" * 2049),
    ],
)
def test_a_damaged_part_is_refused_and_nothing_is_written(
    tmp_path: Path, label: str, bad: bytes
) -> None:
    served = _served()
    served["fake/part2.bin"] = bad
    dest = tmp_path / "fake.gguf"
    with pytest.raises(ChecksumMismatch, match=r"fake-part2==1\.0") as caught:
        assemble(_spec(), _opener(served), dest)
    assert caught.value.expected == _sha(PIECES[1]), label
    assert list(tmp_path.iterdir()) == []


def test_parts_that_do_not_make_the_pinned_whole_are_refused(tmp_path: Path) -> None:
    # Each part is right, but the pinned whole is some other file: the final
    # check is what catches parts pinned from two different models.
    spec = _spec(whole=b"X" * sum(len(p) for p in PIECES))
    with pytest.raises(ChecksumMismatch, match=r"the assembled fake-model\.gguf"):
        assemble(spec, _opener(_served()), tmp_path / "fake.gguf")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_assembly_leaves_a_previous_file_alone(tmp_path: Path) -> None:
    dest = tmp_path / "fake.gguf"
    dest.write_bytes(b"previous")
    served = _served()
    served["fake/part3.bin"] = b"d" * 17
    with pytest.raises(ChecksumMismatch):
        assemble(_spec(), _opener(served), dest)
    assert dest.read_bytes() == b"previous"


def test_parts_must_add_up_to_the_size() -> None:
    with pytest.raises(ValueError, match="do not add up"):
        ModelSpec("x", 1, "0" * 64, _spec().parts, "X", "MIT", "test")


def test_require_model_says_to_run_make(tmp_path: Path) -> None:
    spec = _spec()
    path = tmp_path / spec.file_name
    with pytest.raises(ModelMissing, match="run `make`"):
        require_model(path, spec)
    path.write_bytes(b"short")
    with pytest.raises(ModelMissing, match="has 5 bytes"):
        require_model(path, spec)
    path.write_bytes(b"Z" * spec.size)
    require_model(path, spec)  # the cheap check looks at the size only
    with pytest.raises(ChecksumMismatch):
        require_model(path, spec, full=True)
    path.write_bytes(b"".join(PIECES))
    require_model(path, spec, full=True)


def test_the_default_model_is_pinned_part_by_part() -> None:
    assert DEFAULT_MODEL.size == sum(p.size for p in DEFAULT_MODEL.parts)
    assert all(len(p.sha256) == 64 for p in DEFAULT_MODEL.parts)
    assert len({p.package for p in DEFAULT_MODEL.parts}) == len(DEFAULT_MODEL.parts)


def test_cache_root_follows_xdg(tmp_path: Path) -> None:
    assert cache_root({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "naga"
    home_default = Path.home() / ".cache" / "naga"
    assert cache_root({}) == home_default
    assert cache_root({"XDG_CACHE_HOME": "relative/dir"}) == home_default
    assert model_path(tmp_path, DEFAULT_MODEL).parent == tmp_path / "models"


# -- GGUF header ----------------------------------------------------------------------


def _gguf_string(s: str) -> bytes:
    raw = s.encode()
    return struct.pack("<Q", len(raw)) + raw


def _gguf(scalars: Mapping[str, GgufValue], arrays: Mapping[str, list[str]]) -> bytes:
    """A GGUF v3 header: strings (type 8), int64 (11), float64 (12), bool (7),
    and string arrays (type 9 of 8), which the reader skips."""
    out = [b"GGUF", struct.pack("<IQQ", 3, 0, len(scalars) + len(arrays))]
    for key, value in scalars.items():
        out.append(_gguf_string(key))
        if isinstance(value, bool):
            out.append(struct.pack("<I?", 7, value))
        elif isinstance(value, int):
            out.append(struct.pack("<Iq", 11, value))
        elif isinstance(value, float):
            out.append(struct.pack("<Id", 12, value))
        else:
            out.append(struct.pack("<I", 8) + _gguf_string(value))
    for key, items in arrays.items():
        out.append(_gguf_string(key) + struct.pack("<IIQ", 9, 8, len(items)))
        out.extend(_gguf_string(item) for item in items)
    return b"".join(out) + b"\x00" * 32  # tensor infos would follow


_keys = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=20)
_scalars = st.one_of(
    st.text(max_size=50),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.booleans(),
)


@given(
    scalars=st.dictionaries(_keys, _scalars, max_size=8),
    arrays=st.dictionaries(_keys, st.lists(st.text(max_size=10), max_size=5), max_size=3),
)
def test_gguf_header_round_trip(
    tmp_path_factory: pytest.TempPathFactory,
    scalars: dict[str, GgufValue],
    arrays: dict[str, list[str]],
) -> None:
    arrays = {k: v for k, v in arrays.items() if k not in scalars}
    path = tmp_path_factory.mktemp("gguf") / "h.gguf"
    path.write_bytes(_gguf(scalars, arrays))
    assert read_gguf_metadata(path) == scalars
    some = list(scalars)[:1]
    assert read_gguf_metadata(path, some) == {k: scalars[k] for k in some}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"GGML" + b"\x00" * 40, "not a GGUF file"),
        (b"GGUF" + struct.pack("<IQQ", 1, 0, 0), "version 1"),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1 << 40), "string of"),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 2) + _gguf_string("k"), "truncated or malformed"),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _gguf_string("k") + b"\x63\0\0\0", "type 99"),
        (b"GG", "truncated or malformed"),
    ],
)
def test_gguf_reader_refuses_what_is_not_gguf(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(content)
    with pytest.raises(GgufError, match=message):
        read_gguf_metadata(path)
