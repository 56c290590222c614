"""Stream facts of every tensor of a full-sequence graph, found by running it at two lengths.

A stream fact says how a tensor relates to the time axis of the graph's inputs:

* ``axis``: which axis of the tensor is time (None: the tensor does not grow with the input);
* ``rate``: frames of that axis per input tick (a :class:`fractions.Fraction`: 1 for a per-frame tensor,
  1/4 after a stride-4 conv, 2 after a x2 upsampler), so a chunk of ``C`` ticks holds ``rate * C`` frames;
* ``extra``: frames the full-sequence tensor has beyond ``rate * T`` (edge effects of pads and valid
  convs: full-mode only; a stream has exactly ``rate * C`` frames per chunk);
* ``sizes``: for a small integer tensor whose *values* change with the input length (``Shape`` and the
  arithmetic on it): it only carries sizes, its consumer's rule decides whether that is allowed.

The facts are measured, not derived: the graph runs in ONNX Runtime with every intermediate tensor marked
as an output, once with ``T1`` and once with ``T2`` input ticks. An axis whose size differs is the time
axis; ``size = rate * T + extra`` from the two points. This follows any time axis through Transpose,
Reshape, Squeeze and shape arithmetic without a symbolic shape engine. A tensor with two growing axes
(attention over the whole sequence) or a size that is not affine in T is reported to the caller, which
refuses it.

Sources: the stream fact is sonos/tract's ``StreamInfo { axis, dim, delay }`` (``pulse/src/fact.rs``);
the delay is tracked by the walker (:mod:`cosyedge.surgery.walker`), not here. ONNX Runtime Python API
(``InferenceSession.run`` with extra graph outputs).
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.errors import ArtifactError, UsageError, first_line

onnx = lazy_import("onnx")

_SIZE_VALUES_MAX = 64  # an int tensor with more elements is data, not sizes


@dataclasses.dataclass
class TimeFact:
    """What the two probe runs say of one tensor.

    Attributes:
        shape1 (tuple[int, ...]): Shape at ``T1`` input ticks.
        shape2 (tuple[int, ...]): Shape at ``T2`` input ticks.
        axis (int | None): The time axis, or None when no axis grows with the input.
        rate (Fraction): Frames of ``axis`` per input tick (0 when ``axis`` is None).
        extra (Fraction): Full-mode frames beyond ``rate * T`` (0 when ``axis`` is None).
        sizes (bool): True for a small integer tensor whose values change with T (shape arithmetic).
        values1 (np.ndarray | None): Values at ``T1`` for a small integer tensor (sizes, indices), else None.
        values2 (np.ndarray | None): Values at ``T2``, likewise.
        error (str): Why no single affine time axis fits ("" when fine).
        axes2 (tuple[int, int] | None): For a tensor over time x time (attention scores, masks): its two time axes,
            both at ``rate`` frames per tick with ``extra`` frames (``error`` is still set: only the attention rules
            take such a tensor, :mod:`cosyedge.surgery.rules.attention`).
        axes_rel (tuple[int, int] | None): For a tensor with two growing axes, one twice as fast as the other (time x
            (2T - 1) relative positions): (the slower axis, the faster axis); ``error`` is still set (only
            :mod:`cosyedge.surgery.rules.relative` takes such a tensor, as the relative-position term of an attention).
    """

    shape1: tuple
    shape2: tuple
    axis: int | None = None
    rate: Fraction = Fraction(0)
    extra: Fraction = Fraction(0)
    sizes: bool = False
    values1: Any = None
    values2: Any = None
    error: str = ""
    axes2: tuple | None = None
    axes_rel: tuple | None = None

    @property
    def is_stream(self) -> bool:
        """bool: the tensor has a time axis."""
        return self.axis is not None

    def frames(self, ticks: int) -> Fraction:
        """Frames (Fraction) of the time axis in a stream chunk of ``ticks`` input ticks."""
        return self.rate * ticks


def _fact(shape1: tuple, shape2: tuple, t1: int, t2: int, v1, v2) -> TimeFact:
    fact = TimeFact(tuple(shape1), tuple(shape2))
    if v1 is not None:
        fact.values1, fact.values2 = v1, v2
        fact.sizes = v1.shape == v2.shape and not np.array_equal(v1, v2)
    if len(shape1) != len(shape2):
        fact.error = f"rank changes with the input length ({list(shape1)} vs {list(shape2)})"
        return fact
    grow = [i for i, (a, b) in enumerate(zip(shape1, shape2)) if a != b]
    if not grow:
        return fact
    if len(grow) == 2:  # query time x key time: both axes at one rate (rules/attention.py)
        r = [Fraction(int(shape2[a]) - int(shape1[a]), t2 - t1) for a in grow]
        e = [Fraction(int(shape1[a])) - r[k] * t1 for k, a in enumerate(grow)]
        if r[0] == r[1] and r[0] > 0 and e[0] == e[1]:
            fact.axes2, fact.rate, fact.extra = tuple(grow), r[0], e[0]
        elif sorted(r)[1] == 2 * sorted(r)[0] and r[0] > 0:
            fact.axes_rel = tuple(grow) if r[1] > r[0] else tuple(grow[::-1])
            fact.error = (f"axes {grow} grow with the input length, one twice as fast ({list(shape1)} at T={t1}): a "
                          "tensor over time x (2T - 1) relative positions (Transformer-XL rel_shift, as in NeMo, "
                          "icefall and ESPnet/CosyVoice relative-position attention), or attention between tensors at "
                          "different frame rates: streamed only as the relative-position term of an attention with a "
                          "bounded mask (rules/relative.py)")
            return fact
    if len(grow) > 1:
        fact.error = (f"axes {grow} all grow with the input length ({list(shape1)} at T={t1}, {list(shape2)} at "
                      f"T={t2}): a tensor over time x time (attention over the whole sequence?)")
        return fact
    ax = grow[0]
    rate = Fraction(int(shape2[ax]) - int(shape1[ax]), t2 - t1)
    if rate <= 0:
        fact.error = f"axis {ax} shrinks as the input grows"
        return fact
    fact.axis, fact.rate, fact.extra = ax, rate, Fraction(int(shape1[ax])) - rate * t1
    return fact


def mark_all_outputs(model: Any) -> tuple[Any, list[str]]:
    """Return a copy of ``model`` (onnx.ModelProto) with every node output added as a graph output, and
    the names of the added outputs (list[str], graph order). Types are left to ONNX Runtime."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    added = []
    for node in m.graph.node:
        for name in node.output:
            if name and name not in have:
                m.graph.output.append(onnx.ValueInfoProto(name=name))
                have.add(name)
                added.append(name)
    return m, added


