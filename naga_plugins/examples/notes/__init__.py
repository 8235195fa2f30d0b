"""The notes plugin: ``notes.write`` (R2), ``notes.read`` and ``notes.list``
(R0), plain text files in the plugin's work directory.

A title becomes a file name, so it is held to a safe alphabet: no path
separators, no leading dot, nothing that could name a file elsewhere.
"""

from __future__ import annotations

import os
import re

from naga_plugins import Plugin, ToolFailed

plugin = Plugin("notes")
_TITLE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9 ._-]{0,99}")
_SUFFIX = ".note"


def _path(title: str) -> str:
    if not _TITLE.fullmatch(title) or title.endswith((" ", ".")):
        raise ToolFailed(
            f"title {title!r} must be letters, digits, spaces, '.', '_' or '-', "
            "not starting with a dot or space nor ending with one"
        )
    return os.path.join(plugin.work_dir(), title + _SUFFIX)


@plugin.tool("notes.write")
def write(title: str, text: str) -> dict[str, object]:
    path = _path(title)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)  # a reader never sees half a note
    return {"title": title, "characters": len(text)}


@plugin.tool("notes.read")
def read(title: str) -> dict[str, object]:
    try:
        with open(_path(title), encoding="utf-8") as f:
            return {"title": title, "text": f.read()}
    except FileNotFoundError:
        raise ToolFailed(f"no note titled {title!r}") from None


@plugin.tool("notes.list")
def list_titles() -> list[str]:
    return sorted(
        n.removesuffix(_SUFFIX) for n in os.listdir(plugin.work_dir()) if n.endswith(_SUFFIX)
    )


main = plugin.main
