"""``python -m naga_core.cli``: how ``naga daemon start`` runs the detached core."""

import sys

from naga_core.cli import main

sys.exit(main())
