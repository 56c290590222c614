"""Streamed comparison of a candidate build with its reference, on real speech, with Polygraphy.

Both models are run chunk by chunk (``chunk_samples``, one hop by default = what ``cosyedge run``
does) through Polygraphy runners (:meth:`cosyedge.compare.models.CompareModel.runner`); the utterance
is zero-padded at the end by the model's delay plus up to one chunk, and the audio output is trimmed by
the delay so it is aligned with the input. Two modes:

* **teacher-forced**: every chunk, the candidate gets the *reference's* state inputs (recorded while
  streaming the reference from zero state); its audio and ``state_out`` tensors show the error of one
  step alone. A state computed wrongly (dropped, swapped) shows in that state's own output.
* **free-running**: each model carries its own states from zero; the audio output shows the
  accumulated error a user hears.

The per-chunk outputs of one utterance are concatenated (audio, along time) or stacked (states, along
a new chunk axis) into one Polygraphy ``IterationResult`` per runner and utterance; the ``RunResults``
are compared with ``Comparator.compare_accuracy`` using ``SimpleCompareFunc(check_error_stat="max")``
(max/mean absolute error; falls back to ``CompareFunc.simple`` on old Polygraphy) and
``SnrCompareFunc`` (output SNR). Per utterance, free-running, the audio outputs are also scored against
the clean speech: PESQ-WB and SI-SNR of reference and candidate, and their differences.

Sources: Polygraphy ``polygraphy/comparator/{comparator,compare,struct}.py`` (``Comparator``,
``SimpleCompareFunc``, ``SnrCompareFunc``, ``RunResults``, ``IterationResult``); teacher forcing:
Williams & Zipser, Neural Computation 1(2), 1989 (feeding the reference's state to the next step).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from cosyedge.compare.models import (
    CompareModel,
    _polygraphy,
    check_compatible,
    reraise_runner_error,
)
from cosyedge.compare.tolerances import SNR_CAP_DB, Tolerance, tolerance_for
from cosyedge.compare.utterances import Utterance
from cosyedge.errors import ArtifactError, UsageError, first_line
from cosyedge.log import LOG
from cosyedge.runtime import loop

MODES = ("teacher-forced", "free-running")


def snr_db(ref: np.ndarray, est: np.ndarray) -> float:
    """SNR of ``est`` against ``ref`` in dB: ``10 log10(sum ref^2 / sum (ref - est)^2)``, float64 sums.

    Args:
        ref (np.ndarray): reference tensor, any shape.
        est (np.ndarray): same shape.
    Returns:
        float: dB, clipped to [-:data:`SNR_CAP_DB`, :data:`SNR_CAP_DB`] (identical -> cap; zero
        reference and non-zero error -> -cap); NaN if either holds NaN (:func:`cosyedge.precision.output_snr.snr_db`,
        the one output SNR of the builds and of compare).
    """
    from cosyedge.precision.output_snr import snr_db as output_snr

    return output_snr(ref, est, cap=SNR_CAP_DB)


@dataclasses.dataclass
class StreamRecord:
    """The outputs of one model over one utterance.

    Attributes:
        outputs (dict[str, np.ndarray]): audio output, float32 shape (T,) aligned with the input; each
            other output stacked over chunks, shape (n_chunks, *per-chunk shape without batch).
        state_inputs (list[dict[str, np.ndarray]]): the state inputs fed at each chunk (reference
            only; what teacher forcing feeds the candidate).
    """

    outputs: dict
    state_inputs: list | None = None


def _chunks(utt: Utterance, model: CompareModel, chunk: int) -> tuple[dict[str, np.ndarray], int]:
    """Padded inputs by name, each float32 (1, 1, n_chunks * chunk) (the utterance on the primary input, its
    partner signals on the others: :func:`cosyedge.runtime.feeds.full_inputs`), and n_chunks."""
    from cosyedge.runtime.feeds import fit, full_inputs

    need = len(utt.x) + model.contract.delay_samples
    n = max(1, -(-need // chunk))
    x = fit(utt.x, n * chunk)
    partners = {k: fit(v[: len(utt.x)], n * chunk) for k, v in utt.partners.items()}  # zeros after the utterance
    return full_inputs(model.contract, x, partners, str(model.path)), n


def _collect(per_chunk: list[dict], model: CompareModel, length: int) -> dict:
    c = model.contract
    out = {}
    for name in per_chunk[0]:
        if name == c.output:
            y = np.concatenate([o[name].reshape(-1) for o in per_chunk])
            out[name] = np.ascontiguousarray(y[c.delay_samples: c.delay_samples + length], np.float32)
        else:
            out[name] = np.stack([o[name][0] if o[name].ndim > 0 else o[name] for o in per_chunk])
    return out


def stream(model: CompareModel, runner: Any, utt: Utterance, chunk: int,
           forced_states: list | None = None, keep_state_inputs: bool = False,
           outputs: set | None = None) -> StreamRecord:
    """Stream ``utt`` through an active runner of ``model``.

    Args:
        model (CompareModel): The model (contract: input/output/state names, delay).
        runner: Active Polygraphy runner of ``model``.
        utt (Utterance): Real speech at the model rate (with its partner signals for a model with several
            waveform inputs: :func:`cosyedge.compare.utterances.with_partners`).
        chunk (int): Samples per chunk (a multiple of the total stride).
        forced_states (list[dict] | None): Teacher forcing: the state inputs to feed at each chunk
            (from the reference's :class:`StreamRecord`); None carries the model's own states from zero.
        keep_state_inputs (bool): Record the state inputs fed at each chunk.
        outputs (set | None): Keep only these outputs (None: all).
    Returns:
        StreamRecord
    Raises:
        UsageError: the model fails on a chunk (one line, chunk index and utterance named).
    """
    c = model.contract
    xs, n = _chunks(utt, model, chunk)
    per_chunk, fed = [], []
    calls = [0]

    def infer(feeds: dict) -> dict:
        calls[0] += 1
        return runner.infer(feeds, check_inputs=(calls[0] == 1))

    def on_chunk(_k: int, feeds: dict, res: dict) -> None:
        if keep_state_inputs:
            fed.append({name: v.copy() for name, v in feeds.items() if name not in xs})  # the states fed
        per_chunk.append({name: np.array(v, copy=True) for name, v in res.items() if outputs is None or name in outputs})

    def error(err: Exception, k: int) -> Exception:
        return reraise_runner_error(err, model, f"chunk {k} of '{utt.name}'")

    loop.stream(infer, c, xs, chunk, forced_states=forced_states,
                on_chunk=on_chunk, on_error=error, copy_states=True)
    return StreamRecord(outputs=_collect(per_chunk, model, len(utt.x)), state_inputs=fed if keep_state_inputs else None)


def _compare_funcs():
    """Polygraphy comparison functions: max/mean absolute error statistics (no verdict: atol = rtol = inf)."""
    comp = _polygraphy("polygraphy.comparator")
    simple_cls = getattr(comp, "SimpleCompareFunc", None)
    if simple_cls is not None:
        simple = simple_cls(check_error_stat="max", atol=np.inf, rtol=np.inf)
    else:  # Polygraphy < 0.53
        simple = comp.CompareFunc.simple(check_error_stat="max", atol=np.inf, rtol=np.inf)
    return [simple]


def tensor_stats(ref: np.ndarray, est: np.ndarray) -> dict:
    """``{"max_abs", "mean_abs", "snr_db"}`` (floats) of ``est`` against ``ref`` (same shape), numpy only."""
    r = np.asarray(ref, np.float32)
    e = np.asarray(est, np.float32)
    if r.shape != e.shape:
        raise UsageError(f"shapes differ: candidate {e.shape} vs reference {r.shape}")
    if r.size == 0:
        return {"max_abs": 0.0, "mean_abs": 0.0, "snr_db": SNR_CAP_DB}
    d = np.abs(r.astype(np.float64) - e.astype(np.float64))
    return {"max_abs": float(d.max()), "mean_abs": float(d.mean()), "snr_db": snr_db(r, e)}


def polygraphy_compare(ref_name: str, cand_name: str, ref_iters: list[dict], cand_iters: list[dict],
                       names: list[str] | None = None) -> list[dict]:
    """Compare per-iteration outputs; ``names`` go through Polygraphy's ``Comparator.compare_accuracy``.

    The outputs in ``names`` (the audio output) are compared by Polygraphy (``SimpleCompareFunc`` with
    ``check_error_stat="max"``: max and mean absolute error); every other output (the stacked states:
    millions of values, for which Polygraphy's median/quantile statistics cost seconds) with
    :func:`tensor_stats`. SNR is always :func:`snr_db` over the whole iteration.

    Args:
        ref_name (str), cand_name (str): Runner names.
        ref_iters (list[dict[str, np.ndarray]]): One dict per iteration (utterance) of the reference.
        cand_iters (list[dict[str, np.ndarray]]): Same names and shapes, candidate.
        names (list[str] | None): Outputs compared by Polygraphy (None: all).
    Returns:
        list[dict[str, dict]]: per iteration, per output name ``{"max_abs", "mean_abs", "snr_db"}``.
    Raises:
        UsageError: Polygraphy refused the comparison (shape mismatch...).
    """
    comp = _polygraphy("polygraphy.comparator")
    G_LOGGER = _polygraphy("polygraphy.logger").G_LOGGER
    names = list(ref_iters[0]) if names is None else list(names)
    rr = comp.RunResults()
    for rname, iters in ((ref_name, ref_iters), (cand_name, cand_iters)):
        rr.append((rname, [comp.IterationResult(outputs={n: o[n] for n in names}, runner_name=rname) for o in iters]))
    try:
        with G_LOGGER.verbosity(G_LOGGER.CRITICAL):
            acc = comp.Comparator.compare_accuracy(rr, compare_func=_compare_funcs()[0])
    except Exception as err:  # noqa: BLE001 -PolygraphyException from G_LOGGER.critical
        raise UsageError(f"Polygraphy could not compare the outputs: {first_line(err)}") from None
    # Polygraphy 0.53 returns AccuracyResults (one AccuracyResult per compare function), 0.49 (0.49.0-0.49.18) the
    # AccuracyResult itself (a dict keyed by runner pair)
    result = acc if hasattr(acc, "keys") else acc[0]
    stats = result[(ref_name, cand_name)]
    out = []
    for k, (r_it, c_it) in enumerate(zip(ref_iters, cand_iters)):
        row = {}
        for name in r_it:
            if name in names:
                res = stats[k][name]
                row[name] = {"max_abs": float(res.max_absdiff), "mean_abs": float(res.mean_absdiff),
                             "snr_db": snr_db(r_it[name], c_it[name])}
            else:
                row[name] = tensor_stats(r_it[name], c_it[name])
        out.append(row)
    return out


def _utterance_audio(utt: Utterance, y_ref: np.ndarray, y_cand: np.ndarray, pesq: bool) -> dict:
    """PESQ-WB / SI-SNR of both outputs against clean speech (or against the reference output)."""
    from cosyedge.eval.metrics import pesq_wb
    from cosyedge.signal import si_snr_db

    target = utt.clean if utt.clean is not None else y_ref
    res: dict = {"against": "clean" if utt.clean is not None else "reference output"}
    res["si_snr_ref_db"] = si_snr_db(y_ref, target) if utt.clean is not None else SNR_CAP_DB
    res["si_snr_cand_db"] = min(si_snr_db(y_cand, target), SNR_CAP_DB)
    res["si_snr_delta_db"] = res["si_snr_cand_db"] - res["si_snr_ref_db"]
    if pesq:
        res["pesq_ref"] = pesq_wb(y_ref, target, utt.sample_rate_hz)
        res["pesq_cand"] = pesq_wb(y_cand, target, utt.sample_rate_hz)
        res["pesq_delta"] = res["pesq_cand"] - res["pesq_ref"]
    return {k: (round(v, 4) if isinstance(v, float) and math.isfinite(v) else v) for k, v in res.items()}


class ReferenceCache:
    """Reference streams per utterance, computed once and shared by every candidate (``cosyedge check``).

    Args:
        ref (CompareModel): The reference.
        chunk (int): Samples per chunk.
        threads (int): ONNX Runtime threads.
    """

    def __init__(self, ref: CompareModel, chunk: int, threads: int = 1):
        self.ref, self.chunk, self.threads = ref, chunk, threads
        self._records: dict[str, StreamRecord] = {}

    def get(self, utt: Utterance) -> StreamRecord:
        """Return the reference's :class:`StreamRecord` of ``utt`` (with the state inputs it was fed)."""
        if utt.name not in self._records:
            runner = self.ref.runner("reference", threads=self.threads)
            try:
                with runner:
                    self._records[utt.name] = stream(self.ref, runner, utt, self.chunk, keep_state_inputs=True)
            except UsageError:
                raise
            except Exception as err:  # noqa: BLE001 - onnxruntime/polygraphy raise their own exception types
                raise reraise_runner_error(err, self.ref, f"on '{utt.name}'") from None
        return self._records[utt.name]


DEFAULT_CHUNK_MS = 100.0
"""float: the chunk ``compare``/``check`` aim for when ``--chunk-ms`` is not given (ms); the chunk used is the
multiple of the model's total stride nearest to it (:func:`default_chunk`)."""


def fixed_chunk(m: CompareModel) -> tuple[int, str, str]:
    """The chunk length ``m`` runs only (its graph's fixed time axis, :attr:`StreamContract.fixed_chunk_samples`,
    e.g. an ``ort_matmul`` INT8 build; or a TensorRT engine's profile, manifest ``chunk_samples``).

    Returns:
        tuple[int, str, str]: samples (0: any multiple of the total stride), the model and the reason as a message
        names them (``"engine engines/x"``, ``"an ort_matmul INT8 build: one hop per call"``).
    """
    c = m.contract
    if c.fixed_chunk_samples:
        return int(c.fixed_chunk_samples), c.fixed_chunk_where or str(m.path), c.fixed_chunk_why
    fixed = (m.manifest or {}).get("chunk_samples") if m.backend == "tensorrt" else None
    return (int(fixed), f"TensorRT engine {m.path}", "its optimization profile") if fixed else (0, "", "")


def check_fixed_chunk(chunk: int, models: Any) -> None:
    """Refuse a chunk length one of ``models`` (CompareModel) cannot run, in one line before anything runs.

    Raises:
        UsageError: ``"engine engines/x takes exactly 160 samples (10 ms) per call, not 1600 (an ort_matmul INT8
            build: one hop per call); use --chunk-ms 10"`` (:meth:`StreamContract.check_chunk`), or the same for a
            TensorRT engine's profile.
    """
    for m in models:
        m.contract.check_chunk(chunk)
        fixed, who, why = fixed_chunk(m)
        if fixed and fixed != chunk:
            ms = 1000.0 * fixed / m.contract.sample_rate_hz
            raise UsageError(f"{who} takes exactly {fixed} samples ({ms:g} ms) per call, not {chunk} ({why}); use "
                             f"--chunk-ms {ms:g}")


def default_chunk(model: CompareModel, chunk_ms: float | None, candidates: Any = ()) -> int:
    """Samples per chunk for ``--chunk-ms``.

    Args:
        model (CompareModel): The reference (its contract gives the rate and the total stride).
        chunk_ms (float | None): Chunk (ms), a multiple of the total stride; None = the chunk a candidate runs only
            (:func:`fixed_chunk`: an ``ort_matmul`` INT8 build made before its Scan over hops takes one hop per call; said
            in one info line), else
            the multiple of the total stride nearest :data:`DEFAULT_CHUNK_MS` (100 ms: 1600 samples at hop 160 /
            16 kHz, 1536 = 96 ms at hop 256).
        candidates (Iterable[CompareModel]): The models to be compared with ``model``.
    Returns:
        int: samples per chunk, a positive multiple of the total stride that every candidate runs.
    Raises:
        UsageError: ``chunk_ms`` is not a positive multiple of the total stride (the message is in ms, with the
            samples: ``chunk of 100 ms (1600 samples) is not a multiple of the model's total stride 256 samples =
            16 ms (use 16, 32, ... ms)``), or a candidate cannot run it (:func:`check_fixed_chunk`), or two
            candidates each run only another length.
    """
    c = model.contract
    models = [model, *candidates]
    if chunk_ms is None:
        fixed = {}
        for m in models:
            n, who, why = fixed_chunk(m)
            if n:
                fixed.setdefault(n, f"{who} ({why})")
        if len(fixed) > 1:
            raise UsageError("the models run only different chunk lengths: "
                             + "; ".join(f"{who}: {n} samples" for n, who in fixed.items()))
        if fixed:
            (n, who), = fixed.items()
            LOG.info("%s takes exactly %d samples per call: comparing in %g ms chunks (not the default %g ms)",
                     who, n, 1000.0 * n / c.sample_rate_hz, DEFAULT_CHUNK_MS)
            chunk = n
        else:
            stride = c.total_stride
            chunk = stride * max(1, round(DEFAULT_CHUNK_MS * c.sample_rate_hz / 1000.0 / stride))
    else:
        chunk = c.chunk_samples(chunk_ms)
    check_fixed_chunk(chunk, models)
    return chunk


_PESQ_WARNED = []


def pesq_available() -> bool:
    """bool: the ``pesq`` package is installed. When it is not, says so once (a warning) and PESQ-WB is left
    out of ``compare`` and ``check`` (their other metrics still run on a base install)."""
    import importlib.util

    if importlib.util.find_spec("pesq") is not None:
        return True
    if not _PESQ_WARNED:
        LOG.warning("pesq is not installed: PESQ-WB is omitted (pip install 'cosyedge[eval]' to score it)")
        _PESQ_WARNED.append(True)
    return False


def compare(ref: CompareModel, cand: CompareModel, utterances: list[Utterance], *, chunk: int | None = None,
            tolerance: Tolerance | None = None, modes: tuple = MODES, pesq: bool = True, threads: int = 1,
            ref_cache: ReferenceCache | None = None) -> dict:
    """Compare ``cand`` with ``ref`` on real utterances, in teacher-forced and free-running modes.

    Args:
        ref (CompareModel): FP32 reference (engine folder or ONNX).
        cand (CompareModel): Candidate build.
        utterances (list[Utterance]): Real speech at the model rate (never random data); a model with several
            waveform inputs gets partner signals on the others (:func:`~cosyedge.compare.utterances.with_partners`:
            the next utterances of the list, unless they carry their own).
        chunk (int | None): Samples per chunk (default: one hop).
        tolerance (Tolerance | None): Limits (default: :func:`~cosyedge.compare.tolerances.tolerance_for`
            the candidate's precision label).
        modes (tuple[str]): Subset of :data:`MODES`.
        pesq (bool): Score PESQ-WB (free-running; needs ``pesq``).
        threads (int): ONNX Runtime threads per model.
        ref_cache (ReferenceCache | None): Shared reference streams (built here when None).
    Returns:
        dict: JSON-ready result: ``reference``/``candidate`` descriptions, ``chunk_samples``,
        ``tolerance``, ``modes[mode]["utterances"][name]["outputs"][output] = {max_abs, mean_abs,
        snr_db}`` (+ ``["audio"]`` = PESQ/SI-SNR in free-running mode for a waveform output, or
        ``["probabilities"]`` = :func:`cosyedge.compare.probs.probability_stats` in both modes for an output of
        one value per hop, e.g. a VAD: judged by its decisions, not the waveform limits: a VAD fails when its
        speech segments change, another such output when a hop crosses 0.5), ``failures`` (one line each,
        naming the mode, utterance, tensor or metric and the limit) and ``passed``.
    Raises:
        UsageError: incompatible candidate, unknown mode, bad chunk, a model fails to run, a model input that is
            not a waveform (named).
    """
    check_compatible(ref, cand)
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise UsageError(f"unknown mode(s) {bad or modes} (use {', '.join(MODES)})")
    if not utterances:
        raise UsageError("no utterances to compare")
    from cosyedge.compare.utterances import with_partners

    utterances = with_partners(utterances, ref.contract, str(ref.path), "cosyedge compare")
    chunk = chunk or ref.contract.hop_samples
    check_fixed_chunk(chunk, (ref, cand))  # an ort_matmul INT8 graph or a TensorRT profile fixes the chunk length
    tol = tolerance or tolerance_for(cand.label)
    pesq = pesq and pesq_available()
    cache = ref_cache or ReferenceCache(ref, chunk, threads)
    c = ref.contract
    state_outs = [s.output for s in c.states]
    result: dict = {
        "reference": describe(ref), "candidate": describe(cand), "chunk_samples": chunk,
        "chunk_ms": 1000.0 * chunk / c.sample_rate_hz, "tolerance": tol.as_dict(),
        "utterances": [u.describe() for u in utterances], "modes": {}, "failures": [],
    }
    from cosyedge.compare.probs import is_vad, one_value_per_hop, probability_failures, probability_stats

    per_hop = one_value_per_hop(c)  # a probability, not audio: compared by its decisions, not SI-SNR/PESQ
    vad = per_hop and is_vad(ref)
    audio_out = any(o.name == c.output and o.kind == "audio" for o in c.stream_outputs)
    for mode in modes:
        ref_iters, cand_iters = [], []
        runner = cand.runner("candidate", threads=threads)
        with LOG.stage(f"compare {mode}: {cand.label} {cand.path} vs {ref.path} ({len(utterances)} utterances)"):
            try:
                with runner:
                    for utt in utterances:
                        rec = cache.get(utt)
                        forced = rec.state_inputs if mode == "teacher-forced" else None
                        crec = stream(cand, runner, utt, chunk, forced_states=forced, outputs=set(rec.outputs))
                        ref_iters.append(rec.outputs)
                        cand_iters.append(crec.outputs)
            except (UsageError, ArtifactError):
                raise
            except Exception as err:  # noqa: BLE001 - onnxruntime/polygraphy raise their own exception types
                raise reraise_runner_error(err, cand, mode) from None
            stats = polygraphy_compare("reference", "candidate", ref_iters, cand_iters, names=[c.output])
        per_utt = {}
        for utt, row, r_out, c_out in zip(utterances, stats, ref_iters, cand_iters):
            entry = {"outputs": row}
            if per_hop:  # judged by its decisions instead of the waveform limits (SNR, max abs)
                entry["probabilities"] = probability_stats(len(utt.x), r_out[c.output], c_out[c.output], c, vad)
                result["failures"] += probability_failures(f"{mode} '{utt.name}'", c.output, entry["probabilities"])
            elif mode == "free-running" and audio_out:
                entry["audio"] = _utterance_audio(utt, r_out[c.output], c_out[c.output], pesq)
            per_utt[utt.name] = entry
            result["failures"] += _failures(mode, utt.name, entry, c.output, state_outs, tol, not per_hop)
        result["modes"][mode] = {"utterances": per_utt}
    result["passed"] = not result["failures"]
    return result


def _failures(mode: str, utt: str, entry: dict, output: str, state_outs: list, tol: Tolerance,
              output_limits: bool = True) -> list[str]:
    out = []
    o = entry["outputs"][output]
    where = f"{mode} '{utt}'"
    if output_limits and not o["snr_db"] >= tol.output_snr_db:  # NaN fails
        out.append(f"{where} {output}: SNR {o['snr_db']:.2f} dB < {tol.output_snr_db:g} dB")
    if mode == "teacher-forced":
        if output_limits and not o["max_abs"] <= tol.output_max_abs:
            out.append(f"{where} {output}: max abs error {o['max_abs']:.3g} > {tol.output_max_abs:g}")
        for s in state_outs:
            st = entry["outputs"].get(s)
            if st is not None and not st["snr_db"] >= tol.state_snr_db:
                out.append(f"{where} {s}: state SNR {st['snr_db']:.2f} dB < {tol.state_snr_db:g} dB "
                           f"(state computed differently from the reference's: dropped, swapped or mis-quantized)")
    audio = entry.get("audio") or {}
    if audio.get("against") != "clean":  # no clean speech: the drops would be against a perfect self-score;
        return out  # the output SNR above is the fidelity gate (as in 'cosyedge check')
    if "pesq_delta" in audio and not -audio["pesq_delta"] <= tol.pesq_drop:
        out.append(f"{where} PESQ-WB {audio['pesq_cand']:.3f} vs reference {audio['pesq_ref']:.3f}: "
                   f"drop {-audio['pesq_delta']:.3f} > {tol.pesq_drop:g}")
    if "si_snr_delta_db" in audio and not -audio["si_snr_delta_db"] <= tol.si_snr_drop_db:
        out.append(f"{where} SI-SNR {audio['si_snr_cand_db']:.2f} dB vs reference {audio['si_snr_ref_db']:.2f} dB: "
                   f"drop {-audio['si_snr_delta_db']:.2f} dB > {tol.si_snr_drop_db:g} dB")
    return out


def c_rate(m: CompareModel) -> int:
    """Return the sample rate (int, Hz) of ``m``'s stream contract."""
    return int(m.contract.sample_rate_hz)


def describe(m: CompareModel) -> dict:
    """Return a JSON description of a :class:`CompareModel` (path, backend, precision label, hashes)."""
    return {"path": str(m.path), "model": str(m.model_path), "backend": m.backend, "precision": m.label,
            "model_sha256": m.model_sha256, "parent_sha256": m.parent_sha256, "name": m.contract.name}


__all__ = ["DEFAULT_CHUNK_MS", "MODES", "ReferenceCache", "StreamRecord", "check_fixed_chunk", "compare", "default_chunk",
           "describe", "fixed_chunk", "polygraphy_compare",
           "snr_db", "stream", "tensor_stats"]
