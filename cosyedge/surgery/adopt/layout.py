"""Adopt, step 1b: what each input and output of a graph that already streams is.

After the state pairs, every other input is the waveform (one input (N, 1, T), or a block of L samples per call
in any layout (N, L), (N, 1, L), (L,), whose L - hop samples of context become a state of their own), or a
features input (STFT frames, ERB features: several allowed, each with a time axis: the one named, else its only
symbolic axis, else its only axis of size 1). An input that is none of these (an int or scalar side input such as
Silero's ``sr``) is refused in one line naming it and the option that fixes it (``--const NAME=VALUE``).

Outputs: one value per call ((N, C) or (N,)) streams as one frame per hop; (N, C, T) of a waveform graph has time
last; any other output's time axis is the one named, else the one whose size follows the frames of a call when
the graph is run with one hop and with two (a graph with a dynamic time axis), else its only axis of size 1.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from cosyedge.errors import UsageError
from cosyedge.log import LOG
from cosyedge.surgery.adopt import canon
from cosyedge.surgery.adopt.feeds import StreamTensor
from cosyedge.surgery.adopt.pairs import AdoptedState, _decl_shape, shape_hint


@dataclasses.dataclass
class _Graph:
    """What adopt learned about a graph: streamed inputs and outputs, state pairs (with batch-axis candidates),
    whether it runs one hop per call (then wrapped in a Scan over hops)."""

    ins: list
    outs: list
    states: list
    hop_fixed: bool
    user_axes: dict = dataclasses.field(default_factory=dict)
    """dict[str, tuple[str, list]]: by state input whose batch axis the user gave (``--batch-axis``, ``N`` in
    ``--state NAME=SHAPE``) other than the one the graph tells: (the option as given, the told candidates)."""

    @property
    def audio(self) -> str:
        """str: the first streamed input's name."""
        return self.ins[0].name


def _np_dtype(elem: int) -> str:
    from onnx import helper

    return str(np.dtype(helper.tensor_dtype_to_np_dtype(elem)))


def given_time_axis(name: str, axis: int, shape: list, what: str, where: str) -> int:
    """The time axis ``--time-axis NAME=AXIS`` gives, checked against the tensor's rank (axis 0 is the batch).

    Args:
        name (str): The input or output.
        axis (int): The axis given: 1..rank-1, or -(rank-1)..-1 counted from the end.
        shape (list): Its shape (declared for an input, as run for an output), e.g. ``['N', 1, 160]``.
        what (str): ``"input"`` or ``"output"``, for the message.
        where (str): Name for messages.
    Returns:
        int: the axis, 1..rank-1.
    Raises:
        UsageError: an axis outside the tensor's axes or the batch axis, or a tensor of rank below 2 (no axis besides
            the batch to pick, exit 2).
    """
    rank = len(shape)
    ax = int(axis)
    if rank < 2:
        fix = ("drop --time-axis for it: it streams as one value per call" if what == "output" else
               f"fix its value with --const {name}=VALUE or pair it with --state {name}=OUT if it is no stream")
        raise UsageError(f"{where}: --time-axis {name}={ax}: {what} '{name}' {shape} has no time axis to pick (rank "
                         f"{rank}: {'its only axis is the batch' if rank == 1 else 'a scalar'}): {fix}")
    if not (1 <= ax < rank or -rank < ax <= -1):
        raise UsageError(f"{where}: --time-axis {name}={ax}: {what} '{name}' {shape} has {rank} axes; its time axis is "
                         f"one of axes 1..{rank - 1} (axis 0 is the batch)")
    return ax % rank


