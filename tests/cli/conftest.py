"""Fixtures for the command-line tests: homes holding a ledger, the CLI run
in-process, and the random seed (printed; ``NAGA_TEST_SEED`` replays it)."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from naga_core._home import Home, load_signer
from naga_core._store import blob_store, projection_path
from naga_core.cli import main
from naga_core.ledger import Entry, Ledger, Projection
from tests.ledger_helpers import SMALL_SEGMENT, fixed_signer
from tests.seeds import pick_seed

HEADER_BYTES = 24


@pytest.fixture(scope="module")
def seed() -> int:
    value = pick_seed()
    print(f"NAGA_TEST_SEED={value}")
    return value


# --- the CLI, in-process ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CliResult:
    code: int
    out: str
    err: str

    def json(self) -> dict[str, Any]:
        """stdout as exactly one JSON object (json.loads refuses trailing data)."""
        import json

        doc: object = json.loads(self.out)
        assert isinstance(doc, dict), f"stdout is not one JSON object: {self.out!r}"
        return doc  # pyright: ignore[reportUnknownVariableType]


class Cli:
    """``naga_core.cli.main(argv)`` with stdout/stderr captured; argparse's
    SystemExit becomes the exit code."""

    def __init__(self, capsys: pytest.CaptureFixture[str], *, verbose: bool) -> None:
        self._capsys = capsys
        self._verbose = verbose

    def __call__(self, *argv: str) -> CliResult:
        self._capsys.readouterr()
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        captured = self._capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    def note(self, text: str) -> None:
        """A line for whoever runs ``pytest -s`` (capsys holds everything else)."""
        if self._verbose:
            with self._capsys.disabled():
                print(text)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], pytestconfig: pytest.Config) -> Cli:
    return Cli(capsys, verbose=pytestconfig.getoption("capture") == "no")


def naga_command() -> list[str]:
    """The installed ``naga`` console script next to this interpreter."""
    script = Path(sys.executable).parent / "naga"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from naga_core.cli import main; sys.exit(main())"]


# --- homes -----------------------------------------------------------------------


def home_with_fixed_key(root: str) -> Home:
    """A new home whose ledger key is ``tests.ledger_helpers.fixed_signer()``,
    so ``make_ledger(home.ledger_dir, ...)`` builds a ledger the CLI accepts."""
    home = Home(root)
    home.ensure()
    load_signer(home, create=True)  # writes the key file in its real format
    signer = fixed_signer()
    with open(home.signing_key_path, encoding="ascii") as f:
        header = f.read().splitlines()[0]
    with open(home.signing_key_path, "w", encoding="ascii") as f:
        f.write(f"{header}\n{signer.key_name}\n{signer.private_bytes.hex()}\n")
    with open(home.public_key_path, "w", encoding="ascii") as f:
        f.write(signer.verifier().vkey() + "\n")
    assert load_signer(home, create=False).public_key == signer.public_key
    return home


def blob_content(n: int) -> bytes:
    return f"blob of record {n} ".encode() * (1 + n % 4)


def _entry(n: int, digest: bytes | None) -> Entry:
    refs = [digest] if digest is not None else []
    return Entry.of(f"test.kind{n % 3}", f"payload {n} ".encode() * (1 + n % 5), refs)


@dataclass(frozen=True, slots=True)
class LedgerHome:
    """A home with sealed segments, an active segment of many separate writes,
    records referencing blobs and a caught-up projection."""

    root: str
    records: int
    # (seq, digest) of every blob reference; digests do not depend on the path.
    refs: tuple[tuple[int, bytes], ...]

    @property
    def home(self) -> Home:
        return Home(self.root)

    @property
    def segments_dir(self) -> str:
        return os.path.join(self.home.ledger_dir, "segments")

    def files(self, suffix: str) -> list[str]:
        d = self.segments_dir
        return [os.path.join(d, n) for n in sorted(os.listdir(d)) if n.endswith(suffix)]

    @property
    def sealed_logs(self) -> list[str]:
        return [p for p in self.files(".log") if os.path.exists(p[: -len(".log")] + ".seal")]

    @property
    def active_log(self) -> str:
        return self.files(".log")[-1]

    @property
    def projection(self) -> str:
        return projection_path(self.home)

    def blob_path(self, digest: bytes) -> str:
        return blob_store(self.home).path_of(digest)

    def first_seq(self, log: str) -> int:
        return int(os.path.basename(log)[:20])

    def copy_to(self, root: str) -> LedgerHome:
        shutil.copytree(self.root, root, symlinks=True)
        return LedgerHome(root, self.records, self.refs)


def build_ledger_home(
    root: str, *, batches: int = 10, batch: int = 25, singles: int = 30
) -> LedgerHome:
    """``batches`` writes of ``batch`` records, then ``singles`` one-record
    writes (so the active segment holds many writes); every 6th record refers
    to a blob; the projection is caught up."""
    home = Home(root)
    home.ensure()
    signer = load_signer(home, create=True)
    blobs = blob_store(home)
    refs: list[tuple[int, bytes]] = []

    def entry(n: int) -> Entry:
        digest = None
        if n % 6 == 1:
            digest = blobs.put(blob_content(n))
            refs.append((n, digest))
        return _entry(n, digest)

    with Ledger.open(
        home.ledger_dir, signer, blobs=blobs, segment_max_bytes=SMALL_SEGMENT
    ) as ledger:
        n = 0
        for _ in range(batches):
            ledger.append_many([entry(n + i) for i in range(batch)])
            n += batch
        for _ in range(singles):
            e = entry(n)
            ledger.append(e.kind, e.payload, e.blob_refs)
            n += 1
        with Projection.open(projection_path(home)) as projection:
            projection.catch_up(ledger)
    return LedgerHome(root, n, tuple(refs))


@pytest.fixture(scope="module")
def base_home(tmp_path_factory: pytest.TempPathFactory) -> LedgerHome:
    """Built once per module; tests get a private copy from ``ledger_home``."""
    return build_ledger_home(str(tmp_path_factory.mktemp("base") / "home"))


@pytest.fixture
def ledger_home(base_home: LedgerHome, tmp_path: Path) -> LedgerHome:
    return base_home.copy_to(str(tmp_path / "home"))


# --- reading the log independently ----------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordSpan:
    """Where one record and its fields sit in a segment file."""

    offset: int
    end: int
    seq: int
    batch_pos: int
    batch_len: int
    nrefs: int
    fields: dict[str, range]


def record_spans(data: bytes) -> list[RecordSpan]:
    """Every record of a segment, parsed from the documented layout (no naga code)."""
    spans: list[RecordSpan] = []
    pos = 0
    while pos < len(data):
        assert data[pos : pos + 4] == b"NGL1", f"no record at offset {pos}"
        body_len = int.from_bytes(data[pos + 8 : pos + 12], "big")
        body = pos + HEADER_BYTES
        kind_len = data[body + 48]
        nrefs_at = body + 49 + kind_len
        nrefs = data[nrefs_at]
        payload_at = nrefs_at + 1 + 32 * nrefs
        end = body + body_len
        fields = {
            "magic": range(pos, pos + 4),
            "version": range(pos + 4, pos + 5),
            "reserved": range(pos + 5, pos + 8),
            "body_len": range(pos + 8, pos + 12),
            "batch_pos": range(pos + 12, pos + 16),
            "batch_len": range(pos + 16, pos + 20),
            "crc32": range(pos + 20, pos + 24),
            "seq": range(body, body + 8),
            "timestamp": range(body + 8, body + 16),
            "prev_hash": range(body + 16, body + 48),
            "kind_len": range(body + 48, body + 49),
            "kind": range(body + 49, nrefs_at),
            "nrefs": range(nrefs_at, nrefs_at + 1),
            "blob_ref": range(nrefs_at + 1, payload_at),
            "payload": range(payload_at, end),
        }
        spans.append(
            RecordSpan(
                offset=pos,
                end=end,
                seq=int.from_bytes(data[body : body + 8], "big"),
                batch_pos=int.from_bytes(data[pos + 12 : pos + 16], "big"),
                batch_len=int.from_bytes(data[pos + 16 : pos + 20], "big"),
                nrefs=nrefs,
                fields=fields,
            )
        )
        pos = end
    return spans


def read_spans(path: str) -> list[RecordSpan]:
    with open(path, "rb") as f:
        return record_spans(f.read())
