"""``naga doctor``: independent self-checks, one line each.

A :class:`Check` is a name and a probe returning ``(ok, detail)``; probes
only read (they never create, repair or lock anything, so running the doctor
next to a live core is harmless). :func:`checks_for` gives the core's checks
of one home; other modules add theirs (sandbox features, gRPC health) by
appending :class:`Check` values to that list before :func:`run_checks`.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Literal

import sandbox
from naga.sdk import Client
from naga.sdk.errors import SdkError
from naga.v1 import core_pb2 as cpb
from naga_core import constitution
from naga_core._home import Home
from naga_core._providers import (
    NoProviderConfigured,
    Providers,
    ProvidersFileError,
    providers_path,
)
from naga_core._store import blob_store, projection_path, read_only_ledger, verifier_for
from naga_core.authz import load_token_key, token_key_path
from naga_core.daemon import WEBCHAT_HOST, WEBCHAT_PORT
from naga_core.errors import LedgerLocked, NagaError
from naga_core.ledger import OsFileSystem, verify_ledger

#: WebChat's address (SPEC section 1; the default of the gateway.port setting).
#: What the core daemon keeps in ``$NAGA_HOME/run`` (SPEC section 1).
RUN_DIR = "run"
#: The setting that chooses the model provider (naga_core.agent's SETTING).
PROVIDER_SETTING = "model.provider"
CORE_SOCKET = "core.sock"
CORE_PID = "core.pid"
#: Secrets the core may keep in run/ and keys/; each must be 0600 or narrower.
RUN_SECRETS = ("owner.token",)
KEY_FILES = ("ledger.key", "token.key")
PROVIDERS_FILE = os.path.join("credentials", "providers.json")
#: How long the doctor waits for the core to answer Status.
CORE_ANSWER_TIMEOUT_S = 5.0
#: The lock file the ledger holds (flock) while it is open for writing.
LEDGER_LOCK = "LOCK"

Probe = Callable[[], tuple[bool, str]]


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The outcome of one check: ``ok`` and a line saying what was found."""

    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'ok' if self.ok else 'FAIL':<4} {self.name}: {self.detail}"


@dataclass(frozen=True, slots=True)
class Check:
    """One named, independent check."""

    name: str
    probe: Probe

    def run(self) -> CheckResult:
        try:
            ok, detail = self.probe()
        except (NagaError, OSError) as exc:
            # A check that cannot look has not passed; the others still run.
            return CheckResult(self.name, False, f"could not check: {exc}")
        return CheckResult(self.name, ok, detail)


def run_checks(checks: Iterable[Check]) -> list[CheckResult]:
    return [c.run() for c in checks]


def checks_for(home: Home, *, webchat: tuple[str, int] | None = None) -> list[Check]:
    """The core's checks of ``home``, in report order (a fresh list).
    ``webchat`` pins the address the port check probes; by default it is
    the running core's gateway's (it follows the ``gateway.port`` setting),
    else the default port."""
    return [
        Check("home permissions", partial(_home_permissions, home)),
        Check("key files", partial(_key_files, home)),
        Check("token key", partial(_token_key, home)),
        Check("credentials", partial(_credentials, home)),
        Check("model provider", partial(_model_provider, home)),
        Check("ledger", partial(_ledger, home)),
        Check("constitution", partial(_constitution, home)),
        Check("run directory", partial(_run_directory, home)),
        Check("core process", partial(_core_process, home)),
        Check("core answers", partial(_core_answers, home)),
        Check("webchat port", partial(_webchat_port, home, webchat)),
        Check("sandbox", lambda: sandbox_verdict(sandbox.detect())),
        Check("cgroups", lambda: cgroups_verdict(sandbox.detect_cgroups())),
    ]


# --- files ---------------------------------------------------------------------------


def _owner_problem(path: str, st: os.stat_result) -> str | None:
    me = os.geteuid()
    if st.st_uid != me:
        return f"{path} is owned by uid {st.st_uid}, not by you (uid {me})"
    return None


