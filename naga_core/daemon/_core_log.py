"""Reading the core's log (``run/core.log``) for the console's logs page.

The detached core writes its stderr there, one line per record in the
format of :data:`LOG_FORMAT` (``naga daemon start``); its children's lines
come through the supervisor's output copier as records of their own, so
every line a person reads has a time, a level and a component. Lines of
another shape (a traceback's continuation, an older core's lines without a
level) are kept: a continuation takes the level and component of the record
it continues, so filtering by level keeps a traceback with its error.

The log rotates by size (:class:`RotatingLog`): past :data:`ROTATE_BYTES`
``core.log`` becomes ``core.log.1`` (``.1`` becomes ``.2`` ...) and at most
:data:`KEPT_FILES` older files are kept, so it never grows without bound.
Each new file begins with a line saying which line of the whole log it
is (:data:`_CONTINUES`), so a line keeps its number across rotations and
pages read across the files as one log.

Pages are counted from the end (newest first) by line number, so a page
asked with ``before`` stays put while the core writes on and rotates. Only
the last :data:`MAX_READ_BYTES` of the files are read (all of them, at the
sizes above); older lines are the files', for ``less``.
"""

from __future__ import annotations

import io
import logging
import logging.handlers
import os
import re
from dataclasses import dataclass
from typing import Any

from naga.constants import CORE_LOG_KEPT_FILES, CORE_LOG_ROTATE_BYTES
from naga.v1 import console_admin_pb2 as capb

#: What the core writes (its level in the line, so the page can filter by it).
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
#: Past this size core.log rotates (docs/design/constants.md).
ROTATE_BYTES = CORE_LOG_ROTATE_BYTES
#: Older files kept beside core.log: core.log.1 (the newest) .. core.log.3.
KEPT_FILES = CORE_LOG_KEPT_FILES
#: The tail of the log read for a page: every kept file, at the sizes above.
MAX_READ_BYTES = (KEPT_FILES + 1) * ROTATE_BYTES
#: Characters of one line shown; longer ones are cut (the file has them whole).
MAX_LINE_CHARS = 4000
DEFAULT_LIMIT = 100
MAX_LIMIT = 500

LEVELS = {
    "DEBUG": capb.LOG_LEVEL_DEBUG,
    "INFO": capb.LOG_LEVEL_INFO,
    "WARNING": capb.LOG_LEVEL_WARNING,
    "ERROR": capb.LOG_LEVEL_ERROR,
    "CRITICAL": capb.LOG_LEVEL_CRITICAL,
}
_LINE = re.compile(
    r"(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) "
    r"(?:(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) )?"
    r"(?P<name>[A-Za-z_][\w.-]*) (?P<message>.*)"
)


#: The first line of a file the log rotated into: which line of the log it is.
_CONTINUES = re.compile(r".* naga\.core\.log rotated: this is line (?P<number>\d+) of the log\b.*")
_COUNT_CHUNK = 1 << 20


def _same_file(fd: int, path: str) -> bool:
    try:
        here, there = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def rotated_paths(path: str, kept: int = KEPT_FILES) -> list[str]:
    """The log's files that exist, oldest first, ``path`` itself last."""
    older = [f"{path}.{i}" for i in range(kept, 0, -1)]
    return [p for p in older if os.path.exists(p)] + [path]


def _lines_in(path: str) -> int:
    n = 0
    try:
        with open(path, "rb") as f:
            while chunk := f.read(_COUNT_CHUNK):
                n += chunk.count(b"\n")
    except FileNotFoundError:
        return 0
    return n


