"""systemd unit files: rendered from the templates in ``deploy/systemd/`` and
installed where the service manager looks for them.

A template holds two placeholders, ``@NAGA_BIN@`` (the ``naga`` executable)
and ``@NAGA_HOME@`` (the instance's home). Both are substituted verbatim into
``ExecStart=``, ``Environment=`` and ``ReadWritePaths=``, where systemd splits
on whitespace, expands ``%`` specifiers and ``$`` variables and honours
quotes and backslashes; a path holding any of those is refused here, with the
reason, rather than misparsed by systemd later.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass

from naga_core._home import Home
from naga_core.errors import ConfigError

USER_UNIT = "naga.service"
SYSTEM_UNIT = "naga@.service"
BIN_PLACEHOLDER = "@NAGA_BIN@"
HOME_PLACEHOLDER = "@NAGA_HOME@"
#: The system instance's default home: systemd's state directory for the
#: instance, /var/lib/naga/<user> (StateDirectory=naga/%i creates it, 0700).
SYSTEM_HOME = "%S/naga/%i"
SYSTEM_UNIT_DIR = "/etc/systemd/system"
#: Unit files are configuration, readable by the service manager; nothing
#: secret goes in them (keys and credentials stay in the home).
UNIT_FILE_MODE = 0o644

_REFUSED = {
    "%": "starts a systemd specifier (%h, %i, ...)",
    "$": "is expanded by systemd as an environment variable",
    "\\": "starts a systemd escape sequence",
    '"': "is a systemd quote",
    "'": "is a systemd quote",
}


class UnitError(ConfigError):
    """A unit cannot be rendered or installed as asked."""


@dataclass(frozen=True, slots=True)
class RenderedUnit:
    """A unit file's name (``naga.service``) and full text."""

    name: str
    text: str


@dataclass(frozen=True, slots=True)
class Installed:
    """What an install wrote, and what to run next."""

    path: str
    unit: str
    changed: bool
    home_created: bool
    next_steps: tuple[str, ...]


# --- paths ----------------------------------------------------------------------------


def unit_path(what: str, path: str) -> str:
    """``path`` normalised, if systemd will read it back as the same path."""
    if not path.startswith("/"):
        raise UnitError(f"{what} {path!r} is not an absolute path; systemd needs one")
    for ch in path:
        if 0xDC80 <= ord(ch) <= 0xDCFF:
            raise UnitError(f"{what} {path!r} is not valid UTF-8, which unit files must be")
        if ch.isspace():
            raise UnitError(
                f"{what} {path!r} contains whitespace ({ch!r}), "
                "which splits a systemd command line and path list"
            )
        if not ch.isprintable():
            raise UnitError(f"{what} {path!r} contains the control character {ch!r}")
        if ch in _REFUSED:
            raise UnitError(f"{what} {path!r} contains {ch!r}, which {_REFUSED[ch]}")
    normal = "/" + os.path.normpath(path).lstrip("/")
    if normal == "/":
        raise UnitError(f"{what} must not be the root directory")
    return normal


def default_user_unit_dir(environ: Mapping[str, str] | None = None) -> str:
    """Where a user's service manager reads user units it was not shipped
    with: ``$XDG_CONFIG_HOME/systemd/user``, else ``~/.config/systemd/user``."""
    env = os.environ if environ is None else environ
    config = env.get("XDG_CONFIG_HOME", "")
    if not config.startswith("/"):  # the XDG spec: relative values are ignored
        config = os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(config, "systemd", "user")


def naga_executable() -> str:
    """The ``naga`` console script of the running installation: next to
    the interpreter (a venv's bin/), else the one on ``$PATH``."""
    beside = os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "naga")
    if _is_executable(beside):
        return beside
    found = shutil.which("naga")
    if found is None:
        raise UnitError(
            f"cannot find the naga executable (looked at {beside} and on $PATH); "
            "install Naga with pip or `make run` first"
        )
    return os.path.abspath(found)


def _is_executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


# --- templates ------------------------------------------------------------------------


def template_dirs() -> list[str]:
    """Where the templates may be: the source tree (editable installs and
    checkouts), then ``<prefix>/share/naga/systemd`` (wheel installs)."""
    source = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "deploy")
    return [os.path.join(source, "systemd"), os.path.join(sys.prefix, "share", "naga", "systemd")]


def _template(kind: str, name: str) -> str:
    tried: list[str] = []
    for d in template_dirs():
        path = os.path.join(d, kind, name)
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except FileNotFoundError:
            tried.append(path)
    raise UnitError(f"unit template {kind}/{name} not found (looked in {', '.join(tried)})")