def _private_file(path: str, *, limit: int = 0o600) -> str | None:
    """What is wrong with ``path`` as a private file, or None."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symlink; a private file must be a regular file"
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file"
    mode = stat.S_IMODE(st.st_mode)
    if mode & ~limit:
        return f"{path} is {mode:04o}, wider than {limit:04o} (chmod {limit:o} {path})"
    return _owner_problem(path, st)


def _private_dir(path: str) -> str | None:
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        return f"{path} is {mode:04o}, must be 0700 (chmod 700 {path})"
    return _owner_problem(path, st)


def _home_permissions(home: Home) -> tuple[bool, str]:
    root = home.root
    try:
        st = os.stat(root)
    except FileNotFoundError:
        return False, f"{root} does not exist (`naga daemon start` creates it)"
    if not stat.S_ISDIR(st.st_mode):
        return False, f"{root} is not a directory"
    mode = stat.S_IMODE(st.st_mode)
    if mode != 0o700:
        return False, f"{root} is {mode:04o}, must be 0700 (chmod 700 {root})"
    problem = _owner_problem(root, st)
    return (False, problem) if problem else (True, f"{root} is 0700, owned by you")


def _key_files(home: Home) -> tuple[bool, str]:
    keys = home.keys_dir
    if not os.path.isdir(keys):
        if home.exists():
            return False, f"{keys} is missing but the ledger exists; its signing key is gone"
        return True, f"no {keys} yet (created with the ledger)"
    problems = [p for p in [_private_dir(keys)] if p]
    found: list[str] = []
    for name in KEY_FILES:
        path = os.path.join(keys, name)
        if os.path.lexists(path):
            found.append(name)
            problem = _private_file(path)
            if problem:
                problems.append(problem)
    if home.exists() and "ledger.key" not in found:
        problems.append(f"{home.signing_key_path} is missing; the ledger cannot be signed")
    if problems:
        return False, "; ".join(problems)
    return True, f"{keys} is private" + (f"; so are {', '.join(found)}" if found else "")


def _token_key(home: Home) -> tuple[bool, str]:
    """Whether the core would accept its token root key: the core's own
    loader decides (a regular file of yours, 0600 or narrower, 32 bytes)."""
    path = token_key_path(home)
    if not os.path.lexists(path):
        return True, f"no {path} yet (the core creates it, 0600, at its first start)"
    load_token_key(home, create=False)  # TokenKeyError (a NagaError) says what is wrong
    mode = stat.S_IMODE(os.lstat(path).st_mode)
    return True, f"{path} is {mode:04o}, 32 bytes, yours: capability tokens can be checked"


def _credentials(home: Home) -> tuple[bool, str]:
    path = os.path.join(home.root, PROVIDERS_FILE)
    if not os.path.lexists(path):
        return True, f"no {path} (no model provider configured)"
    problems = [p for p in (_private_dir(os.path.dirname(path)), _private_file(path)) if p]
    if problems:
        return False, "; ".join(problems)
    return True, f"{path} is 0600 or narrower"


def _model_provider(home: Home) -> tuple[bool, str]:
    """providers.json parses and validates (what the core will read), and
    the running core's ``model.provider`` setting names one of its entries
    (or ``local``, or is unset)."""
    path = providers_path(home)
    try:
        names = sorted(Providers.load(home).by_name)
    except NoProviderConfigured:
        names = None
    except ProvidersFileError as exc:
        return False, f"{path} is refused: {exc.reason}"
    listed = f"{path} lists {', '.join(names)}" if names else f"no {path}"
    if live_core_pid(home) is None:
        return True, f"{listed}; model.provider not checked (no live core)"
    try:
        with Client.connect(home.root, timeout=CORE_ANSWER_TIMEOUT_S) as client:
            chosen = client.get_setting(PROVIDER_SETTING).value.text
    except SdkError as exc:
        return False, f"{listed}; the core did not say its model.provider: {exc}"
    if chosen in ("", "local") or (names is not None and chosen in names):
        shown = chosen or "unset (providers.json's default, else local)"
        return True, f"{listed}; model.provider = {shown}"
    known = ", ".join([*(names or []), "local"])
    return False, (
        f"model.provider = {chosen!r} names no provider ({listed}); known: {known}. "
        f"Fix it with `naga config set model.provider NAME`"
    )


def _run_directory(home: Home) -> tuple[bool, str]:
    run = os.path.join(home.root, RUN_DIR)
    if not os.path.lexists(run):
        return True, f"no {run} (the core has not run here)"
    problems = [p for p in [_private_dir(run)] if p]
    sock = os.path.join(run, CORE_SOCKET)
    if os.path.lexists(sock):
        st = os.lstat(sock)
        mode = stat.S_IMODE(st.st_mode)
        if not stat.S_ISSOCK(st.st_mode):
            problems.append(f"{sock} is not a socket")
        elif mode & 0o177:
            problems.append(f"{sock} is {mode:04o}, wider than 0600 (others could call the core)")
    for name in RUN_SECRETS:
        path = os.path.join(run, name)
        problem = _private_file(path) if os.path.lexists(path) else None
        if problem:
            problems.append(problem)
    if problems:
        return False, "; ".join(problems)
    return True, f"{run} is 0700" + ("; core.sock is 0600" if os.path.lexists(sock) else "")


# --- the core process ------------------------------------------------------------------

ProcessState = Literal["gone", "naga", "other"]


def _process(pid: int) -> ProcessState:
    """Whether ``pid`` runs, and whether it is a Naga process: a pid file
    outliving its process may name a pid the kernel has since reused."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2].split()[:1]
    except FileNotFoundError:
        return "gone"
    if state in ([b"Z"], [b"X"]):  # exited, not yet reaped
        return "gone"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return "naga"  # alive; whose it is, /proc will not say
    return "naga" if b"naga" in cmdline else "other"


