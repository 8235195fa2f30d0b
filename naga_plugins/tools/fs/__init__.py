"""The fs plugin: the owner's workspace, which its sandbox shows read-only at
the path its work directory's ``workspace`` link names.

Reads answer from the workspace. ``fs.write``, ``fs.edit`` and
``fs.delete`` write nothing: their result stages the writes (``writes``,
``deletes``) and the core captures them as one effect (docs/design/tools.md).
A path is relative to the workspace; nothing outside it is read, not even
through a symlink.
"""

from __future__ import annotations

import os
import stat

from naga_plugins import Plugin, ToolFailed

plugin = Plugin("fs")
#: Most bytes fs.read returns, most entries fs.list shows, most lines found.
READ_LIMIT = 16_000
LIST_LIMIT = 500
SEARCH_LIMIT = 100
_SEARCH_FILE_LIMIT = 2_000_000


def _root() -> str:
    return os.path.realpath(os.path.join(plugin.work_dir(), "workspace"))


def _rel(path: str) -> str:
    if "\0" in path:
        raise ToolFailed(f"path {path!r} must be relative to the workspace")
    if path.startswith("/"):
        # Small models write "/workspace/x" for the workspace's x, and then
        # repeat the same call if the error does not show the right one.
        rest = path.lstrip("/")
        rest = rest.removeprefix("workspace/") if rest != "workspace" else ""
        raise ToolFailed(f"path {path!r} must be relative to the workspace, e.g. {rest or '.'!r}")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise ToolFailed(f"path {path!r} leaves the workspace")
    return "/".join(parts)


def _inside(path: str) -> str:
    """The real path of ``path``, if it stays in the workspace."""
    root = _root()
    full = os.path.realpath(os.path.join(root, _rel(path)))
    if full != root and not full.startswith(root + "/"):
        raise ToolFailed(f"{path} leads outside the workspace")
    return full


@plugin.tool("fs.read")
def read(path: str) -> dict[str, object]:
    full = _inside(path)
    try:
        with open(full, "rb") as f:
            data = f.read(READ_LIMIT + 1)
    except FileNotFoundError:
        raise ToolFailed(f"no file {path} in the workspace") from None
    except IsADirectoryError:
        raise ToolFailed(f"{path} is a directory (use fs.list)") from None
    out: dict[str, object] = {
        "path": _rel(path),
        "content": data[:READ_LIMIT].decode("utf-8", "replace"),
    }
    if len(data) > READ_LIMIT:
        out["truncated_at"] = READ_LIMIT
    return out


@plugin.tool("fs.list")
def list_dir(path: str = "") -> dict[str, object]:
    full = _inside(path)
    try:
        entries = sorted(os.scandir(full), key=lambda e: e.name)
    except FileNotFoundError:
        raise ToolFailed(f"no directory {path or '.'} in the workspace") from None
    except NotADirectoryError:
        raise ToolFailed(f"{path} is a file (use fs.read)") from None
    shown: list[dict[str, object]] = []
    for entry in entries[:LIST_LIMIT]:
        st = entry.stat(follow_symlinks=False)
        kind = (
            "symlink"
            if stat.S_ISLNK(st.st_mode)
            else "directory"
            if stat.S_ISDIR(st.st_mode)
            else "file"
        )
        item: dict[str, object] = {"name": entry.name, "kind": kind}
        if kind == "file":
            item["size"] = st.st_size
        shown.append(item)
    out: dict[str, object] = {"path": _rel(path) or ".", "entries": shown}
    if len(entries) > LIST_LIMIT:
        out["more"] = len(entries) - LIST_LIMIT
    return out


@plugin.tool("fs.search")
def search(text: str, path: str = "") -> dict[str, object]:
    if not text:
        raise ToolFailed("give some text to search for")
    root = _root()
    start = _inside(path)
    found: list[dict[str, object]] = []
    for directory, dirs, files in os.walk(start):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(directory, name)
            if os.path.islink(full) or os.path.getsize(full) > _SEARCH_FILE_LIMIT:
                continue
            with open(full, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
            for number, line in enumerate(lines, 1):
                if text in line:
                    rel = os.path.relpath(full, root)
                    found.append({"path": rel, "line": number, "text": line[:300]})
                    if len(found) >= SEARCH_LIMIT:
                        return {"matches": found, "truncated": True}
    return {"matches": found}


def _staged_path(path: str) -> str:
    rel = _rel(path)
    if not rel:
        raise ToolFailed("give a file's path, not the workspace itself")
    parent = os.path.dirname(rel)
    _inside(parent)  # no parent outside (a link's target)
    return rel


@plugin.tool("fs.write")
def write(path: str, content: str) -> dict[str, object]:
    rel = _staged_path(path)
    full = os.path.join(_root(), rel)
    if os.path.isdir(full) and not os.path.islink(full):
        raise ToolFailed(f"{rel} is a directory")
    return {"writes": [{"path": rel, "content": content}], "bytes": len(content.encode())}


@plugin.tool("fs.edit")
def edit(path: str, old: str, new: str) -> dict[str, object]:
    rel = _staged_path(path)
    if not old:
        raise ToolFailed("old must not be empty")
    try:
        with open(_inside(rel), encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:  # the embedded model reaches for edit to make a file
        raise ToolFailed(
            f"no file {rel} in the workspace (fs.edit changes a file; fs.write creates one)"
        ) from None
    except UnicodeDecodeError:
        raise ToolFailed(f"{rel} is not UTF-8 text") from None
    count = text.count(old)
    if count != 1:
        raise ToolFailed(
            f"old occurs {count} times in {rel}; it must occur exactly once (give more context)"
        )
    return {"writes": [{"path": rel, "content": text.replace(old, new, 1)}]}


@plugin.tool("fs.delete")
def delete(path: str) -> dict[str, object]:
    rel = _staged_path(path)
    if not os.path.lexists(os.path.join(_root(), rel)):
        raise ToolFailed(f"there is nothing at {rel} to delete")
    return {"deletes": [rel]}


main = plugin.main