def render(template: str, name: str, *, naga_bin: str, home: str) -> RenderedUnit:
    """Substitute already-checked values into ``template``."""
    text = template.replace(BIN_PLACEHOLDER, naga_bin).replace(HOME_PLACEHOLDER, home)
    if "@NAGA_" in text:
        line = next(ln for ln in text.splitlines() if "@NAGA_" in ln)
        raise UnitError(f"unit template {name} has an unknown placeholder: {line.strip()!r}")
    return RenderedUnit(name, text)


def render_user_unit(*, home: str, naga_bin: str) -> RenderedUnit:
    """``naga.service`` for ``systemctl --user``."""
    return render(
        _template("user", USER_UNIT),
        USER_UNIT,
        naga_bin=unit_path("naga executable", naga_bin),
        home=unit_path("Naga home", home),
    )


def render_system_unit(*, naga_bin: str, home: str | None = None) -> RenderedUnit:
    """``naga@.service``, one instance per user; ``home`` defaults to each
    instance's own /var/lib/naga/<user>. A fixed ``home`` suits a machine
    with one instance only."""
    return render(
        _template("system", SYSTEM_UNIT),
        SYSTEM_UNIT,
        naga_bin=unit_path("naga executable", naga_bin),
        home=SYSTEM_HOME if home is None else unit_path("Naga home", home),
    )


# --- installing -------------------------------------------------------------------------


def install_user_units(home: str, naga_bin: str, dest_dir: str | None = None) -> Installed:
    """Write ``naga.service`` into ``dest_dir`` (default: the user's unit
    directory), atomically, mode 0644.

    The home is created (0700) if missing: ``ReadWritePaths=`` must name an
    existing directory or the unit fails to start.
    """
    unit = render_user_unit(home=home, naga_bin=naga_bin)
    _require_executable(naga_bin)
    default_dest = unit_path("unit directory", default_user_unit_dir())
    dest = default_dest if dest_dir is None else unit_path("unit directory", dest_dir)
    home_path = unit_path("Naga home", home)
    created = not os.path.isdir(home_path)
    Home(home_path).ensure()
    path, changed = _write_unit(dest, unit)
    steps = (
        "systemctl --user daemon-reload && systemctl --user enable --now naga",
        "loginctl enable-linger  # optional: keep it running while you are logged out",
    )
    if dest != default_dest:
        steps = (f"systemctl --user link {path}  # {dest} is not where systemd looks", *steps)
    return Installed(path, unit.name, changed, created, steps)


def install_system_unit(
    naga_bin: str, dest_dir: str = SYSTEM_UNIT_DIR, *, home: str | None = None
) -> Installed:
    """Write ``naga@.service`` into ``dest_dir`` (default /etc/systemd/system)."""
    unit = render_system_unit(naga_bin=naga_bin, home=home)
    _require_executable(naga_bin)
    dest = unit_path("unit directory", dest_dir)
    path, changed = _write_unit(dest, unit)
    steps = ("systemctl daemon-reload && systemctl enable --now naga@USER.service",)
    if dest != SYSTEM_UNIT_DIR:
        steps = (f"systemctl link {path}  # {dest} is not where systemd looks", *steps)
    return Installed(path, unit.name, changed, False, steps)


def _require_executable(naga_bin: str) -> None:
    if not _is_executable(naga_bin):
        raise UnitError(f"naga executable {naga_bin!r} is not an executable file")


def _write_unit(dest_dir: str, unit: RenderedUnit) -> tuple[str, bool]:
    """temp file -> fsync -> rename -> fsync of the directory: a crash leaves
    the old unit or the new one, never half of one for systemd to parse."""
    os.makedirs(dest_dir, mode=0o755, exist_ok=True)
    path = os.path.join(dest_dir, unit.name)
    data = unit.text.encode("utf-8")
    try:
        with open(path, "rb") as f:
            unchanged = f.read() == data
        if unchanged and stat.S_IMODE(os.stat(path).st_mode) == UNIT_FILE_MODE:
            return path, False
    except FileNotFoundError:
        pass
    fd, tmp = tempfile.mkstemp(prefix=f".{unit.name}.", suffix=".tmp", dir=dest_dir)
    renamed = False
    try:
        os.fchmod(fd, UNIT_FILE_MODE)  # mkstemp creates files 0600
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        os.rename(tmp, path)
        renamed = True
    finally:
        os.close(fd)
        if not renamed:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    dfd = os.open(dest_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return path, True