def _read_pid(path: str) -> int | None:
    try:
        with open(path, "rb") as f:
            raw = f.read(64)
    except FileNotFoundError:
        return None
    text = raw.decode("ascii", "replace").strip()
    if not text.isdigit() or not 0 < int(text) < 1 << 22:
        raise _BadPidFile(f"{path} does not hold a pid: {raw!r}")
    return int(text)


class _BadPidFile(NagaError):
    pass


def live_core_pid(home: Home) -> int | None:
    """The pid ``run/core.pid`` names, if that is a running Naga process."""
    try:
        pid = _read_pid(os.path.join(home.root, RUN_DIR, CORE_PID))
    except _BadPidFile:
        return None
    return pid if pid is not None and _process(pid) == "naga" else None


def _core_process(home: Home) -> tuple[bool, str]:
    sock = os.path.join(home.root, RUN_DIR, CORE_SOCKET)
    pid_path = os.path.join(home.root, RUN_DIR, CORE_PID)
    has_sock = os.path.lexists(sock)
    try:
        pid = _read_pid(pid_path)
    except _BadPidFile as exc:
        return False, str(exc)
    if pid is None:
        if not has_sock:
            return True, "not running (no socket, no pid file)"
        return False, f"stale socket {sock}: no {pid_path} names a core (remove it)"
    state = _process(pid)
    if state == "gone":
        what = "stale socket and pid file" if has_sock else "stale pid file"
        return False, (
            f"{what}: {pid_path} names pid {pid}, which is not running "
            "(the core did not stop cleanly; remove them or start the core)"
        )
    if state == "other":
        return False, (
            f"{pid_path} names pid {pid}, which is not a Naga process "
            "(a stale pid file whose pid was reused; remove it)"
        )
    if not has_sock:
        return False, f"core pid {pid} runs but {sock} is missing (starting, or restart it)"
    return True, f"running (pid {pid}), serving {sock}"


def _core_answers(home: Home) -> tuple[bool, str]:
    """A live core (named by its pid file) answers a Status call through the
    SDK, with the owner credential, as the CLI would ask it."""
    pid = live_core_pid(home)
    if pid is None:
        return True, "no live core to ask (see the core process check)"
    try:
        with Client.connect(home.root, timeout=CORE_ANSWER_TIMEOUT_S) as client:
            status = client.status()
    except SdkError as exc:
        return False, f"core pid {pid} does not answer Status: {exc}"
    core = status.processes[0] if status.processes else None
    if core is None or core.pid != pid:
        answered = core.pid if core is not None else "nobody"
        return False, f"the socket answers for pid {answered}, but core.pid names {pid}"
    return True, f"core pid {pid} answers Status: ledger {status.ledger_size} records"


# --- the ledger ------------------------------------------------------------------------


def flock_holder(path: str) -> int | None:
    """The pid holding an flock on ``path``, read from /proc/locks: seeing
    the lock without taking it, so a core starting meanwhile is not refused."""
    try:
        st = os.stat(path)
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            table = f.read()
    except FileNotFoundError:
        return None
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for row in table.splitlines():
        fields = row.split()
        # "1: FLOCK  ADVISORY  WRITE 28512 fe:00:2146329 0 EOF"; waiters
        # have "->" after the id.
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == dev:
            return int(fields[4]) if fields[4].isdigit() else None
    return None


def _ledger(home: Home) -> tuple[bool, str]:
    if not home.exists():
        return False, f"no ledger at {home.ledger_dir}"
    holder = flock_holder(os.path.join(home.ledger_dir, LEDGER_LOCK))
    if holder is None:
        try:
            report = verify_ledger(
                OsFileSystem(),
                home.ledger_dir,
                verifier_for(home),
                blobs=blob_store(home),
                projection_path=projection_path(home),
            )
        except LedgerLocked as exc:
            return _held(home, None, str(exc))
        if not report.ok:
            first = report.problems[0]
            return False, f"NOT verified, {len(report.problems)} problem(s); first: {first}"
        return True, (
            f"verified: {report.records} records, {report.segments} segments, "
            f"root {report.root.hex()[:16]}"
        )
    return _held(home, holder, f"the ledger is held by pid {holder}")


