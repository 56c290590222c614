"""Run the model generator (``tests/surgery/model_generator.py``) over N seeds and report how streamify
generalizes: counts per category (accepted-exact, refused-correctly, refused-but-bounded, refused-wrong-reason,
silent-wrong; export-failed apart), a per-choice breakdown of refused-but-bounded and silent-wrong, and every non-exact
case with its seed, choices and message.

Each model's result is appended to a JSONL log as it finishes, so an interrupted run resumes where it stopped (the
same ``--log``, which git ignores); the report is rebuilt from the log (``--report-only``). About 4 s per model on
the shared 2-core machine (0.2-34 s; a dynamo export is most of it): 1000 seeds took 71 min.

Run from the repository root::

    nice -n 10 python scripts/benchmarks/generalize_streamify.py --seeds 1000 \
        --log docs/bench/streamify_generalize.jsonl --out docs/bench/streamify_generalize.json
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import signal
import sys
import tempfile
import time
import warnings
from pathlib import Path

from _common import ROOT, machine
sys.path.insert(0, str(ROOT))

MESSAGE_CHARS = 700  # of each case's message in the report (the JSONL log keeps them whole)
BREAKDOWN_KEYS = ("kind", "positions", "pos_layout", "pos_scaled", "mask", "mask_form", "mask_apply", "fill", "attn",
                  "layout", "heads", "gqa", "norm", "front", "back", "batch", "exporter", "d_model", "layers")


def _quiet() -> None:
    """Silence exporter and streamify chatter (warnings, torch.onnx logs) so the table stays readable."""
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TORCH_LOGS", "-all")
    for name in ("torch", "torch.onnx", "torch.export", "onnxscript", "cosyedge", "torch._dynamo"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _load(log: Path) -> dict[int, dict]:
    done = {}
    if log.exists():
        for line in log.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                done[r["seed"]] = r
    return done


CAUSES = [
    (r"combines positions counted from the sequence start", "positions joined to data: the fixed batch has no batch fact"),
    (r"(?i)relative positions? \(|rel_shift|slices a table at a start computed from the sequence length",
     "relative positions (rel_shift)"),
    (r"over query x key time, applied to its scores by \w+, depends on the values|makes a tensor over query x key "
     r"time from the data", "relative-position bias read as data-dependent (rel_shift)"),
    (r"Gather on positions counted from the sequence start", "Gather on positions (torchtune's rope_cache[..., 0])"),
    (r"neither banded nor chunked", "band with look-ahead read as 'neither banded nor chunked'"),
    (r"RMSNormalization", "ONNX RMSNormalization op (dynamo opset 23) has no rule"),
    (r"cannot run the full-sequence graph on \d+ frames.*invalid dimensions",
     "fixed batch: the proof feeds the full graph another batch (ArtifactError)"),
    (r"(?i)tensor\(bool\)|boolean", "bool mask"),
    (r"(?i)not a multiple of the model's total stride", "hop vs total stride"),
    (r"(?i)differs from the full-sequence graph", "proof failed (AccuracyError)"),
    (r"^crash", "crash inside streamify"),
    (r"(?i)unlimited", "read as unlimited context"),
    (r"(?i)its attention mask is full", "read as full attention"),
]
"""(regex, label) for grouping refusal messages by cause; the first that matches a blocker clause names it."""


def _clauses(msg: str) -> list[str]:
    """The blocker clauses of a streamify refusal ('... block(s) it: A; B; C'), or the whole message."""
    import re

    m = re.search(r"blocks? it: ", msg)
    return [c for c in msg[m.end():].split("; ")] if m else [msg]


def _label(clause: str) -> str:
    import re

    for pat, label in CAUSES:
        if re.search(pat, clause):
            return label
    m = re.match(r"(\w+) node '[^']*': ([^:;(]{0,80})", clause)
    return f"{m.group(1)}: {m.group(2).strip()}" if m else clause[:100]


def cause(msg: str) -> str:
    """Cause label (str) of a refusal message: its first blocker clause, labelled by :data:`CAUSES`."""
    return _label(_clauses(msg)[0])


def causes(msg: str) -> set[str]:
    """Every cause label (set[str]) among the blocker clauses of a refusal message."""
    return {_label(c) for c in _clauses(msg)}


def report(results: list[dict]) -> dict:
    """The JSON report (dict) of per-seed results."""
    from tests.surgery.model_generator import CATEGORIES

    counts = collections.Counter(r["category"] for r in results)
    counted = sum(v for k, v in counts.items() if k != "export-failed")
    bounded = [r for r in results if r["choices"]["kind"] == "bounded" and r["category"] != "export-failed"]
    exact = sum(r["category"] == "accepted-exact" for r in bounded)
    breakdown = {}
    for cat in ("refused-but-bounded", "silent-wrong", "accepted-exact"):
        per = {}
        for key in BREAKDOWN_KEYS:
            tally = collections.Counter(str(r["choices"][key]) for r in results if r["category"] == cat)
            per[key] = dict(sorted(tally.items()))
        breakdown[cat] = per
    # bounded acceptance per choice value (how much each choice costs)
    per_choice = {}
    for key in BREAKDOWN_KEYS:
        vals = collections.defaultdict(lambda: [0, 0])
        for r in bounded:
            v = str(r["choices"][key])
            vals[v][1] += 1
            vals[v][0] += r["category"] == "accepted-exact"
        per_choice[key] = {v: f"{a}/{n}" for v, (a, n) in sorted(vals.items())}
    first, anywhere, sole = (collections.defaultdict(list) for _ in range(3))
    for r in results:
        if r["category"] == "refused-but-bounded":
            first[cause(r["message"])].append(r["seed"])
            for k in causes(r["message"]):
                anywhere[k].append(r["seed"])
            if len(causes(r["message"])) == 1:
                sole[cause(r["message"])].append(r["seed"])
    secs = [r["seconds"] for r in results]
    return {
        "models": len(results),
        "counted": counted,
        "counts": {k: counts.get(k, 0) for k in CATEGORIES},
        "percent": {k: round(100.0 * counts.get(k, 0) / max(counted, 1), 1) for k in CATEGORIES if k != "export-failed"},
        "bounded_accepted_exact": f"{exact}/{len(bounded)}",
        "bounded_accepted_exact_percent": round(100.0 * exact / max(len(bounded), 1), 1),
        "refused_but_bounded_causes": {k: {"count": len(v), "seed": v[0], "seeds": v[:20]}
                                       for k, v in sorted(first.items(), key=lambda kv: -len(kv[1]))},
        "refused_but_bounded_causes_anywhere": {k: {"count": len(v), "seed": v[0]}
                                                for k, v in sorted(anywhere.items(), key=lambda kv: -len(kv[1]))},
        "refused_but_bounded_sole_cause": {k: {"count": len(v), "seed": v[0]}
                                           for k, v in sorted(sole.items(), key=lambda kv: -len(kv[1]))},
        "bounded_accepted_by_choice": per_choice,
        "breakdown": breakdown,
        "seconds_per_model": {"mean": round(sum(secs) / max(len(secs), 1), 2), "max": round(max(secs, default=0), 2),
                              "total": round(sum(secs), 1)},
        "cases": [dict(r, message=r["message"][:MESSAGE_CHARS]) for r in sorted(results, key=lambda r: r["seed"])
                  if r["category"] not in ("accepted-exact", "refused-correctly")],
        "machine": machine(),
    }


def table(rep: dict) -> str:
    lines = [f"{'category':24s} {'count':>6s} {'%':>6s}"]
    for k, v in rep["counts"].items():
        pct = rep["percent"].get(k)
        lines.append(f"{k:24s} {v:6d} {'' if pct is None else f'{pct:6.1f}'}")
    lines.append(f"bounded accepted-exact: {rep['bounded_accepted_exact']} ({rep['bounded_accepted_exact_percent']} %)")
    lines.append("refused-but-bounded by cause (first blocker | named anywhere | the only blocker):")
    for k, v in rep["refused_but_bounded_causes_anywhere"].items():
        n1 = rep["refused_but_bounded_causes"].get(k, {}).get("count", 0)
        n3 = rep["refused_but_bounded_sole_cause"].get(k, {}).get("count", 0)
        lines.append(f"  {n1:5d} | {v['count']:5d} | {n3:5d}  {k}  (seed {v['seed']})")
    wr = [c for c in rep["cases"] if c["category"] == "refused-wrong-reason"]
    lines.append(f"refused-wrong-reason: {len(wr)}")
    for c in wr:
        lines.append(f"  seed {c['seed']} ({c['choices']['kind']}): {c['message'][:160]}")
    sw = [c for c in rep["cases"] if c["category"] == "silent-wrong"]
    lines.append(f"silent-wrong: {len(sw)}")
    for c in sw:
        lines.append(f"  seed {c['seed']}: {c['message'][:200]}")
    s = rep["seconds_per_model"]
    lines.append(f"time per model: mean {s['mean']} s, max {s['max']} s, total {s['total']} s")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--seeds", type=int, default=1000, help="number of models (seeds start .. start+seeds-1)")
    p.add_argument("--start", type=int, default=0, help="first seed")
    p.add_argument("--log", type=Path, default=ROOT / "docs/bench/streamify_generalize.jsonl",
                   help="JSONL of per-seed results; seeds already in it are not run again (resume)")
    p.add_argument("--out", type=Path, default=ROOT / "docs/bench/streamify_generalize.json", help="JSON report")
    p.add_argument("--timeout-s", type=int, default=300, help="per-model limit (a TimeoutError is recorded)")
    p.add_argument("--report-only", action="store_true", help="rebuild the report from the log, run nothing")
    a = p.parse_args(argv)
    _quiet()
    import torch

    def _alarm(*_):
        raise TimeoutError(f"model took over {a.timeout_s} s")

    signal.signal(signal.SIGALRM, _alarm)

    torch.set_num_threads(1)
    from tests.surgery.model_generator import classify, describe

    a.log.parent.mkdir(parents=True, exist_ok=True)
    done = _load(a.log)
    seeds = range(a.start, a.start + a.seeds)
    if not a.report_only:
        with tempfile.TemporaryDirectory() as tmp, a.log.open("a") as log:
            for s in seeds:
                if s in done:
                    continue
                _quiet()
                signal.alarm(a.timeout_s)  # a hang becomes a TimeoutError inside classify (recorded, run goes on)
                r = classify(s, Path(tmp))
                signal.alarm(0)
                rec = {"seed": r.seed, "choices": r.choices, "category": r.category, "message": r.message,
                       "errors": r.errors, "delay_frames": r.delay_frames, "seconds": round(r.seconds, 2)}
                done[s] = rec
                log.write(json.dumps(rec) + "\n")
                log.flush()
                print(f"{s:5d} {r.category:22s} {r.seconds:5.1f}s {describe(r.choices)} | {r.message[:160]}",
                      flush=True)
    rep = report([done[s] for s in seeds if s in done])
    rep["command"] = " ".join(["python scripts/benchmarks/generalize_streamify.py"] + (argv or sys.argv[1:]))
    rep["generated"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    a.out.write_text(json.dumps(rep, indent=1) + "\n")
    print(table(rep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
