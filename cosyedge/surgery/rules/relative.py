"""Relative positions with ``rel_shift`` (Transformer-XL) under a bounded attention mask: computed from the chunk's
own relative positions.

Relative-position attention (Transformer-XL, arXiv:1901.02860 section 3.3 and appendix B) adds to the content scores
``matrix_ac = (q + u) @ k^T`` (N, H, T, T) a position term ``matrix_bd = (q + v) @ p^T`` (N, H, T, 2T - 1), where ``p``
(1, H, 2T - 1, d) projects a sinusoidal table of the relative positions ``T - 1 .. -(T - 1)``, then ``rel_shift`` (pad
one zero column, view as (N, H, 2T, T), drop the first row, view back, keep T columns) moves entry (i, i - r) to the
column of relative position r, so that the term's entry (i, j) is ``(q_i + v) . p[i - j]``. Sources: NeMo
``nemo/collections/asr/parts/submodules/multi_head_attention.py`` (``RelPositionalEncoding``: ``pe[:, center - T :
center + T - 1]`` of a table of ``2 max_len - 1`` rows; ``RelPositionMultiHeadAttention.rel_shift``); ESPnet
``espnet/nets/pytorch_backend/transformer/{embedding,attention}.py`` and CosyVoice
``cosyvoice/transformer/{embedding,attention}.py`` (``EspnetRelPositionalEncoding``: ``pe[:, L // 2 - T + 1 :
L // 2 + T]``; ``rel_shift`` by a zero Concat, keeping ``x.size(-1) // 2 + 1`` columns).

The full graph's tensors over time x (2T - 1) have two growing axes, one twice as fast
(:attr:`cosyedge.surgery.facts.TimeFact.axes_rel`): no chunk of them exists. What does exist: under a bounded mask
(a window of ``W`` frames, or chunks of ``C`` frames with ``n`` left chunks, :mod:`cosyedge.surgery.masks`) a query
sees only keys at relative positions ``i - j`` in a fixed range ``[r_min, r_max]`` (``[0, W - 1]``, ``[-(C - 1),
(n + 1) C - 1]``). So, on a chunk of ``F`` frames with ``L`` cached keys, the term is computed as:

* ``P`` = the positional operand of ``matrix_bd`` (e.g. ``p^T``) at the relative positions ``r_min .. r_max``: a
  **constant** (N-independent, (1, H, d, R), R = r_max - r_min + 1), read from the probe runs;
* ``B = q_v @ P`` (N, H, F, R), the same MatMul on the chunk's queries;
* ``term[i, j] = B[i, clip(i + L - lead - j - r_min, 0, R - 1)]`` (``GatherElements`` over the last axis): key slot
  ``j`` of the chunk (cache first) is ``i + L - lead - j`` frames before query ``i`` (``lead``: frames the keys run
  ahead of the queries, a band that looks ahead or per-frame chunked attention; else 0). Entries outside ``[r_min, r_max]`` are hidden
  by the attention's mask (:func:`cosyedge.surgery.rules.attention_mask.vis3`); the clip only keeps them finite.

Everything is measured, not matched to one exporter's op sequence (:func:`find` and :func:`chunk_term`):

* ``matrix_bd``: a MatMul of a streaming tensor (queries, time on axis -2) and a tensor whose last axis holds
  ``2 T - 1`` entries at both probe lengths (T the queries' frames), computed from the sequence length only (every
  path back to the inputs passes ``Shape``, :meth:`cosyedge.surgery.masks.MaskEvaluator.data_path`);
* that operand is **centred**: its middle ``2 T1 - 1`` entries at the longer probe equal its entries at the shorter
  one, so entry ``T - 1 - r`` is relative position ``r`` at every length (a table counted from the sequence's start
  or end, as ESPnet's legacy encoding, is not);
* the ops from ``matrix_bd`` to the term over query x key time move data only (Pad, Reshape, Slice, Concat with
  shape-only zeros, Transpose, ...), and at both probe lengths the term's entry (i, j) equals ``matrix_bd[i, T - 1 -
  (i - j)]`` (or ``T - 1 + (i - j)``, a table in the other order) at every entry the mask leaves visible; a Mul or Div
  of the shifted term alone by a shape-only factor (``rel_shift(bd) / sqrt(d)``) is applied again to the chunk's.

What does not fit is refused with the reason (closed world); without a bounded mask, the attention's own rule refuses
it (unlimited context: ``--attention-window``; full attention: not streamable).
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.log import plural
from cosyedge.surgery.rules import Blocker

gs = lazy_import("onnx_graphsurgeon")

MOVE_OPS = frozenset("Pad Reshape Slice Concat Transpose Squeeze Unsqueeze Identity Flatten Expand".split())
"""frozenset[str]: ops that only move entries; the ops from ``matrix_bd`` to its relative-shifted term must be these."""


@dataclasses.dataclass
class RelTerm:
    """One relative-position term: the score node ``matrix_bd``, its positional operand, the term over query x key.

    Attributes:
        node (Any): The MatMul making ``matrix_bd`` (queries x 2T - 1 relative positions).
        pos (Any): Its positional operand (input 1: relative positions on its last axis).
        bd (Any): Its output (the tensor with :attr:`TimeFact.axes_rel`).
        term (Any): The tensor over query x key time added to the content scores (``shifted`` after ``tail``).
        chain (list): The movement nodes from ``bd`` to ``shifted``.
        shifted (Any): The rel_shift's result (query x key); ``term`` is it after ``tail``.
        tail (list): Mul/Div nodes by shape-only factors from ``shifted`` to ``term`` (``rel_shift(bd) / sqrt(d)``),
            applied again to the chunk's term.
        sign (int): +1 when column ``T - 1 - r`` is relative position ``r`` (NeMo, ESPnet), -1 for ``T - 1 + r``
            (set by :func:`chunk_term` once the chain is checked).
    """

    node: Any
    pos: Any
    bd: Any
    term: Any
    chain: list
    shifted: Any = None
    tail: list = dataclasses.field(default_factory=list)
    sign: int = 0


def find(ctx: Any) -> None:
    """Find every relative-position term of the graph before the walk: fill ``ctx.attention.relative`` ({term name:
    :class:`RelTerm`}) and ``ctx.attention.relative_nodes`` (names of the nodes the walk leaves alone: ``matrix_bd``,
    the ``rel_shift`` ops and whatever only computes the positional operand or their shapes; they become dead once the
    attention rule puts :func:`chunk_term` in place of the term). A ``matrix_bd`` whose ops do not fit is recorded as a
    blocker (``ctx.blockers``) naming why, its nodes left alone too (no second message for the same cause)."""
    ctx.attention.relative, ctx.attention.relative_nodes = {}, set()
    if ctx.masks is None:
        return
    for node in list(ctx.graph.nodes):
        outs = [o for o in node.outputs if o.name]
        if len(outs) != 1 or not (ctx.fact(outs[0]).axes_rel is not None or _shifted_square(node, ctx)):
            continue
        if any(ctx.fact(t).axes_rel is not None for t in node.inputs if t.name):
            continue  # inside a chain: reached from its matrix_bd
        chain: list = []
        try:
            term = _match(node, ctx, chain)
        except Blocker as err:
            ctx.blockers.append(f"{node.op} node '{node.name}': {err}")
            ctx.attention.relative_nodes.update(n.name for n in [node] + chain)
            continue
        ctx.attention.relative[term.term.name] = term
        ctx.attention.relative_nodes.update(n.name for n in [node] + chain + term.tail)
    if ctx.attention.relative_nodes:
        _sweep(ctx)


def _users(t: Any) -> list:
    """The consumers of ``t`` that read its values (a ``Shape``/``Size`` only reads its shape, for the reshapes)."""
    return [c for c in t.outputs if c.op not in ("Shape", "Size")]


def _shifted_square(node: Any, ctx: Any) -> bool:
    """bool: ``node`` is a MatMul of two streaming tensors making a tensor over query x key time whose one consumer
    moves its entries into a tensor no attention rule takes (two growing axes of different sizes): ESPnet's legacy
    ``rel_shift`` of ``matrix_bd`` over T positions (zero column, view (T + 1, T))."""
    out = node.outputs[0] if node.outputs else None
    if node.op != "MatMul" or out is None or not out.name or ctx.fact(out).axes2 is None:
        return False
    users = _users(out)
    if len(users) != 1 or users[0].op not in MOVE_OPS:
        return False
    nxt = [o for o in users[0].outputs if o.name]
    return len(nxt) == 1 and ctx.fact(nxt[0]).axes2 is None and bool(ctx.fact(nxt[0]).error)


def _match(node: Any, ctx: Any, chain: list) -> RelTerm:
    """:class:`RelTerm` of ``matrix_bd`` ``node`` (module doc); ``chain`` gets the movement nodes as they are found.

    Raises:
        Blocker: the node is not a MatMul of queries and a shape-only positional operand, or the ops after it are not
            movement ops leading to one tensor over query x key time.
    """
    out = node.outputs[0]
    fo = ctx.fact(out)
    if node.op != "MatMul" or len(node.inputs) != 2:
        raise Blocker(f"{node.op} makes a tensor over time x (2T - 1) relative positions (Transformer-XL matrix_bd); "
                      "only a MatMul of queries and projected relative positions is streamed")
    q, pos = node.inputs
    fq, fp = ctx.fact(q), ctx.fact(pos)
    rank = len(fo.shape1)
    if (fo.axes_rel or fo.axes2) != (rank - 2, rank - 1) or not fq.is_stream or fq.axis != len(fq.shape1) - 2 \
            or ctx.fact(pos).axis != len(fp.shape1) - 1:
        raise Blocker(f"a MatMul over time x (2T - 1) relative positions with time on axes {fo.axes_rel or fo.axes2} of "
                      f"{list(fo.shape1)}: not queries (time on axis -2) x relative positions (on the last axis)")
    why = ctx.masks.data_path(pos.name)
    if why:
        raise Blocker(f"its relative positions '{pos.name}' depend on the values of {why}, not only on the sequence "
                      "length: refused, not guessed")
    t = out
    while t is out or ctx.fact(t).axes2 is None:
        users = _users(t)
        if len(users) != 1 or t.name in {o.name for o in ctx.graph.outputs}:
            raise Blocker(f"its scores over relative positions '{t.name}' are used by {plural(len(users), 'node')} "
                          "(the "
                          "rel_shift streamify follows is one chain of Pad/Reshape/Slice ops to query x key scores)")
        c = users[0]
        if c.op not in MOVE_OPS:
            raise Blocker(f"{c.op} node '{c.name}' computes on its scores over relative positions before they become "
                          f"query x key scores (only ops that move entries, {', '.join(sorted(MOVE_OPS))}, are "
                          "followed: the rel_shift)")
        for x in c.inputs:
            if x is not t and x.name and ctx.masks.data_path(x.name):
                raise Blocker(f"{c.op} node '{c.name}' of its rel_shift takes '{x.name}', which depends on the data")
        chain.append(c)
        nxt = [o for o in c.outputs if o.name]
        if len(nxt) != 1:
            raise Blocker(f"{c.op} node '{c.name}' of its rel_shift has {plural(len(nxt), 'output')}")
        t = nxt[0]
        f = ctx.fact(t)
        if f.axes2 is None and f.axes_rel is None and not f.error:  # two growing axes of other sizes: on the way
            raise Blocker(f"its rel_shift ends in '{t.name}' of shape {list(f.shape1)}, not query x key scores")
    while len(_users(t)) == 1 and _users(t)[0].op in MOVE_OPS and t.name not in {o.name for o in ctx.graph.outputs}:
        c = _users(t)[0]  # ops that keep the shape (ESPnet's view_as)
        nxt = [o for o in c.outputs if o.name]
        if len(nxt) != 1 or ctx.fact(nxt[0]).shape1 != ctx.fact(t).shape1 or ctx.fact(nxt[0]).axes2 is None:
            break
        chain.append(c)
        t = nxt[0]
    if len(ctx.fact(t).shape1) != rank or ctx.fact(t).axes2 != (fo.axes_rel or fo.axes2):
        raise Blocker(f"its rel_shift ends in '{t.name}' with query and key on axes {ctx.fact(t).axes2}, not on the "
                      f"axes {fo.axes_rel or fo.axes2} of the relative positions")
    shifted, tail = t, []
    while len(_users(t)) == 1 and _users(t)[0].op in ("Mul", "Div") and t.name not in {o.name for o in
                                                                                       ctx.graph.outputs}:
        c = _users(t)[0]  # a scale of the term alone (the sum with the content scores is the attention rule's)
        others = [x for x in c.inputs if x is not t]
        nxt = [o for o in c.outputs if o.name]
        if (len(others) != 1 or (c.op == "Div" and c.inputs[0] is not t) or len(nxt) != 1
                or ctx.fact(nxt[0]).shape1 != ctx.fact(t).shape1 or ctx.fact(nxt[0]).axes2 is None
                or (others[0].name and (ctx.masks.data_path(others[0].name) or ctx.fact(others[0]).is_stream
                                        or ctx.fact(others[0]).axes2))):
            break
        tail.append(c)
        t = nxt[0]
    return RelTerm(node, pos, out, t, chain, shifted, tail)


def _sweep(ctx: Any) -> None:
    """Add to ``ctx.attention.relative_nodes`` every node that computes only inputs of those nodes from shapes or
    constants (the positional table's slice and projection, the shapes of the rel_shift's reshapes): reverse
    topological order."""
    graph_outs = {t.name for t in ctx.graph.outputs}
    for node in reversed(list(ctx.graph.nodes)):
        if node.name in ctx.attention.relative_nodes:
            continue
        outs = [o for o in node.outputs if o.name]
        if not outs or any(o.name in graph_outs or ctx.masks.data_path(o.name) for o in outs):
            continue
        users = [c for o in outs for c in o.outputs]
        if users and all(c.name in ctx.attention.relative_nodes for c in users):
            ctx.attention.relative_nodes.add(node.name)


def _rel_range(site: Any) -> tuple[int, int]:
    """(r_min, r_max): the relative positions ``i - j`` the site's bounded pattern leaves visible."""
    p = site.pattern
    n = p.window + p.ahead + (p.left + 2) * max(p.chunk, 1) + 8
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    rel = (i - j)[p.visible(i, j)]
    return int(rel.min()), int(rel.max())


