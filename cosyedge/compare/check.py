"""``cosyedge check``: the CI accuracy-regression gate.

For each configured precision label (default ``fp16,int8-sparse``) an ONNX Runtime engine of the
reference model is built with :func:`cosyedge.builders.build_engine` (or reused when its manifest says it
was built from this very model with these flags), compared with the FP32 reference on the fixed set of
real utterances (:func:`cosyedge.compare.core.compare`, both modes, 100 ms chunks), and every metric is
checked against the **baseline** file:

* teacher-forced, per utterance: audio output SNR (dB) and max abs error, SNR of every ``state_out``;
* free-running, per utterance: audio output SNR and max abs error, PESQ-WB and SI-SNR of the candidate
  against the clean speech.

**Sparse labels** (``fp16-sparse``, ``int8-sparse``, ...) are built from, and compared with, the
**sparse parent**: the FP32 model whose weights were pruned 2:4 and fine-tuned (``--sparse-onnx``; for the
bundled model the committed ``reference.sparse.stream.onnx``,
:data:`cosyedge.models.REFERENCE_SPARSE_STREAM_ONNX`),
so the gate measures the precision change of the sparse model users deploy rather than the accuracy that
pruning without fine-tuning loses. Their engines have folders of their own,
``<name>-<sparse parent sha256[:8]>-<label>-onnxruntime`` (:func:`cosyedge.compare.engines.ensure_engine`), so they never replace a
``cosyedge build --sparse`` of the dense model. Without a sparse parent (another ``--onnx`` and no ``--sparse-onnx``) they
are pruned from the reference on the fly and compared with it. The baseline records each label's parent
(SHA-256); a check whose parent differs is refused (exit 2).

A metric fails when it is worse than its baseline value by more than the baseline's ``tolerances``
(written by ``--update-baseline`` as :data:`cosyedge.compare.tolerances.BASELINE_TOLERANCES`: SNR 1 dB, max
abs +50 %, PESQ 0.05, SI-SNR 0.2 dB; an SNR still >= 90 dB never fails; edited values apply, and the table
names them, and ``--update-baseline`` keeps them). **Platforms**: an FP16 label is gated only by a baseline entry
measured on the same kind of platform (:mod:`cosyedge.compare.platforms`: arm64 CPUs with FP16 arithmetic compute
FP16 in half precision, x86-64 in FP32; a baseline without ``platform`` is x86-64's); INT8 and FP32 labels are gated
on any CPU. An FP16 label whose entries all come from another kind of platform is still built and measured, its rows
say ``NO BASELINE``, one ``NO BASELINE`` line names both platforms and the exact ``--update-baseline`` command that
records it here, the other labels are gated as usual, and the check exits **2** when nothing regressed (1 when
something did): a CI job on a Jetson neither passes with an ungated FP16 label nor reports a regression that is
not one; it records the platform's baseline once (kept in ``by_platform`` beside the other platform's entry), or
leaves FP16 out (``--precisions int8-sparse``). A measured metric the baseline lacks, or a baseline metric
this check does not measure, is not gated and is named on a ``NOT GATED`` line. Exit codes: 0 pass; **1** regression
(:class:`~cosyedge.errors.RegressionError`: the table, JSON and JUnit name every failing metric);
**2** bad input (:class:`~cosyedge.errors.UsageError`): a baseline of another model or utterance set, a
missing baseline entry, a baseline label measured against another sparse parent, a sparse parent or
candidate with other inputs/outputs, a ``--candidate`` for a label not in ``--precisions``, an engine that
cannot run here, an INT8 build without its calibration. Other failures keep their usual codes (3 artifact: a missing, non-JSON, non-baseline or
malformed ``--baseline`` file (validated against its schema when loaded, :func:`cosyedge.compare.baseline.validate_baseline`: the
line names the field), a directory given as ``--baseline``, an utterance shorter than 1 s or silent
(:data:`cosyedge.compare.utterances.MIN_SECONDS`), an empty ``--onnx``, a missing ``--sparse-onnx``; 4 dependency).

**Baseline** (``--baseline``, default the committed ``cosyedge/compare/baselines/reference.accuracy.json``
for the bundled model, ``<file>.accuracy.json`` beside any other ``--onnx`` file (``mine.stream.onnx`` ->
``mine.stream.accuracy.json``; an update that replaces another model's baseline says so), never the installed
package's folder; the log says which): JSON keyed by the reference model's SHA-256, with the utterance set's hashes,
chunk length and, per label, every metric's value. ``cosyedge check --update-baseline`` is the one
command that (re)writes it, after the model changes: it builds every label of ``--precisions`` (the
other labels of a baseline of the same model, utterances and chunk are kept) (INT8: calibrates on the
calibration set, ``--calib DIR`` or the default ``calib/`` which is generated from Debian packages on
first use) and stores next to the baseline the amax cache of each INT8 label
(``<model>.<label>.amax.json``), so later checks build INT8 without any calibration audio (CI).

Sources: JUnit XML as read by CI servers (Jenkins/GitLab ``testsuite``/``testcase``/``failure``),
https://llg.cubic.org/docs/junit/ ; Polygraphy's ``polygraphy run --load-outputs`` golden-output
workflow (the baseline idea).
"""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path

