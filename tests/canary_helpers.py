"""Searching a home for plaintext that must not be there (issue 18's canary
tests): a planted string in each form it could be written in, and the
files under ``$NAGA_HOME`` holding any of them, the owner's workspace
aside (it is exempt: the owner's own files)."""

from __future__ import annotations

import base64
import os
import stat


def forms(canary: str) -> list[bytes]:
    """``canary`` plain, in base64 at each of the three offsets it can
    start at in an encoded text (the characters that also depend on the
    bytes around it cut off), and in hex of either case."""
    raw = canary.encode()
    encoded = [base64.b64encode(b"\0" * pad + raw) for pad in range(3)]
    b64 = [encoded[0][:-4]] + [e[4:-4] for e in encoded[1:]]
    return [raw, *b64, raw.hex().encode(), raw.hex().upper().encode()]


def holds(data: bytes, canary: str) -> bool:
    return any(form in data for form in forms(canary))


def files_holding(home: str, needles: list[bytes]) -> list[str]:
    """Paths (relative to ``home``) of the regular files outside the
    workspace holding any of ``needles``."""
    hits: list[str] = []
    for top, _dirs, files in os.walk(home):
        rel_top = os.path.relpath(top, home)
        if rel_top == "workspace" or rel_top.startswith("workspace" + os.sep):
            continue
        for name in files:
            path = os.path.join(top, name)
            try:
                if not stat.S_ISREG(os.lstat(path).st_mode):
                    continue  # a socket or a link
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                continue  # gone while walking
            if any(n in data for n in needles):
                hits.append(os.path.relpath(path, home))
    return sorted(hits)


__all__ = ["files_holding", "forms", "holds"]
