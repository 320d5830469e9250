"""``python -m kquota.advisor advise|collect ...``: the advisor without the rest of the CLI (and for spark-submit)."""

from __future__ import annotations

import sys

from kquota.advisor.cli import main

if __name__ == "__main__":
    sys.exit(main())
