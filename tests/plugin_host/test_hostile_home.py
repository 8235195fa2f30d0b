"""Issue 11, from inside: a hostile plugin installed the way an owner
installs one (a folder under ``$NAGA_HOME/plugins``, a core start, ``naga
plugin enable``) attacks the landed sandbox from its real worker under a
real ``naga daemon start --foreground`` process.

* earlybird: its folder holds a ``sitecustomize.py``, a ``usercustomize.py``,
  a ``.pth`` file and modules shadowing what the worker's interpreter imports
  before its layers (``encodings``, ``pyseccomp``, ``google``, ``naga``,
  ``trio``, ``sandbox``). Each leaves a marker if it ever runs; none may,
  and the plugin's own module must run under the full filter.
* hostile (tests/plugin_host/_hostile.py): TCP Fast Open past its egress
  port, the core's log through its stderr, /etc/ssl, and its token after its
  worker stopped.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest

from naga.sdk import Client
from naga.sdk import errors as sdk_errors
from naga.tokens import Token
from naga_core.plugins import code_hash
from tests.daemon.conftest import CoreProcess, start_core_process
from tests.ledger_helpers import verify_home
from tests.plugin_host._hostile import MANIFEST as HOSTILE_MANIFEST
from tests.plugin_host.conftest import READY_S

# R1, not R0: an R0-only plugin's work directory is read-only, and the
# shadows' markers (proof that they ran) are written there.
EARLYBIRD_MANIFEST = """\
name = "earlybird"
version = "1.0.0"
kind = "tool"
description = "Tries to run before its sandbox (tests only)"
entry = "earlybird:main"

[[tools]]
name = "earlybird.report"
risk = "R1"
description = "The markers left by code that ran, and the filter at its own import"
"""

EARLYBIRD_CODE = """\
import ctypes
import os

from naga_plugins import Plugin

_PR_GET_SECCOMP = 21
# Recorded when this module is imported: 2 (filter mode) once every layer is on.
SECCOMP_AT_IMPORT = ctypes.CDLL(None, use_errno=True).prctl(_PR_GET_SECCOMP, 0, 0, 0, 0)

plugin = Plugin("earlybird")


@plugin.tool("earlybird.report")
def report():
    markers = {}
    for name in sorted(os.listdir(".")):
        if name.startswith("ran-"):
            with open(name) as f:
                markers[name[4:]] = f.read()
    return {"markers": markers, "seccomp_at_import": SECCOMP_AT_IMPORT}


main = plugin.main
"""

#: Written as ``NAME.py`` or ``NAME/__init__.py`` into the plugin's folder.
SHADOW = """\
# A shadow of the module {name!r}: if this runs at all, it leaves a marker in
# the worker's working directory saying under what it ran and what it could
# read of the core's home; then it stands aside for the real module. Bytes
# and os-level I/O only: the shadow of encodings runs before any codec.
def _naga_shadow_mark(name):
    import os
    import sys

    def read(path):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as e:
            return None, e
        try:
            return os.read(fd, 65536), None
        finally:
            os.close(fd)

    status, _ = read("/proc/self/status")
    lines = (status or b"").split(b"\\n")
    said = [l for l in lines if l.startswith((b"Seccomp:", b"NoNewPrivs:"))]
    home = os.path.normpath(os.path.join(os.getcwd(), "..", "..", ".."))
    key, err = read(os.path.join(home, "keys", "token.key"))
    said.append(b"token key: unreadable" if key is None else b"token key: READ")
    try:
        fd = os.open(os.path.join(os.getcwd(), "ran-" + name), os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, b"; ".join(said))
        os.close(fd)
    except OSError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    if os.path.basename(here) == name:
        here = os.path.dirname(here)
    try:
        from importlib.machinery import PathFinder
        import importlib.util
    except ImportError:
        return
    others = [p for p in sys.path if os.path.realpath(p or ".") != os.path.realpath(here)]
    spec = PathFinder.find_spec(name, others)
    if spec is None or spec.loader is None:
        return
    real = importlib.util.module_from_spec(spec)
    sys.modules[name] = real
    spec.loader.exec_module(real)


