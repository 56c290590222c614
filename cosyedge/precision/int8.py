"""INT8 stage: FP32 streaming ONNX -> KL-calibrated explicit-Q/DQ streaming ONNX (``model.stream.int8.onnx``).

:func:`int8_onnx` calibrates the model on a
calibration set (or reuses the matching amax cache, :mod:`cosyedge.precision.calibrate`), inserts Q/DQ
pairs following TensorRT's rules (:mod:`cosyedge.precision.qdq`), keeps the cosyedge stream metadata
(so :class:`~cosyedge.runtime.ort.OrtStreamSession` and TensorRT builds use it unchanged), adds
``cosyedge.precision = int8`` plus the parent and calibration hashes, checks the result with ONNX shape
inference, the checker and one ONNX Runtime chunk, and writes it atomically. It counts the MACs per chunk
and the share of them the Q/DQ covers (:mod:`cosyedge.precision.macs`; a GRU or a conv kept in float stays
float), logs that share in one line (a warning below 50 %) and returns it for the build manifest
(``reports.int8.macs``). A model whose compute sits in Scan bodies (an adopted model: GTCRN, DTLN, Silero VAD) is
calibrated and quantized inside its leaf bodies (:mod:`cosyedge.precision.int8_bodies`); one whose weighted ops
INT8 cannot reach (If/Loop bodies) is refused in one line (:func:`refuse_scan_bodies`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from cosyedge.artifacts import (SourceModel, StreamContract, check_not_input, check_writable,
                                sha256_file, with_portable_ir)
from cosyedge.errors import ArtifactError, UsageError
from cosyedge.log import LOG, plural
from cosyedge.precision.calibration import Calibration
from cosyedge.precision.cost import output_cost

PRECISION = "int8"


def resolve_calibration_set(calib: Any, count: int = 2048):
    """Return the :class:`~cosyedge.precision.calibset.CalibrationSet` to calibrate on.

    Args:
        calib (str | Path | CalibrationSet | None): A set folder (must hold ``manifest.json``), a loaded
            set, or None for the default folder (``$COSYEDGE_CALIB_DIR`` or ``./calib``), where a set of
            ``count`` generated utterances is made when none exists yet.
        count (int): Utterances of a default set made here. Defaults to 2048.
    Returns:
        CalibrationSet: the loaded set.
    Raises:
        ArtifactError: an explicit folder that does not exist, is a file or has no ``manifest.json`` (each said
            so; a missing file: exit 3), a malformed manifest or missing audio.
    """
    from cosyedge.precision.calibset import (
        CalibrationSet,
        MANIFEST,
        default_calib_dir,
        load_calibration_set,
        make_calibration_set,
    )

    if isinstance(calib, CalibrationSet):
        return calib
    folder = Path(calib) if calib is not None else default_calib_dir()
    if calib is not None and not (folder / MANIFEST).is_file():
        make = f"make one: 'cosyedge calib make --out {folder}'"
        if not folder.exists():
            raise ArtifactError(f"calibration folder {folder} does not exist ({make}, or give the folder of an "
                                f"existing set)")
        if not folder.is_dir():
            raise ArtifactError(f"calibration folder {folder} is a file, not a folder ({make})")
        raise ArtifactError(f"calibration folder {folder} has no {MANIFEST} ({make})")
    if not (folder / MANIFEST).is_file():
        LOG.info("%s", default_set_note(folder, count))
        return make_calibration_set(folder, count=count)
    return load_calibration_set(folder)


def default_set_note(folder: Path, count: int) -> str:
    """The line said before a default calibration set is made (str): where it is written (absolute), how many files
    and about how much audio and disk (16-bit PCM, 1-4 s each), what it draws from, what it costs and how to avoid it.
    """
    from cosyedge.precision.calibset import CALIB_ENV, DURATION_RANGE_S, SAMPLE_RATE_HZ

    seconds = count * sum(DURATION_RANGE_S) / 2
    mb = seconds * SAMPLE_RATE_HZ * 2 / 1e6
    return (f"INT8 calibration: no calibration set in {folder.absolute()}: writing the default one there now "
            f"({count} WAV files, about {seconds / 60:.0f} min of audio, {mb:.0f} MB, mixed from the training speech "
            f"and noise, which are prepared on first use in $COSYEDGE_DATA_DIR or ~/.cache/cosyedge/data); the KL "
            f"calibration then streams all of it (minutes on a small CPU). Set {CALIB_ENV} to put it elsewhere, or "
            "make a smaller or your own set: 'cosyedge calib make --count N --out DIR' and build --calib DIR")


def int8_onnx(fp32_stream_onnx: Any, out_path: str | Path, *, calib: Any = None, exclude=(), count: int = 2048,
              amax: str | Path | None = None, threads: int = 1, cache_name: str | None = None,
              calibration: Calibration | None = None, placement: str = "trt", bias_correction: bool = False,
              min_snr_db: float | None = None, holdout=None, final_path: str | Path | None = None,
              fallback_placement: str | None = None, activations: str = "dynamic") -> dict:
    """Calibrate (or reuse the amax cache; nothing for dynamic activations) and write the INT8 streaming ONNX
    atomically.

    Args:
        fp32_stream_onnx (str | Path | Stage | SourceModel): FP32 streaming ONNX with cosyedge stream metadata
            (the output of ``cosyedge streamify``), a stage returning it, or a SourceModel (its contract and
            SHA-256 are reused, not computed again: what a build passes).
        out_path (str | Path): Destination ``.onnx`` (written via a temp file + rename).
        calib (str | Path | CalibrationSet | None): Calibration set folder with ``manifest.json``; None
            uses the default set ``$COSYEDGE_CALIB_DIR`` or ``./calib``, generated when missing.
        exclude (Iterable[str]): Names of weighted nodes to keep in float, in addition to the first and
            last convs.
        count (int): Utterances when the default set has to be generated. Defaults to 2048.
        amax (str | Path | None): Use this amax cache instead of calibrating; it must belong to this
            model (same SHA-256).
        threads (int): ONNX Runtime threads for calibration.
        cache_name (str | None): Name of the amax / TensorRT cache files in the calibration folder
            (default: the model's contract name); ``cosyedge build --sparse`` uses ``<name>-sparse``.
        calibration (Calibration | None): The calibration options as one object (what the build passes);
            when given, ``calib``, ``count``, ``amax`` and ``cache_name`` are taken from it.
        placement (str): Q/DQ placement (:data:`cosyedge.precision.qdq.PLACEMENTS`): ``trt`` (default; TensorRT's
            rules: symmetric int8 activations on the inputs of weighted ops) or ``ort`` (what ONNX Runtime's CPU
            QDQ fusion on x86 needs: uint8 activations, a DQ per consumer, Q on the outputs;
            ``build_ort(..., qdq_placement="ort")``: 24 QLinearConv in the reference instead of none, but 4.6 dB
            lower output SNR vs FP32, so not the default yet) or ``ort_matmul`` (one-frame convs rewritten to
            MatMuls quantized as ``DynamicQuantizeMatMul`` (``activations``), GRUs as
            ``DynamicQuantizeMatMul`` cells: :mod:`cosyedge.precision.qdq_matmul`; that one-hop graph is written as
            the body of a Scan over hops, :mod:`cosyedge.passes.hop_scan`, so the model takes any whole number of
            hops per call, as the FP32 one does). Models with Scan bodies always use ``trt``.
        activations (str): ``ort_matmul`` only: ``dynamic`` (default: each quantized MatMul a
            ``DynamicQuantizeMatMul``, its activation step taken per call from its own range,
            :func:`cosyedge.precision.qdq_matmul.quantize_matmuls_dynamic`: faster and closer to FP32 on the bundled
            model, 44.7 vs 38.1 dB) or ``static`` (the calibrated amax: ``QuantizeLinear`` + ``MatMulIntegerToFloat``,
            :func:`cosyedge.precision.qdq_matmul.insert_qdq_matmul`); bias correction always takes ``static`` (it
            corrects for the calibrated step).
        bias_correction (bool): ``ort_matmul`` only: correct each quantized layer's bias by
            ``E[W_q Q(x) - W x]`` over the calibration set (:func:`cosyedge.precision.qdq_matmul.bias_corrections`);
            also taken from ``calibration.bias_correction``. Defaults to False.
        min_snr_db (float | None): Target output SNR (dB) vs FP32 on held-out speech: while the INT8 model is
            below it, keep in float the quantized layer whose quantization alone hurts most, and re-measure
            (:mod:`cosyedge.precision.fallback`; the amax cache is reused, nothing recalibrated); also taken from
            ``calibration.min_snr_db``. None (default): no fallback.
        holdout (Iterable[str | Path | np.ndarray] | None): Held-out speech for ``min_snr_db``
            (:func:`cosyedge.precision.fallback.holdout_audio`); None: the bundled demo recording.
        final_path (str | Path | None): Where ``out_path`` will end up (a build writes into a temp folder that is then
            renamed): the path the log line and ``output`` name. None: ``out_path``.
        fallback_placement (str | None): The placement to use instead when ``ort_matmul`` finds no layer of its form
            in this model (no one-frame conv, 2-D MatMul or one-step GRU: it would quantize nothing), said in one info
            line and in ``placement_note`` (what a build whose ``ort_matmul`` is the backend's default, not asked
            for, passes: ``trt``). None: quantize what it can (a warning says why the rest stays float).
    Returns:
        dict: manifest fields: ``precision`` ("int8"), ``calibrated`` (bool: False for ``ort_matmul`` with
        ``dynamic`` activations and no bias correction, whose layers take their activation step per call: then no
        calibration set is made or read, ``calib``/``amax`` are not used, and ``amax_path``,
        ``trt_calibration_cache``, ``calibration_manifest_sha256``, ``calibration_utterances`` and
        ``calibration_method`` are None), ``amax_path``, ``trt_calibration_cache``,
        ``calibration_manifest_sha256``, ``calibration_utterances``, ``model_sha256`` (the FP32 parent),
        ``qdq_pairs`` (activation + weight Q/DQ), ``quantized_nodes``, ``excluded_nodes``
        ({node: reason}), ``output`` (path), ``output_sha256`` and ``macs``: the MACs per chunk (one hop) and the
        share of them that runs in INT8 (:func:`cosyedge.precision.macs.mac_share`: ``chunk_samples``, ``total``,
        ``quantized``, ``share``, ``float_ops``), logged in one line (a warning below 50 %); ``placement`` and
        ``activation_type`` (``int8`` | ``uint8`` | ``uint8 per call``: dynamic) of the Q/DQ; ``ort_fusion``: what ONNX Runtime's CPU EP on this
        machine fuses (:func:`cosyedge.precision.ort_fusion.ort_fusion_report`), logged in one line;
        ``bias_correction``: None, or ``{"utterances", "layers": {matmul: {"norm", "bias_norm"}}, "snr_db_with",
        "snr_db_without", "delta_db"}`` (L2 norms of the correction and of the bias it was subtracted from; the output SNR
        vs FP32 on the demo recording, :func:`cosyedge.precision.cost.demo_snr`, with and without the correction, logged
        in one line, a warning when the correction lowers it); ``placement_requested``: the placement asked for
        (the same as ``placement``: a request that cannot be applied is refused, except a default ``ort_matmul`` that
        finds nothing to quantize, which takes ``fallback_placement``); ``placement_note``: None, or why
        ``fallback_placement`` was taken (one line); ``matmul_form`` (``ort_matmul``): the rewrite's counts;
        ``fallback``: None, or what :func:`cosyedge.precision.fallback.search` measured (``target_db``,
        ``initial_snr_db``, ``final_snr_db``, ``met``, ``kept_float`` [{name, alone_snr_db, snr_after_db}],
        ``sensitivity``, ``evaluations``, ``holdout``, ``quantized_mac_share``); the layers it keeps float are in
        ``excluded_nodes`` too (reason: their measured SNR alone).
    Raises:
        ArtifactError: ONNX missing/corrupt or without cosyedge state metadata; an ``amax`` cache from
            another model; the result fails shape inference or does not run in ONNX Runtime.
        UsageError: unknown ``exclude`` node; ``out_path`` equals the input; a bad ``min_snr_db`` (NaN, infinite,
            negative) or one given for a model that does not stream audio to audio; the compute sits in subgraphs INT8
            does not enter (:func:`refuse_scan_bodies`). An adopted model's leaf Scan bodies are quantized
            (:mod:`cosyedge.precision.int8_bodies`), with the ``trt`` placement only: another ``placement`` or
            ``bias_correction`` for such a model is refused.
        ArtifactError: a calibration folder without ``manifest.json``.
    """
    from cosyedge.precision import calibrate as cal
    from cosyedge.precision import qdq
    from cosyedge.precision.macs import LOW_SHARE, mac_share, share_line
    import onnx_graphsurgeon as gs

    from cosyedge.artifacts import load_onnx
    from cosyedge.surgery import io

    if calibration is not None:
        calib, count, amax, cache_name = (calibration.set, calibration.count, calibration.amax,
                                          calibration.cache_name)
        bias_correction = bias_correction or calibration.bias_correction
        if min_snr_db is None:
            min_snr_db = calibration.min_snr_db
    from cosyedge.precision.fallback import check_min_snr

    min_snr_db = check_min_snr(min_snr_db)
    qdq.check_placement(placement)
    if activations not in ("dynamic", "static"):
        raise UsageError(f"int8 activations {activations!r}: use 'dynamic' or 'static'")
    if bias_correction and placement != "ort_matmul":
        raise UsageError(f"bias correction is implemented for Q/DQ placement ort_matmul only, not {placement!r}")
    source = SourceModel.of(fp32_stream_onnx)
    src = source.path
    out_path = Path(out_path)
    contract = source.contract
    contract.require_streaming(src)
    check_not_input(src, out_path)
    check_writable(out_path)
    exclude = tuple(exclude or ())
    model = io.at_least_opset(load_onnx(src), 13, str(src), "per-channel Q/DQ (DequantizeLinear axis)")
    from cosyedge.precision.bodies import has_subgraphs, iter_graphs

    if any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for g in iter_graphs(model.graph) for n in g.node):
        raise UsageError(f"{src} already holds Q/DQ nodes; give the FP32 streaming model")
    plans, placement_note = None, None
    # ort_matmul writes one-step GRUs as cells of DynamicQuantizeMatMul (qdq_matmul.quantize_dynamic): --exclude
    # may name a GRU to keep it float
    grus = {n.name for n in model.graph.node if n.op_type == "GRU"} if placement == "ort_matmul" else set()
    gru_keep, exclude = [e for e in exclude if e in grus], tuple(e for e in exclude if e not in grus)
    if has_subgraphs(model):  # an adopted model: Q/DQ inside its leaf Scan bodies
        from cosyedge.precision import int8_bodies

        plans = int8_bodies.body_plans(model, contract, exclude)
        to_quantize = [w for p in plans for w in p.quantize]
        kept = {k: v for p in plans for k, v in p.kept.items()}
        if placement != "trt" or bias_correction:
            asked = " and ".join(x for x in (f"--int8-placement {placement}" if placement != "trt" else "",
                                             "--bias-correction" if bias_correction else "") if x)
            raise UsageError(f"int8: {src.name} keeps its compute in Scan bodies, which take the trt placement only "
                             f"(ort_matmul and bias correction are for flat graphs): build without {asked}")
    else:
        to_quantize, kept = qdq.select_nodes(model, [i.name for i in contract.stream_inputs], contract.output,
                                             exclude)
    mm_form = None
    if placement == "ort_matmul" and plans is None:
        from cosyedge.passes.hop_scan import scan_over_hops
        from cosyedge.precision import qdq_matmul

        mm_model, mm_form, mm_names = _matmul_plan(model, contract, to_quantize)
        got = {mm_form["origin"][n] for n in mm_names}
        # GRU cells kept float by --exclude were found: no fallback (trt has no GRU to exclude and would refuse it)
        if fallback_placement and _finds_nothing(mm_form, mm_names):
            placement_note = (f"INT8 placement {fallback_placement}: the ONNX Runtime default ort_matmul finds no layer "
                              f"of its form in {src.name} (one-frame convs, 2-D MatMuls, one-step GRUs at one hop per "
                              f"call)")
            LOG.info("%s", placement_note)
            # the GRUs --exclude keeps float are float under trt anyway (not a weighted op there: trt refuses them)
            return int8_onnx(source, out_path, calib=calib, exclude=tuple(exclude), count=count,
                             amax=amax, threads=threads, cache_name=cache_name, calibration=calibration,
                             placement=fallback_placement, min_snr_db=min_snr_db, holdout=holdout,
                             final_path=final_path) | {"placement_requested": placement,
                                                       "placement_note": placement_note}
        for w in to_quantize:
            if w.name not in got:
                kept[w.name] = ("no MatMul form (not a one-frame conv, or it feeds an ArgMax/Log): float, since a "
                                "float op between Q/DQ is slower than FP32 on ONNX Runtime CPU")
        note = qdq_matmul.float_note(model, contract, [w.name for w in to_quantize if w.name not in got],
                                     len(to_quantize))
        if note:
            LOG.warning("%s", note)
        to_quantize = [w for w in to_quantize if w.name in got]
    model_sha = source.sha256
    # dynamic activations take their step per call: no layer reads an amax, so nothing is calibrated (and no
    # calibration set is made); static activations, bias correction and the Q/DQ placements need the amax
    calibrated = not (mm_form is not None and activations == "dynamic" and not bias_correction)
    data: dict = {}
    amax_path = trt_cache = None
    if not calibrated:
        LOG.info("INT8 activations quantized per call (DynamicQuantizeMatMul): no calibration needed%s",
                 f"; the amax cache {amax} is not used" if amax is not None else "")
        if calib is not None:  # asked for by name, silently unread, a typo or a missing folder would go unseen
            shown_set = getattr(calib, "folder", calib)
            LOG.warning("INT8 calibration set %s is not read: ONNX Runtime's INT8 (placement ort_matmul, dynamic "
                        "activations) quantizes activations per call and calibrates nothing (--int8-placement trt "
                        "or --bias-correction calibrate on it)", shown_set)
    elif amax is not None:
        amax_path = Path(amax)
        data = cal.load_amax(amax_path, model_sha256=model_sha, where=str(src), model_path=src)
        trt_cache = cal.trt_cache_path_for(amax_path.parent, contract.name)
    else:
        cset = resolve_calibration_set(calib, count)
        amax_path = cal.calibrate(source, cset, threads=threads, cache_name=cache_name)
        data = cal.load_amax(amax_path, model_sha256=model_sha, where=str(src), model_path=src)
        trt_cache = cal.trt_cache_path_for(amax_path.parent, cache_name or contract.name)
    calib_info = data.get("calibration") or {}
    bias_info, shift = None, None
    if mm_form is not None and bias_correction:
        from cosyedge.precision.calibration import BIAS_CORRECTION_UTTERANCES

        cset = resolve_calibration_set(calib, count)
        with LOG.stage(f"bias correction ({min(BIAS_CORRECTION_UTTERANCES, len(cset))} utterances, one hop per call)"):
            shift = qdq_matmul.bias_corrections(mm_model, contract, data["amax"], mm_names, cset,
                                                BIAS_CORRECTION_UTTERANCES, threads)
        bias_info = {"utterances": min(BIAS_CORRECTION_UTTERANCES, len(cset)), "layers": {}}

    def build(names: set[str], shift=shift) -> tuple:
        """The Q/DQ model (not finalized) quantizing the weighted nodes in ``names``, and insert_qdq's report
        (``shift``: the bias corrections, None for none)."""
        if mm_form is not None:
            m = _copy(mm_model)
            chosen = [n for n in mm_names if mm_form["origin"][n] in names]
            if activations == "dynamic" and shift is None:
                rep = qdq_matmul.quantize_matmuls_dynamic(m, chosen)
            else:
                rep = qdq_matmul.insert_qdq_matmul(m, data["amax"], chosen, shift)
            # GRUs: no amax needed; a GRU not in ``names`` (excluded, or kept float by the fallback) stays float
            dyn = qdq_matmul.quantize_dynamic(m, mm_form["gru_cells"],
                                              set(gru_keep) | {g for g in mm_form["gru_cells"] if g not in names})
            rep["weights"].update({k: 1 for k in dyn["gru"]})
            rep["gru_kept"] = dyn["kept"]
            # any whole number of hops per call: the one-hop graph as the body of a Scan over hops
            return scan_over_hops(m, contract), rep
        if plans is not None:
            m = _copy(model)
            ps = int8_bodies.body_plans(m, contract, exclude)
            for p in ps:
                p.quantize = [w for w in p.quantize if w.name in names]
            rep = int8_bodies.quantize_bodies(m, ps, data["amax"])
            rep.setdefault("placement", "trt")
            rep.setdefault("activation_type", "int8")
            return m, rep
        graph = gs.import_onnx(model)
        rep = graph.insert_qdq(data["amax"], [w for w in to_quantize if w.name in names], placement=placement)
        graph.cleanup().toposort()
        return io.graph_to_model(graph, like=model), rep

    # the one-step GRUs the ort_matmul placement quantizes (DynamicQuantizeMatMul cells): fallback candidates too
    dyn_grus = [g for g in mm_form["gru_cells"] if g not in gru_keep] if mm_form is not None else []
    fallback = None
    if min_snr_db is not None:
        from cosyedge.precision import fallback as fb

        measure = fb.HoldoutSnr(source, fb.holdout_audio(contract, holdout))
        try:
            with LOG.stage(f"int8 fallback to {min_snr_db:g} dB on held-out speech"):
                fallback = fb.search([w.name for w in to_quantize] + dyn_grus, lambda names: build(names)[0],
                                     measure, min_snr_db)
        finally:
            measure.close()
        fallback["holdout"] = "bundled demo recording (noisy.wav)" if holdout is None else \
            f"{len(measure.clips)} clips given"
        fallback["holdout_seconds"] = round(sum(x.size for x in measure.clips) / contract.sample_rate_hz, 3)
        for k in fallback["kept_float"]:
            kept[k["name"]] = f"int8 fallback: {k['alone_snr_db']:.1f} dB vs FP32 when quantized alone"
        left = set(fallback.pop("quantize"))
        to_quantize = [w for w in to_quantize if w.name in left]
        dyn_grus = [g for g in dyn_grus if g in left]
    with LOG.stage(f"insert Q/DQ into {src.name} ({len(to_quantize)} weighted nodes, {len(kept)} kept in float)"):
        out_model, report = build({w.name for w in to_quantize} | set(dyn_grus))
        kept.update({k: v for k, v in report.pop("gru_kept", {}).items() if k not in kept})
        if mm_form is not None:
            kept.update({k: "not a one-step GRU: float" for k in grus if k not in mm_form["gru_cells"]})
        if bias_info is not None:
            bias_info["layers"] = {n: {"norm": float(np.linalg.norm(shift[n])), "bias_norm": float(b)}
                                   for n, b in report.pop("bias_norms").items()}
        for key, value in (("precision", PRECISION), ("parent_sha256", model_sha),
                           ("calibration_manifest_sha256", calib_info.get("manifest_sha256"))):
            if value is None:  # not calibrated (dynamic activations)
                continue
            p = out_model.metadata_props.add()
            p.key, p.value = f"cosyedge.{key}", value
        out_model = io.finalize_model(out_model, where=str(src))
        _smoke_test(out_model, contract, src)
        macs = int8_bodies.mac_share(out_model, contract) if plans is not None else mac_share(out_model, contract)
        io.save_model(with_portable_ir(out_model), out_path)  # IR its opsets need: older readers load it
    shown = Path(final_path) if final_path is not None else out_path
    LOG.info("INT8 model %s: %d Q/DQ pairs, %d nodes quantized%s, kept in float: %s", shown,
             report["qdq_pairs"], len(to_quantize) + len(dyn_grus),
             f" ({len(dyn_grus)} of them GRUs as dynamic INT8 cells)" if dyn_grus else "",
             ", ".join(sorted(kept)) or "none")
    if macs["share"] < LOW_SHARE:
        LOG.warning("%s (below %d %%: most of this INT8 build runs in float)", share_line(macs), 100 * LOW_SHARE)
    else:
        LOG.info("%s", share_line(macs))
    from cosyedge.precision.ort_fusion import fusion_line, ort_fusion_report

    fusion = ort_fusion_report(out_path, contract)
    LOG.info("%s (Q/DQ placement %s, %s activations)", fusion_line(fusion), report["placement"],
             report["activation_type"])
    if fallback is not None:
        fallback["quantized_mac_share"] = macs["share"]
        # which audio: the output SNR line below measures the first seconds of the demo recording only
        on = f"on held-out speech ({fallback['holdout_seconds']:.3g} s, {fallback['holdout']})"
        if not fallback["met"]:
            LOG.warning("int8 fallback: the target %.1f dB vs FP32 %s cannot be met: %.1f dB with "
                        "%s kept float and only %s left INT8 (%.0f %% of the MACs INT8); the model is written "
                        "anyway (lower --int8-min-snr, or build FP16/FP32)", min_snr_db, on, fallback["final_snr_db"],
                        plural(len(fallback["kept_float"]), "layer"), ", ".join(sorted(w.name for w in to_quantize)),
                        100 * macs["share"])
        else:
            LOG.info("int8 fallback: %.1f dB vs FP32 %s (target %.1f dB), %s kept float: %s; "
                     "%.0f %% of the MACs INT8", fallback["final_snr_db"], on, min_snr_db,
                     plural(len(fallback["kept_float"]), "layer"),
                     ", ".join(k["name"] for k in fallback["kept_float"]) or "none", 100 * macs["share"])
    snr = output_cost(source, out_path, "int8", "INT8 quantization",
                      "keep sensitive layers float with --exclude or --int8-min-snr, or calibrate on more of your "
                      "own audio")
    if bias_info is not None:
        bias_info.update(_bias_effect(source, out_path, snr, build({w.name for w in to_quantize} | set(dyn_grus), None)[0], src))
    return {
        "precision": PRECISION,
        "output_snr_db": snr,
        "output": str(shown),
        "output_sha256": sha256_file(out_path),
        "model_sha256": model_sha,
        "calibrated": calibrated,
        "amax_path": str(amax_path) if amax_path is not None else None,
        "trt_calibration_cache": str(trt_cache) if trt_cache is not None and trt_cache.is_file() else None,
        "calibration_manifest_sha256": calib_info.get("manifest_sha256"),
        "calibration_utterances": calib_info.get("utterances"),
        "calibration_method": data.get("params", {}).get("method", "entropy") if calibrated else None,
        "qdq_pairs": report["qdq_pairs"],
        "activation_scales": report["activations"],
        "quantized_nodes": sorted(report["weights"]),
        "excluded_nodes": dict(sorted(kept.items())),
        "macs": macs,
        "placement": report["placement"],
        "placement_requested": placement,
        "placement_note": placement_note,
        "activation_type": report["activation_type"],
        "ort_fusion": fusion,
        "bias_correction": bias_info,
        "matmul_form": None if mm_form is None else mm_form["counts"],
        "fallback": fallback,
    }


def _matmul_plan(model: Any, contract: StreamContract, to_quantize: list) -> tuple[Any, dict, list[str]]:
    """The ``ort_matmul`` form of ``model`` (:func:`cosyedge.precision.qdq_matmul.matmul_form`: the rewritten model
    and its report, with ``origin`` and ``gru_cells``) and the names of its MatMuls that quantize a node of
    ``to_quantize`` (weighted nodes, :func:`cosyedge.precision.qdq.select_nodes`)."""
    from cosyedge.precision import qdq_matmul

    mm_model, mm_form = qdq_matmul.matmul_form(model, contract)
    wanted = {w.name for w in to_quantize}
    return mm_model, mm_form, [n.name for n in qdq_matmul.quantizable(mm_model)
                               if mm_form["origin"].get(n.name) in wanted]


def _finds_nothing(mm_form: dict, mm_names: list[str]) -> bool:
    """Whether the ``ort_matmul`` form (:func:`_matmul_plan`) found no layer to quantize: no MatMul of a weighted
    node and no one-step GRU cell (a default build then takes its fallback placement, ``trt``, which calibrates)."""
    return not mm_names and not mm_form["gru_cells"]


def needs_calibration(fp32_stream_onnx: Any, placement: str, activations: str = "dynamic",
                      bias_correction: bool = False) -> bool:
    """Whether :func:`int8_onnx` with these options calibrates (reads an amax cache or a calibration set).

    It does not for ``ort_matmul`` with ``dynamic`` activations and no bias correction on a flat graph where that
    form finds a layer to quantize (a one-frame conv, a 2-D MatMul or a one-step GRU): each layer then takes its
    activation step per call. Anything else (the Q/DQ placements, static activations, bias correction, a model
    with Scan bodies, or ``ort_matmul`` finding nothing, whose build falls back to ``trt``) calibrates.
    ``cosyedge check`` asks this before it requires a baseline's amax cache.

    Args:
        fp32_stream_onnx (str | Path | SourceModel): FP32 streaming ONNX.
        placement (str): Q/DQ placement (``trt``, ``ort``, ``ort_matmul``).
        activations (str): ``dynamic`` or ``static`` (``ort_matmul``).
        bias_correction (bool): Bias correction asked for.
    Returns:
        bool
    Raises:
        ArtifactError: the model is missing, corrupt or not a streaming model.
    """
    from cosyedge.artifacts import load_onnx
    from cosyedge.precision import qdq
    from cosyedge.precision.bodies import has_subgraphs
    from cosyedge.surgery import io

    if placement != "ort_matmul" or activations != "dynamic" or bias_correction:
        return True
    source = SourceModel.of(fp32_stream_onnx)
    contract = source.contract
    contract.require_streaming(source.path)
    model = io.at_least_opset(load_onnx(source.path), 13, str(source.path), "per-channel Q/DQ (DequantizeLinear axis)")
    if has_subgraphs(model):
        return True
    to_quantize, _ = qdq.select_nodes(model, [i.name for i in contract.stream_inputs], contract.output, ())
    return _finds_nothing(*_matmul_plan(model, contract, to_quantize)[1:])


def _bias_effect(source: Any, out_path: Path, snr_with: float | None, plain: Any, src: Path) -> dict:
    """Measure what bias correction did: the output SNR (dB) vs FP32 on the demo recording
    (:func:`cosyedge.precision.cost.demo_snr`) of ``plain`` (the same INT8 model without the correction; written next
    to ``out_path`` and removed) beside ``snr_with`` (the corrected model's); logged in one line, a warning when the
    correction lowered it. Returns ``{"snr_db_with", "snr_db_without", "delta_db"}`` (floats or None)."""
    from cosyedge.precision.cost import demo_snr
    from cosyedge.surgery import io

    tmp = out_path.with_name(out_path.stem + ".no-bias-correction.tmp.onnx")
    try:
        io.save_model(io.finalize_model(plain, where=str(src)), tmp)
        without = demo_snr(source, tmp)
    finally:
        tmp.unlink(missing_ok=True)
    if snr_with is None or without is None:
        return {"snr_db_with": snr_with, "snr_db_without": without, "delta_db": None}
    delta = snr_with - without
    if delta < 0:
        LOG.warning("int8: bias correction lowered the output SNR vs FP32 on the demo recording: %.1f dB with it, "
                    "%.1f dB without (%+.1f dB); build without --bias-correction", snr_with, without, delta)
    else:
        LOG.info("int8: bias correction: output SNR vs FP32 on the demo recording %.1f dB with it, %.1f dB without "
                 "(%+.1f dB)", snr_with, without, delta)
    return {"snr_db_with": round(snr_with, 2), "snr_db_without": round(without, 2), "delta_db": round(delta, 2)}


def _copy(model: Any) -> Any:
    """A deep copy of an ``onnx.ModelProto``."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    return m


def refuse_scan_bodies(model: Any, src: Path, contract: StreamContract | None = None) -> None:
    """Refuse, before any calibration or pruning, a model whose main graph holds a Scan/Loop/If but whose compute
    INT8 cannot reach: no leaf Scan body (:mod:`cosyedge.precision.int8_bodies`; If/Loop bodies and bodies reading
    outer tensors are not entered) holds a weighted op with constant weights, so an 'int8' engine would be the FP32
    model under another label. Adopted models (DTLN, GTCRN, Silero VAD) pass: their bodies are quantized.

    Args:
        model (onnx.ModelProto): The FP32 streaming model.
        src (Path): Its path (for the message).
        contract (StreamContract | None): Its contract; read from ``model`` when None.
    Raises:
        UsageError: one line naming why and what to build instead.
    """
    from cosyedge.precision.bodies import has_subgraphs
    from cosyedge.precision.int8_bodies import body_plans

    if not has_subgraphs(model):
        return
    try:
        body_plans(model, contract if contract is not None else StreamContract.from_onnx(model))
    except UsageError:
        raise UsageError(f"int8: {src} keeps its compute inside subgraphs (Scan/Loop/If), and no Scan body that the "
                         f"INT8 stage enters (Scan bodies reading no outer tensor) holds a Conv/ConvTranspose/Gemm/"
                         f"MatMul with constant weights, so nothing would run in INT8: build it with --fp16 and/or "
                         f"--sparse, or in FP32") from None


def _smoke_test(model: Any, contract: StreamContract, where: Path) -> None:
    """Run one zero chunk of the Q/DQ model in ONNX Runtime (CPU); outputs must be finite."""
    import onnxruntime  # noqa: F401 - a missing onnxruntime stays ImportError here, as before

    from cosyedge.runtime.feeds import zero_feeds
    from cosyedge.runtime.ort import session_from_onnx

    try:
        sess = session_from_onnx(model, threads=1, inter_threads=None, log_severity=3)
        feeds = {**zero_feeds(contract), **{s.input: s.zeros(1) for s in contract.states}}
        outs = sess.run(None, feeds)
    except Exception as err:  # onnxruntime's own exception types
        from cosyedge.errors import first_line

        raise ArtifactError(f"INT8 model made from {where} does not run in ONNX Runtime: {first_line(err)}") from None
    if not all(np.isfinite(o).all() for o in outs):
        raise ArtifactError(f"INT8 model made from {where} gives NaN/Inf for a zero chunk")
