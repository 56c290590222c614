#!/usr/bin/env python3
"""Paired per-file differences between the systems of one ``cosyedge eval`` report, against an anchor system.

For every system S and metric M of the report (``items[i].scores[S][M]``, one value per noisy/clean pair),
prints the mean of ``M(S) - M(anchor)`` over the pairs, its standard error (sample standard deviation / sqrt n)
and the number of pairs on which S scores higher than the anchor. A mean difference within about two standard
errors of 0 is a tie on this test set: it says whether "beats RNNoise on STOI" is a measurable statement at all
(paired comparison of means, e.g. Loizou, *Speech Enhancement: Theory and Practice*, 2nd ed., ch. 10).

    python scripts/paired_eval.py docs/eval/side-by-side.json --anchor rnnoise [--json out.json]

Exit codes: 0 printed; 2 usage error; 3 the report is missing, unreadable, not a ``cosyedge eval`` report with
per-item scores, or lacks the anchor (one ``[!]`` line each).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

#: metrics compared (SI-SNR itself is left out: SI-SNRi is the same difference)
METRICS = ("si_snri_db", "pesq_wb", "stoi", "dnsmos_sig", "dnsmos_bak", "dnsmos_ovrl", "dnsmos_p808")


class ReportError(Exception):
    """The eval report cannot be compared (message is the one-line reason)."""


def paired_differences(report: dict, anchor: str = "rnnoise", metrics=METRICS) -> dict:
    """Paired differences of every system against ``anchor``.

    Args:
        report (dict): a ``cosyedge eval --json`` report (``items``: list of dicts with ``scores``:
            {system: {metric: float}}).
        anchor (str): system every other one is compared with.
        metrics (tuple[str]): metric keys; a metric absent for a pair in either system skips that pair.
    Returns:
        dict: {system: {metric: {"n": int, "mean_diff": float, "se": float, "wins": int}}}; ``se`` is NaN for
        n < 2. Systems without paired scores (``clean``) are left out.
    Raises:
        ReportError: no per-item scores, or ``anchor`` not scored on any item.
    """
    items = report.get("items") if isinstance(report, dict) else None
    if not isinstance(items, list) or not items or not all(isinstance(i, dict) and isinstance(i.get("scores"), dict)
                                                             for i in items):
        raise ReportError("not a cosyedge eval report with per-item scores (no 'items' list with 'scores')")
    if not any(anchor in i["scores"] for i in items):
        systems = sorted({s for i in items for s in i["scores"]})
        raise ReportError(f"anchor {anchor!r} is not among the report's systems ({', '.join(systems)})")
    systems = [s for s in dict.fromkeys(s for i in items for s in i["scores"]) if s != anchor]
    out: dict = {}
    for s in systems:
        for m in metrics:
            diffs = []
            for i in items:
                a, b = i["scores"].get(anchor, {}), i["scores"].get(s, {})
                if isinstance(a.get(m), (int, float)) and isinstance(b.get(m), (int, float)):
                    diffs.append(float(b[m]) - float(a[m]))
            if not diffs:
                continue
            n = len(diffs)
            mean = sum(diffs) / n
            se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1) / n) if n > 1 else float("nan")
            out.setdefault(s, {})[m] = {"n": n, "mean_diff": mean, "se": se, "wins": sum(d > 0 for d in diffs)}
    return out


def format_table(diffs: dict, anchor: str) -> str:
    """Markdown table of :func:`paired_differences` (one row per system and metric)."""
    lines = [f"| system | metric | mean - {anchor} | standard error | pairs above {anchor} |", "|---|---|---|---|---|"]
    for s, per in diffs.items():
        for m, r in per.items():
            lines.append(f"| {s} | {m} | {r['mean_diff']:+.4f} | {r['se']:.4f} | {r['wins']}/{r['n']} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("report", help="cosyedge eval --json report")
    ap.add_argument("--anchor", default="rnnoise", help="system the others are compared with (default rnnoise)")
    ap.add_argument("--json", default=None, help="also write the differences here")
    args = ap.parse_args(argv)
    try:
        try:
            report = json.loads(Path(args.report).read_text())
        except FileNotFoundError:
            raise ReportError(f"{args.report}: not found") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ReportError(f"{args.report}: not readable as JSON ({type(e).__name__})") from None
        diffs = paired_differences(report, args.anchor)
    except ReportError as e:
        print(f"[!] {e}", file=sys.stderr)
        return 3
    print(format_table(diffs, args.anchor))
    if args.json:
        tmp = Path(args.json).with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"report": args.report, "anchor": args.anchor, "differences": diffs}, indent=1))
        tmp.replace(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
