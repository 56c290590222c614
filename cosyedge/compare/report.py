"""The report of ``cosyedge check``: table rows, the text table, JUnit XML and the JSON-safe copy.

Source: JUnit XML as read by CI servers (Jenkins/GitLab ``testsuite``/``testcase``/``failure``),
https://llg.cubic.org/docs/junit/ .
"""

from __future__ import annotations

import math
from pathlib import Path

from cosyedge.artifacts import atomic_output
from cosyedge.compare.tolerances import BASELINE_TOLERANCES


def _rows(label: str, res: dict, metrics: dict, output: str, state_outs: list[str],
          unbased: bool = False) -> list[dict]:
    """Table rows of one label (list of dict), one per mode and utterance; ``unbased``: the label has no baseline
    for this platform (status ``NO BASELINE``)."""
    rows = []
    for mode, data in res["modes"].items():
        for utt, entry in data["utterances"].items():
            prefix = f"{mode}/{utt}/"
            states = [(entry["outputs"][s]["snr_db"], s) for s in state_outs if s in entry["outputs"]]
            worst = min(states) if states and mode == "teacher-forced" else None
            audio = entry.get("audio") or {}
            fails = [f"{k[len(prefix):]}: {v['regression']}" for k, v in metrics.items()
                     if k.startswith(prefix) and v["regression"]]
            rows.append({
                "label": label, "mode": mode, "utterance": utt,
                "snr_db": entry["outputs"][output]["snr_db"],
                "snr_base_db": metrics.get(f"{prefix}{output}/snr_db", {}).get("baseline"),
                "max_abs": entry["outputs"][output]["max_abs"],
                "worst_state": None if worst is None else f"{worst[1]} {worst[0]:.1f}",
                "pesq": audio.get("pesq_cand"), "pesq_ref": audio.get("pesq_ref"),
                "si_snr_db": audio.get("si_snr_cand_db") if audio.get("against") == "clean" else None,
                "status": "FAIL" if fails else "NO BASELINE" if unbased else "ok", "failures": fails,
            })
    return rows


def format_table(report: dict) -> str:
    """Return the check's table (str): one row per label, mode and utterance, then the regressions."""
    head = f"{'precision':<12} {'mode':<15} {'utterance':<12} {'SNR dB':>7} {'(base)':>7} {'max abs':>9} " \
           f"{'worst state dB':>20} {'PESQ':>6} {'SI-SNR':>7}  status"
    lines = [head, "-" * len(head)]

    def f(v, fmt):
        width = int(fmt.split(".")[0] or 0)
        return "-".rjust(width) if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)

    for r in report["rows"]:
        lines.append(f"{r['label']:<12} {r['mode']:<15} {r['utterance']:<12} {f(r['snr_db'], '7.2f')} "
                     f"{f(r['snr_base_db'], '7.2f')} {f(r['max_abs'], '9.2e')} {r['worst_state'] or '-':>20} "
                     f"{f(r['pesq'], '6.3f')} {f(r['si_snr_db'], '7.2f')}  {r['status']}")
    if report.get("updated"):
        lines.append(f"baseline written: {report['baseline']}")
    changed = {k: v for k, v in (report.get("tolerances") or {}).items() if v != BASELINE_TOLERANCES.get(k)}
    if changed and not report.get("updated"):
        lines.append("tolerances from the baseline: " + ", ".join(
            f"{k} {v:g} (cosyedge's {BASELINE_TOLERANCES[k]:g})" for k, v in changed.items()))
    for note in report.get("not_gated", []):
        lines.append(f"NOT GATED {note}")
    for note in report.get("no_baseline", []):
        lines.append(f"NO BASELINE {note['line']}")
    for reg in report["regressions"]:
        lines.append(f"REGRESSION {reg}")
    for label, data in report.get("labels", {}).items():
        if data.get("debug"):
            lines.append(f"find the first tensor whose error jumps ({label}): {data['debug']}")
    return "\n".join(lines)


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_junit(path: str | Path, report: dict) -> Path:
    """Write JUnit XML: suite ``cosyedge.check``, one test case per label/mode/utterance; a failing case
    holds one ``<failure>`` listing its regressed metrics, a case with no baseline for this platform one ``<error
    type="no-baseline-for-platform">`` with the NO BASELINE line. Written atomically.

    Returns:
        Path: ``path``.
    """
    import xml.etree.ElementTree as ET

    rows = report["rows"]
    notes = {n["label"]: n["line"] for n in report.get("no_baseline", [])}
    suite = ET.Element("testsuite", name="cosyedge.check", tests=str(len(rows)),
                       failures=str(sum(r["status"] == "FAIL" for r in rows)),
                       errors=str(sum(r["status"] == "NO BASELINE" for r in rows)),
                       time=str(report.get("elapsed_s", 0)))
    for r in rows:
        case = ET.SubElement(suite, "testcase", classname=f"cosyedge.check.{r['label']}",
                             name=f"{r['mode']}/{r['utterance']}")
        if r["status"] == "FAIL":
            fail = ET.SubElement(case, "failure", message="; ".join(r["failures"])[:1000], type="regression")
            fail.text = "\n".join(r["failures"])
        elif r["status"] == "NO BASELINE":
            ET.SubElement(case, "error", message=notes.get(r["label"], "no baseline for this platform")[:1000],
                          type="no-baseline-for-platform")
    root = ET.Element("testsuites")
    root.append(suite)
    path = Path(path)
    with atomic_output(path) as tmp:
        ET.ElementTree(root).write(tmp, encoding="utf-8", xml_declaration=True)
    return path


__all__ = ["format_table", "write_junit"]
