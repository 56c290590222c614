"""Graph passes: in-memory rewrites of a streaming ONNX graph, one pass per module on one base.

Every pass is a :class:`~cosyedge.passes.base.Pass` (match, rewrite, report) named after its module; the runtime
and the builds apply them through :func:`~cosyedge.passes.base.apply_passes` and list here the passes they apply:

========================  ==============================================================================
:data:`SESSION_PASSES`    :class:`~cosyedge.runtime.ort.OrtStreamSession` (CPU provider), by default
:data:`SESSION_OPTIONAL`  the session, only when named in its ``rewrites``
:data:`POOL_PASSES`       :class:`~cosyedge.runtime.pool.StreamPool` with more than one stream
:data:`MATMUL_FORM_PASSES`  the INT8 ``ort_matmul`` build (:func:`cosyedge.precision.qdq_matmul.matmul_form`),
                          written into the engine
========================  ==============================================================================

Shared helpers: :mod:`cosyedge.passes.shapes` (shapes at given input shapes), :mod:`cosyedge.passes.edit` (copy,
attributes, splice, toposort), :mod:`cosyedge.passes.hop_scan` (a one-hop graph in a Scan over hops; the passes apply
to its body). A pass that fails, or a rewritten graph that ONNX Runtime will not load (the stored
graph then runs), is said in one warning line.
"""

from __future__ import annotations

from cosyedge.passes.base import Pass, Target, apply_passes

PASSES = {p.name: p for p in (
    Pass("conv_sum", ("Add",), True, "Conv -> Add (residual sum) as one com.microsoft.FusedConv"),
    Pass("dft_fft", ("Conv", "ConvTranspose"), True, "one-frame windowed real-DFT Conv/ConvTranspose as an FFT"),
    Pass("einsum_matmul", ("Einsum",), True, "one-frame grouped-linear Einsum as a batched MatMul"),
    Pass("gru_cell", ("GRU",), True, "one-step GRU as its cell (two MatMuls)"),
    Pass("batch_gemm", ("Conv", "MatMul"), False, "one-frame Conv / matrix-vector MatMul as one GEMM per batch"),
    Pass("onehot_conv", ("Conv",), False, "one-frame Conv with one-hot weight rows as a Reshape/Gather of its window"),
    Pass("conv_matvec", ("Conv",), True, "strided whole-input one-frame Conv as a (row-blocked) matrix-vector MatMul "
         "(bit-identical on MLAS)"),
    Pass("matvec_groups", ("MatMul",), True, "scaled matrix-vector MatMul per stream as one GEMM per group of streams "
         "(bit-identical on MLAS)"),
    Pass("scalar_rank", ("Add", "Sub", "Mul", "Div"), True, "one-element constant of an elementwise op given the "
         "other operand's rank"),
    Pass("state_layout", ("Concat",), False, "conv states carried time-major (N, P, C) inside a StreamPool (its "
         "I/O layout: StreamPool only)"),
    Pass("batch_streams", ("Scan",), False, "a Scan running a batch-1 body once per stream as one batched body "
         "(proved on real speech)"),
    Pass("scan_once", ("Scan",), False, "a Scan that iterates once at the runtime's chunk as its body"),
    Pass("perm_gather", ("Gather", "GatherElements"), False, "Gather/GatherElements of a transposed, flattened "
         "tensor through constant indices as a Slice / GatherElements of the untransposed one (bit-identical)"),
    Pass("gather_inner", ("GatherElements",), True, "GatherElements over trailing unit axes on its last axis "
         "(Reshapes around; bit-identical)"),
    Pass("reshape_chain", ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose"), True, "a chain of ops that "
         "only re-shape a tensor as one Reshape, or none (bit-identical)"),
    Pass("ring_state", ("Concat",), False, "a dilated conv's time-major state as a ring buffer written in place, "
         "one frame per tick (StreamPool only: it keeps the positions; bit-identical)"),
    Pass("dqmm_per_row", ("DynamicQuantizeMatMul",), False, "DynamicQuantizeMatMul quantized per row (per stream)",
         optional=False),
)}
"""dict[str, Pass]: every pass by name."""

SESSION_PASSES = ("conv_sum", "dft_fft", "einsum_matmul")
"""tuple[str, ...]: the passes :class:`~cosyedge.runtime.ort.OrtStreamSession` applies on the CPU provider by default,
in order (measured in ``docs/bench/profile_stream.json`` and ``docs/bench/bench_dfn3.json``)."""

SESSION_OPTIONAL = ("gru_cell",)
"""tuple[str, ...]: session passes applied only when named (``gru_cell``: in FP32 about 3 % slower per hop on
DeepFilterNet3 than ONNX Runtime's GRU kernel)."""

POOL_PASSES = ("batch_streams", "dft_fft", "einsum_matmul", "batch_gemm", "onehot_conv", "conv_matvec", "matvec_groups",
               "scalar_rank", "state_layout", "perm_gather", "gather_inner", "reshape_chain", "ring_state",
               "dqmm_per_row",
               "scan_once")
"""tuple[str, ...]: the passes a StreamPool of more than one stream applies, in order: ``batch_streams`` (a batch-1
graph adopted as a Scan over streams runs all streams in one batched body, proved against the Scan; its
``batch_rewrite`` switch), the two batch-free session passes (CPU provider; ``conv_sum`` is left out: ``batch_gemm``
turns the same one-frame convs into GEMMs), then ``batch_gemm`` (its ``batch_rewrite`` switch), then the per-tick cuts
that keep every output bit-identical (``onehot_conv``, ``conv_matvec``, ``matvec_groups``, ``scalar_rank``,
``state_layout``: the pool binds its states time-major; then ``perm_gather``, which reads the time-major windows'
picks as Slices, ``gather_inner``, ``reshape_chain`` and ``ring_state``: a dilated conv's state as a ring written
in place, the pool keeping the positions; measured in ``docs/bench/roofline_reference.json`` and
``docs/bench/bench_targets.json``), then
``dqmm_per_row`` (always: correctness), then ``scan_once`` (an adopted model's Scan over the hops of a one-hop chunk
as its body, value for value; last, so the passes before see the graph they were proved on).
:class:`~cosyedge.runtime.pool.StreamPool` takes another list (``passes=``), e.g. :data:`POOL_PASSES_BASE` to measure
the cuts."""

POOL_PASSES_BASE = ("dft_fft", "einsum_matmul", "batch_gemm", "dqmm_per_row")
"""tuple[str, ...]: the pool's passes before the batching of a Scan over streams and the bit-identical per-tick cuts,
for A/B measurements (``scripts/benchmarks/bench_streams.py --passes base``)."""

MATMUL_FORM_PASSES = ("batch_gemm", "gru_cell")
"""tuple[str, ...]: the passes the INT8 ``ort_matmul`` build writes into the model at one hop per call (with the bias
moved after each Reshape in between, :func:`cosyedge.precision.qdq_matmul.matmul_form`); the build then runs that
one-hop graph in a Scan over hops (:mod:`cosyedge.passes.hop_scan`)."""


def passes(names) -> list[Pass]:
    """The passes named (list[Pass], in the order given). Raises KeyError for an unknown name."""
    return [PASSES[n] for n in names]


__all__ = ["MATMUL_FORM_PASSES", "PASSES", "POOL_PASSES", "POOL_PASSES_BASE", "Pass", "SESSION_OPTIONAL",
           "SESSION_PASSES", "Target",
           "apply_passes", "passes"]
