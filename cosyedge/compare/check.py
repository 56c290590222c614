"""``cosyedge check``: the CI accuracy-regression gate.

For each configured precision label (default ``fp16,int8-sparse``) an ONNX Runtime engine of the
reference model is built with :func:`cosyedge.build.build_engine` (or reused when its manifest says it
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
``<name>-<sparse parent sha256[:8]>-<label>-onnxruntime`` (:func:`ensure_engine`), so they never replace a
``cosyedge build --sparse`` of the dense model. Without a sparse parent (another ``--onnx`` and no ``--sparse-onnx``) they
are pruned from the reference on the fly and compared with it. The baseline records each label's parent
(SHA-256); a check whose parent differs is refused (exit 2).

A metric fails when it is worse than its baseline value by more than the baseline's ``tolerances``
(written by ``--update-baseline`` as :data:`cosyedge.compare.tolerances.BASELINE_TOLERANCES`: SNR 1 dB, max
abs +50 %, PESQ 0.05, SI-SNR 0.2 dB; an SNR still >= 90 dB never fails; edited values apply, and the table
names them, and ``--update-baseline`` keeps them). A measured metric the baseline lacks, or a baseline metric
this check does not measure, is not gated and is named on a ``NOT GATED`` line. Exit codes: 0 pass; **1** regression
(:class:`~cosyedge.errors.RegressionError`: the table, JSON and JUnit name every failing metric);
**2** bad input (:class:`~cosyedge.errors.UsageError`): a baseline of another model or utterance set, a
missing baseline entry, a baseline label measured against another sparse parent, a sparse parent or
candidate with other inputs/outputs, a ``--candidate`` for a label not in ``--precisions``, an engine that
cannot run here, an INT8 build without its calibration. Other failures keep their usual codes (3 artifact: a missing, non-JSON, non-baseline or
malformed ``--baseline`` file (validated against its schema when loaded, :func:`validate_baseline`: the
line names the field), a directory given as ``--baseline``, an utterance shorter than 1 s or silent
(:data:`cosyedge.compare.utterances.MIN_SECONDS`), an empty ``--onnx``, a missing ``--sparse-onnx``; 4 dependency).

**Baseline** (``--baseline``, default the committed ``cosyedge/compare/baselines/reference.accuracy.json``
for the bundled model): JSON keyed by the reference model's SHA-256, with the utterance set's hashes,
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

import dataclasses
import json
import math
import shutil
import time
from pathlib import Path
from typing import Any

from cosyedge.artifacts import (
    SCHEMA_VERSION,
    atomic_output,
    check_writable,
    model_content_sha256,
    sha256_file,
    write_json,
)
from cosyedge.compare.core import ReferenceCache, compare
from cosyedge.compare.models import (
    CompareModel,
    load_compare_model,
    parse_precision_label,
    precision_label,
)
from cosyedge.compare.tolerances import BASELINE_TOLERANCES, SNR_EXACT_DB, tolerance_for
from cosyedge.compare.utterances import Utterance, fixed_utterances
from cosyedge.errors import ArtifactError, CosyEdgeError, UsageError
from cosyedge.log import LOG

BASELINE_KIND = "cosyedge.accuracy-baseline"
BASELINE_DIR = Path(__file__).resolve().parent / "baselines"
DEFAULT_PRECISIONS = ("fp16", "int8-sparse")
DEFAULT_CHUNK_MS = 100.0
"""float: chunk of ``cosyedge check`` (ms): teacher forcing every 100 ms; 10x fewer runner calls than
one-hop chunks, which keeps the CI gate under a minute on two shared cores."""


def default_baseline_path(model_name: str = "reference") -> Path:
    """Return the committed baseline of a bundled model (Path): ``cosyedge/compare/baselines/<name>.accuracy.json``."""
    return BASELINE_DIR / f"{model_name}.accuracy.json"


def amax_cache_path(baseline: Path, model_name: str, label: str) -> Path:
    """Return where ``check`` keeps the amax cache of an INT8 label: ``<baseline dir>/<model>.<label>.amax.json``."""
    return Path(baseline).parent / f"{model_name}.{label}.amax.json"


def parse_precisions(text: str | None) -> list[str]:
    """Parse ``"fp16,int8-sparse"`` into normalized labels (list[str]).

    Raises:
        UsageError: empty list or unknown label.
    """
    if text is None:
        return list(DEFAULT_PRECISIONS)
    labels = []
    for part in str(text).split(","):
        if part.strip():
            lab = precision_label(*parse_precision_label(part))
            if lab not in labels:
                labels.append(lab)
    if not labels:
        raise UsageError("--precisions is empty (e.g. --precisions fp16,int8-sparse)")
    return labels


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
            f"{ref.model_path} (sha256 {ref.model_sha256[:12]}): the model changed; {fix}")
    return data


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def validate_baseline(data: dict, path: Path, fix: str = "regenerate it: cosyedge check --update-baseline") -> None:
    """Check a parsed baseline against its schema (what :func:`run_check` reads, and what
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
            amax?: str | null}},
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
    for label, entry in labels.items():
        where = f"labels.{label}"
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