def _check_shift(rt: RelTerm, ctx: Any, site: Any) -> int:
    """The sign of the column map the rel_shift computes, checked at both probe lengths on the entries the mask leaves
    visible: +1 when ``term[i, j] = bd[i, T - 1 - (i - j)]``, -1 for ``bd[i, T - 1 + (i - j)]``.

    Raises:
        Blocker: neither (ESPnet's legacy rel_shift over a (T, T) table, a shift by the wrong amount, ...).
    """
    found = None
    for get in (ctx.value, ctx.value2):
        bd, z = get(rt.bd), get(rt.shifted)
        if bd is None or z is None:
            raise Blocker("its rel_shift's values were not measured")
        bd, z = np.asarray(bd), np.asarray(z)
        t = z.shape[-2]
        if bd.shape[-1] != 2 * t - 1 or bd.shape[-2] != t:
            raise Blocker(f"its scores over relative positions have {bd.shape[-1]} columns for {t} queries, not "
                          f"2 x {t} - 1")
        i, j = np.arange(t)[:, None], np.arange(t)[None, :]
        vis = np.broadcast_to(site.pattern.visible(i, j), (t, t))
        ok = []
        for sign in (1, -1):
            col = np.broadcast_to(t - 1 - sign * (i - j), z.shape)
            want = np.take_along_axis(np.broadcast_to(bd, z.shape[:-1] + bd.shape[-1:]), col, axis=-1)
            if np.array_equal(want[..., vis], z[..., vis]):
                ok.append(sign)
        if not ok:
            raise Blocker(f"its rel_shift does not give the visible entry (i, j) of '{rt.shifted.name}' the relative "
                          f"position i - j at {plural(t, 'frame')} (ESPnet's legacy rel_shift over T positions "
                          "counted from the "
                          "sequence's end?): the term depends on the sequence length")
        found = ok[0] if found is None or found in ok else None
        if found is None:
            raise Blocker("its rel_shift maps relative positions differently at the two probe lengths")
    return found


