"""``python -m cudnnlite ...``: the ``cudnnlite`` command (info, tune, db, doctor, demo)
without the console script on PATH."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