def inspect_inputs(model: Any, pairs: list[tuple[str, str]], hop: int, *, frame_samples: int | None,
                   time_axes: dict, batch_axes: dict, init: dict, kinds: dict, state_shapes: dict,
                   where: str, consts: Any = ()) -> tuple[Any, list, _Graph]:
    """Classify the inputs of ``model`` (see the module doc) and check the state pairs.

    Args:
        model (onnx.ModelProto): The graph (constants already fixed).
        pairs (list[tuple[str, str]]): State pairs (input, output).
        hop (int): Samples per hop.
        frame_samples (int | None): Samples per call of a waveform block input (default: its fixed size).
        time_axes (dict[str, int]): Time axis by input/output name.
        batch_axes, init, kinds (dict): By state input name (see :func:`cosyedge.surgery.adopt.adopt`).
        state_shapes (dict[str, tuple[int, ...]]): Shape by state input name where the graph does not tell.
        where (str): Name for messages.
        consts (Iterable[str]): Inputs fixed by ``--const`` (gone from the graph): named as such when an option
            names them.
    Returns:
        tuple[onnx.ModelProto, list, _Graph]: the graph (a block input made a waveform one plus its context
        state), the pairs (with the context pair) and what was found (``outs`` empty: filled after running).
    Raises:
        UsageError: unknown or repeated names, an input left unexplained, a features input without a time axis or
            with a fixed batch above 1, a ``--time-axis`` outside the input's axes (:func:`given_time_axis`) or on a
            state, ``--batch-axis``/``--init``/``--state NAME=SHAPE`` for an input that is no state, an input fixed by
            ``--const`` named by another option, a block shorter than the hop, state pairs of different shapes or
            dtypes.
    """
    ins = {i.name: i for i in model.graph.input}
    outs = {o.name: o for o in model.graph.output}
    fixed = set(consts or ())

    def constant(name: str, opt: str) -> None:
        if name in fixed:
            raise UsageError(f"{where}: {opt}: input '{name}' is fixed by --const {name}=VALUE (a constant, no longer "
                             f"an input of the graph): give one of the two")

    bad_in = [i for i, _ in pairs if i not in ins]
    bad_out = [o for _, o in pairs if o not in outs]
    for i, o in pairs:
        if i in bad_in:
            constant(i, f"--state {i}={o}")
    if bad_in or bad_out:
        what = (f"state input{'s' if len(bad_in) > 1 else ''} {bad_in} not among the inputs {list(ins)}" if bad_in
                else f"state output{'s' if len(bad_out) > 1 else ''} {bad_out} not among the outputs {list(outs)}")
        raise UsageError(f"{where}: {what}{shape_hint(bad_out[0]) if bad_out and not bad_in else ''}")
    for side in (0, 1):
        names = [p[side] for p in pairs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise UsageError(f"{where}: '{dup[0]}' appears in several state pairs")
    paired = {p[0]: p[1] for p in pairs}
    options = [("--batch-axis", batch_axes, "the batch axis of a state input whose shape does not tell"),
               ("--init", init, "the initial value of a state input"), ("kinds", kinds, "the kind of a state"),
               ("--state", state_shapes, "the shape of a state input (NAME=SHAPE)")]
    for opt, given, what in options:
        for name in given:
            shown = f"{opt} {name}={'x'.join(map(str, given[name])) if opt == '--state' else given[name]}"
            constant(name, shown)
            if name not in ins:
                raise UsageError(f"{where}: '{name}' (given for {opt}) is not an input of the graph (inputs: "
                                 f"{list(ins)})")
            if name not in paired:
                raise UsageError(f"{where}: {shown}: input '{name}' is not a state (state inputs: {list(paired)}): "
                                 f"{opt} gives {what}; drop it, or pair '{name}' with its output (--state "
                                 f"{name}=OUT) if it is a state")
    states_out = {o: i for i, o in pairs}
    for name in time_axes:
        constant(name, f"--time-axis {name}={time_axes[name]}")
        if name not in ins and name not in outs:
            raise UsageError(f"{where}: --time-axis {name}=...: no input or output of the graph is named so "
                             f"(inputs {list(ins)}, outputs {list(outs)})")
        if name in paired or name in states_out:
            pair = f"{name}={paired[name]}" if name in paired else f"{states_out[name]}={name}"
            raise UsageError(f"{where}: --time-axis {name}={time_axes[name]}: '{name}' is a state (pair {pair}), "
                             f"carried whole from call to call, not streamed over time: --time-axis is for a "
                             f"features input or output; drop it")
        if name in ins and ins[name].type.tensor_type.HasField("shape"):  # before the input is read any other way
            given_time_axis(name, time_axes[name], _decl_shape(ins[name]), "input", where)
    rest_in = [n for n in ins if n not in paired]
    rest_out = [n for n in outs if n not in {p[1] for p in pairs}]
    if not rest_in:
        raise UsageError(f"{where}: no input is left for the audio or features after the state pairs "
                         f"{[f'{a}={b}' for a, b in pairs]}")
    if not rest_out:
        raise UsageError(f"{where}: every output is a state output: the graph has no audio or features output")
    for n in rest_in:
        shape, dt = _decl_shape(ins[n]), _np_dtype(ins[n].type.tensor_type.elem_type)
        if not shape or not dt.startswith("float"):
            raise UsageError(f"{where}: input '{n}' ({dt} {shape}) is left unexplained (not a state, not audio or "
                             f"features): fix its value with --const {n}=VALUE (e.g. --const sr=16000) or pair it with "
                             f"--state {n}=OUT")
    kinds = dict(kinds)
    pairs = list(pairs)
    streamed: list[StreamTensor] = []
    shape0 = _decl_shape(ins[rest_in[0]])
    time_axes = waveform_time_axis(rest_in, shape0, time_axes, {n: _decl_shape(outs[n]) for n in rest_out}, where)
    layout = canon.waveform_layout(shape0) if len(rest_in) == 1 and rest_in[0] not in time_axes else None
    if layout is not None and frame_samples is None and one_frame_of_features(
            rest_in[0], shape0, {n: _decl_shape(outs[n]) for n in rest_out}, hop, where):
        time_axes = {**time_axes, rest_in[0]: 1}
        layout = None
    if layout is not None:
        name = rest_in[0]
        if isinstance(shape0[0], int) and shape0[0] not in (0, 1) and layout > 1:
            raise UsageError(f"{where}: audio input '{name}' has a fixed batch of {shape0[0]}: export it with batch 1 "
                             f"or a dynamic batch")
        length = shape0[-1]
        fixed = isinstance(length, int) and length > 0
        frame = frame_samples or (length if fixed else hop)
        if fixed and frame != length:
            raise UsageError(f"{where}: --frame-samples {frame}, but audio input '{name}' takes {length} samples per "
                             f"call (shape {shape0})")
        if frame < hop:
            feats = (f"--time-axis {name}=1" if layout == 3 and not frame_samples else
                     f"a time axis: export it as (N, 1, {frame}) and give --time-axis {name}=1")
            raise UsageError(f"{where}: audio input '{name}' takes {frame} samples per call (shape {shape0}), fewer "
                             f"than hop_samples {hop}: give --hop-samples {frame} if it is a waveform block, or, if it "
                             f"is one frame of {frame} features per call, {feats}")
        if not fixed and frame_samples is None:
            LOG.info("%s: audio input '%s' has no fixed length (shape %s): taken as the hop, %d samples per call with "
                     "no context; if the graph wants context samples before the hop, give --frame-samples (e.g. "
                     "Silero: 576 with --hop-samples 512)", where, name, shape0, hop)
        elif fixed and frame_samples is None and length > hop:
            LOG.warning("%s: audio input '%s' takes %d samples per call (shape %s), more than the %d-sample hop: its "
                        "first %d samples are context (the previous calls' last samples, kept as a state); if the "
                        "graph's hop is its block, give --hop-samples %d", where, name, length, shape0, hop,
                        length - hop, length)
        if layout == 3 and frame_samples is None and (not fixed or length == hop):
            streamed.append(StreamTensor(name, "audio", 2, hop, [1, 1, hop], "float32", dynamic_time=not fixed))
            hop_fixed = fixed
        else:  # a block of `frame` samples per call: a waveform input of one hop, plus its context as a state
            model, ctx = canon.frame_input(model, name, frame, hop)
            if ctx:
                pairs.append(ctx)
                kinds[ctx[0]] = "context"
            streamed.append(StreamTensor(name, "audio", 2, hop, [1, 1, hop], "float32"))
            hop_fixed = True
            ins = {i.name: i for i in model.graph.input}
            outs = {o.name: o for o in model.graph.output}
    else:
        for n in rest_in:
            shape = _decl_shape(ins[n])
            if shape and isinstance(shape[0], int) and shape[0] > 1:
                raise UsageError(f"{where}: features input '{n}' has a fixed batch of {shape[0]} ({shape}): export it "
                                 f"with batch 1 or a dynamic batch (adopt runs and proves it one stream at a time)")
            if n in time_axes:
                ta = given_time_axis(n, time_axes[n], shape, "input", where)
            else:
                cands = canon.time_axis_candidates(shape)
                if len(cands) != 1 or len(shape) < 2:
                    raise UsageError(f"{where}: features input '{n}' {shape}: cannot tell its time axis (candidates "
                                     f"{cands}): give --time-axis {n}=AXIS (or --const / --state if it is no stream)")
                ta = cands[0]
            per_hop = [1] + [(d if isinstance(d, int) and d > 0 else 1) for d in shape[1:]]
            dyn = not isinstance(shape[ta], int)
            per_hop[ta] = 1 if dyn else int(shape[ta])
            streamed.append(StreamTensor(n, "features", ta, per_hop[ta], per_hop,
                                         _np_dtype(ins[n].type.tensor_type.elem_type), dynamic_time=dyn))
        hop_fixed = not any(t.dynamic_time for t in streamed)
    states = []
    a_shape = _decl_shape(ins[streamed[0].name])
    a_batch = a_shape[0] if a_shape and isinstance(a_shape[0], str) and a_shape[0] != "?" else None
    user_axes, from_shape = {}, {}
    for i, o in pairs:
        si, so = _decl_shape(ins[i]), _decl_shape(outs[o])
        ei, eo = ins[i].type.tensor_type.elem_type, outs[o].type.tensor_type.elem_type
        if 0 in si and i not in state_shapes:
            from cosyedge.errors import ArtifactError

            raise ArtifactError(f"{where}: the graph declares state input '{i}' {si} with an axis of size 0 (a "
                                f"state of no values): export it with its true sizes")
        decl_si = si
        if ei != eo:
            raise UsageError(f"{where}: state pair {i}={o} has dtypes {_np_dtype(ei)} and {_np_dtype(eo)} (a state "
                             f"output feeds the next chunk's input: dtypes must be equal)")
        if i in state_shapes:
            given = list(state_shapes[i])
            text = "x".join(map(str, given))
            if si and (len(si) != len(given) or any(isinstance(a, int) and a != (1 if b == "N" else b)
                                                    for a, b in zip(si, given))):
                raise UsageError(f"{where}: --state {i}={text} contradicts the graph's shape {si}")
            if "N" in given:  # N marks the batch axis (size 1 at batch 1)
                nax = given.index("N")
                if i in batch_axes and int(batch_axes[i]) % len(given) != nax:
                    raise UsageError(f"{where}: --state {i}={text} puts the batch on axis {nax}, --batch-axis "
                                     f"{i}={batch_axes[i]} on axis {int(batch_axes[i]) % len(given)}: give one")
                batch_axes = {**batch_axes, i: nax}
                from_shape[i] = f"--state {i}={text}"
            si = [1 if d == "N" else d for d in given]
        fixed = len(si) == len(so) or not so
        fixed = fixed and all(a == b for a, b in zip(si, so) if isinstance(a, int) and isinstance(b, int))
        if not fixed:
            raise UsageError(f"{where}: state pair {i}={o} has shapes {si} and {so} (a state output feeds the next "
                             f"chunk's input: shapes must be equal)")
        sym = [k for k, d in enumerate(decl_si if len(decl_si) == len(si) else si)
               if a_batch is not None and d == a_batch]
        ones = [k for k, d in enumerate(si) if d == 1 or isinstance(d, str)]
        told = sym[:1] or ([0] if 0 in ones else []) + [k for k in ones if k != 0] or [None]
        if i in batch_axes:
            ax = int(batch_axes[i])
            if not -len(si) <= ax < len(si):
                raise UsageError(f"{where}: --batch-axis {i}={ax} is outside the state's {len(si)} axes {si}")
            cands = [ax % len(si)]
            if told[0] is not None and cands[0] not in told[:1]:
                user_axes[i] = (from_shape.get(i, f"--batch-axis {i}={batch_axes[i]}"), told)
        else:
            cands = told
        value = float(init.get(i, 0.0))
        dt = _np_dtype(ei)
        if i in init and (not np.isfinite(value) or (dt.startswith("float") and abs(value) > float(np.finfo(dt).max))):
            bound = f" within its range (|x| <= {float(np.finfo(dt).max):.4g})" if dt.startswith("float") else ""
            raise UsageError(f"{where}: --init {i}={init[i]}: the initial value of state '{i}' ({dt}) must be a finite "
                             f"number{bound}")
        st = AdoptedState(i, o, tuple(si), dt, cands[0], value, kinds.get(i, "recurrent"))
        states.append((st, cands))
    given = set(state_shapes) | ({p[0] for p in pairs if kinds.get(p[0]) == "context"} if frame_samples else set())
    check_states_fit([s for s, _c in states], given, where)
    return model, pairs, _Graph(streamed, rest_out, states, hop_fixed, user_axes)


def waveform_time_axis(rest_in: list[str], shape: list, time_axes: dict, outs: dict[str, list], where: str) -> dict:
    """What a ``--time-axis`` given for the only streamed input means when its layout is a waveform block's
    ((N, 1, L), (N, L)): the axis of its samples (the last; -1 counted from the end) keeps it a waveform, so the
    option is dropped; another axis (axis 1 of (N, 1, L), of size 1) reads it as one frame of L features per call,
    as asked, with a warning when an output has the input's shape (a waveform in and out, likely): the file then
    streams features, which ``cosyedge run`` does not take.

    Args:
        rest_in (list[str]): The streamed inputs (not states).
        shape (list): The first one's declared shape.
        time_axes (dict[str, int]): Time axis by name, given.
        outs (dict[str, list]): Declared shapes of the streamed outputs.
        where (str): Name for messages.
    Returns:
        dict[str, int]: ``time_axes``, without the input when the axis given is its samples' axis.
    """
    if len(rest_in) != 1 or rest_in[0] not in time_axes or canon.waveform_layout(shape) not in (2, 3):
        return time_axes
    name = rest_in[0]
    ax = given_time_axis(name, time_axes[name], shape, "input", where)
    if ax == len(shape) - 1:
        return {k: v for k, v in time_axes.items() if k != name}
    same = [o for o, d in outs.items() if len(d) == len(shape) and d[1:] == shape[1:]]
    if same:
        size = shape[-1]
        LOG.warning("%s: --time-axis %s=%s reads input '%s' %s as one frame of %s features per call (time on its "
                    "axis %d of size 1), not as a waveform block, and so its output%s %s of the same shape: the file "
                    "streams features, which 'cosyedge run' (audio files) does not take; if '%s' is a waveform, leave "
                    "--time-axis %s out (its samples are on axis %d)", where, name, time_axes[name], name, shape,
                    size, ax, "s" if len(same) > 1 else "", same, name, name, len(shape) - 1)
    return time_axes


def check_states_fit(states: list[AdoptedState], given: set, where: str, how: str = "declares") -> None:
    """Refuse states that carry more than :data:`cosyedge.artifacts.contract.MAX_STATE_BYTES_PER_STREAM` per stream
    (sizes the graph leaves symbolic count as 1), before any of them is allocated.

    Args:
        states (list[AdoptedState]): The states (shape at batch 1, dtype).
        given (set[str]): State inputs whose shape the user gave (``--state NAME=SHAPE``, the context of
            ``--frame-samples``): the largest state among them is a bad argument (UsageError, exit 2); else the
            graph is to blame (ArtifactError, exit 3).
        where (str): Name for messages.
        how (str): How the graph gives the shapes (``"declares"``, ``"gives when run"``), for the message.
    Raises:
        UsageError | ArtifactError: see ``given``.
    """
    from cosyedge.artifacts.contract import MAX_STATE_BYTES_PER_STREAM, check_state_bytes, state_nbytes
    from cosyedge.errors import ArtifactError

    named = [(s.input, list(s.shape), s.dtype) for s in states]
    sizes = {n: state_nbytes(shape, dt) for n, shape, dt in named}
    if sum(sizes.values()) <= MAX_STATE_BYTES_PER_STREAM:
        return
    big = max(sizes, key=sizes.get)
    if big in given:
        check_state_bytes(named, where, UsageError, fix=f"give the state's true sizes at batch 1 (--state {big}=SHAPE)"
                          if big in {s.input for s in states if s.kind != "context"} else
                          "give a smaller --frame-samples")
    check_state_bytes(named, where, ArtifactError, fix=f"the graph {how} state '{big}' this large; export it with "
                                                       f"smaller states")


def one_frame_of_features(name: str, shape: list, outs: dict[str, list], hop: int, where: str) -> bool:
    """Whether the only streamed input ``name``, of a waveform block's layout, is one frame of features per call.

    A graph that takes one frame of F features per call (an already-streaming encoder over mel or STFT frames with
    its caches) declares its input (N, 1, F), the layout of a waveform block of F samples. What tells them apart
    holds for any graph: a waveform block is at least one hop long (the samples before the hop are context), so
    F < ``hop`` samples is one frame of F features, read with time on axis 1. With F >= ``hop`` both readings run:
    when every streamed output is declared one frame of D > 1 values (N, 1, D) with D < ``hop`` (no waveform at the
    hop, no one value per call), the graph is refused, naming both choices, instead of being silently adopted as a
    waveform block whose outputs are one channel of D frames per hop.

    Args:
        name (str): The input.
        shape (list): Its declared shape, e.g. ``['N', 1, 80]`` (ints fixed, strings symbolic).
        outs (dict[str, list]): Declared shapes of the streamed (non-state) outputs by name (``[]``: undeclared).
        hop (int): Samples per hop the user gave.
        where (str): Name for messages.
    Returns:
        bool: True to read the input as one frame of features (time axis 1); False to keep the waveform reading
        (any other layout, a symbolic length, or a block of at least a hop whose outputs do not say otherwise).
    Raises:
        UsageError: a block of at least a hop whose outputs are all one frame of fewer than ``hop`` values, or one
            shorter than the hop with an output of its shape (a waveform in and out at the wrong hop, likely), naming
            both fixes (exit 2).
    """
    if len(shape) != 3 or shape[1] != 1 or not isinstance(shape[2], int) or shape[2] <= 0:
        return False
    size = shape[2]
    same = [o for o, d in outs.items() if len(d) == 3 and d[1:] == shape[1:]]
    if size < hop and same:
        raise UsageError(f"{where}: input '{name}' {shape} takes {size} values per call, fewer than the {hop}-sample "
                         f"hop, and output{'s' if len(same) > 1 else ''} {same} ha{'ve' if len(same) > 1 else 's'} its "
                         f"shape: it is a waveform block of {size} samples (give --hop-samples {size}) or one frame of "
                         f"{size} features per call (give --time-axis {name}=1)")
    if size < hop:
        LOG.info("%s: input '%s' (shape %s) takes %d values per call, fewer than the %d-sample hop, so it is no "
                 "waveform block: read as one frame of %d features per call (time axis 1, one frame per hop); if it "
                 "is a waveform block of %d samples, give --hop-samples %d", where, name, shape, size, hop, size, size,
                 size)
        return True
    frames = [(o, d) for o, d in outs.items() if len(d) == 3 and d[1] == 1 and isinstance(d[2], int)]
    if outs and len(frames) == len(outs) and all(1 < d[2] < hop for _o, d in frames):
        block = f"{size - hop} of them context before the {hop}-sample hop" if size > hop else "one hop"
        said = ", ".join(f"{o} {d}" for o, d in frames)
        raise UsageError(f"{where}: input '{name}' {shape} is a waveform block of {size} samples ({block}) or one "
                         f"frame of {size} features per call, and its outputs ({said}) give no waveform at the hop: "
                         f"give --time-axis {name}=1 if it is one frame of features per call, or --frame-samples "
                         f"{size} if it is a waveform block")
    return False


def output_tensors(model_outs: dict, first: dict, second: dict | None, g: _Graph, hop: int, time_axes: dict,
                   where: str) -> tuple[list[StreamTensor], dict[str, int]]:
    """The streamed outputs, from one call of one hop (``first``) and, for a graph with a dynamic time axis, one of
    two hops (``second``).

    Args:
        model_outs (dict): Graph outputs (ValueInfoProto) by name.
        first (dict[str, np.ndarray]): Outputs of one call of one hop.
        second (dict[str, np.ndarray] | None): Outputs of one call of two hops (dynamic time only).
        g (_Graph): The graph's inputs (``outs`` holds the output names).
        hop (int): Samples per hop.
        time_axes (dict[str, int]): Time axis by output name, given.
        where (str): Name for messages.
    Returns:
        tuple[list[StreamTensor], dict[str, int]]: the outputs (after the per-call Reshape of
        :func:`canon.per_call_outputs_to_frames`) and the ranks of those given one value per call.
    Raises:
        UsageError: an output whose time axis cannot be told, or a ``--time-axis`` outside its axes
            (:func:`given_time_axis`).
    """
    res, per_call = [], {}
    waveform = g.ins[0].kind == "audio"
    for o in g.outs:
        a = first[o]
        shape = list(a.shape)
        if o in time_axes:
            ta = given_time_axis(o, time_axes[o], shape, "output", where)
        elif a.ndim <= 2:
            per_call[o] = a.ndim
            shape = [shape[0] if shape else 1, shape[1] if a.ndim == 2 else 1, 1]
            ta = 2
        elif second is not None:
            grow = [k for k in range(a.ndim) if second[o].shape[k] != a.shape[k]]
            if len(grow) != 1:
                raise UsageError(f"{where}: output '{o}' {shape}: cannot tell its time axis (axes {grow} change with the "
                                 f"frames of a call): give --time-axis {o}=AXIS")
            ta = grow[0]
        elif waveform and a.ndim == 3:
            ta = 2
            if a.shape[1] == 1 and a.shape[2] > hop:
                raise UsageError(f"{where}: output '{o}' gives {a.shape[2]} samples per call {shape}, more than the "
                                 f"{hop}-sample hop: it cannot be a waveform at the hop (give the graph's hop, "
                                 f"--hop-samples {a.shape[2]}, or its time axis with --time-axis {o}=AXIS if it is "
                                 f"not audio; if input '{g.audio}' is one frame of features per call, give "
                                 f"--time-axis {g.audio}=1)")
        else:
            ones = [k for k in range(1, a.ndim) if a.shape[k] == 1]
            if len(ones) != 1:
                raise UsageError(f"{where}: output '{o}' {shape}: cannot tell its time axis (axes of size 1: {ones}): "
                                 f"give --time-axis {o}=AXIS")
            ta = ones[0]
        shape[0] = 1
        kind = "audio" if len(shape) == 3 and ta == 2 and shape[1] == 1 and shape[2] == hop else "features"
        dt = _np_dtype(model_outs[o].type.tensor_type.elem_type)
        res.append(StreamTensor(o, kind, ta, int(shape[ta]), shape, dt,
                                dynamic_time=second is not None and o not in per_call))
    return res, per_call