def _first_line(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.readline(MAX_LINE_CHARS).decode("utf-8", errors="replace").rstrip("\n")
    except FileNotFoundError:
        return ""


def first_number(paths: list[str]) -> int:
    """The log's line number of the first line of ``paths[-1]``, ``paths``
    being the log's files oldest first: its own rotation line says it, else
    it follows the older files' lines (a log that never rotated starts at 1)."""
    m = _CONTINUES.fullmatch(_first_line(paths[-1]))
    if m is not None:
        return int(m["number"])
    if len(paths) == 1:
        return 1
    return first_number(paths[:-1]) + _lines_in(paths[-2])


class RotatingLog(logging.handlers.RotatingFileHandler):
    """run/core.log, rotated by size (0600: the log may name peers and
    settings). ``follow``: the file descriptors (the detached core's stdout
    and stderr) that are the log too; after a rotation they are pointed at
    the new file, so what is written to them raw (a child's early words, a
    traceback at exit) lands in the log being read, not in a rotated one."""

    def __init__(
        self,
        path: str,
        *,
        max_bytes: int = ROTATE_BYTES,
        kept: int = KEPT_FILES,
        follow: tuple[int, ...] = (),
    ) -> None:
        self._follow = follow
        super().__init__(path, maxBytes=max_bytes, backupCount=kept, encoding="utf-8")
        self.setFormatter(logging.Formatter(LOG_FORMAT))

    def _open(self) -> io.TextIOWrapper:
        fd = os.open(
            self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600
        )
        return os.fdopen(fd, "a", encoding="utf-8", errors="replace")

    def doRollover(self) -> None:  # noqa: N802 - logging's name
        # The number of the new file's first line, counted before the files move.
        number = first_number(rotated_paths(self.baseFilename, self.backupCount))
        number += _lines_in(self.baseFilename)
        super().doRollover()
        stream = self.stream
        if stream is None:  # pragma: no cover - delay is never set here
            return
        for fd in self._follow:
            os.dup2(stream.fileno(), fd, inheritable=True)
        record = logging.LogRecord(
            "naga.core.log",
            logging.INFO,
            __file__,
            0,
            "rotated: this is line %d of the log; earlier lines are in %s.1 "
            "(at most %d older files kept)",
            (number, os.path.basename(self.baseFilename), self.backupCount),
            None,
        )
        stream.write(self.format(record) + "\n")
        stream.flush()


def log_to_run_dir(path: str) -> RotatingLog:
    """Make the core's records reach ``path`` (run/core.log), rotated by
    size. When stderr is that file already (the detached core's), the
    stderr handler ``logging.basicConfig`` put on the root is replaced by
    this one, which keeps stdout and stderr on the current file; otherwise
    (``--foreground``: a terminal, systemd's journal) records go to both,
    so the console's logs page reads what this core logs."""
    root = logging.getLogger()
    follow = tuple(fd for fd in (1, 2) if _same_file(fd, path))
    if 2 in follow:
        handlers: list[logging.Handler] = list(root.handlers)
        for h in handlers:
            stream: Any = getattr(h, "stream", None)
            if not isinstance(h, logging.FileHandler) and stream is not None:
                root.removeHandler(h)
    handler = RotatingLog(path, follow=follow)
    root.addHandler(handler)
    return handler


@dataclass(frozen=True, slots=True)
class LogPage:
    lines: list[capb.LogLine]
    more: bool
    next_before: int
    total: int
    components: list[str]


def parse(lines: list[str], first_number: int) -> list[capb.LogLine]:
    """Each line as a :class:`LogLine`, numbered from ``first_number``."""
    out: list[capb.LogLine] = []
    level: capb.LogLevel.ValueType = capb.LOG_LEVEL_UNSPECIFIED
    component = ""
    for i, raw in enumerate(lines):
        text = raw[:MAX_LINE_CHARS]
        m = _LINE.fullmatch(text)
        if m is not None:
            level = LEVELS.get(m["level"] or "", capb.LOG_LEVEL_UNSPECIFIED)
            component = m["name"]
            line = capb.LogLine(time=m["time"], level=level, component=component)
            line.message = m["message"]
        else:  # a continuation: the record it continues says what it is
            line = capb.LogLine(level=level, component=component, message=text)
        line.number = first_number + i
        out.append(line)
    return out


def matches(line: capb.LogLine, min_level: int, component: str) -> bool:
    if min_level and line.level < min_level:
        return False
    if component:
        name = line.component
        return name == component or name.startswith(component + ".")
    return True


def _read_tail(path: str) -> tuple[bytes, int]:
    """The last :data:`MAX_READ_BYTES` of the log's files as one text, and
    the log's number of its first line (1 when a file was read only in
    part: numbers then count from the first whole line read)."""
    paths = rotated_paths(path)
    chunks: list[bytes] = []
    left = MAX_READ_BYTES
    first = len(paths) - 1
    cut = False
    for i in range(len(paths) - 1, -1, -1):
        try:
            with open(paths[i], "rb") as f:
                size = os.fstat(f.fileno()).st_size
                start = max(0, size - left)
                f.seek(start)
                data = f.read(size - start)
        except FileNotFoundError:
            continue
        if data and not data.endswith(b"\n"):
            data += b"\n"  # a file cut mid-line by a crash: its last line ends there
        chunks.append(data)
        left -= len(data)
        first = i
        if start:
            cut = True
            break
        if left <= 0:
            break
    data = b"".join(reversed(chunks))
    if cut:
        nl = data.find(b"\n")
        return (data[nl + 1 :] if nl >= 0 else b""), 1
    return data, first_number(paths[: first + 1]) if chunks else 1


def read_page(
    path: str, *, min_level: int, component: str, before: int | None, limit: int
) -> LogPage:
    """Up to ``limit`` matching lines before line ``before`` (None: the
    end), newest first, read across the rotated files as one log. A missing
    log is an empty one (the core never ran in this home)."""
    data, number = _read_tail(path)
    if not data:
        return LogPage([], False, 0, 0, [])
    text = data.decode("utf-8", errors="replace")
    raw = text.split("\n")
    if raw and raw[-1] == "":
        raw.pop()
    parsed = parse(raw, number)
    total = len(parsed)
    end = total if before is None else max(0, min(before - number, total))
    found: list[capb.LogLine] = []
    i = end - 1
    while i >= 0 and len(found) < limit:
        if matches(parsed[i], min_level, component):
            found.append(parsed[i])
        i -= 1
    more = any(matches(parsed[j], min_level, component) for j in range(i, -1, -1))
    components = sorted({p.component for p in parsed if p.component})
    return LogPage(found, more, parsed[i].number + 1 if more else 0, total, components)


__all__ = [
    "DEFAULT_LIMIT",
    "KEPT_FILES",
    "LEVELS",
    "LOG_FORMAT",
    "MAX_LIMIT",
    "ROTATE_BYTES",
    "LogPage",
    "RotatingLog",
    "first_number",
    "log_to_run_dir",
    "read_page",
    "rotated_paths",
]