def _centred(rt: RelTerm, ctx: Any) -> np.ndarray:
    """The positional operand at the first probe (np.ndarray), checked to be centred (module doc).

    Raises:
        Blocker: it was not measured, or it is not centred.
    """
    p1, p2 = ctx.value(rt.pos), ctx.value2(rt.pos)
    if p1 is None or p2 is None:
        raise Blocker(f"the relative positions '{rt.pos.name}' were not measured")
    p1, p2 = np.asarray(p1), np.asarray(p2)
    n1, n2 = p1.shape[-1], p2.shape[-1]
    off = (n2 - n1) // 2
    mid = p2[..., off:off + n1]
    scale = max(float(np.abs(p1).max()), 1e-30)
    if (n2 - n1) % 2 or mid.shape != p1.shape or float(np.abs(mid - p1).max()) > 1e-5 * scale:
        raise Blocker(f"its relative positions '{rt.pos.name}' ({n1} entries at the shorter probe, {n2} at the longer) "
                      "are not centred on the query: the middle entries at the longer probe differ from the shorter "
                      "probe's (positions counted from the sequence's or the table's start or end, as ESPnet's legacy "
                      "relative encoding): the term depends on the sequence length")
    return p1


def table_rows(rt: RelTerm, ctx: Any) -> tuple[int, str] | None:
    """The longest sequence (frames at the queries' rate) whose relative positions the positional operand of ``rt``
    holds in full, and what limits it: a Slice of a constant table whose starts and ends run with the length (NeMo's
    ``pe[:, center - T : center + T - 1]``, ESPnet's ``pe[:, L // 2 - T + 1 : L // 2 + T]``) runs out of rows there
    (past it a start below 0 wraps to the table's end, an end past the last row is clipped). Found among the nodes
    that compute the operand, from the starts and ends at the two probe lengths.

    Returns:
        tuple[int, str] | None: (frames, ``"the relative-position table 'NAME' of Slice node 'NODE' (R rows)"``), or
        None when no such Slice is found (a table computed from the length: no limit).
    """
    p1, p2 = ctx.value(rt.pos), ctx.value2(rt.pos)
    if p1 is None or p2 is None:
        return None
    f1, f2 = (np.shape(p1)[-1] + 1) // 2, (np.shape(p2)[-1] + 1) // 2
    if f1 == f2:
        return None
    best, seen, front = None, set(), [rt.pos]
    while front:
        t = front.pop()
        if id(t) in seen or isinstance(t, gs.Constant) or len(getattr(t, "inputs", [])) != 1:
            continue
        seen.add(id(t))
        node = t.inputs[0]
        front.extend(x for x in node.inputs if x.name)
        if node.op != "Slice" or len(node.inputs) < 3:
            continue
        table = ctx.value(node.inputs[0])
        if table is None or ctx.is_stream(node.inputs[0]) or not np.array_equal(table, ctx.value2(node.inputs[0])):
            continue
        got = [(ctx.value(x), ctx.value2(x)) for x in node.inputs[1:3]]
        if any(a is None or b is None for a, b in got):
            continue
        (s1, s2), (e1, e2) = ((np.asarray(a, np.int64).ravel(), np.asarray(b, np.int64).ravel()) for a, b in got)
        axes = (np.asarray(ctx.value(node.inputs[3]), np.int64).ravel() if len(node.inputs) > 3 and node.inputs[3].name
                and ctx.value(node.inputs[3]) is not None else np.arange(len(s1)))
        for j, ax in enumerate(axes):
            if j >= len(s1) or j >= len(e1) or j >= len(s2) or j >= len(e2):
                break
            rows = int(np.shape(table)[int(ax) % np.ndim(table)])
            limits = []
            ds, de = Fraction(int(s2[j] - s1[j]), f2 - f1), Fraction(int(e2[j] - e1[j]), f2 - f1)
            if ds < 0 and 0 <= s1[j] <= rows:  # the start falls below the first row
                limits.append(f1 + Fraction(int(s1[j])) / -ds)
            if de > 0 and 0 <= e1[j] <= rows:  # the end passes the last row
                limits.append(f1 + Fraction(rows - int(e1[j])) / de)
            if limits:
                frames = math.floor(min(limits))
                if best is None or frames < best[0]:
                    best = (frames, f"the relative-position table '{node.inputs[0].name}' of Slice node "
                                    f"'{node.name}' ({plural(rows, 'row')})")
    return best


