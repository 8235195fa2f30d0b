"""The one error the framing raises."""

from __future__ import annotations


class WebSocketError(Exception):
    """A peer broke RFC 6455; ``close_code`` is the close code that says how
    (1002 protocol error, 1007 bad UTF-8, 1009 too big)."""

    def __init__(self, message: str, close_code: int) -> None:
        super().__init__(message)
        self.close_code = close_code


__all__ = ["WebSocketError"]