# ---------------------------------------------------------------------------------------------- engines
def _manifest(folder: Path) -> dict:
    """The engine folder's ``manifest.json`` (dict), or {} when missing or unreadable."""
    try:
        manifest = json.loads((Path(folder) / "manifest.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return manifest if isinstance(manifest, dict) else {}


def _int8_report(folder: Path) -> dict:
    """The INT8 report of an engine manifest (``reports.int8``), or {}."""
    manifest = _manifest(folder)
    rep = (manifest.get("reports") or {}).get("int8") or manifest.get("int8") or {}
    return rep if isinstance(rep, dict) else {}


def _excluded_nodes(folder: Path) -> list:
    """Nodes the engine ``folder`` was built with ``--exclude`` (list; [] when none or unknown)."""
    flags = _manifest(folder).get("flags") or {}
    return list(flags.get("exclude") or []) if isinstance(flags, dict) else []


def _amax_matches(amax: Path | None, folder: Path) -> bool:
    """True when amax cache ``amax`` is the calibration the INT8 engine ``folder`` was built from: made for
    the model it quantized and on the same calibration set (manifest SHA-256)."""
    if amax is None or not Path(amax).is_file():
        return False
    try:
        data = json.loads(Path(amax).read_text())
    except (OSError, json.JSONDecodeError):
        return False
    rep = _int8_report(folder)
    want = rep.get("model_sha256")
    if not want or (data.get("model") or {}).get("sha256") != want:
        return False
    return (data.get("calibration") or {}).get("manifest_sha256") == rep.get("calibration_manifest_sha256")


def sparse_parent(ref: CompareModel, sparse_onnx: str | Path | None = None) -> CompareModel:
    """Return the FP32 model the sparse labels of a check of ``ref`` are built from and compared with.

    Args:
        ref (CompareModel): The FP32 streaming reference of the check.
        sparse_onnx (str | Path | None): FP32 streaming ONNX with 2:4-pruned, fine-tuned weights. Default:
            :data:`cosyedge.models.REFERENCE_SPARSE_STREAM_ONNX` when ``ref`` is the bundled reference model
            (that path, and that file exists), else ``ref`` itself (sparse builds then prune ``ref`` on the fly;
            a copy elsewhere passes ``sparse_onnx``). The dense parent the sparse model records matches ``ref``
            by file hash, or by :func:`~cosyedge.artifacts.model_content_sha256` (the same graph and weights
            with another machine-measured proof).
    Returns:
        CompareModel: the sparse parent (``ref`` when there is none).
    Raises:
        UsageError: the sparse parent is not an FP32 streaming ONNX, has another model name, or its inputs,
            outputs, stream contract or state pairs differ from ``ref``'s (names the tensor; for the bundled
            default, says to re-run ``scripts/finetune_sparse.py`` or pass ``--sparse-onnx``).
        UsageError: the sparse parent records (:func:`cosyedge.precision.sparsity.stamp_dense_parent`) that it
            was fine-tuned from a dense ONNX other than ``ref`` (a stale sparse model; exit 2).
        ArtifactError: ``sparse_onnx`` does not exist or is not a readable streaming ONNX (exit 3).
    """
    from cosyedge.compare.models import check_compatible
    from cosyedge.models import REFERENCE_SPARSE_STREAM_ONNX, REFERENCE_STREAM_ONNX
    from cosyedge.precision.sparsity import dense_parent_sha256

    what = "--sparse-onnx"
    if sparse_onnx is None:
        bundled = Path(ref.model_path).resolve() == REFERENCE_STREAM_ONNX.resolve()
        if not (bundled and REFERENCE_SPARSE_STREAM_ONNX.is_file()):
            return ref
        sparse_onnx = REFERENCE_SPARSE_STREAM_ONNX
        what = (f"the bundled sparse model {REFERENCE_SPARSE_STREAM_ONNX.name} (re-run scripts/finetune_sparse.py "
                f"after changing the model, or pass --sparse-onnx)")
    if not Path(sparse_onnx).exists():
        raise ArtifactError(f"--sparse-onnx {sparse_onnx} not found (give the FP32 streaming ONNX of the 2:4 "
                         f"fine-tuned model, e.g. made by scripts/finetune_sparse.py)")
    parent = load_compare_model(sparse_onnx)
    if parent.precision != "fp32":
        raise UsageError(f"{what}: {parent.path} is a {parent.label} build; give the FP32 streaming ONNX "
                         f"of the 2:4 fine-tuned model")
    if parent.contract.name != ref.contract.name:
        raise UsageError(f"{what}: {parent.path} is model '{parent.contract.name}', the reference is "
                         f"'{ref.contract.name}'")
    try:
        check_compatible(ref, parent)
    except UsageError as err:
        raise UsageError(f"{what} does not fit the reference: {err}") from None
    recorded = dense_parent_sha256(parent.model_path)
    if recorded and recorded != ref.root_sha256 and not (
            not ref.parent_sha256 and recorded == ref.content_sha256):  # a copy, proof changed
        raise UsageError(f"{what}: {parent.path} was fine-tuned from another dense model (SHA-256 {recorded[:12]}, "
                         f"the reference {ref.path} is {ref.root_sha256[:12]}); fine-tune it again from the "
                         f"reference's weights with scripts/finetune_sparse.py")
    return parent


def _parent_of_label(base: dict, label: str) -> dict:
    """The FP32 model a baseline measured ``label`` against: ``{"path", "sha256", "content_sha256"}`` (dict) from
    the label's ``reference`` entry, or the baseline's model for baselines written before sparse parents existed.
    ``content_sha256`` (:func:`~cosyedge.artifacts.model_content_sha256`, ``""`` when unknown) is the label's own,
    or the baseline model's when the label was measured against that model (baselines written before labels
    recorded it)."""
    model = base.get("model") or {}
    entry = (base.get("labels") or {}).get(label) or {}
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


def ensure_engine(ref: CompareModel, label: str, engines_dir: Path, *, baseline: Path, update: bool,
                  calib: str | Path | None, derived: bool | None = None) -> Path:
    """Return an ONNX Runtime engine folder of ``ref`` for ``label``, building it when needed.

    The folder is ``<engines_dir>/<model>-<label>-onnxruntime``, ``<model>`` as ``cosyedge build`` names it
    (:func:`cosyedge.build.prepare.engine_model_name`): the model's name for the dense reference, and
    ``<name>-<sha256[:8]>`` for the sparse parent (``derived``; the bundled fine-tuned model records its dense
    parent, so a plain ``cosyedge build --onnx reference.sparse.stream.onnx --sparse [--int8]`` writes the same
    folder), so check's builds of the sparse parent and the user's builds of the dense model (``--sparse``
    prunes it on the fly) never replace each other.

    Reused when that folder loads, its manifest's ``parent_sha256``
    is the reference's hash and it was built without ``--exclude`` (INT8: and from the amax cache kept
    next to the baseline, or from ``calib``: same quantized model and same calibration manifest SHA-256;
    a user's own ``cosyedge build --int8 --calib DIR`` in that folder is rebuilt, not gated). INT8 builds
    use that amax cache; with ``update`` (or ``calib``) they calibrate instead (reusing the calibration
    set's own cache when current) and the cache is copied next to the baseline.

    Args:
        ref (CompareModel): The FP32 parent the label is built from (the reference or the sparse parent).
        label (str): Normalized precision label.
        engines_dir (Path): Engines root.
        baseline (Path): The baseline file (INT8 amax caches are kept next to it).
        update (bool): ``--update-baseline``: INT8 calibrates instead of using the kept amax.
        calib (str | Path | None): INT8 calibration set to calibrate on.
        derived (bool | None): ``ref`` is not the model its name stands for (check's sparse parent): the folder
            name gets its hash even when the ONNX records no dense parent. None: from ``ref``'s metadata.
    Raises:
        UsageError: INT8 without its amax cache and without ``update``/``calib`` (says what to run);
            the cache belongs to another model.
        ArtifactError / DependencyError / AccuracyError: from the build.
    """
    from cosyedge.builders import build_engine
    from cosyedge.builders.names import engine_folder_name, engine_model_name

    precision, sparse = parse_precision_label(label)
    name = ref.contract.name
    engine_name = engine_model_name(name, ref.model_path, derived=derived)
    folder = Path(engines_dir) / engine_folder_name(engine_name, precision, "onnxruntime", sparse)
    amax = amax_cache_path(baseline, name, label)
    use_amax = precision == "int8" and not update and calib is None
    if use_amax and not amax.is_file():
        raise UsageError(f"no INT8 calibration for '{label}' of this model ({amax} missing); run "
                         f"'cosyedge check --update-baseline' (calibrates on calib/, made from Debian packages "
                         f"on first use) or pass --calib DIR")
    fresh = False
    try:
        cand = load_compare_model(folder)
        fresh = cand.parent_sha256 == ref.model_sha256 and cand.label == label and not _excluded_nodes(folder)
        if fresh and precision == "int8":
            used = _int8_report(folder).get("amax_path")
            fresh = _amax_matches(amax, folder) if use_amax else _amax_matches(Path(used) if used else None, folder)
            if fresh and calib is not None:  # built on the set passed now?
                cal = Path(calib) / "manifest.json"
                fresh = cal.is_file() and sha256_file(cal) == _int8_report(folder).get("calibration_manifest_sha256")
    except CosyEdgeError:
        fresh = False
    if fresh:
        LOG.info("reusing engine %s", folder)
    else:
        kwargs: dict[str, Any] = {}
        if precision == "int8":
            kwargs = {"amax": amax} if use_amax else {"calib": calib}
        try:
            folder = build_engine(ref.model_path, backend="onnxruntime", out_dir=engines_dir, name=engine_name,
                                  precision=precision, sparse=sparse, **kwargs)
        except ArtifactError as err:
            if use_amax and "amax" in str(err):
                raise UsageError(f"INT8 calibration {amax} does not belong to this model ({err}); run "
                                 f"'cosyedge check --update-baseline'") from None
            raise
    if precision == "int8" and not use_amax:
        used = _int8_report(folder).get("amax_path")
        if used and _amax_matches(Path(used), folder) and Path(used).resolve() != amax.resolve():
            check_writable(amax)
            with atomic_output(amax) as tmp:
                shutil.copyfile(used, tmp)
            LOG.info("INT8 calibration of '%s' kept as %s", label, amax)
    return folder


# --------------------------------------------------------------------------------------------- candidates
def load_candidate(label: str, target: str | Path, parent: CompareModel) -> CompareModel:
    """Load ``--candidate label=target`` and check that it is what the label says, built from ``parent``.

    Args:
        label (str): Normalized precision label (``fp16``, ``int8-sparse``...).
        target (str | Path): Engine folder or streaming ONNX given for it.
        parent (CompareModel): The FP32 model the label is compared with.
    Returns:
        CompareModel: the candidate.
    Raises:
        UsageError: built from another model than ``parent`` (manifest ``parent_sha256``), or not the label's
            precision/sparsity (:func:`check_candidate_label`); exit 2.
        ArtifactError: missing/invalid engine, a manifest whose ``schema_version`` is newer than this
            cosyedge (:func:`cosyedge.artifacts.load_manifest`); exit 3.
    """
    cand = load_compare_model(target)
    if cand.parent_sha256 and cand.parent_sha256 != parent.model_sha256:
        raise UsageError(f"--candidate {label}={target} was built from another model (parent sha256 "
                         f"{cand.parent_sha256[:12]}), not from {parent.model_path} (sha256 "
                         f"{parent.model_sha256[:12]}) that '{label}' is compared with; build it with "
                         f"'cosyedge build --onnx {parent.model_path} ...'")
    check_candidate_label(cand, label, f"--candidate {label}={target}")
    return cand


def check_candidate_label(cand: CompareModel, label: str, where: str) -> None:
    """Refuse a candidate that is not what its precision label says.

    Checked, in order:

    1. what the candidate says it is: an engine folder's manifest ``precision`` and ``sparse``; for a bare
       ONNX its ``cosyedge.precision`` and ``cosyedge.sparsity`` metadata, when present;
    2. the ONNX content (:func:`cosyedge.build.trt.onnx_precision_stats`): ``int8`` needs QuantizeLinear/
       DequantizeLinear nodes; ``fp16`` needs FP16 initializers or Casts to FP16 and no Q/DQ; ``fp32`` has
       neither.

    Args:
        cand (CompareModel): The loaded candidate.
        label (str): Normalized precision label it is checked for.
        where (str): What the user gave (``--candidate fp16=PATH``), for the message.
    Raises:
        UsageError: the first contradiction, one line naming the field or the ONNX markers (exit 2).
    """
    from cosyedge.artifacts import load_onnx
    from cosyedge.builders.trt import onnx_precision_stats
    from cosyedge.compare.models import PRECISION_KEY, SPARSITY_KEY

    precision, sparse = parse_precision_label(label)
    model = load_onnx(cand.model_path, load_external_data=False)
    stats = onnx_precision_stats(model)
    qdq, f16 = stats["qdq_nodes"], stats["fp16_initializers"] + stats["fp16_casts"]
    content = "int8" if qdq else "fp16" if f16 else "fp32"  # what the ONNX holds
    if cand.manifest is not None:
        said, said_sparse = str(cand.manifest.get("precision", "fp32")), bool(cand.manifest.get("sparse", False))
        src, src_sparse = "its manifest says", "its manifest says"
    else:
        meta = {p.key: p.value for p in model.metadata_props}
        said, said_sparse = meta.get(PRECISION_KEY), (True if SPARSITY_KEY in meta else None)
        src, src_sparse = f"its ONNX metadata ({PRECISION_KEY}) says", f"its ONNX metadata ({SPARSITY_KEY}) says"
    actual = precision_label(said or content, sparse if said_sparse is None else said_sparse)
    fix = (f"give the {label} build, or check this one as --candidate {actual}=..." if actual != label else
           f"give the {label} build made by 'cosyedge build'")
    if said is not None and said != precision:
        raise UsageError(f"{where}: {src} precision '{said}', not the label's '{precision}'; {fix}")
    if said_sparse is not None and said_sparse != sparse:
        what = "2:4 sparse (sparse: true)" if said_sparse else "dense (sparse: false)"
        raise UsageError(f"{where}: {src_sparse} {what}, but the label '{label}' is "
                         f"{'2:4 sparse' if sparse else 'dense'}; {fix}")
    onnx_path = cand.model_path
    if precision == "int8" and not qdq:
        raise UsageError(f"{where}: {onnx_path} has no QuantizeLinear/DequantizeLinear nodes, so it is not an INT8 "
                         f"model (label '{label}'); {fix}")
    if precision != "int8" and qdq:
        raise UsageError(f"{where}: {onnx_path} has {qdq} QuantizeLinear/DequantizeLinear nodes, so it is an INT8 "
                         f"model, not {precision.upper()} (label '{label}'); {fix}")
    if precision == "fp16" and not f16:
        raise UsageError(f"{where}: {onnx_path} holds no FP16 tensor (no FP16 initializer, no Cast to FP16), so it "
                         f"is not an FP16 model (label '{label}'); {fix}")
    if precision == "fp32" and f16:
        raise UsageError(f"{where}: {onnx_path} holds {stats['fp16_initializers']} FP16 initializers and "
                         f"{stats['fp16_casts']} Casts to FP16, so it is an FP16 model, not FP32 (label '{label}'); "
                         f"{fix}")


# ----------------------------------------------------------------------------------------------- the gate
def run_check(onnx_path: str | Path | None = None, *, baseline: str | Path | None = None,
              update_baseline: bool = False, precisions: list[str] | None = None,
              engines_dir: str | Path | None = None, candidates: dict | None = None,
              utterances: list[Utterance] | None = None, chunk_ms: float = DEFAULT_CHUNK_MS,
              calib: str | Path | None = None, json_path: str | Path | None = None,
              junit_path: str | Path | None = None, pesq: bool = True, threads: int = 1,
              sparse_onnx: str | Path | None = None) -> dict:
    """Build (or reuse) each precision, compare it with its FP32 parent, gate on the baseline.

    Args:
        onnx_path (str | Path | None): FP32 streaming ONNX (default: the bundled reference model).
        baseline (str | Path | None): Baseline JSON (default :func:`default_baseline_path`).
        update_baseline (bool): Measure and (re)write the baseline instead of gating.
        precisions (list[str] | None): Labels, e.g. ``["fp16", "int8-sparse"]`` (default: the baseline's
            labels, or :data:`DEFAULT_PRECISIONS` when updating).
        engines_dir (str | Path | None): Engines root (default ``$COSYEDGE_ENGINES_DIR`` or ``./engines``).
        candidates (dict[str, str | Path] | None): ``{label: engine folder or ONNX}`` checked instead of
            building that label (e.g. a build made elsewhere).
        utterances (list[Utterance] | None): Real speech (default :func:`fixed_utterances`).
        chunk_ms (float): Chunk (ms), a multiple of the hop.
        calib (str | Path | None): INT8 calibration set folder (calibrate instead of using the kept amax).
        json_path (str | Path | None): Write the full report here.
        junit_path (str | Path | None): Write JUnit XML here (one test case per label, mode and utterance).
        pesq (bool): Score PESQ-WB.
        threads (int): ONNX Runtime threads.
        sparse_onnx (str | Path | None): FP32 parent of the sparse labels (see :func:`sparse_parent`).
    Returns:
        dict: ``passed`` (bool), ``regressions`` (list of one-line texts), ``rows`` (table rows),
        ``labels[label]`` (engine, FP32 parent ``reference``/``reference_sha256``, compare result, metrics
        with baseline values and verdicts),
        ``baseline`` (path), ``updated`` (bool).
    Raises:
        UsageError: see module docstring (exit 2). The caller raises RegressionError on ``not passed``.
    """
    from cosyedge.runtime.engine import engines_root
    from cosyedge.models import require_reference

    t0 = time.perf_counter()
    ref = load_compare_model(onnx_path or require_reference())
    if ref.precision != "fp32" or ref.sparse:
        raise UsageError(f"the reference {ref.path} is a {ref.label} model; give the FP32 streaming ONNX")
    baseline = Path(baseline) if baseline is not None else default_baseline_path(ref.contract.name)
    for p in (json_path, junit_path):
        if p is not None:
            check_writable(p)
    if update_baseline:
        check_writable(baseline)
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
    sparse_ref = sparse_parent(ref, sparse_onnx) if has_sparse else ref  # only resolved when a sparse label is checked

    def parent_of(label: str) -> CompareModel:  # the FP32 model a label is built from and compared with
        return sparse_ref if parse_precision_label(label)[1] else ref

    utts = utterances if utterances is not None else fixed_utterances(ref.contract.sample_rate_hz)
    chunk = round(chunk_ms * ref.contract.sample_rate_hz / 1000.0)
    ref.contract.check_chunk(chunk)
    if base is not None:
        _check_same_set(base, utts, chunk, baseline)
        missing = [lab for lab in labels if lab not in base.get("labels", {})]
        if missing:  # the baseline is rewritten with exactly --precisions: name the kept labels too
            keep = list(base.get("labels", {})) + [lab for lab in labels if lab not in base.get("labels", {})]
            raise UsageError(f"baseline {baseline} has no entry for {missing} (it has {sorted(base.get('labels', {}))}); "
                             f"run 'cosyedge check --update-baseline --precisions {','.join(keep)}'")
        for lab in labels:
            parent, was = parent_of(lab), _parent_of_label(base, lab)
            if not _is_parent(was, parent):
                raise UsageError(f"baseline {baseline} measured '{lab}' against another FP32 model ({was['path']}, "
                                 f"sha256 {was['sha256'][:12]}), not {parent.model_path} (sha256 "
                                 f"{parent.model_sha256[:12]}); pass that model as --sparse-onnx, or re-measure "
                                 f"the label: cosyedge check --update-baseline --precisions {lab} (with the same "
                                 f"--onnx/--baseline/--sparse-onnx)")
    engines_dir = Path(engines_dir) if engines_dir is not None else engines_root()
    caches: dict[str, ReferenceCache] = {}
    tolerances = {**BASELINE_TOLERANCES, **(_kept_tolerances(baseline) if update_baseline else
                                            (base or {}).get("tolerances") or {})}
    report: dict = {"reference": str(ref.model_path), "model_sha256": ref.model_sha256,
                    "baseline": str(baseline), "updated": bool(update_baseline), "chunk_samples": chunk,
                    "utterances": [u.describe() for u in utts], "labels": {}, "regressions": [], "rows": [],
                    "tolerances": tolerances, "not_gated": []}
    state_outs = [s.output for s in ref.contract.states]
    given = {label: load_candidate(label, candidates[label], parent_of(label)) for label in labels
             if label in candidates}  # every --candidate is checked before anything is built or compared
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
        base_vals = (base or {}).get("labels", {}).get(label, {}).get("metrics", {}) if base else {}
        rows_m = {}
        for m in metrics:
            b = base_vals.get(m.key)
            why = regression(m.key.rsplit("/", 1)[1], m.value, b, tolerances) if base is not None else None
            if base is not None and m.key not in base_vals:
                why = None
            rows_m[m.key] = {"value": m.value, "baseline": b, "better": m.better, "regression": why}
            if why:
                report["regressions"].append(f"{label} {m.key}: {why}")
        if base is not None:  # say what the gate did not compare: a trimmed or hand-edited baseline is visible
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
        report["rows"] += _rows(label, res, rows_m, ref.contract.output, state_outs)
    parents: dict[str, CompareModel | None] = {"dense": ref, "sparse": sparse_ref}
    if update_baseline and not has_sparse:  # the parent kept sparse labels would be checked against now
        try:
            parents["sparse"] = sparse_parent(ref, sparse_onnx)
        except CosyEdgeError:
            parents["sparse"] = None  # none usable: kept sparse labels are dropped
    report["parents"] = {k: (p.model_sha256 if p is not None else "") for k, p in parents.items()}
    report["passed"] = not report["regressions"]
    report["elapsed_s"] = round(time.perf_counter() - t0, 2)
    if update_baseline:
        _write_baseline(baseline, ref, utts, chunk, report, parents)
    if json_path is not None:
        write_json(json_path, _jsonable(report))
    if junit_path is not None:
        write_junit(junit_path, report)
    return report


def _rows(label: str, res: dict, metrics: dict, output: str, state_outs: list[str]) -> list[dict]:
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
                "status": "FAIL" if fails else "ok", "failures": fails,
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
    for reg in report["regressions"]:
        lines.append(f"REGRESSION {reg}")
    for label, data in report.get("labels", {}).items():
        if data.get("debug"):
            lines.append(f"find the first tensor whose error jumps ({label}): {data['debug']}")
    return "\n".join(lines)


def _write_baseline(path: Path, ref: CompareModel, utts: list[Utterance], chunk: int, report: dict,
                    parents: dict | None = None) -> None:
    """Write the baseline of ``report`` (the measured labels, plus the kept ones; see :func:`_kept_labels`).

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

    data = {
        "kind": BASELINE_KIND, "schema_version": SCHEMA_VERSION, "cosyedge_version": __version__,
        "model": {"name": ref.contract.name, "sha256": ref.model_sha256, "path": ref.model_path.name,
                  "content_sha256": ref.content_sha256},
        "utterances": [u.describe() | {"source": Path(u.source).name} for u in utts],
        "chunk_samples": chunk, "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tools": _tools(), "tolerances": report.get("tolerances") or BASELINE_TOLERANCES,
        "regenerate": "cosyedge check --update-baseline",
        "labels": {**_kept_labels(path, ref, utts, chunk, set(report["labels"]), parents),
                   **{lab: {"reference": {"path": Path(d["reference"]).name, "sha256": d["reference_sha256"],
                                          "content_sha256": content_of(d["reference"])},
                            "metrics": {k: _num(v["value"]) for k, v in d["metrics"].items()},
                            "amax": (amax_cache_path(path, ref.contract.name, lab).name
                                     if lab.startswith("int8") else None)}
                      for lab, d in report["labels"].items()}},
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


def _kept_labels(path: Path, ref: CompareModel, utts: list[Utterance], chunk: int, measured: set,
                 parents: dict | None = None) -> dict:
    """Labels of the baseline already at ``path`` that this update did not measure, kept when that baseline
    is for the same model, utterance set and chunk (else ``{}``: its values no longer apply), and each kept
    label was measured against the FP32 parent it would have now (``parents``: ``{"dense": CompareModel,
    "sparse": CompareModel | None}``; a label of another parent, or of a kind whose parent is None, is dropped,
    with a log line; the same model exported on another CPU is the same parent, see :func:`_is_parent`;
    without ``parents`` every label is kept)."""
    try:
        old = load_baseline(path, ref)
        _check_same_set(old, utts, chunk, path)
    except (UsageError, ArtifactError):  # none yet, unreadable, or of another model: nothing to keep
        return {}
    kept = {}
    for lab, v in (old.get("labels") or {}).items():
        if lab in measured:
            continue
        kind = "sparse" if parse_precision_label(lab)[1] else "dense"
        if parents is not None and not _is_parent(_parent_of_label(old, lab), parents.get(kind)):
            LOG.warning("baseline %s: dropped '%s' (measured against another FP32 parent; re-measure it with "
                        "--update-baseline --precisions %s)", path, lab, lab)
            continue
        kept[lab] = v
    if kept:
        LOG.info("baseline %s: kept the entries of %s (not re-measured)", path, sorted(kept))
    return kept


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
    holds one ``<failure>`` listing its regressed metrics. Written atomically.

    Returns:
        Path: ``path``.
    """
    import xml.etree.ElementTree as ET

    rows = report["rows"]
    suite = ET.Element("testsuite", name="cosyedge.check", tests=str(len(rows)),
                       failures=str(sum(r["status"] != "ok" for r in rows)), errors="0",
                       time=str(report.get("elapsed_s", 0)))
    for r in rows:
        case = ET.SubElement(suite, "testcase", classname=f"cosyedge.check.{r['label']}",
                             name=f"{r['mode']}/{r['utterance']}")
        if r["status"] != "ok":
            fail = ET.SubElement(case, "failure", message="; ".join(r["failures"])[:1000], type="regression")
            fail.text = "\n".join(r["failures"])
    root = ET.Element("testsuites")
    root.append(suite)
    path = Path(path)
    with atomic_output(path) as tmp:
        ET.ElementTree(root).write(tmp, encoding="utf-8", xml_declaration=True)
    return path


__all__ = ["BASELINE_KIND", "DEFAULT_CHUNK_MS", "DEFAULT_PRECISIONS", "amax_cache_path", "default_baseline_path",
           "check_candidate_label", "ensure_engine", "format_table", "load_baseline", "load_candidate", "metrics_of",
           "parse_precisions", "regression", "run_check", "validate_baseline", "write_junit"]