def _too_short(rt: RelTerm, site: Any, src: tuple[int, str], need: int) -> str:
    """The blocker (str) for a site whose keys reach ``need`` frames back or ahead while the table ``src``
    (:func:`table_rows`) holds relative positions up to +-(frames - 1) only; with ``--attention-window`` the longest
    window it allows."""
    from cosyedge.surgery.masks import window_for_cache, window_for_reach

    frames, why = src
    text = (f"its relative positions '{rt.pos.name}' come from {why}, which holds relative positions up to "
            f"+-{plural(frames - 1, 'frame')}, fewer than the +-{need} its {site.pattern.describe()} attention reaches")
    if site.original != site.pattern:  # the proof then streams twice the window against the full graph as well
        longest = min(window_for_reach(site.original, frames), window_for_cache(site.original, frames // 2))
        text += (f": the longest --attention-window it allows is {plural(longest, 'frame')} (the proof streams twice "
                 "the window against the full-sequence graph)" if longest else ": no --attention-window fits it")
    return text


def _table(rt: RelTerm, ctx: Any, site: Any, rmin: int, rmax: int, sign: int) -> np.ndarray:
    """The positional operand at relative positions ``rmin .. rmax`` (its last axis, R entries), batch axis 1.

    Raises:
        Blocker: it is not centred (module doc), or it cannot be evaluated at a length that holds those positions.
    """
    p1 = _centred(rt, ctx)
    half = (p1.shape[-1] - 1) // 2  # entry half - sign * r is relative position r
    need = max(abs(rmin), abs(rmax))
    table = p1
    src = table_rows(rt, ctx)
    if src is not None and need > src[0] - 1:
        raise Blocker(_too_short(rt, site, src, need))
    if need > half:
        ticks = ctx.ticks_for_frames(site.rate, need + 1)
        try:
            table = np.asarray(ctx.masks.evaluate([rt.pos.name], ticks)[rt.pos.name])
        except RuntimeError as err:
            raise Blocker(f"its relative positions '{rt.pos.name}' cannot be evaluated at {plural(need + 1, 'frame')} "
                          f"from shapes alone ({err})") from None
        half = (table.shape[-1] - 1) // 2
        if table.shape[-1] % 2 == 0 or need > half:
            raise Blocker(f"its relative positions '{rt.pos.name}' evaluated at {plural(need + 1, 'frame')} hold "
                          f"{table.shape[-1]} entries, not relative positions +-{need}")
    b = ctx.batch_axes.get(rt.pos.name)
    if b is not None and b != table.ndim - 1 and table.shape[b] > 1:
        first = np.take(table, [0], axis=b)
        if not np.array_equal(np.broadcast_to(first, table.shape), table):
            raise Blocker(f"its relative positions '{rt.pos.name}' differ between streams of a batch")
        table = first
    cols = half - sign * np.arange(rmin, rmax + 1)
    return np.ascontiguousarray(np.take(table, cols, axis=-1))


def chunk_term(node: Any, i: int, ctx: Any, site: Any) -> Any:
    """The chunk's value of input ``i`` of ``node`` (a relative-position term :func:`find` recorded, added to the
    scores of ``site``): ``GatherElements(q_v @ P, index)`` (module doc). Returns the new tensor (float, (..., F,
    L + F), query and key on the last two axes, the site's delay).

    Raises:
        Blocker: the rel_shift or the positional operand does not fit (see :func:`_check_shift`, :func:`_table`), or
            the queries are later than the site's.
    """
    rt = ctx.attention.relative[node.inputs[i].name]
    _centred(rt, ctx)
    sign = rt.sign = _check_shift(rt, ctx, site)
    rmin, rmax = _rel_range(site)
    table = _table(rt, ctx, site, rmin, rmax, sign)
    src = table_rows(rt, ctx)
    if src is not None:  # the full graph runs out of rows past it, the stream never does: it bounds the proof only
        ctx.limit_full_ticks(math.floor(Fraction(src[0]) / site.rate), src[1], src[0])
    base = f"{rt.node.name}/relative"
    q = rt.node.inputs[0]
    dq = ctx.delay_of(q)
    if dq is not None and dq != site.delay:
        if dq > site.delay:
            raise Blocker(f"its queries '{q.name}' are {plural(dq - site.delay, 'frame')} later than the attention's")
        q = ctx.delay_line(q, site.delay - dq, rt.node.name)
    bc = ctx.op(rt.node.op, [q, ctx.const(table, f"{base}/table", dtype=table.dtype)], base,
                dict(rt.node.attrs))  # (..., F, R)
    i64 = np.int64
    fq = ctx.frames_tensor(site.rate, base)  # (1,)
    n = ctx.unsqueeze(fq, [0], base, squeeze=True)
    L, R = site.cache, rmax - rmin + 1
    rq = ctx.unsqueeze(ctx.op("Range", [ctx.const(0), n, ctx.const(1)], base, dtype=i64), [1], base)  # (F, 1)
    nk = ctx.op("Add", [n, ctx.const(L)], base, dtype=i64)
    rk = ctx.unsqueeze(ctx.op("Range", [ctx.const(0), nk, ctx.const(1)], base, dtype=i64), [0], base)  # (1, L + F)
    # query i is i + L - lead - j frames after key slot j (the keys run site.lead frames ahead of the queries)
    col = ctx.op("Sub", [ctx.op("Add", [rq, ctx.const(L - site.lead - rmin)], base, dtype=i64), rk], base, dtype=i64)
    col = ctx.op("Min", [ctx.op("Max", [col, ctx.const(0)], base, dtype=i64), ctx.const(R - 1)], base, dtype=i64)
    rank = len(ctx.fact(rt.bd).shape1)
    if rank > 2:
        col = ctx.unsqueeze(col, list(range(rank - 2)), base)
    lead = ctx.op("Slice", [ctx.op("Shape", [bc], base, dtype=i64), ctx.const([0]), ctx.const([rank - 1]),
                            ctx.const([0])], base, dtype=i64)
    shape = ctx.op("Concat", [lead, ctx.unsqueeze(nk, [0], base)], base, {"axis": 0}, dtype=i64)
    col = ctx.op("Expand", [col, shape], base, dtype=i64)
    term = ctx.op("GatherElements", [bc, col], base, {"axis": rank - 1}, dtype=ctx.dtype_of(rt.bd))
    prev = rt.shifted
    for c in rt.tail:
        ins = [term if x is prev else x for x in c.inputs]
        prev = c.outputs[0]
        term = ctx.op(c.op, ins, base, dict(c.attrs), dtype=ctx.dtype_of(prev))
    return term
