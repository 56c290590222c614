"""Aggregate, print and save ``cosyedge eval`` results.

* :func:`summarize`: mean of every metric per system over each group (``<condition>@<snr>dB``), per SNR
  (``all@<snr>dB``, when conditions exist) and ``overall``; NaN scores are left out of the means.
* :func:`format_table`: the terminal table, one block per group, one row per system.
* :func:`write_report`: the JSON file (atomic write; NaN becomes ``null``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from cosyedge.artifacts import atomic_output

COLUMNS = (
    ("si_snr_db", "SI-SNR", "{:7.2f}"),
    ("si_snri_db", "SI-SNRi", "{:7.2f}"),
    ("pesq_wb", "PESQ-WB", "{:7.3f}"),
    ("stoi", "STOI", "{:6.3f}"),
    ("dnsmos_sig", "SIG", "{:5.2f}"),
    ("dnsmos_bak", "BAK", "{:5.2f}"),
    ("dnsmos_ovrl", "OVRL", "{:5.2f}"),
    ("delay_ms", "delay ms", "{:8.1f}"),
)
"""tuple: (metric key, column header, number format) of the terminal table."""


def _snr_key(snr) -> str:
    return f"all@{snr:g}dB"


def summarize(rows: list[dict], systems: list[str], metric_names: list[str]) -> dict:
    """Mean metrics per group, per SNR and overall.

    Args:
        rows (list[dict]): Per-file results (``group``, ``condition``, ``snr_db`` and ``scores``: system ->
            metric -> value).
        systems (list[str]): System names to average.
        metric_names (list[str]): Metric keys to average.
    Returns:
        dict: group -> ``{"n": files, system: {metric: mean}}`` in order: the file groups (sorted by
        condition then SNR), ``all@<snr>dB`` per SNR (when there are several conditions and several
        SNRs), ``overall`` (when there is not exactly one group). A mean over no finite value is NaN.
    """
    def snr_sort(r):
        return (r["snr_db"] is None, r["snr_db"] if r["snr_db"] is not None else 0.0)

    groups: dict[str, list[dict]] = {}
    for r in sorted(rows, key=lambda r: (r["condition"] or "", *snr_sort(r))):
        groups.setdefault(r["group"], []).append(r)
    if list(groups) == ["all"]:
        groups = {}
    elif len(groups) > 1:
        conditions = {r["condition"] for r in rows if r["condition"]}
        snrs = sorted({r["snr_db"] for r in rows if r["snr_db"] is not None})
        if len(conditions) > 1 and len(snrs) > 1:
            for snr in snrs:
                groups[_snr_key(snr)] = [r for r in rows if r["snr_db"] == snr]
    if len(groups) != 1:
        groups["overall"] = rows
    out = {}
    for g, rs in groups.items():
        entry: dict = {"n": len(rs)}
        for s in systems:
            vals = {}
            for m in metric_names:
                have = [r["scores"][s][m] for r in rs if m in r["scores"].get(s, {})]
                xs = [x for x in have if x is not None and math.isfinite(x)]
                if have:
                    vals[m] = float(np.mean(xs)) if xs else float("nan")
            if vals:
                entry[s] = vals
        out[g] = entry
    return out


def format_table(report: dict) -> str:
    """Return the terminal table (str) of a report from :func:`cosyedge.eval.evaluate.evaluate`.

    One block per summary group; rows are systems (noisy, the engines, the baselines, clean), columns the
    metrics present (:data:`COLUMNS`); ``-`` where a metric does not apply or could not be computed. Then one
    line per engine and baseline: algorithmic latency (ms) and CPU time per 10 ms of audio (ms, this run).
    """
    metrics = [c for c in COLUMNS if c[0] in report["metrics"]]
    gw = max([len("group")] + [len(g) for g in report["summary"]]) + 2
    sw = max([9] + [len(s) for s in report["systems"]])
    head = f"{'group':<{gw}}{'n':>4}  {'system':<{sw}}" + "".join(
        f" {h:>{len(fmt.format(0.0))}}" for _, h, fmt in metrics)
    lines = [head, "-" * len(head)]
    for g, entry in report["summary"].items():
        first = True
        for s in report["systems"]:
            if s not in entry:
                continue
            cells = []
            for key, _, fmt in metrics:
                v = entry[s].get(key)
                w = len(fmt.format(0.0))
                cells.append(f" {fmt.format(v):>{w}}" if v is not None and math.isfinite(v) else f" {'-':>{w}}")
            label = f"{g:<{gw}}{entry['n']:>4}" if first else " " * (gw + 4)
            lines.append(f"{label}  {s:<{sw}}" + "".join(cells))
            first = False
    info = report.get("systems_info") or {}
    if info:
        lines += ["", f"{'system':<{sw}}  {'algorithmic latency ms':>22}  {'CPU ms per 10 ms audio':>22}  kind"]
        for s, i in info.items():
            lat, cpu = i.get("algorithmic_latency_ms"), i.get("cpu_ms_per_10ms")
            lines.append(f"{s:<{sw}}  {lat if lat is not None else float('nan'):>22.1f}  "
                         f"{cpu if cpu is not None else float('nan'):>22.3f}  {i.get('kind', '')}")
    return "\n".join(lines)


def to_jsonable(obj):
    """Return ``obj`` with NaN/Inf floats replaced by None and numpy scalars by Python numbers (recursive)."""
    if isinstance(obj, dict):
        return {k: to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        return float(obj) if math.isfinite(float(obj)) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def write_report(path: str | Path, report: dict) -> Path:
    """Write ``report`` as JSON to ``path`` atomically (an existing file survives a failure); key order is
    kept (summary groups in table order).

    Raises:
        ArtifactError: the file cannot be written.
    """
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps(to_jsonable(report), indent=2) + "\n")
    return Path(path)