from cosyedge.artifacts import MANIFEST_NAME, check_not_inputs, check_writable, write_json
from cosyedge.log import LOG
from cosyedge.compare.baseline import (
    BASELINE_KIND,
    _check_same_set,
    _is_parent,
    _kept_tolerances,
    _parent_of_label,
    _write_baseline,
    default_baseline_path,
    entry_for,
    load_baseline,
    metrics_of,
    regression,
)
from cosyedge.compare.core import DEFAULT_CHUNK_MS, ReferenceCache, compare, default_chunk
from cosyedge.compare.engines import ensure_engine, sparse_parent
from cosyedge.compare.labels import DEFAULT_PRECISIONS, load_candidate, parse_precisions
from cosyedge.builders.names import parse_precision_label, precision_label
from cosyedge.compare.models import CompareModel, check_reference, load_compare_model
from cosyedge.compare.platforms import describe, this_platform
from cosyedge.compare.report import _jsonable, _rows, write_junit
from cosyedge.compare.tolerances import BASELINE_TOLERANCES, tolerance_for
from cosyedge.compare.utterances import Utterance, fixed_utterances, with_partners
from cosyedge.errors import ArtifactError, CosyEdgeError, UsageError
from cosyedge.log import LOG

# DEFAULT_CHUNK_MS (100 ms, from cosyedge.compare.core): teacher forcing about every 100 ms; 10x fewer runner calls
# than one-hop chunks, which keeps the CI gate under a minute on two shared cores.

# ----------------------------------------------------------------------------------------------- the gate
def _bundled(path: str | Path) -> bool:
    """Whether ``path`` is a model shipped inside the installed cosyedge package (its committed baseline applies)."""
    import cosyedge

    pkg = Path(cosyedge.__file__).resolve().parent
    try:
        Path(path).resolve().relative_to(pkg)
        return True
    except ValueError:
        return False


def default_baseline_for(onnx_path: str | Path | None, model_name: str) -> Path:
    """The baseline ``cosyedge check`` reads or writes without ``--baseline`` (Path): the committed
    ``cosyedge/compare/baselines/<name>.accuracy.json`` for the bundled model (no ``--onnx``, or a model inside the
    package), else ``<file>.accuracy.json`` beside the user's ``--onnx`` file, named after that file
    (``mine.stream.onnx`` -> ``mine.stream.accuracy.json``; never into the installed package). Named after the file,
    not the model name in its metadata: two adopted models in one folder share that name (the file stem 'stream'),
    and ``--update-baseline`` of one overwrote the other's baseline."""
    if onnx_path is None or _bundled(onnx_path):
        return default_baseline_path(model_name)
    p = Path(onnx_path)
    stem = p.name[:-len(".onnx")] if p.name.lower().endswith(".onnx") and len(p.name) > len(".onnx") else p.name
    return p.parent / f"{stem}.accuracy.json"


