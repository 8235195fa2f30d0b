"""Which part of a streamed reply a user may see before the reply is whole.

Models that write their tool calls into the text (``_textcalls``) stream the
call's JSON like any other text; it is removed from the answer only at the
end. :class:`VisibleText` sits between the chunks and the user and holds
back whatever may still turn out to be a call. The rule, for a request that
offers tools to a dialect that parses calls out of text (otherwise every
delta is shown as it arrives):

1. Leading whitespace is held until the first other character. If that is
   ``{`` or ``[`` the reply may be a bare call object: the whole reply is
   held to the end.
2. At a call opener (``<tool_call>``, or a fence ``````` with no word or
   the word json, tool_call or tool_code) whose first non-space character
   after it is ``{`` or ``[``, everything from the opener on is held to the
   end; while that character has not arrived, it is held until it does.
   An opener followed by anything else is text (``_textcalls`` would not
   take it for a call) and is shown.
3. A tail that may be the start of an opener (``<tool_c``, two backticks)
   is held until the next text decides it.
4. Trailing whitespace is held until other text follows: removing a call
   strips the whitespace around it, so showing it early could show text the
   answer does not have.

At the end the answer's text (calls removed) is known, and :meth:`finish`
gives what the user has not seen of it. So what the user was shown, in
order, is the answer's text exactly, except that leading whitespace shown
before a call turns up is not taken back (a whitespace-only difference).
"""

from __future__ import annotations

from naga.v1 import model_pb2
from naga_plugins.models._request import tool_names

_CALL_TAG = "<tool_call>"
_FENCE = "```"
#: The fence words ``_textcalls._OPENERS`` accepts.
_FENCE_WORDS = ("json", "tool_call", "tool_code")
_JSON_START = ("{", "[")


class VisibleText:
    """Feed a call's text deltas in order; show what :meth:`feed` returns,
    then what :meth:`finish` returns."""

    def __init__(self, *, hold_calls: bool) -> None:
        self._filter = hold_calls
        self._held = ""
        self._shown: list[str] = []
        self._started = False
        #: A call may have begun: nothing more is shown before the end.
        self._locked = False

    @classmethod
    def for_request(cls, request: model_pb2.ChatRequest, *, text_calls: bool) -> VisibleText:
        """The filter for one call: ``text_calls`` is the adapter's
        ``text_tool_calls`` (its dialect reads calls out of text)."""
        return cls(hold_calls=text_calls and bool(tool_names(request)))

    def feed(self, delta: str) -> str:
        """The part of the text so far that may be shown now, not shown before."""
        if not self._filter:
            self._shown.append(delta)
            return delta
        if self._locked or not delta:
            return ""
        self._held += delta
        return self._release()

    def finish(self, content: str) -> str:
        """The rest of the answer's text ``content`` (the final message's,
        calls removed) that the user has not been shown."""
        shown = "".join(self._shown)
        if content.startswith(shown):
            rest = content[len(shown) :]
        elif content.startswith(shown.lstrip()):
            rest = content[len(shown.lstrip()) :]
        else:  # the rule above makes this unreachable; never show text twice
            rest = ""
        self._shown.append(rest)
        return rest

    def _release(self) -> str:
        held = self._held
        if not self._started:
            body = held.lstrip()
            if not body:
                return ""
            if body.startswith(_JSON_START):
                self._locked = True
                return ""
            self._started = True
        stop = len(held[: self._stop(held)].rstrip())
        out, self._held = held[:stop], held[stop:]
        if out:
            self._shown.append(out)
        return out

    def _stop(self, held: str) -> int:
        """Where the text that may be shown ends (sets ``_locked`` at a call)."""
        position = 0
        while True:
            tag = held.find(_CALL_TAG, position)
            fence = held.find(_FENCE, position)
            found = [i for i in (tag, fence) if i >= 0]
            if not found:
                break
            start = min(found)
            verdict = _block(held, start)
            if verdict == "call":
                self._locked = True
                return start
            if verdict == "open":
                return start
            position = start + (len(_CALL_TAG) if start == tag else len(_FENCE))
        for size in range(min(len(held) - position, len(_CALL_TAG) - 1), 0, -1):
            tail = held[-size:]
            if _CALL_TAG.startswith(tail) or _FENCE.startswith(tail):
                return len(held) - size
        return len(held)


def _block(held: str, start: int) -> str:
    """What the opener at ``start`` begins: a "call", "text", or still "open"."""
    if held.startswith(_CALL_TAG, start):
        rest = held[start + len(_CALL_TAG) :]
    else:
        rest = held[start + len(_FENCE) :]
        for word in _FENCE_WORDS:
            if rest.startswith(word):
                rest = rest[len(word) :]
                break
            if word.startswith(rest):
                return "open"
    body = rest.lstrip()
    if not body:
        return "open"
    return "call" if body.startswith(_JSON_START) else "text"


__all__ = ["VisibleText"]
