"""A stand-in for naga-core in the penetration tests: a separate, unsandboxed
process holding private files (0600 under a 0700 home) that every attack
must leave running and untouched.

Run as ``python -m tests.sandbox._sentinel HOME``; prints ``ready`` once the
files exist and then blocks until its stdin closes.
"""

from __future__ import annotations

import os
import sys

#: Files the sentinel owns, relative to its home.
PRIVATE_FILES = ("keys/ledger.key", "credentials/providers.json")


def main(home: str) -> None:
    os.umask(0o077)
    for rel in PRIVATE_FILES:
        path = os.path.join(home, rel)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        with open(path, "wb") as f:
            f.write(os.urandom(32))
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sys.stdin.buffer.read()


if __name__ == "__main__":
    main(sys.argv[1])
