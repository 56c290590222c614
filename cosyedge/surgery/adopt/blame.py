"""What adopt says the user got wrong: a batch axis given that keeps the graph from batching, a ``--state`` pair whose
output is no state of it, and the ``--state NAME=SHAPE`` example for a state whose shape the graph does not tell.
"""

from __future__ import annotations

from typing import Any

from cosyedge.errors import UsageError, first_line
from cosyedge.surgery.adopt.batch import _batch_test, _dynamic_batch
from cosyedge.surgery.adopt.pairs import AdoptedState, _decl_shape
from cosyedge.surgery.adopt.wrap import _rename_and_wrap


def blame_user_axes(model: Any, g: Any, states: list[AdoptedState], streamed_names: list[str], feed: dict,
                    atol: float, hop: int, why_fixed: str, where: str) -> None:
    """Refuse a batch axis the user gave (``--batch-axis``, ``N`` in ``--state NAME=SHAPE``) when it is what keeps
    the graph from a dynamic batch: with the axis the graph tells for those states instead, the batch test passes
    (batch 2 == two streams at batch 1). Returns when it fails that way too (the graph is to blame: the Scan over
    streams follows, as without the option).

    Args:
        model (onnx.ModelProto): The canonical graph.
        g (_Graph): What adopt found (``user_axes``: the options and the told axes).
        states (list[AdoptedState]): The states (batch axes as given); restored before returning.
        streamed_names (list[str]): Streamed inputs and outputs.
        feed (dict): The proof's inputs.
        atol (float): Proof tolerance.
        hop (int): Samples per hop.
        why_fixed (str): Why the given axes fail the batch test.
        where (str): Name for messages.
    Raises:
        UsageError: naming the option and the axis that batches (exit 2).
    """
    saved = [s.batch_axis for s in states]
    try:
        for s in states:
            if s.input in g.user_axes:
                s.batch_axis = g.user_axes[s.input][1][0]
        dyn, _ = _dynamic_batch(model, streamed_names, states)
        cand = _rename_and_wrap(dyn, g.ins, g.outs, states, dynamic=True, scan=g.hop_fixed, hop=hop)
        why = _batch_test(cand, g.ins, g.outs, states, feed, atol)
    except Exception as err:  # noqa: BLE001 - it does not batch that way either: the graph is to blame
        why = first_line(err) or type(err).__name__
    told = {s.input: s.batch_axis for s in states if s.input in g.user_axes}
    for s, ax in zip(states, saved):
        s.batch_axis = ax
    if why:
        return
    opts, fixes = [], []
    for s in states:
        if s.input not in g.user_axes:
            continue
        opt = g.user_axes[s.input][0]
        opts.append(opt)
        if opt.startswith("--state"):
            dims = [str(d) for d in s.shape]
            dims[told[s.input]] = "N"
            fixes.append(f"--state {s.input}={'x'.join(dims)}")
        else:
            fixes.append(f"--batch-axis {s.input}={told[s.input]}")
    axes = ", ".join(f"'{k}' on axis {v}" for k, v in told.items())
    raise UsageError(f"{where}: {' '.join(opts)} keep{'s' if len(opts) == 1 else ''} the graph from a dynamic batch "
                     f"({why_fixed}), while with the batch axis the graph tells ({axes}) batch 2 runs as two streams "
                     f"at batch 1: give {' '.join(fixes)} (or leave the batch axis out)")


def misplaced_pairs(model: Any, given: list[tuple[str, str]], g: Any) -> tuple[str, str]:
    """What is wrong with a state pair the user gave (``--state IN=OUT``) whose output is no state of it, for the
    message of a proof that finds no state dependence; '' when no given pair looks so.

    A given output is suspect when it is not named as the input's new state (``cache`` -> ``new_cache``...) and either
    an output left to stream is (the pair took the audio output, the real state output streams instead), or it has
    the audio input's declared shape (it is likely the audio output).

    Args:
        model (onnx.ModelProto): The canonical graph (declared shapes).
        given (list[tuple[str, str]]): The pairs the user gave.
        g (_Graph): What adopt found (``ins``, ``outs``: the streamed tensors).
    Returns:
        tuple[str, str]: what is wrong (``"--state cache=enhanced pairs state 'cache' with output 'enhanced', which is
        no state of it"``) and why and the fix (``"'enhanced' ... is likely the audio output; ..."``); ('', '') when
        no given pair looks wrong.
    """
    from cosyedge.surgery.adopt.pairs import _name_candidates

    decl = {v.name: _decl_shape(v) for v in list(model.graph.input) + list(model.graph.output)}
    streamed = [getattr(t, "name", t) for t in g.outs]  # names before the outputs are read, tensors after
    audio = g.ins[0].name if g.ins and g.ins[0].kind == "audio" else None
    for i, o in given:
        names = _name_candidates(i)
        if o in names:
            continue
        conv = next((c for c in names if c in streamed), None)
        like_audio = audio is not None and decl.get(o) and decl.get(o) == decl.get(audio)
        if not conv and not like_audio:
            continue
        why = []
        if like_audio:
            why.append(f"'{o}' {decl[o]} has the shape of the audio input '{audio}', so it is likely the audio output")
        why.append(f"'{conv}' is named as {i}'s new state: give --state {i}={conv} (or leave the pair out: it is "
                   f"found by its name)" if conv else
                   f"give --state {i}=OUT with the output that holds {i}'s new state")
        return f"--state {i}={o} pairs state '{i}' with output '{o}', which is no state of it", "; ".join(why)
    return "", ""


def state_shape_example(name: str, decl: list | None, batch_sym: str | None = None) -> str:
    """The example of ``--state NAME=SHAPE`` a message gives for a state whose shape the graph does not tell: a form
    :func:`split_state_args` takes (digits, ``N`` on the batch axis), never a placeholder alone.

    Args:
        name (str): The state input.
        decl (list | None): Its declared shape (ints fixed, strings symbolic), None for an unknown rank.
        batch_sym (str | None): The streamed input's symbolic batch name (its axis is written ``N``); else a symbol
            named ``N`` is the batch.
    Returns:
        str: e.g. ``"e.g. --state h=1xNx32"``, ``"Nx1xL with a number for L, N on the batch axis, e.g. --state
        cache=Nx1x64"``, or ``"all its sizes at batch 1, e.g. 1x64"`` for an unknown rank.
    """
    if decl is None:
        return "all its sizes at batch 1, e.g. 1x64"
    batch = batch_sym if batch_sym and batch_sym in decl else "N"
    dims, holes, nax = [], [], None
    for k, d in enumerate(decl):
        if isinstance(d, int) and d > 0:
            dims.append(str(d))
        elif d == batch and nax is None:
            dims.append("N")
            nax = k
        else:
            hole = d if isinstance(d, str) and d.isalpha() and d not in ("N", "x") and d not in holes else f"D{k}"
            holes.append(hole)
            dims.append(hole)
    form = "x".join(dims)
    if not holes:
        return f"e.g. --state {name}={form}"
    example = "x".join("64" if d in holes else d for d in dims)
    return (f"{form} with {'a number' if len(holes) == 1 else 'numbers'} for {', '.join(holes)}"
            f"{', N on the batch axis' if nax is not None else ''}, e.g. --state {name}={example}")
