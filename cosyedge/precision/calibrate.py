"""KL (entropy) calibration of a streaming FP32 ONNX on a calibration set: ``calib/<model>.amax.json``.

Every utterance of the set is streamed through the FP32 streaming model in ONNX Runtime from zero
state, chunk by chunk (:data:`CHUNK_HOPS` hops = 1 s for the reference; the chunk is a hop multiple and
the states are the real carried states, so the activations equal those of 10 ms streaming), with the
tensors to quantize (:func:`cosyedge.precision.qdq.activation_tensors`) and the outputs of the weighted
ops (for the TensorRT cache, :func:`cosyedge.precision.qdq.calibration_tensors`) added as extra graph
outputs. For a model whose compute sits in Scan bodies (an adopted model) the tensors are those of its leaf bodies,
brought out as extra scan outputs of each enclosing Scan (:func:`cosyedge.precision.int8_bodies.expose`: every
value the tensor takes over the hops of a chunk).
Pass 1 records ``max |x|`` per tensor, pass 2 fills a 2048-bin histogram of ``|x|`` over
``[0, max]`` (:class:`cosyedge.precision.entropy.AbsHistogram`: why two passes), then each amax is the
KL-optimal threshold (:func:`cosyedge.precision.entropy.amax_entropy`, TensorRT's EntropyCalibration2).
Memory holds one utterance, one chunk's activations and 2048 counters per tensor, whatever the number
of utterances; the tail of an utterance shorter than one hop is not used. A model with several waveform inputs
(e.g. ``audio`` and ``ref``) gets the utterance on its primary input and the next utterances of the set on the
others (:mod:`cosyedge.runtime.feeds`); a feature input is refused by name (:func:`require_calibratable`).

The result ``<calib dir>/<model name>.amax.json`` records the model SHA-256, the calibration manifest
SHA-256 and the parameters. :func:`calibrate` reuses it when all match and recomputes it, saying why,
when any differs. It also writes ``<model name>.calibration.cache`` in TensorRT's calibration-cache text
format for TensorRT 10 implicit-INT8 / DLA builds (:func:`write_trt_cache`).

Sources: NVIDIA TensorRT developer guide, "INT8 calibration" (entropy calibration, calibration cache);
ONNX Runtime ``onnxruntime/quantization/calibrate.py`` (calibration by adding intermediate tensors as
graph outputs); ONNX Runtime TensorRT EP ``ReadDynamicRange`` (cache text format, see
:func:`write_trt_cache`).
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path
from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.artifacts import (SCHEMA_VERSION, SourceModel, StreamContract, atomic_output, load_onnx,
                                model_content_sha256, write_json)
from cosyedge.errors import ArtifactError, UsageError, first_line
from cosyedge.log import LOG
from cosyedge.precision.calibset import CalibrationSet
from cosyedge.precision.entropy import NUM_BINS, START_BIN, AbsHistogram
from cosyedge.runtime import loop
from cosyedge.runtime.ort import session_from_onnx

ort = lazy_import("onnxruntime")
soxr = lazy_import("soxr")

CHUNK_HOPS = 100
"""int: calibration chunk in hops (100 x 160 samples = 1 s at 16 kHz): fewer ONNX Runtime calls."""

METHOD = "entropy"
DEFAULT_TRT_VERSION = "10.3.0"
"""str: TensorRT version written into the calibration cache header when tensorrt is not importable
(10.3 is the JetPack 6 TensorRT, the DLA target)."""


def amax_path_for(calib_dir: str | Path, model_name: str) -> Path:
    """Return ``<calib_dir>/<model_name>.amax.json`` (Path)."""
    return Path(calib_dir) / f"{model_name}.amax.json"


def trt_cache_path_for(calib_dir: str | Path, model_name: str) -> Path:
    """Return ``<calib_dir>/<model_name>.calibration.cache`` (Path)."""
    return Path(calib_dir) / f"{model_name}.calibration.cache"


def _session_with_outputs(model: Any, tensors: list[str], threads: int) -> Any:
    """An ORT CPU session of ``model`` with ``tensors`` appended as graph outputs."""
    from onnx import TensorProto, helper

    m = type(model)()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output} | {i.name for i in m.graph.input}
    for t in tensors:
        if t not in have:
            m.graph.output.append(helper.make_tensor_value_info(t, TensorProto.FLOAT, None))
    try:
        return session_from_onnx(m, threads=threads, inter_threads=1, log_severity=3)
    except Exception as err:  # onnxruntime raises its own types
        raise ArtifactError(f"ONNX Runtime cannot load the model for calibration: {first_line(err)}") from None


def _stream_utterance(sess, contract: StreamContract, x: np.ndarray, chunk: int, names: list[str], fn,
                      partners: dict | None = None) -> None:
    """Stream ``x`` (float32 (T,)) from zero state; call ``fn(values)`` with the list of arrays of
    ``names`` (tensor names, state outputs excluded) for every chunk. ``partners`` (input name -> float32 (T',))
    feeds a model's other waveform inputs (:func:`cosyedge.runtime.feeds.full_inputs`)."""
    from cosyedge.runtime.feeds import full_inputs

    hop = contract.total_stride
    usable = (x.size // hop) * hop
    outs = [s.output for s in contract.states] + names

    def infer(feeds: dict) -> dict:
        it = iter(sess.run([o for o in outs if o not in feeds], feeds))
        return {o: (feeds[o] if o in feeds else next(it)) for o in outs}

    loop.stream(infer, contract, full_inputs(contract, x[:usable], partners), chunk,
                on_chunk=lambda _k, _feeds, vals: fn([vals[n] for n in names]))


CALIB_HINT = ("give activation ranges instead: 'cosyedge calib int8 --onnx MODEL --amax FILE -o OUT.onnx' with an amax "
              "cache of this model (<name>.amax.json: its sha256 and an amax per tensor, e.g. measured from Python "
              "with cosyedge.precision.entropy.AbsHistogram on your own features)")
"""str: what to do when INT8 calibration cannot feed a model (a feature input): the end of that one-line error."""


def require_calibratable(contract: StreamContract, where: str) -> None:
    """Refuse a model INT8 calibration cannot feed: an input that is not a waveform (one line, exit 2).

    A model with several waveform inputs is calibrated with a partner utterance on each other input
    (:func:`cosyedge.runtime.feeds.pick_partners`: the next utterances of the set).

    Raises:
        UsageError: names each feature input and its shape, and :data:`CALIB_HINT`.
    """
    from cosyedge.runtime.feeds import require_waveform_inputs

    require_waveform_inputs(contract, str(where), "INT8 calibration", CALIB_HINT)


def collect_amax(model_path: str | Path, calib: CalibrationSet, tensors: list[str], *, threads: int = 1,
                 chunk_hops: int = CHUNK_HOPS, num_bins: int = NUM_BINS, progress: bool | None = None) -> dict:
    """Two-pass histogram calibration of ``tensors`` over ``calib`` (see module docstring).

    Args:
        model_path (str | Path): FP32 streaming ONNX with cosyedge stream metadata.
        calib (CalibrationSet): Calibration set; at another rate than the model's, every utterance is
            resampled to the model's rate (soxr HQ) as it is read.
        tensors (list[str]): Float activation tensor names to calibrate.
        threads (int): ONNX Runtime intra-op threads. Defaults to 1.
        chunk_hops (int): Chunk length in hops (>= 1). Defaults to 100.
        num_bins (int): Histogram bins. Defaults to 2048.
        progress (bool | None): tqdm progress bars (None: only on a terminal).
    Returns:
        dict: ``{"amax": {tensor: float}, "max": {tensor: float}, "elements": {tensor: int},
        "utterances": int, "chunk_samples": int, "elapsed_s": float}``.
    Raises:
        ArtifactError: model unreadable/not streaming; a calibration file missing or changed.
        UsageError: non-finite activations; an input that is not a waveform (:func:`require_calibratable`).
    """
    from tqdm import tqdm

    model = load_onnx(model_path)
    contract = StreamContract.from_onnx(model)
    contract.require_streaming(model_path)
    resample = calib.sample_rate_hz != contract.sample_rate_hz
    if resample:  # calibrate at the model's rate: every utterance resampled (a 16 kHz set has no band above 8 kHz)
        LOG.info("calibration set %s is %d Hz: each utterance is resampled to the model's %d Hz (soxr HQ)%s",
                 calib.folder, calib.sample_rate_hz, contract.sample_rate_hz,
                 "; its audio holds nothing above %g kHz" % (calib.sample_rate_hz / 2000)
                 if calib.sample_rate_hz < contract.sample_rate_hz else "")
    if int(chunk_hops) < 1:
        raise UsageError(f"chunk_hops must be >= 1, got {chunk_hops}")
    chunk = contract.hop_samples * int(chunk_hops)
    require_calibratable(contract, model_path)
    from cosyedge.runtime.feeds import pick_partners

    def read(i: int) -> np.ndarray:
        x = calib.read(i)
        if resample:
            x = np.ascontiguousarray(soxr.resample(x, calib.sample_rate_hz, contract.sample_rate_hz, quality="HQ"),
                                     dtype=np.float32)
        return x

    readers = [lambda i=i: read(i) for i in range(len(calib))]
    fetch = {t: t for t in tensors}
    from cosyedge.precision.bodies import has_subgraphs

    if has_subgraphs(model):  # an adopted model: body tensors come out as extra scan outputs
        from cosyedge.precision.int8_bodies import expose

        model, fetch = expose(model, tensors)
    sess = _session_with_outputs(model, list(dict.fromkeys(fetch.values())), threads)
    del model
    fetched = [fetch[t] for t in tensors]
    hists = {t: AbsHistogram(num_bins) for t in tensors}
    t0 = time.perf_counter()
    for pass_no, what in ((1, "amax"), (2, "histograms")):
        if pass_no == 2:
            for h in hists.values():
                h.start_histogram()
        hs = [hists[t] for t in tensors]
        fn = ((lambda vals: [h.observe_max(v) for h, v in zip(hs, vals)]) if pass_no == 1
              else (lambda vals: [h.add(v) for h, v in zip(hs, vals)]))
        for i in tqdm(range(len(calib)), desc=f"calibration pass {pass_no}/2 ({what})", unit="utt",
                      disable=(None if progress is None else not progress)):
            x = read(i)
            _stream_utterance(sess, contract, x, chunk, fetched, fn, pick_partners(contract, readers, i))
    amax = {t: h.amax_entropy() for t, h in hists.items()}
    elapsed = time.perf_counter() - t0
    return {"amax": amax, "max": {t: h.max for t, h in hists.items()},
            "elements": {t: int(h.count) for t, h in hists.items()}, "utterances": len(calib),
            "chunk_samples": chunk, "elapsed_s": round(elapsed, 3)}


def load_amax(path: str | Path, model_sha256: str | None = None, where: str = "",
              model_path: str | Path | None = None) -> dict:
    """Load an amax cache and, when ``model_sha256`` is given, check it belongs to that model.

    A cache whose file hash differs is still that model's when it records the model's
    :func:`~cosyedge.artifacts.model_content_sha256` (``model.content_sha256``) and ``model_path`` has the same one:
    the same graph and weights exported on another CPU (only the machine-measured proof differs).

    Args:
        path (str | Path): ``<model>.amax.json``.
        model_sha256 (str | None): Expected model hash (file SHA-256).
        where (str): Model path for the message.
        model_path (str | Path | None): The model file, for the content-hash comparison.
    Returns:
        dict: the cache (``"amax"``: {tensor: float}, ``"model"``, ``"calibration"``, ``"params"``).
    Raises:
        ArtifactError: missing/bad file, or calibrated for another model (the message gives both hashes).
    """
    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"amax cache {path} not found")
    try:
        data = json.loads(path.read_text())
        data["amax"], data["model"]["sha256"], data["calibration"]["manifest_sha256"]
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as err:
        raise ArtifactError(f"{path} is not a cosyedge amax cache ({type(err).__name__}: {err}); "
                            f"delete it and recalibrate") from None
    content = data["model"].get("content_sha256") if isinstance(data["model"], dict) else None
    if (model_sha256 is not None and data["model"]["sha256"] != model_sha256
            and not (content and model_path is not None and content == model_content_sha256(model_path))):
        raise ArtifactError(
            f"amax cache {path} was calibrated for another model (sha256 {data['model']['sha256'][:12]}, "
            f"'{data['model'].get('name', '?')}'), not {where or 'this model'} (sha256 {model_sha256[:12]}); "
            f"recalibrate with 'cosyedge calib amax' or pass the matching cache"
        )
    return data


def calibrate(model_path: "str | Path | SourceModel", calib: CalibrationSet, *, out_dir: str | Path | None = None,
              threads: int = 1, force: bool = False, trt_version: str | None = None,
              progress: bool | None = None, cache_name: str | None = None) -> Path:
    """Return the amax cache of ``model_path`` on ``calib``, computing it only when needed.

    ``cache_name`` (default: the model's contract name) names the cache files; give variants of one
    model (e.g. its 2:4-pruned copy, ``<name>-sparse``) their own name so they do not evict each other.

    Args:
        model_path (str | Path | SourceModel): FP32 streaming ONNX (cosyedge stream metadata required); a
            SourceModel's contract and SHA-256 are reused (what :func:`~cosyedge.precision.int8.int8_onnx` passes).
        calib (CalibrationSet): The calibration set.
        out_dir (str | Path | None): Folder of the cache; defaults to the set's folder.
        threads (int): ONNX Runtime threads for calibration.
        force (bool): Recompute even when the cache matches.
        trt_version (str | None): TensorRT version for the calibration-cache header (see
            :func:`write_trt_cache`).
        progress (bool | None): Progress bars (None: on a terminal).
    Returns:
        Path: ``<out_dir>/<model name>.amax.json`` (``<model name>.calibration.cache`` beside it).
    Raises:
        ArtifactError: model missing/corrupt, no cosyedge metadata or no state; calibration file changed.
        UsageError: sample-rate mismatch; an input that is not a waveform (:func:`require_calibratable`).
    """
    source = SourceModel.of(model_path)
    model_path = source.path
    contract = source.contract
    contract.require_streaming(model_path)
    from cosyedge.precision.qdq import calibration_tensors, concat_aliases

    require_calibratable(contract, model_path)
    model_sha = source.sha256
    fp32 = load_onnx(model_path)
    from cosyedge.precision.bodies import has_subgraphs

    if has_subgraphs(fp32):  # an adopted model: the tensors of its Scan bodies (cosyedge.precision.int8_bodies)
        from cosyedge.precision import int8_bodies

        tensors = int8_bodies.calibration_tensors(fp32, contract)
        aliases = {}
    else:
        tensors = calibration_tensors(fp32)
        aliases = concat_aliases(fp32, tensors)
    del fp32
    if not tensors:
        raise UsageError(f"{model_path} has no Conv/ConvTranspose/Gemm/MatMul with constant weights to quantize")
    out_dir = Path(out_dir) if out_dir is not None else calib.folder
    cache_name = cache_name or contract.name
    path = amax_path_for(out_dir, cache_name)
    params = {"method": METHOD, "num_bits": 8, "num_bins": NUM_BINS, "start_bin": START_BIN, "stride": 1,
              "chunk_samples": contract.hop_samples * CHUNK_HOPS, "histogram": "two-pass, |x| over [0, max]"}
    from cosyedge.runtime.feeds import partner_inputs

    if partner_inputs(contract):  # only for models with several waveform inputs: other caches keep their params
        params["partners"] = "input k (after the primary) gets utterance i + 1 + k of the set, cyclically"
    if path.is_file() and not force:
        why = _stale_reason(path, model_sha, calib.sha256, params, tensors)
        if why is None:
            LOG.info("amax cache %s matches the model and calibration set: reused", path)
            if not trt_cache_path_for(out_dir, cache_name).is_file():
                write_trt_cache(trt_cache_path_for(out_dir, cache_name), _with_aliases(load_amax(path)["amax"],
                                                                                          aliases), trt_version)
            return path
        LOG.info("amax cache %s is stale (%s): recalibrating", path, why)
    with LOG.stage(f"KL calibration of {model_path.name} on {len(calib)} utterances ({calib.duration_s / 60:.1f} min)"):
        res = collect_amax(model_path, calib, tensors, threads=threads, progress=progress)
    from cosyedge import __version__

    data = {
        "schema_version": SCHEMA_VERSION,
        "stage": "calibrate",
        "cosyedge_version": __version__,
        "model": {"name": contract.name, "path": str(model_path), "sha256": model_sha,
                  "content_sha256": model_content_sha256(model_path)},
        "calibration": {"dir": str(calib.folder), "manifest_sha256": calib.sha256, "utterances": len(calib),
                        "duration_s": round(calib.duration_s, 3)},
        "params": params,
        "onnxruntime_version": ort.__version__,
        "elapsed_s": res["elapsed_s"],
        "amax": res["amax"],
        "max": res["max"],
        "elements": res["elements"],
    }
    write_json(path, data)
    write_trt_cache(trt_cache_path_for(out_dir, cache_name), _with_aliases(res["amax"], aliases), trt_version)
    LOG.info("amax cache written: %s (%d tensors, %.1f s)", path, len(tensors), res["elapsed_s"])
    return path


def _with_aliases(amax: dict, aliases: dict) -> dict:
    """``amax`` plus each Concat input under its Concat output's amax (TensorRT cache order: graph order)."""
    out = dict(amax)
    for name, target in aliases.items():
        if target in amax:
            out.setdefault(name, amax[target])
    return out


def _stale_reason(path: Path, model_sha: str, manifest_sha: str, params: dict, tensors: list[str]) -> str | None:
    """Why the cache at ``path`` cannot be reused (str), or None when it can."""
    try:
        data = load_amax(path)
    except ArtifactError as err:
        return str(err)
    if data["model"]["sha256"] != model_sha:
        return (f"model sha256 changed: cache {data['model']['sha256'][:12]}, model now {model_sha[:12]}")
    if data["calibration"]["manifest_sha256"] != manifest_sha:
        return (f"calibration manifest sha256 changed: cache {data['calibration']['manifest_sha256'][:12]}, "
                f"set now {manifest_sha[:12]}")
    if data.get("params") != params:
        return "calibration parameters changed"
    missing = [t for t in tensors if t not in data["amax"]]
    if missing:
        return f"{len(missing)} tensor(s) not calibrated, e.g. {missing[0]}"
    return None


# ------------------------------------------------------------------------------ TensorRT calibration cache
def trt_version_number(version: str) -> int:
    """Return TensorRT's ``NV_TENSORRT_VERSION`` (int) for a version string such as ``"8.6.1"``.

    TensorRT <= 8: ``major*1000 + minor*100 + patch`` (8.6.1 -> 8601); TensorRT >= 10:
    ``major*10000 + minor*100 + patch`` (10.3.0 -> 100300).

    Raises:
        UsageError: not a ``major.minor[.patch]`` version.
    Source: TensorRT ``NvInferRuntimeBase.h`` (8.x ``kNV_TENSORRT_VERSION_IMPL``) and ``NvInferVersion.h``
        (10.x ``NV_TENSORRT_VERSION_INT``).
    """
    try:
        parts = [int(p) for p in str(version).split(".")[:3]]
    except ValueError:
        raise UsageError(f"TensorRT version {version!r} is not like 10.3.0") from None
    if len(parts) < 2:
        raise UsageError(f"TensorRT version {version!r} is not like 10.3.0")
    major, minor, patch = (parts + [0])[:3]
    return (major * 10000 if major >= 10 else major * 1000) + minor * 100 + patch


def _default_trt_version() -> str:
    from cosyedge._lazy import has_module

    if has_module("tensorrt"):
        try:
            import tensorrt

            return tensorrt.__version__
        except Exception:  # noqa: BLE001 - a broken install: fall back to the documented default
            pass
    return DEFAULT_TRT_VERSION


def write_trt_cache(path: str | Path, amax: dict[str, float], trt_version: str | None = None) -> Path:
    """Write amax values as a TensorRT calibration cache (text), atomically.

    Format: first line ``TRT-<NV_TENSORRT_VERSION>-EntropyCalibration2`` (e.g. ``TRT-8601-...`` for
    8.6.1; TensorRT rejects a cache whose version differs from its own, so pass the target's version),
    then one line per tensor ``<ONNX tensor name>: <scale>`` where ``<scale> = amax / 127`` written as the
    8 hex digits of its IEEE-754 float32 bits, big-endian (``struct.pack(">f", scale).hex()``; 1.0 ->
    ``3f800000``). TensorRT names network tensors after the ONNX tensor names.

    Args:
        path (str | Path): Destination file.
        amax (dict[str, float]): amax per tensor (> 0; 0 is written as scale 1/127).
        trt_version (str | None): Target TensorRT version; defaults to the installed tensorrt, else
            :data:`DEFAULT_TRT_VERSION`.
    Returns:
        Path: ``path``.
    Source: ONNX Runtime TensorRT EP ``tensorrt_execution_provider_utils.h::ReadDynamicRange`` ("tensor
        name : scale in 32-bit single precision IEEE754 format", dynamic range = scale * 127, example
        ``TRT-7103-EntropyCalibration2`` / ``data_0: 4000889d``).
    """
    version = trt_version or _default_trt_version()
    lines = [f"TRT-{trt_version_number(version)}-EntropyCalibration2"]
    for name, a in amax.items():
        scale = (float(a) if a > 0 else 1.0) / 127.0
        lines.append(f"{name}: {struct.pack('>f', scale).hex()}")
    path = Path(path)
    with atomic_output(path) as tmp:
        tmp.write_text("\n".join(lines) + "\n")
    return path


def read_trt_cache(path: str | Path) -> tuple[str, dict[str, float]]:
    """Parse a TensorRT calibration cache written by :func:`write_trt_cache` (or by TensorRT).

    Returns:
        tuple[str, dict[str, float]]: the header line and ``{tensor: amax}`` (scale * 127).
    Raises:
        ArtifactError: missing file or a header not starting with ``TRT-``.
    """
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except OSError as err:
        raise ArtifactError(f"cannot read calibration cache {path}: {err.strerror or err}") from None
    if not lines or not lines[0].startswith("TRT-"):
        raise ArtifactError(f"{path} is not a TensorRT calibration cache (first line must start with 'TRT-')")
    out = {}
    for ln in lines[1:]:
        if not ln.strip():
            continue
        name, _, hx = ln.rpartition(":")
        out[name.strip()] = struct.unpack(">f", bytes.fromhex(hx.strip()))[0] * 127.0
    return lines[0], out
