"""A target whose import says its pid on stdout and then never finishes:
a child still in its setup when its launcher dies (test_parent_death)."""

import os
import threading

os.write(1, f"{os.getpid()}\n".encode())
threading.Event().wait()


def run(args: list[str]) -> int:  # pragma: no cover - never reached
    return 0
