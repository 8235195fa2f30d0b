"""The prompt budget: the one place a turn's prompt is fitted to the model's
context window (docs/adr/0010-prompt-budget.md).

Tokens are estimated, not counted: the core has no tokenizer for every
provider, so it takes the UTF-8 size over :data:`BYTES_PER_TOKEN` (3),
which is above the true count for English (about 4 bytes a token) and
for CJK text (3 bytes a character, about one token each), plus a fixed
cost per message. The reply keeps its share (``max_tokens``, else
:data:`DEFAULT_REPLY_TOKENS` or a quarter of a small window), the tool
specs theirs.

What does not fit is left out in this order, never silently (each step
says what it left out, and the turn.model record carries the words):

1. at the job: history beyond ``agent history_entries``; then, newest
   first, the entries that fit (each cut to a quarter of the prompt at
   most); all older ones are dropped, with their seqs; the user's own
   message is cut in the middle to half the prompt at most;
2. at every model call (the turn grew by tool steps): the text of earlier
   steps' tool results, oldest first, down to a stub; then the history
   kept at the job, oldest first; then the middle of the largest message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from naga.constants import IMAGE_TOKENS
from naga.v1 import model_pb2 as mpb
from naga.v1 import turn_pb2 as tpb

#: UTF-8 bytes counted as one token (an overestimate of tokens: safe).
BYTES_PER_TOKEN = 3
#: Tokens a message costs besides its text (role markers, separators).
MESSAGE_TOKENS = 8
#: The reply's share of the window when the request names no max_tokens.
DEFAULT_REPLY_TOKENS = 1024
#: Most bytes of one tool result shown to the model; the rest is in a blob
#: it can read on with ``turn.read_result``.
TOOL_RESULT_MAX_BYTES = 16_000
#: Least bytes kept of a message that is cut.
_MIN_KEEP_BYTES = 64
#: Room the note of a cut takes (it replaces the middle).
_NOTE_BYTES = 128


def tokens(text: str) -> int:
    """The estimated tokens of ``text``."""
    return -(-len(text.encode()) // BYTES_PER_TOKEN)


def message_tokens(message: mpb.ChatMessage) -> int:
    n = MESSAGE_TOKENS + tokens(message.content) + IMAGE_TOKENS * len(message.images)
    for call in message.tool_calls:
        n += MESSAGE_TOKENS + tokens(call.id) + tokens(call.name) + tokens(call.arguments_json)
    return n


def cut_middle(text: str, keep_bytes: int) -> str:
    """``text`` with its middle replaced by a note saying how much was left
    out, in at most about ``keep_bytes`` UTF-8 bytes (never mid-character)."""
    raw = text.encode()
    if len(raw) <= keep_bytes:
        return text
    half = max(_MIN_KEEP_BYTES, keep_bytes) // 2
    head = raw[:half].decode(errors="ignore")
    tail = raw[len(raw) - half :].decode(errors="ignore")
    gone = len(text) - len(head) - len(tail)
    note = f"[... {gone} characters of {len(text)} left out to fit the model's window ...]"
    return f"{head}\n{note}\n{tail}"


@dataclass(frozen=True, slots=True)
class Budget:
    """Tokens of one model's window: what the prompt may take."""

    window: int
    reply: int
    tools: int

    @classmethod
    def of(cls, window: int, max_tokens: int, tools: Sequence[mpb.ToolSpec]) -> Budget:
        reply = max_tokens or min(DEFAULT_REPLY_TOKENS, window // 4)
        spec = sum(
            MESSAGE_TOKENS
            + tokens(t.name)
            + tokens(t.description)
            + tokens(t.parameters_json_schema)
            for t in tools
        )
        return cls(window, reply, spec)

    @property
    def prompt(self) -> int:
        """Tokens the messages may take."""
        return max(0, self.window - self.reply - self.tools)

    @property
    def shown_bytes(self) -> int:
        """Most bytes of one tool result the model is shown: an eighth of
        the prompt, at most TOOL_RESULT_MAX_BYTES."""
        return max(256, min(TOOL_RESULT_MAX_BYTES, self.prompt * BYTES_PER_TOKEN // 8))


@dataclass(slots=True)
class Fitted:
    """A prompt within its budget and what was left out of it."""

    messages: list[mpb.ChatMessage]
    #: Sentences, for the trace.
    left_out: list[str] = field(default_factory=list[str])
    #: The ledger seqs of history entries not in the prompt.
    dropped_seqs: list[int] = field(default_factory=list[int])
    #: How many of them the window dropped (the rest: agent.history_entries).
    by_window: int = 0


def _role(entry: tpb.SessionEntry) -> mpb.Role.ValueType:
    return mpb.ROLE_USER if entry.role == tpb.HISTORY_ROLE_USER else mpb.ROLE_ASSISTANT


def build(
    budget: Budget,
    system: str,
    entries: Sequence[tpb.SessionEntry],
    text: str,
    *,
    history_limit: int,
    images: Sequence[mpb.ImagePart] = (),
) -> Fitted:
    """The job's prompt: ``system``, what fits of ``entries`` (oldest
    first, the turn's own message not among them), the user's ``text``."""
    room = budget.prompt
    system_message = mpb.ChatMessage(role=mpb.ROLE_SYSTEM, content=system)
    room -= message_tokens(system_message)
    left_out: list[str] = []
    half = max(0, room // 2) * BYTES_PER_TOKEN
    content = text
    if len(text.encode()) > half:
        content = cut_middle(text, half)
        left_out.append(
            f"the middle of the user's message ({len(text)} characters, cut to fit the "
            f"{budget.window}-token window)"
        )
    user = mpb.ChatMessage(role=mpb.ROLE_USER, content=content, images=images)
    room -= message_tokens(user)
    recent = list(entries[-history_limit:]) if history_limit > 0 else []
    dropped = [e.seq for e in entries[: len(entries) - len(recent)]]
    limit_words = f"beyond agent.history_entries ({history_limit})" if dropped else ""
    quarter = max(0, budget.prompt // 4) * BYTES_PER_TOKEN
    kept: list[mpb.ChatMessage] = []
    cut = 0
    for index in range(len(recent) - 1, -1, -1):
        entry = recent[index]
        body = entry.text
        long = len(body.encode()) > quarter
        if long:
            body = cut_middle(body, quarter)
        message = mpb.ChatMessage(role=_role(entry), content=body)
        need = message_tokens(message)
        if need > room:
            dropped = [e.seq for e in entries[: len(entries) - len(recent) + index + 1]]
            limit_words = f"older than what fits the {budget.window}-token window"
            break
        cut += long
        room -= need
        kept.append(message)
    kept.reverse()
    if cut:
        left_out.append(f"the middles of {cut} long earlier messages")
    if dropped:
        left_out.append(
            f"{len(dropped)} earlier messages (seqs {dropped[0]}..{dropped[-1]}), {limit_words}"
        )
    by_window = len(dropped) - (len(entries) - len(recent))
    return Fitted([system_message, *kept, user], left_out, dropped, by_window)


def fit_request(budget: Budget, request: mpb.ChatRequest, history: tuple[int, int]) -> list[str]:
    """Fit ``request`` (as the executor sent it, steering appended) to the
    budget in place; what was left out, in words. ``history`` is the index
    range of the job's history messages in it (they come first, after the
    system message, as the job gave them)."""
    messages = request.messages
    total = sum(message_tokens(m) for m in messages)
    if total <= budget.prompt:
        return []
    left_out: list[str] = []
    last_assistant = max(
        (i for i, m in enumerate(messages) if m.role == mpb.ROLE_ASSISTANT), default=-1
    )
    stubbed = 0
    for index, message in enumerate(messages):
        if total <= budget.prompt or index >= last_assistant:
            break
        if message.role == mpb.ROLE_TOOL and len(message.content) > _MIN_KEEP_BYTES:
            before = message_tokens(message)
            message.content = (
                f"[an earlier tool result of {len(message.content)} characters, left out to "
                "fit the model's window]"
            )
            total -= before - message_tokens(message)
            stubbed += 1
    if stubbed:
        left_out.append(f"the text of {stubbed} earlier tool results")
    start, end = history
    dropped = 0
    while total > budget.prompt and start < end:
        total -= message_tokens(messages[start])
        del messages[start]
        end -= 1
        dropped += 1
    if dropped:
        left_out.append(f"{dropped} more earlier messages")
    cut = 0
    while total > budget.prompt:
        largest = max(
            (m for m in messages if m.role != mpb.ROLE_SYSTEM),
            key=lambda m: len(m.content.encode()),
            default=None,
        )
        size = len(largest.content.encode()) if largest is not None else 0
        if largest is None or size <= 2 * _MIN_KEEP_BYTES:
            break  # the system prompt and tools alone fill it: the provider says so
        over = (total - budget.prompt) * BYTES_PER_TOKEN + _NOTE_BYTES
        before = message_tokens(largest)
        largest.content = cut_middle(largest.content, max(_MIN_KEEP_BYTES, size - over))
        total -= before - message_tokens(largest)
        cut += 1
    if cut:
        left_out.append(f"the middle of {cut} long messages")
    return left_out


__all__ = [
    "BYTES_PER_TOKEN",
    "DEFAULT_REPLY_TOKENS",
    "TOOL_RESULT_MAX_BYTES",
    "Budget",
    "Fitted",
    "build",
    "cut_middle",
    "fit_request",
    "message_tokens",
    "tokens",
]
