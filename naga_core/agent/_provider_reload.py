"""providers.json followed while the core runs (docs/design/models.md,
"Editing providers.json").

Every model call asks :meth:`ProviderFileWatch.current`; it stats the file
and its directory (a few microseconds) and re-reads only when what the stat
says changed: device, inode, mode, owner, size, mtime or ctime. An editor
that renames a new file into place changes the inode; one that rewrites in
place changes mtime and ctime; ``chmod`` changes ctime; a directory made
writable by others changes the directory's mode. The stamp is taken before
the read, so a write that lands during the read is seen at the next call.

A re-read file replaces the previous reading whatever it says: a valid one
is the new provider set, a refused one is the refusal (the next turn's MODEL
error quotes it, and no provider of the old file is used: its key may be the
one the owner meant to revoke), a deleted one is "no providers.json", as at
start. An in-place rewrite of the same size within the filesystem's
timestamp granularity is not seen; editors do not do that.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from naga_core._home import Home
from naga_core._providers import (
    NoProviderConfigured,
    Providers,
    ProvidersFileError,
    providers_path,
)
from naga_core.agent._provider_choice import ProviderFile

log = logging.getLogger("naga.agent")

_Stat = tuple[int, int, int, int, int, int, int]


def _stat(path: str) -> _Stat | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None  # the read says why (missing, unreadable)
    return (
        st.st_dev,
        st.st_ino,
        st.st_mode,
        st.st_uid,
        st.st_size,
        st.st_mtime_ns,
        st.st_ctime_ns,
    )


@dataclass(frozen=True, slots=True)
class Stamp:
    """What ``lstat`` says of the file and of its directory."""

    file: _Stat | None
    directory: _Stat | None

    @classmethod
    def of(cls, path: str) -> Stamp:
        return cls(_stat(path), _stat(os.path.dirname(path)))


def read_provider_file(home: Home) -> ProviderFile:
    """providers.json now: parsed, absent, or refused (with the reason)."""
    try:
        return ProviderFile.read(Providers.load(home))
    except NoProviderConfigured:
        return ProviderFile.absent()
    except ProvidersFileError as exc:
        return ProviderFile.refused(f"{exc}")


class ProviderFileWatch:
    """The latest reading of providers.json, re-read when its stat changes."""

    def __init__(self, home: Home) -> None:
        self._home = home
        self._path = providers_path(home)
        self._stamp: Stamp | None = None
        self._file = ProviderFile.absent()
        #: How many times the file was read (the first read included).
        self.reads = 0

    def current(self) -> ProviderFile:
        stamp = Stamp.of(self._path)
        if stamp == self._stamp:
            return self._file
        first = self._stamp is None
        self._stamp = stamp
        file = read_provider_file(self._home)
        self.reads += 1
        if file.problem:
            log.warning("providers.json refused: %s", file.problem)
        elif not first and file != self._file:
            # Names only: a Provider's repr leaves its key out, and so does this.
            names = ", ".join(file.names())
            log.info("providers.json changed; re-read it (providers: %s)", names)
        self._file = file
        return file


__all__ = ["ProviderFileWatch", "Stamp", "read_provider_file"]
