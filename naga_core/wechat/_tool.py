"""``wechat.send_file``, the agent's tool for sending an image or a file to
the WeChat user of the turn (R2, irreversible once WeChat took it): the
core answers it itself (naga_core.agent's core tools) through the
channel's ``send_file`` (the plugin encrypts, asks getuploadurl, uploads to
the CDN, sends the item).

It is offered only to a turn of a WeChat session, and sends only to that
session's user through that session's binding: a turn cannot address
anyone else. What it sends is a file of the workspace (a relative path that
stays inside it, through no symlink) or a blob of this conversation's own
by its SHA-256 (a file or image the user sent, described to the model with
it: named by the session's records and sealed under the user's key),
opened before it goes."""

from __future__ import annotations

import json
import os
import stat

import pydantic
import trio

from naga.constants import WECHAT_SEND_MAX_BYTES
from naga.media import is_image
from naga.tokens import Risk
from naga.v1 import model_pb2 as mpb
from naga.v1 import wechat_media_pb2 as wmpb
from naga_core.agent import CoreToolAnswer, TurnView
from naga_core.errors import NagaError
from naga_core.wechat._channel import WechatChannel
from naga_core.wechat._keys import session_of
from naga_core.workspace import Workspace, check_path

NAME = "wechat.send_file"
RISK = Risk.R2
_PREFIX = "wechat:"
SPEC = mpb.ToolSpec(
    name=NAME.replace(".", "__"),
    description=(
        "Send an image or a file to the WeChat user you are talking with (it cannot be "
        "taken back). Give either `path` (a file of the workspace, relative to it) or "
        "`blob` (the sha256 of a file or image received in this conversation, as it is "
        "described)."
    ),
    parameters_json_schema=json.dumps(
        {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "relative to the workspace"},
                "blob": {"type": "string", "description": "64 hex characters (sha256)"},
                "kind": {
                    "type": "string",
                    "enum": ["image", "file"],
                    "description": "default: image for PNG, JPEG, GIF or WebP bytes, else file",
                },
                "file_name": {"type": "string", "description": "the name the user sees"},
            },
        },
        separators=(",", ":"),
    ),
)


class _Args(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True)

    path: str = pydantic.Field(default="", max_length=4096)
    blob: str = pydantic.Field(default="", pattern=r"^([0-9a-f]{64})?$")
    kind: str = pydantic.Field(default="", pattern=r"^(image|file)?$")
    file_name: str = pydantic.Field(default="", max_length=200)


class _Refused(Exception):
    """Why the tool did not send (told to the model)."""


def wechat_target(turn: TurnView) -> tuple[str, str] | None:
    """(bot id, user id) of a WeChat session's turn, else None: the peer is
    ``wechat:<bot>/<user>`` and the session is that pair's own."""
    if not turn.peer.startswith(_PREFIX):
        return None
    bot, sep, user = turn.peer[len(_PREFIX) :].partition("/")
    if not sep or not bot or not user or turn.session != session_of(bot, user):
        return None
    return bot, user


def _read_workspace_file(root: str, path: str) -> tuple[bytes, str]:
    checked = check_path(path)
    real_root = os.path.realpath(root)
    full = os.path.realpath(os.path.join(real_root, checked))
    if not full.startswith(real_root.rstrip(os.sep) + os.sep):
        raise _Refused(f"{path!r} leads outside the workspace (through a symlink)")
    try:
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise _Refused(f"there is no file {checked!r} in the workspace") from None
    except OSError as exc:
        raise _Refused(f"{checked!r} cannot be read: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise _Refused(f"{checked!r} is not a regular file")
        if st.st_size > WECHAT_SEND_MAX_BYTES:
            raise _Refused(
                f"{checked!r} is {st.st_size} bytes; at most {WECHAT_SEND_MAX_BYTES} are sent"
            )
        return f.read(WECHAT_SEND_MAX_BYTES + 1), os.path.basename(checked)


class WechatSendFileTool:
    def __init__(self, channel: WechatChannel, workspace: Workspace) -> None:
        self._channel = channel
        self._workspace = workspace

    @property
    def name(self) -> str:
        return NAME

    @property
    def risk(self) -> Risk:
        return RISK

    @property
    def spec(self) -> mpb.ToolSpec:
        return SPEC

    def refusal(self, turn: TurnView) -> str | None:
        if wechat_target(turn) is None:
            return (
                f"{NAME}: only in a WeChat conversation (this session is not one): "
                "there is no WeChat user to send to"
            )
        return None

    async def call(self, turn: TurnView, arguments_json: str) -> CoreToolAnswer:
        target = wechat_target(turn)
        if target is None:
            return CoreToolAnswer(ok=False, error=self.refusal(turn) or NAME)
        try:
            args = _Args.model_validate_json(arguments_json or "{}")
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors()
            )
            return CoreToolAnswer(ok=False, error=f"{NAME}: {problems}")
        try:
            data, name = await self._load(args, target)
        except (_Refused, NagaError) as exc:  # a path refused, a blob not this one's
            return CoreToolAnswer(ok=False, error=f"{NAME}: {exc}")
        image = args.kind == "image" or (not args.kind and is_image(data))
        req = wmpb.WechatSendFileRequest(
            bot_id=target[0],
            to_user_id=target[1],
            data=data,
            image=image,
            file_name=args.file_name or name,
        )
        try:
            done = await self._channel.send_file(req)
        except NagaError as exc:
            return CoreToolAnswer(ok=False, error=f"{NAME}: not sent: {exc}")
        result = {
            "sent": "image" if image else "file",
            "file_name": req.file_name,
            "size": done.size,
            "sha256": done.sha256,
            "seq": done.seq,
        }
        return CoreToolAnswer(ok=True, result_json=json.dumps(result))

    async def _load(self, args: _Args, target: tuple[str, str]) -> tuple[bytes, str]:
        if bool(args.path) == bool(args.blob):
            raise _Refused("give exactly one of `path` (a workspace file) or `blob` (a sha256)")
        if args.path:
            root = self._workspace.root
            data, name = await trio.to_thread.run_sync(_read_workspace_file, root, args.path)
        else:
            # Only this conversation's own blob, opened: a peer's session
            # cannot send another's (nor the store's sealed bytes).
            data = await self._channel.session_blob(*target, args.blob)
            name = args.blob[:12]
        if not data:
            raise _Refused("the file is empty: there is nothing to send")
        if len(data) > WECHAT_SEND_MAX_BYTES:
            raise _Refused(f"{len(data)} bytes; at most {WECHAT_SEND_MAX_BYTES} are sent")
        return data, name


__all__ = ["NAME", "RISK", "SPEC", "WechatSendFileTool", "wechat_target"]
