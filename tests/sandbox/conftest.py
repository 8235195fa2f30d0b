"""The penetration range: a sentinel "core" process with private files, and
a launcher of real sandboxed children that run one attack each."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import sandbox
from tests.sandbox._sentinel import PRIVATE_FILES

REPO_ROOT = Path(__file__).resolve().parents[2]
_MIB = 1 << 20

#: Small limits keep the resource attacks quick.
TEST_LIMITS = sandbox.Rlimits(
    address_space=512 * _MIB, cpu_seconds=10, open_files=64, file_size=1 * _MIB
)


@pytest.fixture(scope="session")
def kernel() -> sandbox.KernelReport:
    """This kernel, which must offer every layer: the suite shows each one
    working (degraded paths are tested by handing the launcher a report
    with a feature switched off)."""
    report = sandbox.detect()
    complete = (
        report.seccomp
        and report.seccomp_tsync
        and report.no_new_privs
        and report.landlock_abi >= 6
        and report.net_namespaces
        and report.mount_namespaces
    )
    assert complete, "the sandbox tests need a kernel with every layer; this one offers:\n" + (
        "\n".join(report.lines())
    )
    return report


class Sentinel:
    """A real, unsandboxed process standing in for naga-core."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.sandbox._sentinel", str(home)],
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self._proc.stdout is not None
        # Readiness is its own word for it, not a guess.
        assert self._proc.stdout.readline() == b"ready\n"
        self.pid = self._proc.pid
        self.files = [home / rel for rel in PRIVATE_FILES]
        self._digests = {path: self._digest(path) for path in self.files}

    @staticmethod
    def _digest(path: Path) -> tuple[str, int]:
        return hashlib.sha256(path.read_bytes()).hexdigest(), stat.S_IMODE(path.stat().st_mode)

    def assert_intact(self) -> None:
        assert self._proc.poll() is None, f"sentinel died: {self._proc.returncode}"
        state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        assert state in ("S", "R"), f"sentinel state {state}"
        for path, digest in self._digests.items():
            assert self._digest(path) == digest, f"{path} changed"
        assert sorted(p.name for p in self.home.iterdir()) == ["credentials", "keys"]

    def stop(self) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        assert self._proc.wait(timeout=10) == 0


@pytest.fixture(scope="module")
def sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sentinel]:
    home = tmp_path_factory.mktemp("core-home")
    home.chmod(0o700)
    s = Sentinel(home)
    yield s
    s.stop()


@dataclass(frozen=True, slots=True)
class Outcome:
    #: The line the attacker wrote (an errno name...), None if it wrote none.
    report: str | None
    exit: sandbox.Exit


class Range:
    """Runs one attack in a fresh sandboxed child under the plugin profile."""

    def __init__(
        self, work: Path, read_only: Path, kernel: sandbox.KernelReport, forker: sandbox.Forker
    ) -> None:
        self.work = work
        self.read_only = read_only
        self.kernel = kernel
        #: The test's: it forks every child the range launches.
        self.forker = forker
        self.ro_file = read_only / "data.txt"
        self.ro_file.write_bytes(b"read-only data\n")

    def profile(
        self, *, limits: sandbox.Rlimits = TEST_LIMITS, egress: tuple[sandbox.Egress, ...] = ()
    ) -> sandbox.Profile:
        return sandbox.Profile.plugin(
            work_dir=self.work, read_only=[self.read_only], rlimits=limits, egress=egress
        )

    def start(
        self,
        attack: str,
        *params: str,
        profile: sandbox.Profile | None = None,
        target: str = "tests.sandbox._attacks:run",
        pass_fds: tuple[int, ...] = (),
        kernel: sandbox.KernelReport | None = None,
    ) -> tuple[sandbox.Sandboxed, int]:
        """The running child and the read end of its report pipe."""
        r, w = os.pipe()
        try:
            child = sandbox.launch(
                profile or self.profile(),
                target,
                [str(w), attack, *params] if attack else [str(w), *params],
                pass_fds=[w, *pass_fds],
                kernel=kernel or self.kernel,
                forker=self.forker,
            )
        finally:
            os.close(w)
        return child, r

    def run(
        self,
        attack: str,
        *params: str,
        profile: sandbox.Profile | None = None,
        timeout: float = 30.0,
        target: str = "tests.sandbox._attacks:run",
        kernel: sandbox.KernelReport | None = None,
    ) -> Outcome:
        child, r = self.start(attack, *params, profile=profile, target=target, kernel=kernel)
        try:
            end = child.wait(timeout=timeout)
            # The child has exited, so every writer is closed: this read ends.
            data = b"".join(iter(lambda: os.read(r, 4096), b""))
        finally:
            os.close(r)
        line = data.decode().strip()
        return Outcome(line or None, end)


@pytest.fixture
def attacker(tmp_path: Path, kernel: sandbox.KernelReport, forker: sandbox.Forker) -> Range:
    work = tmp_path / "work"
    read_only = tmp_path / "ro"
    work.mkdir()
    read_only.mkdir()
    return Range(work, read_only, kernel, forker)


class FileLayer:
    """Runs file attacks with the whole sandbox ("view": paths outside the
    profile do not exist), or with Landlock alone ("landlock": the kernel
    report claims no mount namespaces, the profile accepts degraded mode),
    so each layer is shown to stop them by itself."""

    def __init__(self, name: str, attacker: Range) -> None:
        self.name = name
        self._attacker = attacker

    def run(self, attack: str, *params: str) -> Outcome:
        if self.name == "view":
            return self._attacker.run(attack, *params)
        profile = dataclasses.replace(self._attacker.profile(), allow_degraded=True)
        kernel = dataclasses.replace(self._attacker.kernel, mount_namespaces=False)
        return self._attacker.run(attack, *params, profile=profile, kernel=kernel)

    def expect(self, *, view: str, landlock: str) -> str:
        return view if self.name == "view" else landlock


@pytest.fixture(params=["view", "landlock"])
def layer(request: pytest.FixtureRequest, attacker: Range) -> FileLayer:
    return FileLayer(str(request.param), attacker)