_naga_shadow_mark({name!r})
"""
SHADOWED_MODULES = ("sitecustomize", "usercustomize", "trio", "pyseccomp")
SHADOWED_PACKAGES = ("encodings", "google", "naga", "sandbox")
PTH = "import os; open(os.path.join(os.getcwd(), 'ran-pth'), 'w').write('ran')\\n"


@dataclass
class Served:
    core: CoreProcess
    home: str
    client: Client
    #: A listener whose port the hostile plugin's manifest declares.
    egress: socket.socket


def _install_earlybird(home: str) -> None:
    folder = Path(home, "plugins", "earlybird")
    folder.mkdir(parents=True)
    (folder / "plugin.toml").write_text(EARLYBIRD_MANIFEST)
    (folder / "earlybird.py").write_text(EARLYBIRD_CODE)
    (folder / "evil.pth").write_text(PTH)
    for name in SHADOWED_MODULES:
        (folder / f"{name}.py").write_text(SHADOW.format(name=name))
    for name in SHADOWED_PACKAGES:
        (folder / name).mkdir()
        (folder / name / "__init__.py").write_text(SHADOW.format(name=name))


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    root = tempfile.mkdtemp(prefix="naga-h-")
    home = os.path.join(root, "home")
    os.makedirs(home, mode=0o700)
    _install_earlybird(home)
    egress = socket.create_server(("127.0.0.1", 0))
    Path(home, "plugins", "hostile").mkdir()
    Path(home, "plugins", "hostile", "plugin.toml").write_text(
        HOSTILE_MANIFEST.format(port=egress.getsockname()[1])
    )
    core = start_core_process(home, Path(root) / "core.log")
    try:
        with Client.connect(home) as client, egress:
            # Installed as an owner installs one (a folder copied in runs
            # only once installed; the hostile one's loopback egress is
            # approved so that its attacks on the port rules can be made).
            for name in ("earlybird", "hostile"):
                folder = os.path.join(home, "plugins", name)
                client.install_plugin(folder, code_hash(folder), local_network=name == "hostile")
            yield Served(core, home, client, egress)
            client.shutdown("tests done")
        assert core.proc.wait(60) == 0, core.output()
        verify_home(home)
    finally:
        if core.proc.poll() is None:
            core.proc.kill()
            core.proc.wait()
        shutil.rmtree(root, ignore_errors=True)


def _enabled(served: Served, name: str) -> None:
    info = served.client.enable_plugin(name, wait=READY_S).plugin
    assert info.pid > 0, (info, served.core.output()[-4000:])


def test_no_code_of_a_plugin_runs_before_its_sandbox(served: Served) -> None:
    served.client.enable_plugin("earlybird", wait=READY_S)
    # Wherever it could have written: any work directory of its name.
    works = Path(served.home, "work", "plugins").glob("earlybird*")
    ran = {p.name: p.read_text() for work in works for p in work.glob("ran-*")}
    assert ran == {}, ran  # e.g. {'ran-sitecustomize': 'Seccomp: 0 ... read the token key'}
    _enabled(served, "earlybird")
    report = served.client.invoke("earlybird", "earlybird.report", {}, timeout=READY_S)
    assert isinstance(report, dict)
    # Nothing in the folder ran, not even under the sandbox: it was never
    # on the import path before its own module was imported.
    assert report["markers"] == {}, report["markers"]
    # And its own module was imported under the filter (2: filter mode).
    assert report["seccomp_at_import"] == 2
    assert served.core.proc.poll() is None


def test_tcp_fast_open_does_not_pass_the_port_rules(served: Served) -> None:
    _enabled(served, "hostile")
    with socket.create_server(("127.0.0.1", 0)) as other:
        other.setblocking(False)
        port = other.getsockname()[1]
        outcome = served.client.invoke("hostile", "hostile.fastopen", {"port": port})
        assert outcome == "EPERM,EPERM,EPERM,EPERM,EPERM"
        with pytest.raises(BlockingIOError):
            other.accept()


def test_a_plugin_cannot_rewrite_the_core_log(served: Served) -> None:
    _enabled(served, "hostile")
    log = served.core.log
    head = log.read_bytes()[:200]
    line = f"forged line {os.getpid()}"
    outcome = served.client.invoke("hostile", "hostile.stderr", {"line": line})
    assert isinstance(outcome, dict)
    # Its stderr is a pipe the core reads: no seek, no truncate, nothing to unappend.
    assert outcome["pipe"] is True, outcome
    assert outcome["regular"] is False, outcome
    assert outcome["seek"] == "ESPIPE", outcome
    assert outcome["truncate"] == "EINVAL", outcome
    assert log.read_bytes()[:200] == head
    # Its line reaches the core's log, written by the core, under its name.
    deadline = 200
    for _ in range(deadline):
        if f"plugin hostile: {line}" in served.core.output():
            break
        served.client.status()  # the core's log is written on its loop: let it run
    assert f"plugin hostile: {line}" in served.core.output()


def test_only_the_ca_bundle_of_etc_ssl_is_visible(served: Served) -> None:
    _enabled(served, "hostile")
    seen = served.client.invoke("hostile", "hostile.ssl", {})
    assert isinstance(seen, dict)
    # Private keys live beside the bundle (/etc/ssl/private, /etc/pki/tls/private).
    assert seen["/etc/ssl/private"] == "absent", seen
    assert seen["/etc/ssl/openssl.cnf"] == "absent", seen
    assert seen["/etc/pki"] == "absent", seen
    assert isinstance(seen["ca_certs"], int)
    assert seen["ca_certs"] > 0, seen


def test_a_stopped_workers_token_is_refused(served: Served) -> None:
    _enabled(served, "hostile")
    raw = served.client.invoke("hostile", "hostile.token", {})
    assert isinstance(raw, str)
    token = Token.from_bytes(base64.b64decode(raw))
    with Client.connect(served.home, token) as stolen:
        stolen.status()  # accepted while its worker lives
        served.client.disable_plugin("hostile")
        with pytest.raises(sdk_errors.SdkError) as refused:
            stolen.status()
    assert "revoked" in str(refused.value), refused.value


def test_the_cores_files_other_plugins_data_and_proc_are_out_of_reach(served: Served) -> None:
    # Another plugin's data exists (earlybird ran), and a provider file too.
    _enabled(served, "earlybird")
    home = Path(served.home)
    other = next((home / "work" / "plugins").glob("earlybird@*"))
    (other / "notes.txt").write_text("earlybird's own")
    credentials = home / "credentials"
    credentials.mkdir(mode=0o700, exist_ok=True)
    (credentials / "providers.json").write_text("{}")
    os.chmod(credentials / "providers.json", 0o600)
    segment = next(p for p in (home / "ledger").rglob("*") if p.is_file())
    targets = [
        home / "keys" / "token.key",
        home / "keys" / "ledger.key",
        home / "ledger",
        segment,
        credentials / "providers.json",
        home / "run" / "owner.token",
        home / "run" / "core.log",
        other,
        other / "notes.txt",
        home / "work" / "gateway",
        home / "plugins" / "earlybird",
    ]
    _enabled(served, "hostile")
    seen = served.client.invoke(
        "hostile",
        "hostile.reach",
        {"paths": "\n".join(map(str, targets)), "core_pid": served.core.pid},
        timeout=READY_S,
    )
    assert isinstance(seen, dict)
    # None of it is in its view: each route finds nothing (the symlink is
    # made in its own directory, but points at nothing it can see).
    for target in targets:
        for route in ("read", "list", "symlink", "hardlink"):
            assert seen[f"{route} {target}"] == "ENOENT", (route, target, seen)
    for rel in ("environ", "fd", "mem", "maps", "root"):
        assert seen[f"/proc/core/{rel}"] == "ENOENT", seen
    assert seen["/proc/self/fd"] == "ENOENT", seen
    assert seen["userfaultfd"] == "EPERM", seen
    assert seen["memfd_exec"] == "EPERM", seen
    # No port of its own, not even the ephemeral one of a bare listen().
    assert (seen["listen_unbound"], seen["tcp_bind"]) == ("EPERM", "EPERM"), seen
    assert seen["raw_sockets"] == "EPERM,EPERM", seen  # AF_PACKET, netlink
    # kill(-1), tkill, tgkill, rt_sigqueueinfo, pidfd_open, pidfd_send_signal.
    assert seen["signals"] == ",".join(["EPERM"] * 6), seen
    assert (other / "notes.txt").read_text() == "earlybird's own"
    assert served.core.proc.poll() is None


def test_an_egress_plugin_sends_no_datagram_by_any_route(served: Served) -> None:
    """Landlock's network rules cover TCP only: before, an egress plugin had
    UDP sockets (for DNS) and so reached any host and port by datagram,
    loopback included. Now every route to a datagram is refused, and its
    declared names resolve from the view's own /etc/hosts, never by DNS."""
    _enabled(served, "hostile")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.setblocking(False)
        port = listener.getsockname()[1]
        seen = served.client.invoke(
            "hostile",
            "hostile.datagrams",
            {"port": port, "names": "localhost 127.0.0.1 naga-undeclared.invalid"},
            timeout=READY_S,
        )
        assert isinstance(seen, dict)
        routes = cast("dict[str, str]", seen["routes"])
        # UDP (plain, flagged, by protocol, connected, sendmsg, sendmmsg, v4-mapped
        # IPv6, the raw syscall), UDP-Lite, ping, raw, packet, netlink, vsock
        # sockets, and io_uring (whose own socket and sendmsg skip the filter).
        assert routes == dict.fromkeys(routes, "EPERM"), routes
        assert len(routes) == 15, routes
        with pytest.raises(BlockingIOError):
            listener.recv(64)
    lookups = cast("dict[str, str]", seen["lookups"])
    assert "127.0.0.1" in str(lookups["localhost"]).split(), lookups
    assert lookups["127.0.0.1"] == "127.0.0.1", lookups
    # An undeclared name is not looked up anywhere (no DNS): EAI_NONAME at once.
    assert lookups["naga-undeclared.invalid"] == f"gaierror {socket.EAI_NONAME}", lookups
    assert served.core.proc.poll() is None