def probe_inputs(model: Any, time_axes: dict[str, int], ticks: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for a probe run: every time axis ``ticks`` long, other symbolic axes 1.

    Args:
        model (onnx.ModelProto): The full-sequence model.
        time_axes (dict[str, int]): Time axis of every graph input that has one.
        ticks (int): Length of those axes.
        seed (int): Random seed (float inputs: N(0, 0.1^2); integer inputs: zeros).
    Returns:
        dict[str, np.ndarray]: one array per graph input.
    Raises:
        UsageError: an input has a symbolic axis that is neither time nor batch (axis 0).
    """
    rng = np.random.default_rng(seed)
    feeds = {}
    inits = {i.name for i in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims = []
        for ax, d in enumerate(tt.shape.dim):
            if vi.name in time_axes and ax == time_axes[vi.name]:
                dims.append(ticks)
            elif d.HasField("dim_value") and d.dim_value > 0:
                dims.append(int(d.dim_value))
            elif ax == 0:
                dims.append(1)
            else:
                raise UsageError(f"input '{vi.name}' has symbolic axis {ax} ('{d.dim_param}') that is neither time "
                                 f"(axis {time_axes.get(vi.name)}) nor batch (axis 0): give its time axis")
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if np.issubdtype(dtype, np.floating):
            feeds[vi.name] = (0.1 * rng.standard_normal(dims)).astype(dtype)
        else:
            feeds[vi.name] = np.zeros(dims, dtype=dtype)
    return feeds


def _dims(vi: Any) -> list:
    """The shape of a ``ValueInfoProto`` (list): ints for fixed dims, the dim_param (str, maybe "") for others."""
    return [int(d.dim_value) if d.HasField("dim_value") else d.dim_param for d in vi.type.tensor_type.shape.dim]


def _time_axis_guess(dims: list) -> int | None:
    """The likely time axis of a shape (int | None): its one non-batch symbolic axis, else its longest fixed one."""
    sym = [i for i, d in enumerate(dims) if i > 0 and not isinstance(d, int)]
    if len(sym) == 1:
        return sym[0]
    fixed = [(d, i) for i, d in enumerate(dims) if i > 0 and isinstance(d, int) and d > 1]
    return max(fixed)[1] if fixed else None


def dynamic_axes_hint(inputs: list[tuple[str, list]], outputs: list[tuple[str, list]]) -> str:
    """How to export a model with a dynamic time axis (str): the ``torch.onnx.export`` ``dynamic_axes`` and
    ``dynamic_shapes`` arguments for its graph inputs and outputs, the time axis guessed from each shape
    (:func:`_time_axis_guess`).

    Args:
        inputs (list[tuple[str, list]]): (name, shape) of each graph input; a shape holds ints for fixed dims and
            str/None for symbolic ones.
        outputs (list[tuple[str, list]]): The same for the graph outputs.
    Returns:
        str: e.g. ``dynamic_axes={'audio': {2: 'T'}, 'enhanced': {2: 'T'}} (torch.onnx.export) or dynamo=True
        with dynamic_shapes={'audio': {2: torch.export.Dim('T')}}``.
    """
    def axis(dims):
        return _time_axis_guess([int(d) if isinstance(d, (int, np.integer)) else str(d or "") for d in dims or []])

    ins = [(n, axis(d)) for n, d in inputs]
    outs = [(n, axis(d)) for n, d in outputs]
    axes = ", ".join(f"'{n}': {{{a}: 'T'}}" for n, a in ins + outs if a is not None)
    shapes = ", ".join(f"'{n}': {{{a}: torch.export.Dim('T')}}" for n, a in ins if a is not None)
    return f"dynamic_axes={{{axes}}} (torch.onnx.export) or dynamo=True with dynamic_shapes={{{shapes}}}"


def fixed_length_error(model: Any, err: BaseException, where: str = "model") -> UsageError | None:
    """The one-line error (:class:`~cosyedge.errors.UsageError`, exit 2) for a graph whose export fixed the time
    length, recognised in ONNX Runtime's error for a run at another length; None for any other error.

    Recognised: a graph input declared with a fixed length (``Got invalid dimensions for input ... Expected: N``,
    when a time axis was given for it), and a Reshape to a fixed shape (``cannot be reshaped to the requested
    shape``: a traced ``x.reshape(1, 100, 160)`` keeps its numbers) or a broadcast against a fixed-length tensor.

    Args:
        model (onnx.ModelProto): The full-sequence graph (its I/O for the export hint, :func:`dynamic_axes_hint`).
        err (BaseException): What ONNX Runtime raised (its text is multi-line; only facts are quoted).
        where (str): Name for the message.
    Returns:
        UsageError | None: ``<where>: the export fixed the time length (<what>); export with a dynamic time axis:
        dynamic_axes={...} (torch.onnx.export) or dynamo=True with dynamic_shapes={...}``.
    """
    import re

    text = str(err)
    what = None
    m = re.search(r"invalid dimensions for input: (\S+).*?index: (\d+) Got: (\d+) Expected: (\d+)", text, re.S)
    if m and m.group(2) == "0":  # axis 0 is the batch (a model exported for batch 1 only), not time
        m = None
    if m:
        what = f"input '{m.group(1)}' axis {m.group(2)} is always {m.group(4)} long"
    node = re.search(r"while running (\w+) node\. Name:'([^']*)'", text)
    if what is None and node and re.search(r"cannot be reshaped|broadcast", text, re.I):
        shape = re.search(r"requested shape:\s*(\{[^}]*\})", text)
        what = (f"{node.group(1)} node '{node.group(2)}' "
                + (f"asks for shape {shape.group(1)} at any input length" if shape else
                   "combines the input with a tensor of fixed length"))
    if what is None:
        return None
    inits = {i.name for i in model.graph.initializer}
    hint = dynamic_axes_hint([(vi.name, _dims(vi)) for vi in model.graph.input if vi.name not in inits],
                             [(vi.name, _dims(vi)) for vi in model.graph.output])
    tail = ", and shapes computed from the input (x.reshape(1, -1, 160), not fixed numbers)" if node and not m else ""
    out = UsageError(f"{where}: the export fixed the time length ({what}); export with a dynamic time axis: "
                     f"{hint}{tail}")
    out.what = what  # what failed, for a caller that knows the graph ran at other lengths (proof.prove)
    return out


def run_all(model: Any, feeds: dict[str, np.ndarray], where: str = "model") -> dict[str, np.ndarray]:
    """Run ``model`` in ONNX Runtime (CPU, one thread, no graph optimisation) with every tensor marked as
    an output; returns {tensor name: value} for graph outputs and every intermediate tensor.

    Raises:
        UsageError: the export fixed the time length (:func:`fixed_length_error`): one line with the fix.
        ArtifactError: ONNX Runtime cannot load or run the model otherwise (first line of its message).
    """
    marked, _ = mark_all_outputs(model)
    from cosyedge.runtime.ort import session_from_onnx

    try:
        sess = session_from_onnx(marked, threads=1, inter_threads=1, optimize=False, log_severity=4)
        names = [o.name for o in sess.get_outputs()]
        values = sess.run(None, feeds)
    except Exception as err:
        fixed = fixed_length_error(model, err, where)
        if fixed is not None:
            raise fixed from None
        raise ArtifactError(f"{where}: ONNX Runtime cannot run the full-sequence graph ({first_line(err)})") from None
    return dict(zip(names, values))


def measure(model: Any, time_axes: dict[str, int], t1: int, t2: int,
            where: str = "model") -> tuple[dict[str, TimeFact], dict[str, np.ndarray], dict[str, int]]:
    """Measure the :class:`TimeFact` of every tensor of ``model`` (graph inputs, node outputs, initializers).

    Args:
        model (onnx.ModelProto): Full-sequence model, constant-folded.
        time_axes (dict[str, int]): Time axis of each graph input that streams.
        t1 (int): First probe length in input ticks (> 0).
        t2 (int): Second probe length (> t1).
        where (str): Name for error messages.
    Returns:
        tuple: (facts, values, batch_axes): the :class:`TimeFact` by tensor name; every tensor's values in
        the ``T1`` and the ``T2`` run (a pair of dicts; the two runs have different seeded inputs, so a value
        equal in both does not depend on the data); the batch axis by tensor name, found by a third run
        with batch 2 (empty when the model fixes its batch at 1).
    Raises:
        ArtifactError: ONNX Runtime cannot run the model.
        UsageError: an input has an unknown symbolic axis.
    """
    f1, f2 = probe_inputs(model, time_axes, t1), probe_inputs(model, time_axes, t2, seed=1)
    v1, v2 = run_all(model, f1, where), run_all(model, f2, where)
    for name, arr in f1.items():
        v1[name], v2[name] = arr, f2[name]
    facts = {}
    for name, a in v1.items():
        b = v2.get(name)
        if b is None:
            continue
        a, b = np.asarray(a), np.asarray(b)
        small_int = (a.dtype.kind in "iu" and a.size <= _SIZE_VALUES_MAX and b.size <= _SIZE_VALUES_MAX)
        facts[name] = _fact(a.shape, b.shape, t1, t2, a if small_int else None, b if small_int else None)
    for init in model.graph.initializer:
        shape = tuple(init.dims)
        facts.setdefault(init.name, TimeFact(shape, shape))
    batch_axes = {}
    try:
        fb = {k: np.concatenate([v, v], axis=0) if v.ndim else v for k, v in f1.items()}
        vb = run_all(model, fb, where)
    except (ArtifactError, UsageError):  # batch 1 only (a reshape to a fixed batch reads as a fixed length)
        vb = {}
    for name, b in vb.items():
        a = v1.get(name)
        if a is None:
            continue
        diff = [i for i, (p, q) in enumerate(zip(np.shape(a), np.shape(b))) if p != q]
        if len(diff) == 1 and np.ndim(a) == np.ndim(b):
            batch_axes[name] = diff[0]
    return facts, (v1, v2), batch_axes
