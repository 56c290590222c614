"""The accuracy baseline of ``cosyedge check``: its schema, reading, validation and writing, and the gated
metrics with their regression rule.

A baseline is JSON keyed by the reference model's SHA-256, with the utterance set's hashes, chunk length and,
per precision label, every metric's value (see :func:`validate_baseline` for the schema). It is written only
by ``cosyedge check --update-baseline`` (:func:`_write_baseline`), which keeps the labels, tolerances and
parents of the baseline already there when they still apply (:func:`_kept_entries`, :func:`_kept_tolerances`).

Source: Polygraphy's ``polygraphy run --save-outputs/--load-outputs`` golden-output workflow (the baseline idea;
``polygraphy/comparator/struct.py`` ``RunResults``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

from cosyedge.artifacts import SCHEMA_VERSION, model_content_sha256, write_json
from cosyedge.builders.names import parse_precision_label, precision_label
from cosyedge.compare.models import CompareModel
from cosyedge.compare.platforms import LEGACY_PLATFORM, platform_bound, platform_key, this_platform
from cosyedge.compare.tolerances import BASELINE_TOLERANCES, SNR_EXACT_DB
from cosyedge.compare.utterances import Utterance
from cosyedge.errors import ArtifactError, UsageError
from cosyedge.log import LOG

BASELINE_KIND = "cosyedge.accuracy-baseline"
BASELINE_DIR = Path(__file__).resolve().parent / "baselines"


def default_baseline_path(model_name: str = "reference") -> Path:
    """Return the committed baseline of a bundled model (Path): ``cosyedge/compare/baselines/<name>.accuracy.json``."""
    return BASELINE_DIR / f"{model_name}.accuracy.json"


def amax_cache_path(baseline: Path, model_name: str, label: str) -> Path:
    """Return where ``check`` keeps the amax cache of an INT8 label: ``<baseline dir>/<model>.<label>.amax.json``."""
    return Path(baseline).parent / f"{model_name}.{label}.amax.json"


# ----------------------------------------------------------------------------------------------- metrics
@dataclasses.dataclass
class Metric:
    """One gated number: ``key`` = ``mode/utterance/tensor/metric``; ``better`` = ``higher`` | ``lower``."""

    key: str
    value: float
    better: str


def metrics_of(result: dict, output: str, state_outputs: list[str]) -> list[Metric]:
    """Flatten a :func:`~cosyedge.compare.core.compare` result into the gated metrics (see module docstring)."""
    out: list[Metric] = []
    for mode, data in result["modes"].items():
        for utt, entry in data["utterances"].items():
            o = entry["outputs"][output]
            out.append(Metric(f"{mode}/{utt}/{output}/snr_db", o["snr_db"], "higher"))
            out.append(Metric(f"{mode}/{utt}/{output}/max_abs", o["max_abs"], "lower"))
            if mode == "teacher-forced":
                for s in state_outputs:
                    if s in entry["outputs"]:
                        out.append(Metric(f"{mode}/{utt}/{s}/snr_db", entry["outputs"][s]["snr_db"], "higher"))
            audio = entry.get("audio") or {}
            if audio.get("against") == "clean":
                if "pesq_cand" in audio:
                    out.append(Metric(f"{mode}/{utt}/{output}/pesq", audio["pesq_cand"], "higher"))
                out.append(Metric(f"{mode}/{utt}/{output}/si_snr_db", audio["si_snr_cand_db"], "higher"))
    return out


def regression(metric: str, value: float, base: float, tolerances: dict | None = None) -> str | None:
    """Return why ``value`` regressed from ``base`` (str) or None when it is within tolerance.

    Args:
        metric (str): Metric kind: the last part of the key (``snr_db``, ``max_abs``, ``pesq``, ``si_snr_db``).
        value (float): Now.
        base (float): Baseline.
        tolerances (dict | None): The baseline's ``tolerances`` (same keys as
            :data:`~cosyedge.compare.tolerances.BASELINE_TOLERANCES`, which fills any key it lacks).
    """
    tols = {**BASELINE_TOLERANCES, **(tolerances or {})}
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "is NaN" if base is not None and not (isinstance(base, float) and math.isnan(base)) else None
    if base is None or (isinstance(base, float) and math.isnan(base)):
        return None
    if metric == "snr_db":
        tol = tols["snr_db"]
        if value < base - tol and value < SNR_EXACT_DB:
            return f"SNR {value:.2f} dB < baseline {base:.2f} dB - {tol:g} dB"
    elif metric == "max_abs":
        limit = base * (1.0 + tols["max_abs_rel"]) + 1e-6
        if value > limit:
            return f"max abs error {value:.3g} > baseline {base:.3g} x {1 + tols['max_abs_rel']:g}"
    elif metric == "pesq":
        tol = tols["pesq"]
        if value < base - tol:
            return f"PESQ-WB {value:.3f} < baseline {base:.3f} - {tol:g}"
    elif metric == "si_snr_db":
        tol = tols["si_snr_db"]
        if value < base - tol:
            return f"SI-SNR {value:.2f} dB < baseline {base:.2f} dB - {tol:g} dB"
    return None


# ---------------------------------------------------------------------------------------------- baseline
def load_baseline(path: Path, ref: CompareModel) -> dict:
    """Load and validate a baseline for ``ref``.

    The file is checked against the baseline schema (:func:`validate_baseline`) before anything reads it, so a
    malformed baseline is one line naming the file and the field, never a traceback and never exit 1 (which CI
    reads as an accuracy regression).

    Raises:
        ArtifactError: file missing, not JSON, not a cosyedge baseline, or malformed (a field of the wrong
            type, a metric that is not a finite number, a schema newer than this cosyedge; exit 3).
        UsageError: made for another model (one line naming both hashes and the regenerate command).
    """
    path = Path(path)
    fix = f"regenerate it: cosyedge check --update-baseline --onnx {ref.model_path} --baseline {path}"
    if path.is_dir():
        raise ArtifactError(f"baseline {path} is a directory, not a baseline JSON file; give the file, e.g. "
                            f"--baseline {path / default_baseline_path(ref.contract.name).name}")
    if not path.is_file():
        raise ArtifactError(f"baseline {path} not found; create it: cosyedge check --update-baseline "
                         f"--onnx {ref.model_path} --baseline {path}")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ArtifactError(f"baseline {path} is not valid JSON ({err}); {fix}") from None
    if not isinstance(data, dict) or data.get("kind") != BASELINE_KIND or "model" not in data:
        raise ArtifactError(f"{path} is not a cosyedge accuracy baseline (kind '{BASELINE_KIND}'); {fix}")
    validate_baseline(data, path, fix)
    sha = data["model"]["sha256"]
    content = data["model"].get("content_sha256")
    if sha != ref.model_sha256 and not (content and content == ref.content_sha256):
        raise UsageError(
            f"baseline {path} is for model '{data['model'].get('name', '?')}' sha256 {str(sha)[:12]}, not "
            f"{ref.model_path} (sha256 {ref.model_sha256[:12]}): the model changed, or the baseline is another "
            f"model's; cosyedge check --update-baseline --onnx {ref.model_path} --baseline {path} replaces the stored "
            f"baseline with one of {ref.model_path.name} (or give another --baseline FILE)")
    return data


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def validate_baseline(data: dict, path: Path, fix: str = "regenerate it: cosyedge check --update-baseline") -> None:
    """Check a parsed baseline against its schema (what :func:`cosyedge.compare.check.run_check` reads, and what
    :func:`_write_baseline` writes).

    Schema (``?`` = optional)::

        kind: "cosyedge.accuracy-baseline"
        schema_version: int <= cosyedge.artifacts.SCHEMA_VERSION
        model: {sha256: str, name?: str, path?: str}
        utterances: [{name: str, sha256: str, ...}, ...]
        chunk_samples?: int > 0
        labels: {<precision label, e.g. fp16 or int8-sparse>: {  (at least one)
            metrics: {"<mode>/<utterance>/<tensor>/<metric>": finite number, ...}  (at least one),
            reference?: {sha256: str, path?: str},
            amax?: str | null,  (the INT8 calibration cache kept beside the baseline; null when none is kept)
            platform?: {machine: str, fp16_compute: "fp32" | "half"}}},  (where it was measured; missing = x86-64,
                FP16 computed in FP32: cosyedge.compare.platforms.LEGACY_PLATFORM)
        platform?: {machine, fp16_compute}  (where the last --update-baseline ran)
        by_platform?: {<platform kind, e.g. x86_64 or aarch64+fp16>: {<FP16 label>: <label entry as above, its
            platform of that kind>}}  (the FP16 entries of other platforms than ``labels``' own, kept by an update)
        tolerances?: {snr_db?, max_abs_rel?, pesq?, si_snr_db?: finite number >= 0}  (the gate's; missing
            keys are cosyedge's BASELINE_TOLERANCES)

    Args:
        data (dict): The parsed JSON (already known to be a dict of kind ``cosyedge.accuracy-baseline``).
        path (Path): The file, for the message.
        fix (str): The fix the message ends with.
    Raises:
        ArtifactError: the first field that breaks the schema, named as a dotted path
            (``'labels.fp16.metrics.free-running/demo-noisy/enhanced/pesq' is NaN``); exit 3.
    """
    def bad(field: str, why: str):
        return ArtifactError(f"baseline {path}: '{field}' {why}; {fix}")

    def kind(v: Any) -> str:
        return "null" if v is None else {"str": "a string", "list": "a list", "dict": "an object", "bool": "a boolean",
                                         "int": "a number", "float": "a number"}.get(type(v).__name__, type(v).__name__)

    def obj(v: Any, field: str) -> dict:
        if not isinstance(v, dict):
            raise bad(field, f"must be an object, not {kind(v)}")
        return v

    def text(v: Any, field: str) -> str:
        if not isinstance(v, str) or not v:
            raise bad(field, "must be a non-empty string" + ("" if isinstance(v, str) else f", not {kind(v)}"))
        return v

    if "schema_version" not in data:
        raise bad("schema_version", "is missing")
    version = data["schema_version"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise bad("schema_version", f"must be a positive integer, not {version!r}")
    if version > SCHEMA_VERSION:
        raise ArtifactError(f"baseline {path}: 'schema_version' {version} is newer than this cosyedge understands "
                            f"({SCHEMA_VERSION}); upgrade cosyedge, or {fix}")
    model = obj(data.get("model"), "model")
    text(model.get("sha256"), "model.sha256")
    if "content_sha256" in model:
        text(model["content_sha256"], "model.content_sha256")
    if "name" in model:
        text(model["name"], "model.name")
    utts = data.get("utterances")
    if not isinstance(utts, list):
        raise bad("utterances", "is missing" if utts is None and "utterances" not in data else
                  f"must be a list, not {kind(utts)}")
    for i, u in enumerate(utts):
        obj(u, f"utterances[{i}]")
        for key in ("name", "sha256"):
            text(u.get(key), f"utterances[{i}].{key}")
    if "chunk_samples" in data:
        chunk = data["chunk_samples"]
        if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 1:
            raise bad("chunk_samples", f"must be a positive integer, not {chunk!r}")
    if "labels" not in data:
        raise bad("labels", "is missing")
    labels = obj(data["labels"], "labels")
    if not labels:
        raise bad("labels", "is empty (nothing to gate)")

    def platform(v: Any, field: str) -> None:
        obj(v, field)
        text(v.get("machine"), f"{field}.machine")
        if v.get("fp16_compute") not in ("fp32", "half"):
            raise bad(f"{field}.fp16_compute", f"must be \"fp32\" or \"half\", not {json.dumps(v.get('fp16_compute'))}")

    def entries(labels: dict, prefix: str) -> None:
        for label, entry in labels.items():
            where = f"{prefix}.{label}"
            try:
                norm = precision_label(*parse_precision_label(str(label)))
            except UsageError:
                norm = None
            if norm != label:
                raise bad(where, "is not a precision label (fp32, fp16 or int8, optionally with -sparse)")
            obj(entry, where)
            if "metrics" not in entry:
                raise bad(f"{where}.metrics", "is missing")
            metrics = obj(entry["metrics"], f"{where}.metrics")
            if not metrics:
                raise bad(f"{where}.metrics", "is empty (nothing to gate)")
            for key, value in metrics.items():
                field = f"{where}.metrics.{key}"
                if not _is_number(value):
                    raise bad(field, f"must be a number, not {kind(value)} {json.dumps(value)}")
                if not math.isfinite(value):
                    raise bad(field, f"is {value!r}".replace("nan", "NaN").replace("inf", "Infinity") +
                              " (a metric must be a finite number, or it drops out of the gate)")
            if "reference" in entry:
                ref = obj(entry["reference"], f"{where}.reference")
                text(ref.get("sha256"), f"{where}.reference.sha256")
                if "content_sha256" in ref:
                    text(ref["content_sha256"], f"{where}.reference.content_sha256")
            if entry.get("amax") is not None:
                text(entry["amax"], f"{where}.amax")
            if "platform" in entry:
                platform(entry["platform"], f"{where}.platform")

    entries(labels, "labels")
    if "platform" in data:
        platform(data["platform"], "platform")
    if "by_platform" in data:
        for key, labs in obj(data["by_platform"], "by_platform").items():
            entries(obj(labs, f"by_platform.{key}"), f"by_platform.{key}")
            for label, entry in labs.items():
                if "platform" not in entry or platform_key(entry["platform"]) != key:
                    raise bad(f"by_platform.{key}.{label}.platform", f"must be a platform of kind '{key}'")
    if "tolerances" in data:
        tols = obj(data["tolerances"], "tolerances")
        for key, value in tols.items():
            if key not in BASELINE_TOLERANCES:
                raise bad(f"tolerances.{key}", f"is not a tolerance (known: {', '.join(BASELINE_TOLERANCES)})")
            if not _is_number(value) or not math.isfinite(value) or value < 0:
                raise bad(f"tolerances.{key}", f"must be a finite number >= 0, not {json.dumps(value)}")


def _check_same_set(baseline: dict, utts: list[Utterance], chunk: int, path: Path) -> None:
    have = [(u["name"], u["sha256"]) for u in baseline.get("utterances", [])]
    now = [(u.name, u.sha256) for u in utts]
    if have != now:
        raise UsageError(f"baseline {path} was measured on utterances {[n for n, _ in have]} but this check uses "
                         f"{[n for n, _ in now]} (or their audio changed); use the same set or run "
                         f"'cosyedge check --update-baseline'")
    if int(baseline.get("chunk_samples", chunk)) != chunk:
        raise UsageError(f"baseline {path} was measured with {baseline['chunk_samples']}-sample chunks, not {chunk}; "
                         f"pass the same --chunk-ms or run 'cosyedge check --update-baseline'")


def entry_for(base: dict, label: str, here: dict | None = None) -> tuple[dict | None, list[dict]]:
    """The baseline entry that gates ``label`` on platform ``here`` (default :func:`this_platform`), and the
    platforms of the entries that do not apply here.

    A label whose gate does not depend on the platform (INT8, FP32: :func:`~cosyedge.compare.platforms.platform_bound`)
    uses ``labels[label]`` wherever it was measured. An FP16 label uses the entry (``labels[label]`` or
    ``by_platform[kind][label]``) measured on the same kind of platform
    (:func:`~cosyedge.compare.platforms.platform_key`); an entry without ``platform`` was measured on x86-64.

    Returns:
        tuple: ``(entry or None, [platform record of each entry of ``label`` that is for another kind])``;
        ``(None, [])`` when the baseline has no entry for ``label`` at all.
    """
    first = (base.get("labels") or {}).get(label)
    if not platform_bound(label):
        return first, []
    want = platform_key(here if here is not None else this_platform())
    found = ([first] if first is not None else []) + [
        labs[label] for labs in (base.get("by_platform") or {}).values() if label in labs]
    for entry in found:
        if platform_key(entry.get("platform")) == want:
            return entry, []
    return None, [e.get("platform") or dict(LEGACY_PLATFORM) for e in found]


def _parent_of_label(base: dict, label: str, entry: dict | None = None) -> dict:
    """The FP32 model a baseline measured ``label`` against: ``{"path", "sha256", "content_sha256"}`` (dict) from
    the label's ``reference`` entry, or the baseline's model for baselines written before sparse parents existed.
    ``content_sha256`` (:func:`~cosyedge.artifacts.model_content_sha256`, ``""`` when unknown) is the label's own,
    or the baseline model's when the label was measured against that model (baselines written before labels
    recorded it). ``entry``: the label entry to read (default ``labels[label]``; e.g. one of ``by_platform``)."""
    model = base.get("model") or {}
    entry = entry or (base.get("labels") or {}).get(label) or {}
    ref = entry.get("reference") or model
    content = ref.get("content_sha256") or (model.get("content_sha256") if ref.get("sha256") == model.get("sha256")
                                            else None)
    return {"path": ref.get("path", "?"), "sha256": ref.get("sha256", ""), "content_sha256": content or ""}


def _is_parent(was: dict, parent: CompareModel | None) -> bool:
    """Whether ``parent`` is the FP32 parent ``was`` (:func:`_parent_of_label`): the same file, or the same graph
    and weights exported on another CPU (same content hash; only the machine-measured proof differs). ``None``
    (no usable parent) is nobody's parent."""
    if parent is None:
        return False
    if was["sha256"] == parent.model_sha256:
        return True
    return bool(was.get("content_sha256")) and was["content_sha256"] == parent.content_sha256


def _write_baseline(path: Path, ref: CompareModel, utts: list[Utterance], chunk: int, report: dict,
                    parents: dict | None = None) -> None:
    """Write the baseline of ``report`` (the measured labels, plus the kept ones; see :func:`_kept_entries`).

    ``parents`` (``{"dense": CompareModel, "sparse": CompareModel | None}``) are the FP32 parents the labels
    were measured against (each label's is found by its ``reference`` path; kept labels are checked against
    them); without it, the labels' parents are loaded from their paths.

    Raises:
        UsageError: a measured metric is NaN/Inf (a baseline holds finite numbers only: a non-finite value
            would drop out of the gate); nothing is written.
    """
    from cosyedge import __version__

    known = {str(p.model_path): p for p in (parents or {}).values() if p is not None}

    def content_of(model_path: str) -> str:  # each parent's content hash computed once (CompareModel caches it)
        return known[model_path].content_sha256 if model_path in known else model_content_sha256(model_path)

    for lab, d in report["labels"].items():
        for key, v in d["metrics"].items():
            value = v["value"]
            if value is None or (_is_number(value) and not math.isfinite(value)):
                what = "NaN" if value is None or math.isnan(value) else repr(value).replace("inf", "Infinity")
                raise UsageError(f"cannot write baseline {path}: '{lab}' {key} is {what} (the candidate or the "
                                 f"utterance gives no finite value; a baseline holds finite numbers only); check "
                                 f"the build with 'cosyedge compare', or use other --utterances (or --no-pesq "
                                 f"for a PESQ that cannot be scored)")

    here = this_platform()
    kept, others = _kept_entries(path, ref, utts, chunk, set(report["labels"]), parents)
    labels = {**kept,
              **{lab: {"reference": {"path": Path(d["reference"]).name, "sha256": d["reference_sha256"],
                                     "content_sha256": content_of(d["reference"])},
                       "metrics": {k: _num(v["value"]) for k, v in d["metrics"].items()},
                       # the cache kept next to the baseline; none for an INT8 build that calibrates nothing
                       "amax": (amax_cache_path(path, ref.contract.name, lab).name
                                if lab.startswith("int8") and amax_cache_path(path, ref.contract.name, lab).is_file()
                                else None),
                       "platform": dict(here)}
                 for lab, d in report["labels"].items()}}
    by_platform: dict = {}  # the FP16 entries of other platforms: kept beside the one in labels
    for lab, entry in others:
        kind = platform_key(entry.get("platform"))
        if lab in labels and platform_key(labels[lab].get("platform")) == kind:
            continue  # superseded by the entry measured (or kept) for this kind
        by_platform.setdefault(kind, {}).setdefault(lab, {**entry, "platform": entry.get("platform")
                                                          or dict(LEGACY_PLATFORM)})
    data = {
        "kind": BASELINE_KIND, "schema_version": SCHEMA_VERSION, "cosyedge_version": __version__,
        "model": {"name": ref.contract.name, "sha256": ref.model_sha256, "path": ref.model_path.name,
                  "content_sha256": ref.content_sha256},
        "utterances": [u.describe() | {"source": Path(u.source).name} for u in utts],
        "chunk_samples": chunk, "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tools": _tools(), "tolerances": report.get("tolerances") or BASELINE_TOLERANCES,
        "regenerate": "cosyedge check --update-baseline",
        "platform": dict(here), "labels": labels, **({"by_platform": by_platform} if by_platform else {}),
    }
    write_json(path, data)


def _kept_tolerances(path: Path) -> dict:
    """The ``tolerances`` of the baseline already at ``path`` when it has valid ones (kept by an update), else
    ``{}``."""
    try:
        old = json.loads(Path(path).read_text())
        tols = old.get("tolerances") if isinstance(old, dict) else None
        if isinstance(tols, dict) and all(k in BASELINE_TOLERANCES and _is_number(v) and math.isfinite(v) and v >= 0
                                          for k, v in tols.items()):
            return dict(tols)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        pass
    return {}


def _kept_entries(path: Path, ref: CompareModel, utts: list[Utterance], chunk: int, measured: set,
                  parents: dict | None = None) -> tuple[dict, list[tuple[str, dict]]]:
    """What an update keeps of the baseline already at ``path``, when that baseline is for the same model, utterance
    set and chunk (else nothing: its values no longer apply).

    Returns:
        tuple: ``(labels, others)``: ``labels`` = the entries of ``labels`` that this update did not measure;
        ``others`` = ``[(label, entry), ...]``, every FP16 entry of the old baseline (``labels`` and ``by_platform``,
        measured or not), for :func:`_write_baseline` to keep beside the entry of its platform kind. Each is kept
        only when it was measured against the FP32 parent it would have now (``parents``: ``{"dense": CompareModel,
        "sparse": CompareModel | None}``; a label of another parent, or of a kind whose parent is None, is dropped,
        with a log line; the same model exported on another CPU is the same parent, see :func:`_is_parent`; without
        ``parents`` every label is kept).
    """
    try:
        old = load_baseline(path, ref)
        _check_same_set(old, utts, chunk, path)
    except (UsageError, ArtifactError):  # none yet, unreadable, or of another model: nothing to keep
        return {}, []

    def fits(lab: str, entry: dict, say: bool = True) -> bool:
        kind = "sparse" if parse_precision_label(lab)[1] else "dense"
        if parents is not None and not _is_parent(_parent_of_label(old, lab, entry), parents.get(kind)):
            if say:
                LOG.warning("baseline %s: dropped '%s' (measured against another FP32 parent; re-measure it with "
                            "--update-baseline --precisions %s)", path, lab, lab)
            return False
        return True

    kept = {lab: v for lab, v in (old.get("labels") or {}).items() if lab not in measured and fits(lab, v)}
    others = [(lab, v) for lab, v in (old.get("labels") or {}).items() if platform_bound(lab) and
              (lab in kept or (lab in measured and fits(lab, v, say=False)))]
    others += [(lab, v) for labs in (old.get("by_platform") or {}).values() for lab, v in labs.items()
               if fits(lab, v)]
    if kept:
        LOG.info("baseline %s: kept the entries of %s (not re-measured)", path, sorted(kept))
    return kept, others


def _tools() -> dict:
    out = {}
    for mod in ("onnxruntime", "polygraphy", "numpy"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - informational only
            out[mod] = None
    return out


def _num(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return round(v, 6) if isinstance(v, float) else v


__all__ = ["BASELINE_DIR", "BASELINE_KIND", "Metric", "amax_cache_path", "default_baseline_path", "load_baseline",
           "metrics_of", "regression", "validate_baseline"]
