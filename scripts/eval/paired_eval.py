#!/usr/bin/env python3
"""Paired per-file differences between the systems of one ``cosyedge eval`` report, against an anchor system.

For every system S and metric M of the report (``items[i].scores[S][M]``, one value per noisy/clean pair),
prints the mean of ``M(S) - M(anchor)`` over the pairs, its standard error (sample standard deviation / sqrt n)
and the number of pairs on which S scores higher than the anchor. A mean difference within about two standard
errors of 0 is a tie on this test set: it says whether "beats RNNoise on STOI" is a measurable statement at all
(paired comparison of means, e.g. Loizou, *Speech Enhancement: Theory and Practice*, 2nd ed., ch. 10).

    python scripts/eval/paired_eval.py docs/eval/side-by-side.json --anchor rnnoise [--json out.json]

Exit codes: 0 printed; 2 usage error; 3 the report is missing, unreadable, not a ``cosyedge eval`` report with
per-item scores (or a score is not a finite number), lacks the anchor or any other system, or ``--json`` cannot
be written (one ``[!]`` line each; nothing is printed or written then).
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


def _value(item_no: int, system: str, metric: str, scores: dict):
    """The metric as a float, None where the pair has no such score; ReportError for anything but a finite number."""
    v = scores.get(metric)
    if v is None:
        return None
    try:
        ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and abs(v) < 1e100
    except OverflowError:  # an int too large for a float
        ok = False
    if not ok:
        raise ReportError(f"item {item_no}: {system} {metric} is {repr(v)[:40]}, not a finite number")
    return float(v)


def paired_differences(report: dict, anchor: str = "rnnoise", metrics=METRICS) -> dict:
    """Paired differences of every system against ``anchor``.

    Args:
        report (dict): a ``cosyedge eval --json`` report (``items``: list of dicts with ``scores``:
            {system: {metric: float}}).
        anchor (str): system every other one is compared with.
        metrics (tuple[str]): metric keys; a metric absent (or null) for a pair in either system skips that pair.
    Returns:
        dict: {system: {metric: {"n": int, "mean_diff": float, "se": float | None, "wins": int}}}; ``se`` is None
        for n < 2. A system is compared on the metrics it shares with the anchor (``clean``: DNSMOS only).
    Raises:
        ReportError: no per-item scores, a system's scores not a mapping, a score that is not a finite number,
            ``anchor`` not scored on any item, or no other system to compare.
    """
    items = report.get("items") if isinstance(report, dict) else None
    if not isinstance(items, list) or not items or not all(isinstance(i, dict) and isinstance(i.get("scores"), dict)
                                                             for i in items):
        raise ReportError("not a cosyedge eval report with per-item scores (no 'items' list with 'scores')")
    for n, i in enumerate(items):
        for s, sc in i["scores"].items():
            if not isinstance(sc, dict):
                raise ReportError(f"item {n}: the scores of {s!r} are {type(sc).__name__}, not a mapping of metrics")
    if not any(anchor in i["scores"] for i in items):
        systems = sorted({s for i in items for s in i["scores"]})
        raise ReportError(f"anchor {anchor!r} is not among the report's systems ({', '.join(systems)})")
    systems = [s for s in dict.fromkeys(s for i in items for s in i["scores"]) if s != anchor]
    if not systems:
        raise ReportError(f"the report scores only {anchor!r}: no other system to compare")
    out: dict = {}
    for s in systems:
        for m in metrics:
            diffs = []
            for n, i in enumerate(items):
                a = _value(n, anchor, m, i["scores"].get(anchor, {}))
                b = _value(n, s, m, i["scores"].get(s, {}))
                if a is not None and b is not None:
                    diffs.append(b - a)
            if not diffs:
                continue
            k = len(diffs)
            mean = sum(diffs) / k
            se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (k - 1) / k) if k > 1 else None
            out.setdefault(s, {})[m] = {"n": k, "mean_diff": mean, "se": se, "wins": sum(d > 0 for d in diffs)}
    if not out:
        raise ReportError(f"no metric ({', '.join(metrics)}) is scored for {anchor!r} and another system on one pair")
    return out


def format_table(diffs: dict, anchor: str) -> str:
    """Markdown table of :func:`paired_differences` (one row per system and metric)."""
    lines = [f"| system | metric | mean - {anchor} | standard error | pairs above {anchor} |", "|---|---|---|---|---|"]
    for s, per in diffs.items():
        for m, r in per.items():
            se = "-" if r["se"] is None else f"{r['se']:.4f}"
            lines.append(f"| {s} | {m} | {r['mean_diff']:+.4f} | {se} | {r['wins']}/{r['n']} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("report", help="cosyedge eval --json report")
    ap.add_argument("--anchor", default="rnnoise", help="system the others are compared with (default rnnoise)")
    ap.add_argument("--json", default=None, help="also write the differences here")
    args = ap.parse_args(argv)
    if args.json is not None and not args.json.strip():
        ap.error("--json needs a file name")
    try:
        try:
            report = json.loads(Path(args.report).read_text())
        except FileNotFoundError:
            raise ReportError(f"{args.report}: not found") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
            raise ReportError(f"{args.report}: not readable as JSON ({type(e).__name__})") from None
        diffs = paired_differences(report, args.anchor)
        if args.json:
            _write_json(Path(args.json), {"report": args.report, "anchor": args.anchor, "differences": diffs})
    except ReportError as e:
        print(f"[!] {e}", file=sys.stderr)
        return 3
    print(format_table(diffs, args.anchor))
    return 0


def _write_json(path: Path, data: dict) -> None:
    """Write ``data`` to ``path`` with :func:`cosyedge.eval.report.write_report` (atomic: temp file + rename);
    ReportError if it can't, and for a missing folder (refused, not created) or a folder as ``path``."""
    from cosyedge.errors import ArtifactError
    from cosyedge.eval.report import write_report

    if path.is_dir():
        raise ReportError(f"--json {path}: is a folder")
    if not path.parent.is_dir():
        raise ReportError(f"--json {path}: cannot write (No such file or directory)")
    try:
        write_report(path, data)
    except ArtifactError as e:
        raise ReportError(f"--json {path}: {e}") from None
    except OSError as e:  # the rename onto path
        raise ReportError(f"--json {path}: cannot write ({e.strerror or type(e).__name__})") from None


if __name__ == "__main__":
    sys.exit(main())
