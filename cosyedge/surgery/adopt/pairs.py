"""Adopt, step 1: the state pairs of a graph that already streams, given (``IN=OUT``) or found from names and metadata.

Names: ``x_in``/``x_out``, ``h_in``/``h_out``, ``cache``/``new_cache``, ``states_in``/``states_out``, a
``state``/``cache``/``hidden``-named input whose output is the only one with its shape, or a ``state_pairs``
entry in the model metadata; an ambiguous or missing pairing is refused in one line naming the candidates.

Source: k2-fsa/icefall ``onnx_pretrained-streaming.py`` (cache/new_cache naming).
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from cosyedge.errors import UsageError

_STATE_WORDS = ("state", "cache", "hidden", "memory")


@dataclasses.dataclass
class AdoptedState:
    """One state pair of the original graph.

    Attributes:
        input (str): Original input name (e.g. DTLN's ``input_3``).
        output (str): Original output name (e.g. ``tf_op_layer_stack_2``).
        shape (tuple[int, ...]): Shape at batch 1 in the original layout, e.g. (1, 2, 128, 2).
        dtype (str): numpy dtype name.
        batch_axis (int | None): Batch axis in the original layout; None for a batch-1 graph whose state
            has no batch axis.
        init (float): Initial value of every element.
        kind (str): :attr:`cosyedge.artifacts.StateSpec.kind` of the contract entry.
    """

    input: str
    output: str
    shape: tuple
    dtype: str = "float32"
    batch_axis: int | None = 0
    init: float = 0.0
    kind: str = "recurrent"


def parse_state_pairs(values: Any) -> list[tuple[str, str]]:
    """Parse state pairs given as ``"IN=OUT"`` strings, ``(IN, OUT)`` tuples or a dict ``{IN: OUT}``.

    Args:
        values (Iterable[str | tuple[str, str]] | dict[str, str] | None): The pairs.
    Returns:
        list[tuple[str, str]]: (input name, output name) pairs, in the given order.
    Raises:
        UsageError: a string without ``=`` or with an empty side.
    """
    if not values:
        return []
    if isinstance(values, dict):
        return [(str(k), str(v)) for k, v in values.items()]
    pairs = []
    for v in values:
        if isinstance(v, str):
            name, sep, out = v.partition("=")
            if not sep or not name or not out:
                raise UsageError(f"a state pair is IN=OUT (input name = output name, e.g. h_in=h_out), got '{v}'")
            pairs.append((name, out))
        else:
            a, b = v
            pairs.append((str(a), str(b)))
    return pairs


_SHAPE = re.compile(r"^(\d+|N)(x(\d+|N))*$")
"""A ``--state NAME=SHAPE``: sizes at batch 1 joined by ``x``, ``N`` on the batch axis (``2x1x128``, ``1xNx32``)."""


def split_state_args(values: Any) -> tuple[list[tuple[str, str]], dict[str, tuple]]:
    """Split ``--state`` values into pairs (``IN=OUT``) and shapes (``NAME=SHAPE``, e.g. ``state=2x1x128``: the
    state input's shape at batch 1 where the graph does not tell it; ``N`` marks the batch axis, e.g. ``h=1xNx32``,
    size 1 at batch 1; ``N`` alone is read as an output name).

    Args:
        values (Iterable[str | tuple[str, str]] | dict[str, str] | None): The values.
    Returns:
        tuple[list[tuple[str, str]], dict[str, tuple]]: the pairs and the shapes by input name (ints, and the
        string ``"N"`` on the batch axis where given).
    Raises:
        UsageError: a string without ``=`` or with an empty side, a SHAPE with a size below 1 (e.g. 0x4) or more
            than one ``N``, a name given twice as a shape or in two pairs.
    """
    if not values or isinstance(values, dict):
        return parse_state_pairs(values), {}
    pairs, shapes = [], {}
    for v in values:
        name, _, right = v.partition("=") if isinstance(v, str) else ("", "", "")
        if name and _SHAPE.match(right) and right != "N":
            dims = tuple(d if d == "N" else int(d) for d in right.split("x"))
            if dims.count("N") > 1:
                raise UsageError(f"--state {v}: N marks the one batch axis of SHAPE, given {dims.count('N')} times "
                                 f"(e.g. {name}=1xNx32)")
            if any(d != "N" and d < 1 for d in dims):
                raise UsageError(f"--state {v}: SHAPE is D1xD2x... of positive integers (all sizes at batch 1, "
                                 f"e.g. {name}=1x64), got a size of 0")
            if name in shapes:
                raise UsageError(f"--state {name}=SHAPE is given twice ({'x'.join(map(str, shapes[name]))} and "
                                 f"{right}): give it once")
            shapes[name] = dims
        else:
            pairs.extend(parse_state_pairs([v]))
    for side, what in ((0, "input"), (1, "output")):
        names = [p[side] for p in pairs]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            raise UsageError(f"--state: state {what} '{dup}' is given in several pairs "
                             f"({', '.join(f'{a}={b}' for a, b in pairs if (a, b)[side] == dup)}): give it once")
    return pairs, shapes


def shape_hint(right: str) -> str:
    """A hint for a ``--state`` right side that looks like a malformed SHAPE (digits, ``N`` and 'x', e.g. ``1xq``,
    ``Nx1xL``: a placeholder left in; sizes joined otherwise, ``nx1x160``, ``1X1X160``, ``1,1,160``: the form
    meant), else ''."""
    if not re.match(r"^(\d+|N)x", right):
        parts = re.split(r"[xX*,\u00d7]", right.strip())
        if len(parts) < 2 or sum(t.strip().isdigit() for t in parts) * 2 < len(parts):
            return ""  # no size list: an output name
        norm = "x".join("N" if t.strip() in ("n", "N") else t.strip() for t in parts)
        if _SHAPE.match(norm) and norm.count("N") <= 1 and "0" not in norm.split("x"):
            return (f" (if it is a shape: SHAPE is sizes joined by a lowercase 'x', N (capital) on the batch axis: "
                    f"{norm})")
        bad = [t for t in parts if not (t.strip().isdigit() or t.strip() in ("n", "N"))]
        which = (", ".join(repr(t) for t in bad) + (" is no size" if len(bad) == 1 else " are no sizes")) if bad else ""
        return (" (if it is a shape: SHAPE is D1xD2x... of positive integers, N on the batch axis, e.g. 1x64 or Nx64"
                f"{'; ' + which if which else ''})")
    bad = [t for t in right.split("x") if not (t.isdigit() or t == "N")]
    which = ", ".join(repr(t) for t in bad) + (" is no size" if len(bad) == 1 else " are no sizes")
    return (" (if it is a shape: SHAPE is D1xD2x... of positive integers, N on the batch axis, e.g. 1x64 or Nx64"
            f"{'; ' + which if bad else ''})")


def _name_candidates(name: str) -> list[str]:
    """Output names a state input ``name`` conventionally pairs with (x_in -> x_out, cache -> new_cache ...)."""
    out = []
    for pat, rep in ((r"_in$", "_out"), (r"\.in$", ".out"), (r"^in_", "out_"), (r"_in_", "_out_"), (r"In$", "Out"),
                     (r"_input$", "_output"), (r"^input_", "output_")):
        if re.search(pat, name):
            out.append(re.sub(pat, rep, name, count=1))
    for pre in ("new_", "next_", "updated_", "out_"):
        out.append(pre + name)
    for suf in ("_new", "_next", "_out", "_updated", "N", "n"):  # Silero: state -> stateN, h -> hn, c -> cn
        out.append(name + suf)
    return list(dict.fromkeys(out))


def _metadata_pairs(model: Any) -> list[tuple[str, str]]:
    meta = {p.key: p.value for p in model.metadata_props}
    raw = meta.get("state_pairs") or meta.get("states")
    if not raw:
        return []
    try:
        val = json.loads(raw)
    except json.JSONDecodeError:
        val = [v.strip() for v in raw.split(",") if v.strip()]
    try:
        return parse_state_pairs(val)
    except (UsageError, TypeError, ValueError):
        return []


def _decl_shape(vi: Any) -> list:
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return []
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim]


def find_state_pairs(model: Any, where: str = "model", given: list | None = None) -> list[tuple[str, str]]:
    """Find the state pairs of an already-streaming graph from its metadata and name conventions.

    Args:
        model (onnx.ModelProto): The graph.
        where (str): Name for messages.
        given (list[tuple[str, str]] | None): Pairs given by the user: kept first, their names not searched;
            then finding none more is not an error.
    Returns:
        list[tuple[str, str]]: (input, output) pairs in input order.
    Raises:
        UsageError: an input could pair with several outputs, or several inputs with one output (the line
            names the candidates), or no pair is found (the line lists inputs and outputs).
    """
    given = list(given or [])
    ins = [i.name for i in model.graph.input if i.name not in {a for a, _ in given}]
    outs = [o.name for o in model.graph.output if o.name not in {b for _, b in given}]
    meta = _metadata_pairs(model)
    if meta and not given:
        return meta
    shapes_in = {i.name: (_decl_shape(i), i.type.tensor_type.elem_type) for i in model.graph.input}
    shapes_out = {o.name: (_decl_shape(o), o.type.tensor_type.elem_type) for o in model.graph.output}
    pairs: dict[str, str] = {}
    for name in ins:
        cands = [c for c in _name_candidates(name) if c in outs]
        if len(cands) > 1:
            raise UsageError(f"{where}: state input '{name}' could pair with outputs {cands}: give the pair, e.g. "
                             f"--state {name}={cands[0]}")
        if cands:
            pairs[name] = cands[0]
    taken = set(pairs.values())
    for name in ins:
        if name in pairs or not any(w in name.lower() for w in _STATE_WORDS):
            continue
        same = [o for o in outs if o not in taken and shapes_out[o] == shapes_in[name] and shapes_in[name][0]]
        if len(same) > 1:
            raise UsageError(f"{where}: state input '{name}' {shapes_in[name][0]} could pair with outputs {same} "
                             f"(same shape): give the pair, e.g. --state {name}={same[0]}")
        if same:
            pairs[name] = same[0]
            taken.add(same[0])
    rev: dict[str, list[str]] = {}
    for i, o in pairs.items():
        rev.setdefault(o, []).append(i)
    dup = next(((o, i) for o, i in rev.items() if len(i) > 1), None)
    if dup:
        raise UsageError(f"{where}: inputs {dup[1]} all pair with output '{dup[0]}': give the pairs with --state IN=OUT")
    if not pairs and given:
        return given
    if not pairs:
        raise UsageError(f"{where}: found no state pairs (inputs {ins}, outputs {outs}; no x_in/x_out, cache/new_cache "
                         f"or state-named input whose output has its shape): give them with --state IN=OUT")
    return given + [(i, pairs[i]) for i in ins if i in pairs]