def _warn_if_replacing_another_models(baseline: Path, ref: CompareModel) -> None:
    """Say, in one warning line, when ``--update-baseline`` is about to replace a baseline recorded for another
    model (another model name or file): the other model's gate is lost with it."""
    try:
        old = json.loads(baseline.read_text())
        model = old.get("model") if isinstance(old, dict) and old.get("kind") == BASELINE_KIND else None
    except (OSError, UnicodeDecodeError, ValueError):
        return
    if not isinstance(model, dict):
        return
    name, path = str(model.get("name", "?")), str(model.get("path", "?"))
    if name == ref.contract.name and path == ref.model_path.name:
        return
    LOG.warning("--update-baseline replaces %s, the baseline recorded for another model ('%s', %s, sha256 %s), with "
                "the baseline of '%s' (%s); give --baseline FILE to keep both", baseline, name, path,
                str(model.get("sha256", "?"))[:12], ref.contract.name, ref.model_path)


def run_check(onnx_path: str | Path | None = None, *, baseline: str | Path | None = None,
              update_baseline: bool = False, precisions: list[str] | None = None,
              engines_dir: str | Path | None = None, candidates: dict | None = None,
              utterances: list[Utterance] | None = None, chunk_ms: float | None = None,
              calib: str | Path | None = None, json_path: str | Path | None = None,
              junit_path: str | Path | None = None, pesq: bool = True, threads: int = 1,
              sparse_onnx: str | Path | None = None, utterances_arg: str | None = None) -> dict:
    """Build (or reuse) each precision, compare it with its FP32 parent, gate on the baseline.

    Args:
        onnx_path (str | Path | None): FP32 streaming ONNX (default: the bundled reference model).
        baseline (str | Path | None): Baseline JSON (default :func:`default_baseline_for`: the committed one for the
            bundled model, else beside ``onnx_path``).
        update_baseline (bool): Measure and (re)write the baseline instead of gating.
        precisions (list[str] | None): Labels, e.g. ``["fp16", "int8-sparse"]`` (default: the baseline's
            labels, or :data:`DEFAULT_PRECISIONS` when updating).
        engines_dir (str | Path | None): Engines root (default ``$COSYEDGE_ENGINES_DIR`` or ``./engines``).
        candidates (dict[str, str | Path] | None): ``{label: engine folder or ONNX}`` checked instead of
            building that label (e.g. a build made elsewhere).
        utterances (list[Utterance] | None): Real speech (default :func:`fixed_utterances`).
        chunk_ms (float | None): Chunk (ms), a multiple of the total stride; None (default) = the one chunk a given
            candidate takes (an ``ort_matmul`` INT8 build made before its Scan over hops: one hop), else the multiple nearest :data:`DEFAULT_CHUNK_MS`
            (:func:`cosyedge.compare.core.default_chunk`).
        calib (str | Path | None): INT8 calibration set folder (calibrate instead of using the kept amax).
        json_path (str | Path | None): Write the full report here.
        junit_path (str | Path | None): Write JUnit XML here (one test case per label, mode and utterance).
        pesq (bool): Score PESQ-WB.
        threads (int): ONNX Runtime threads.
        sparse_onnx (str | Path | None): FP32 parent of the sparse labels (see :func:`cosyedge.compare.engines.sparse_parent`).
        utterances_arg (str | None): The ``--utterances`` the user gave (only for the command a NO BASELINE line
            prints).
    Returns:
        dict: ``passed`` (bool: no regression and every label gated), ``regressions`` (list of one-line texts),
        ``no_baseline`` (list of ``{"label", "here", "measured_on", "command", "line"}``: FP16 labels whose
        baseline entries are all from another kind of platform, measured but not gated; see the module docstring),
        ``platform`` (:func:`~cosyedge.compare.platforms.this_platform`), ``rows`` (table rows),
        ``labels[label]`` (engine, FP32 parent ``reference``/``reference_sha256``, compare result, metrics
        with baseline values and verdicts),
        ``baseline`` (path), ``updated`` (bool).
    Raises:
        UsageError: see module docstring (exit 2). The caller raises RegressionError on ``not passed``.
    """
    from cosyedge.models import require_reference
    from cosyedge.runtime.engine import engines_root

    t0 = time.perf_counter()
    ref = load_compare_model(onnx_path or require_reference())
    check_reference(ref)
    if baseline is None:
        baseline = default_baseline_for(onnx_path, ref.contract.name)
        LOG.info("baseline: %s (the default %s; --baseline FILE to choose another)", baseline,
                 "committed with cosyedge for its bundled model" if onnx_path is None or _bundled(onnx_path) else
                 f"beside {onnx_path}")
    baseline = Path(baseline)
    engines_dir = Path(engines_dir) if engines_dir is not None else engines_root()
    inputs = [onnx_path, ref.path, ref.model_path, baseline, sparse_onnx, calib, *(candidates or {}).values(),
              *baseline.parent.glob(f"{ref.contract.name}.*.amax.json"),  # the INT8 calibration kept beside it
              *(m.parent for m in engines_dir.glob(f"*/{MANIFEST_NAME}"))]  # engine folders built or reused
    for p, option in ((json_path, "--json"), (junit_path, "--junit")):
        if p is not None:
            check_writable(p)
            check_not_inputs(p, inputs, option)
    if json_path is not None and junit_path is not None and Path(json_path).resolve() == Path(junit_path).resolve():
        raise UsageError(f"--json {json_path} and --junit {junit_path} are the same file: give two paths")
    if update_baseline:
        check_writable(baseline)
        _warn_if_replacing_another_models(baseline, ref)
        base = None
    else:
        base = load_baseline(baseline, ref)
    labels = parse_precisions(",".join(precisions)) if precisions else (
        list(base["labels"]) if base else list(DEFAULT_PRECISIONS))
    candidates = {precision_label(*parse_precision_label(k)): v for k, v in (candidates or {}).items()}
    unchecked = [lab for lab in candidates if lab not in labels]
    if unchecked:  # it would be silently ignored: the user believes that engine was gated
        raise UsageError(f"--candidate {unchecked[0]}=... is for a label this check does not run (it checks "
                         f"{','.join(labels)}); add it to --precisions")
    has_sparse = any(parse_precision_label(lab)[1] for lab in labels)
    has_int8 = any(parse_precision_label(lab)[0] == "int8" for lab in labels)
    for path, option, used, what in ((calib, "--calib", has_int8, "int8 labels"),
                                     (sparse_onnx, "--sparse-onnx", has_sparse, "-sparse labels")):
        if path is None:
            continue
        if not Path(path).exists():
            raise ArtifactError(f"{option} {path} not found")
        if not used:  # a CI job may pass it for every label set: said, not refused
            LOG.warning("%s %s is not used: it serves %s only, and this check runs %s", option, path, what,
                        ",".join(labels))
    sparse_ref = sparse_parent(ref, sparse_onnx) if has_sparse else ref  # only resolved when a sparse label is checked

    def parent_of(label: str) -> CompareModel:  # the FP32 model a label is built from and compared with
        return sparse_ref if parse_precision_label(label)[1] else ref

    utts = utterances if utterances is not None else fixed_utterances(ref.contract.sample_rate_hz)
    utts = with_partners(utts, ref.contract, str(ref.path), "cosyedge check")  # a model with several inputs
    given = {label: load_candidate(label, candidates[label], parent_of(label)) for label in labels
             if label in candidates}  # every --candidate is checked before anything is built or compared
    chunk_given = chunk_ms is not None
    chunk = default_chunk(ref, chunk_ms, given.values())  # a candidate that runs one chunk length only sets it
    chunk_ms = 1000.0 * chunk / ref.contract.sample_rate_hz
    here = this_platform()  # an FP16 label is gated only by a baseline entry of the same kind of platform
    if base is not None:
        _check_same_set(base, utts, chunk, baseline)
        missing = [lab for lab in labels if entry_for(base, lab, here) == (None, [])]
        if missing:  # the baseline is rewritten with exactly --precisions: name the kept labels too
            keep = list(base.get("labels", {})) + [lab for lab in labels if lab not in base.get("labels", {})]
            raise UsageError(f"baseline {baseline} has no entry for {missing} (it has {sorted(base.get('labels', {}))}); "
                             f"run 'cosyedge check --update-baseline --precisions {','.join(keep)}'")
        for lab in labels:
            entry = entry_for(base, lab, here)[0]
            if entry is None:  # only other platforms' entries: the first one's parent is the one to match
                entry = base["labels"].get(lab) or next(labs[lab] for labs in base.get("by_platform", {}).values()
                                                        if lab in labs)
            parent, was = parent_of(lab), _parent_of_label(base, lab, entry)
            if not _is_parent(was, parent):
                raise UsageError(f"baseline {baseline} measured '{lab}' against another FP32 model ({was['path']}, "
                                 f"sha256 {was['sha256'][:12]}), not {parent.model_path} (sha256 "
                                 f"{parent.model_sha256[:12]}); pass that model as --sparse-onnx, or re-measure "
                                 f"the label: cosyedge check --update-baseline --precisions {lab} (with the same "
                                 f"--onnx/--baseline/--sparse-onnx)")
    caches: dict[str, ReferenceCache] = {}
    tolerances = {**BASELINE_TOLERANCES, **(_kept_tolerances(baseline) if update_baseline else
                                            (base or {}).get("tolerances") or {})}
    report: dict = {"reference": str(ref.model_path), "model_sha256": ref.model_sha256,
                    "baseline": str(baseline), "updated": bool(update_baseline), "chunk_samples": chunk,
                    "utterances": [u.describe() for u in utts], "labels": {}, "regressions": [], "rows": [],
                    "tolerances": tolerances, "not_gated": [], "no_baseline": [], "platform": here}
    state_outs = [s.output for s in ref.contract.states]
    for label in labels:
        parent = parent_of(label)
        if label in given:
            target, cand = candidates[label], given[label]
        else:
            target = ensure_engine(parent, label, engines_dir, baseline=baseline, update=update_baseline, calib=calib,
                                   derived=True if parent is not ref else None)
            cand = load_compare_model(target)
        cache = caches.setdefault(parent.model_sha256, ReferenceCache(parent, chunk, threads))
        res = compare(parent, cand, utts, chunk=chunk, tolerance=tolerance_for(label), pesq=pesq, threads=threads,
                      ref_cache=cache)
        metrics = metrics_of(res, ref.contract.output, state_outs)
        entry, elsewhere = entry_for(base, label, here) if base is not None else (None, [])
        base_vals = (entry or {}).get("metrics", {})
        if base is not None and entry is None:  # an FP16 label measured on another kind of platform only
            report["no_baseline"].append(_no_baseline(label, here, elsewhere, onnx_path, baseline, sparse_onnx,
                                                      chunk_ms if chunk_given else None, utterances_arg, pesq))
        rows_m = {}
        for m in metrics:
            b = base_vals.get(m.key)
            why = regression(m.key.rsplit("/", 1)[1], m.value, b, tolerances) if base is not None else None
            if base is not None and m.key not in base_vals:
                why = None
            rows_m[m.key] = {"value": m.value, "baseline": b, "better": m.better, "regression": why}
            if why:
                report["regressions"].append(f"{label} {m.key}: {why}")
        if entry is not None:  # say what the gate did not compare: a trimmed or hand-edited baseline is visible
            ungated = [k for k in rows_m if k not in base_vals]
            unmeasured = [k for k in base_vals if k not in rows_m]
            if ungated:
                report["not_gated"].append(
                    f"{label}: {len(ungated)} measured metric(s) have no baseline value and were not gated (e.g. "
                    f"{ungated[0]}); re-measure: cosyedge check --update-baseline --precisions {label}")
            if unmeasured:
                report["not_gated"].append(
                    f"{label}: {len(unmeasured)} baseline metric(s) were not measured by this check (e.g. "
                    f"{unmeasured[0]}{'; PESQ is off (--no-pesq)' if not pesq and unmeasured[0].endswith('/pesq') else ''})")
        report["labels"][label] = {"engine": str(target), "reference": str(parent.model_path),
                                   "reference_sha256": parent.model_sha256, "candidate": res["candidate"], "compare": res,
                                   "metrics": rows_m, "default_tolerance_failures": res["failures"]}
        if any(v["regression"] for v in rows_m.values()):
            report["labels"][label]["debug"] = (f"cosyedge compare {parent.model_path} {target} --mark-all "
                                                f"--chunk-ms {chunk_ms:g}")
        report["rows"] += _rows(label, res, rows_m, ref.contract.output, state_outs,
                                unbased=base is not None and entry is None)
    parents: dict[str, CompareModel | None] = {"dense": ref, "sparse": sparse_ref}
    if update_baseline and not has_sparse:  # the parent kept sparse labels would be checked against now
        try:
            parents["sparse"] = sparse_parent(ref, sparse_onnx)
        except CosyEdgeError:
            parents["sparse"] = None  # none usable: kept sparse labels are dropped
    report["parents"] = {k: (p.model_sha256 if p is not None else "") for k, p in parents.items()}
    report["passed"] = not report["regressions"] and not report["no_baseline"]
    report["elapsed_s"] = round(time.perf_counter() - t0, 2)
    if update_baseline:
        _write_baseline(baseline, ref, utts, chunk, report, parents)
    if json_path is not None:
        write_json(json_path, _jsonable(report))
    if junit_path is not None:
        write_junit(junit_path, report)
    return report


