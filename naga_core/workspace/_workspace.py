"""The owner's workspace: where it is, the world action that sets its
paths, and the one effect each tool call's writes become.

A tool never writes here itself. Its writes arrive staged (an fs tool's
result, a shell command's staged copy); :meth:`Workspace.journal` captures
them against the live tree and journals one ``perform`` effect whose ``do``
is ``workspace.apply`` of the new state and whose ``undo`` is
``workspace.apply`` of the old one, both change sets in the blob store. The
kernel writes the effect ahead, then runs ``do``; a rollback past it runs
``undo``, which puts back the prior bytes.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Callable, Mapping
from typing import cast

from google.protobuf.message import DecodeError

from naga import values
from naga.v1 import kernel_pb2 as kpb
from naga.v1 import tools_pb2 as tlpb
from naga_core._home import Home
from naga_core.errors import NagaError, NotFound
from naga_core.kernel import Actions, Kernel, Scalar, action
from naga_core.ledger import BlobStore
from naga_core.workspace._changes import Captured, Staged, apply, capture, holds
from naga_core.workspace._errors import PathRefused, Reason
from naga_core.workspace._tree import Kind, Node, check_path

APPLY_ACTION = "workspace.apply"
#: What of the home no workspace change may touch (see Workspace._refuse_private).
_PRIVATE = ("constitution.md", "ledger", "keys", "blobs", "credentials", "run")
#: Largest file a tool may write, in bytes (the blob store's limit is higher).
MAX_FILE_BYTES = 16 << 20


def default_root(home: Home) -> str:
    return os.path.join(home.root, "workspace")


class Workspace:
    """The workspace of one home; ``setting`` reads ``workspace.path``."""

    def __init__(self, home: Home, blobs: BlobStore, setting: Callable[[], str]) -> None:
        self._home = home
        self._blobs = blobs
        self._setting = setting

    def read_setting(self, setting: Callable[[], str]) -> None:
        """Read ``workspace.path`` through ``setting`` from now on (once the
        kernel is open: the action is installed before it)."""
        self._setting = setting

    @property
    def blobs(self) -> BlobStore:
        return self._blobs

    @property
    def root(self) -> str:
        """The live workspace (made on first use)."""
        root = self._setting() or default_root(self._home)
        # A workspace around the home would hold the core's private files
        # (the constitution among them, INV-5) and the shell's own staging
        # copy (which would copy itself into itself): refused.
        real, home = os.path.realpath(root), os.path.realpath(self._home.root)
        if real == home or home.startswith(real.rstrip(os.sep) + os.sep):
            raise PathRefused(
                Reason.BAD_PATH,
                f"workspace.path {root} holds the home {self._home.root} and the core's private "
                "files: choose a directory inside it or elsewhere",
            )
        os.makedirs(root, mode=0o700, exist_ok=True)
        return root

    def install(self, actions: Actions) -> None:
        """Register ``workspace.apply`` (before the kernel opens: recovery
        re-runs an interrupted one)."""
        actions.register(APPLY_ACTION, self._apply)

    def _apply(self, args: Mapping[str, Scalar]) -> None:
        root, digest = args.get("root"), args.get("set")
        if not isinstance(root, str) or not isinstance(digest, bytes):
            raise PathRefused(Reason.BAD_CHANGE_SET, f"{APPLY_ACTION} needs root and set: {args}")
        try:
            changes = tlpb.WorkspaceChangeSet.FromString(self._blobs.get(digest))
        except (NotFound, DecodeError) as exc:
            raise PathRefused(Reason.BAD_CHANGE_SET, f"change set {digest.hex()}: {exc}") from None
        apply(root, self._blobs, changes)

    def holds(self, act: kpb.Action) -> bool:
        """Whether the tree is as the ``workspace.apply`` action ``act``
        would leave it (the start's undo of an interrupted tool call looks
        before it undoes: blocking I/O, small). False for any other action
        or a change set that cannot be read."""
        if act.name != APPLY_ACTION or "root" not in act.args or "set" not in act.args:
            return False
        try:
            root, digest = values.from_value(act.args["root"]), values.from_value(act.args["set"])
        except values.InvalidValue:
            return False
        if not isinstance(root, str) or not isinstance(digest, bytes):
            return False
        try:
            changes = tlpb.WorkspaceChangeSet.FromString(self._blobs.get(digest))
        except (NagaError, DecodeError):  # absent or corrupt: not what the tree holds
            return False
        return holds(root, changes)

    def capture(self, staged: Mapping[str, Staged]) -> Captured | None:
        """``staged`` over the live tree (blocking I/O: call off the loop)."""
        root = self.root
        for path in staged:
            self._refuse_private(root, path)
        return capture(root, self._blobs, staged)

    def _refuse_private(self, root: str, path: str) -> None:
        """A workspace the owner put around the home (``workspace.path`` =
        the home, or /) still never reaches the core's own files: the
        constitution (INV-5), the ledger, the keys, the blobs, the
        credentials, ``run/``."""
        target = os.path.realpath(os.path.join(root, path))
        home = os.path.realpath(self._home.root)
        for name in _PRIVATE:
            private = os.path.join(home, name)
            if (
                target == private
                or target.startswith(private + os.sep)
                or (private.startswith(target + os.sep))
            ):
                raise PathRefused(
                    Reason.BAD_PATH, f"{path} is (or holds) the core's private {private}"
                )

    def journal(self, kernel: Kernel, captured: Captured, *, description: str) -> int:
        """One effect for ``captured`` (on the loop, inside ``Core.write``;
        its blobs are durable already: no sync here)."""
        root = self.root
        return kernel.perform(
            [action(APPLY_ACTION, root=root, set=captured.do_blob)],
            [action(APPLY_ACTION, root=root, set=captured.undo_blob)],
            description=description,
        )

    def staged_from_result(self, result: object) -> dict[str, Staged]:
        """The writes an fs tool's result stages: ``{"writes": [{"path",
        "content"} | {"path", "content_b64"}], "deletes": [path]}``."""
        if not isinstance(result, dict):
            raise PathRefused(Reason.BAD_CHANGE_SET, "a staging tool's result must be an object")
        result = cast("dict[str, object]", result)
        staged: dict[str, Staged] = {}
        root = self.root
        for raw_item in _list(result.get("writes", [])):
            if not isinstance(raw_item, dict):
                raise PathRefused(Reason.BAD_CHANGE_SET, "each write must be an object")
            item = cast("dict[str, object]", raw_item)
            path = check_path(_text(item.get("path")))
            data = _content(item)
            if len(data) > MAX_FILE_BYTES:
                raise PathRefused(
                    Reason.TOO_LARGE, f"{path}: {len(data)} bytes, the limit is {MAX_FILE_BYTES}"
                )
            full = os.path.join(root, path)
            if os.path.isdir(full) and not os.path.islink(full):
                raise PathRefused(Reason.WRONG_KIND, f"{path} is a directory, not a file")
            executable = os.path.isfile(full) and bool(os.lstat(full).st_mode & 0o111)
            staged[path] = (Node.file(data, executable=executable), data)
            parent = os.path.dirname(path)
            while parent:  # parents made on the way are part of the change
                if not os.path.lexists(os.path.join(root, parent)):
                    staged[parent] = (Node(Kind.DIRECTORY), None)
                parent = os.path.dirname(parent)
        for raw in _list(result.get("deletes", [])):
            path = check_path(_text(raw))
            if not os.path.lexists(os.path.join(root, path)):
                raise PathRefused(Reason.MISSING, f"there is nothing at {path} to delete")
            staged[path] = None
        return staged


def _list(value: object) -> list[object]:
    if not isinstance(value, list):
        raise PathRefused(Reason.BAD_CHANGE_SET, "writes and deletes must be lists")
    return list(cast("list[object]", value))


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise PathRefused(Reason.BAD_PATH, f"a path must be text, got {value!r}")
    return value


def _content(item: dict[str, object]) -> bytes:
    if "content_b64" in item:
        try:
            return base64.b64decode(_text(item["content_b64"]), validate=True)
        except binascii.Error as exc:
            raise PathRefused(Reason.BAD_CHANGE_SET, f"content_b64: {exc}") from None
    content = item.get("content")
    if not isinstance(content, str):
        raise PathRefused(Reason.BAD_CHANGE_SET, "a write needs content (text)")
    return content.encode("utf-8")


__all__ = ["APPLY_ACTION", "MAX_FILE_BYTES", "Workspace", "default_root"]
