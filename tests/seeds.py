"""The one way tests pick a random seed: ``NAGA_TEST_SEED`` replays a run,
else a fresh seed each run (printed by the tests that use it on failure)."""

from __future__ import annotations

import os
import random


def pick_seed(default: int | None = None) -> int:
    """``$NAGA_TEST_SEED`` if set, else ``default``, else a fresh random seed."""
    env = os.environ.get("NAGA_TEST_SEED")
    if env:
        return int(env)
    return default if default is not None else random.SystemRandom().randrange(1 << 32)
