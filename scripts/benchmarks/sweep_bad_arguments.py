"""Sweep bad option values over the CLI (tests/cli_sweep.py) and write the table.

Usage: python scripts/benchmarks/sweep_bad_arguments.py [--json docs/bench/bad_arguments_sweep.json] [COMMAND ...]

Prints one line per case that is not ``ok`` and a count per command and verdict; ``--json`` keeps the counts,
the count per value class, and every case (command, option, class, value, exit code, the error line).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT

sys.path.insert(0, str(ROOT))  # tests/ is not installed: import the checkout's

from tests import cli_sweep  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("commands", nargs="*", help="Commands to sweep (default: all five).")
    ap.add_argument("--json", type=Path, help="Write the counts and cases here.")
    args = ap.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        cases = [cli_sweep.run_case(c, Path(d)) for c in cli_sweep.cases(Path(d), args.commands or None)]
    counts: dict = collections.defaultdict(collections.Counter)
    classes: dict = collections.defaultdict(collections.Counter)
    for c in cases:
        counts[c.command][c.verdict] += 1
        classes[c.cls][f"exit {c.rc}"] += 1
        if c.verdict != "ok":
            print(f"{c.verdict:9s} {c.command} {c.option} {c.value[:40]!r} -> {c.rc}: {c.err.strip()[-200:]}")
    for cmd, cnt in counts.items():
        print(f"{cmd:10s} {sum(cnt.values()):4d} cases  " + "  ".join(f"{k} {v}" for k, v in sorted(cnt.items())))
    total = collections.Counter(c.verdict for c in cases)
    print(f"all        {len(cases):4d} cases  " + "  ".join(f"{k} {v}" for k, v in sorted(total.items()))
          + f"  ({time.perf_counter() - t0:.0f} s)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "cases": len(cases), "verdicts": dict(total), "by_command": {k: dict(v) for k, v in counts.items()},
            "exit_codes_by_class": {k: dict(v) for k, v in classes.items()},
            "seconds": round(time.perf_counter() - t0, 1),
            "rows": [{"command": c.command, "option": c.option, "class": c.cls, "value": c.value[:60],
                      "rc": c.rc, "verdict": c.verdict,
                      "line": c.err.strip().splitlines()[-1][:300] if c.err.strip() else ""} for c in cases],
        }, indent=1) + "\n")
    return 0 if total.get("ok", 0) == len(cases) else 1


if __name__ == "__main__":
    sys.exit(main())
