"""The command line every converter in scripts/data shares.

``--describe`` prints the conversion steps (the converter's docstring) and exits; the named
inputs and ``--out`` are required, and a missing one is named in the error.
"""

import argparse
import sys


def parse(doc, inputs, seed=False):
    """Parses a converter's arguments. `inputs` are the (flag, help) pairs it needs besides
    ``--out``; `seed` adds ``--seed`` (default 42). Exits after printing `doc` for
    ``--describe``."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--describe", action="store_true", help="print the conversion steps")
    for flag, help_text in inputs:
        ap.add_argument(flag, help=help_text)
    ap.add_argument("--out")
    if seed:
        ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()
    if a.describe:
        print(doc.strip())
        sys.exit(0)
    flags = [flag for flag, _ in inputs] + ["--out"]
    if any(getattr(a, flag[2:].replace("-", "_")) is None for flag in flags):
        names = ", ".join(flags[:-1]) + " and " + flags[-1]
        ap.error(f"{names} are required")
    return a