def _no_baseline(label: str, here: dict, elsewhere: list[dict], onnx_path, baseline: Path, sparse_onnx,
                 chunk_ms: float | None, utterances_arg: str | None, pesq: bool) -> dict:
    """The NO BASELINE note of an FP16 ``label`` whose baseline entries are all from other kinds of platform
    (dict ``{"label", "here", "measured_on", "command", "line"}``; ``command`` records a baseline for this platform
    with the options this check ran with)."""
    cmd = ["cosyedge", "check", "--update-baseline", "--precisions", label]
    if onnx_path is not None:
        cmd += ["--onnx", str(onnx_path)]
    cmd += ["--baseline", str(baseline)]
    if sparse_onnx is not None and label.endswith("-sparse"):
        cmd += ["--sparse-onnx", str(sparse_onnx)]
    if utterances_arg is not None:
        cmd += ["--utterances", str(utterances_arg)]
    if chunk_ms is not None:
        cmd += ["--chunk-ms", f"{chunk_ms:g}"]
    if not pesq:
        cmd.append("--no-pesq")
    command = " ".join(shlex.quote(c) for c in cmd)
    where = " and ".join(dict.fromkeys(describe(p) for p in elsewhere))
    line = (f"{label}: no baseline for this platform, not gated: {baseline.name}'s {label} entry was measured on "
            f"{where}, and this CPU is {describe(here)}; record a baseline here with: {command}")
    return {"label": label, "here": here, "measured_on": elsewhere, "command": command, "line": line}


__all__ = ["DEFAULT_CHUNK_MS", "run_check"]
