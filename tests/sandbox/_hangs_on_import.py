"""A target whose import never finishes: the launcher's ready deadline must fire."""

import threading

threading.Event().wait()


def run(args: list[str]) -> int:  # pragma: no cover - never reached
    return 0