def _constitution(home: Home) -> tuple[bool, str]:
    """The file against its anchor: the running core's (its last check),
    else the ledger's, read offline."""
    if not home.exists():
        return False, f"no home at {home.root}"
    if live_core_pid(home) is not None:
        checked = constitution.last_check(os.path.join(home.root, RUN_DIR))
        anchor = checked.get("anchor", "")
        interval = checked.get("interval_s", "?")
        source = f"the running core's anchor (it checks every {interval} s)"
    else:
        try:  # read-only: a stopped core's ledger is never opened here
            _report, ledger = read_only_ledger(home)
            anchored = constitution.anchored_in(home, ledger)
        except NagaError as exc:
            return False, f"cannot read the anchor from the ledger: {exc}"
        if anchored is None and not os.path.exists(constitution.path_of(home)):
            return True, "not installed yet: the core installs the shipped default at its start"
        in_force = constitution.effective(anchored)
        anchor = in_force.sha256
        source = (
            "the shipped default's hash (never amended)"
            if anchored is None
            else f"the ledger's anchor ({anchored.source})"
        )
    if not anchor:
        return False, "the running core reported no check yet"
    got = constitution.check(home, constitution.Anchor(anchor, "", 0))
    if got.ok:
        return True, f"matches {source}: sha256 {anchor[:16]}"
    return False, f"{got.problem}; to go on: {constitution.how_to_fix(home)}"


def _held(home: Home, holder: int | None, what: str) -> tuple[bool, str]:
    """The ledger is open for writing: by the running core (fine: verifying
    it mid-write could misread a batch being appended) or by someone else."""
    core = live_core_pid(home)
    if core is not None and holder in (None, core):
        return True, (
            f"held by the running core (pid {core}); "
            "stop it and run `naga ledger verify` for an offline check"
        )
    return False, f"{what}, which is not a running core named by run/{CORE_PID}"


# --- the network -----------------------------------------------------------------------


def _gateway_address(home: Home) -> tuple[str, int] | None:
    """Where the running core's gateway serves, from its status row (a
    stale socket refuses at once)."""
    if not os.path.exists(os.path.join(home.root, RUN_DIR, CORE_SOCKET)):
        return None
    try:
        with Client.connect(home.root, timeout=CORE_ANSWER_TIMEOUT_S) as client:
            rows = client.status().processes
    except SdkError:
        return None
    for row in rows:
        if row.role == "gateway" and row.state == cpb.PROCESS_STATE_RUNNING:
            url = urllib.parse.urlsplit(row.detail)
            if url.hostname and url.port:
                return url.hostname, url.port
    return None


def _webchat_port(home: Home, pinned: tuple[str, int] | None) -> tuple[bool, str]:
    reported = None if pinned else _gateway_address(home)
    host, port = pinned or reported or (WEBCHAT_HOST, WEBCHAT_PORT)
    where = f"{host}:{port}"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        err = probe.connect_ex((host, port))
    if err == 0:
        if reported is None and live_core_pid(home) is None:
            return False, (
                f"{where} is served by another program while the core is not running; "
                "Naga's gateway could not bind it"
            )
        return True, f"{where} is served (the running core's gateway)"
    if err != errno.ECONNREFUSED:
        return False, f"cannot probe {where}: {os.strerror(err)}"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            return False, f"{where} is bound by another program but not accepting ({exc.strerror})"
    if reported is not None:
        return False, f"{where} is where the core says its gateway serves, but nothing answers"
    return True, f"{where} is free"


# --- the sandbox ---------------------------------------------------------------------


def cgroups_verdict(support: sandbox.CgroupSupport) -> tuple[bool, str]:
    """Where workers get a cgroup of their own (a CPU quota and a memory
    ceiling the kernel holds), or the fallback and why: never a failure,
    since the supervisor's windowed CPU check and resident ceiling hold
    without them (docs/adr/0031-sec-cgroups.md)."""
    if support.usable:
        return True, support.line().removeprefix("sandbox cgroups: ")
    return True, (
        "none: each worker's CPU share is the supervisor's windowed check and a renice, "
        f"its memory the resident check ({support.reason})"
    )


def sandbox_verdict(report: sandbox.KernelReport) -> tuple[bool, str]:
    """Whether this kernel can enforce the plugin and executor profiles
    (docs/design/sandbox.md); what is missing degrades them, and the core
    refuses to start a worker it cannot enforce unless the owner allowed
    degraded mode."""
    missing = [
        what
        for what, present in (
            ("a seccomp filter", report.seccomp),
            ("seccomp TSYNC", report.seccomp_tsync),
            ("no_new_privs", report.no_new_privs),
            ("Landlock", report.landlock_abi > 0),
            ("mount namespaces (the private filesystem view)", report.mount_namespaces),
            ("network namespaces", report.net_namespaces),
        )
        if not present
    ]
    layers = f"Linux {report.release}, Landlock ABI {report.landlock_abi}"
    if missing:
        return False, (
            f"{layers}: no {', no '.join(missing)}; plugins and executors will not start "
            "unless degraded mode is allowed"
        )
    return True, f"{layers}: seccomp (TSYNC), no_new_privs, Landlock, namespaces all enforced"
