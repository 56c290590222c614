"""The attention mask: measured from the full-sequence graph, rebuilt for the chunk from each stream's positions.

A site's masks are **measured** (:func:`classify_site`): every mask applied between the scores and ``probs @ V``
(:func:`region`) is evaluated from shapes at :data:`MASK_FRAMES` (and :data:`MASK_FRAMES_LONG` when it looks
unlimited there), reduced to the query x key set it leaves visible (:func:`visible`) and classified
(:func:`cosyedge.surgery.masks.classify`). The chunk graph gets the same pattern **built** from the position counter
(:func:`vis3`, laid out per tensor by :func:`vis_for`); :func:`bound_full_model` puts a ``--attention-window`` bound
into a copy of the full graph (the proof's reference). The rules that use them are in
:mod:`cosyedge.surgery.rules.attention`.

Sources: WeNet ``wenet/utils/mask.py`` (``subsequent_chunk_mask``); sonos/tract ``pulse/src/blockify.rs`` (chunk
masks recognised from their values).
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.surgery.masks import Pattern, classify
from cosyedge.surgery.rules import Blocker

if TYPE_CHECKING:
    from cosyedge.surgery.rules.attention import Att, Site

gs = lazy_import("onnx_graphsurgeon")


MASK_FRAMES = (701, 1103)
"""Lengths (frames at the attention's rate) a mask is evaluated and classified at: odd, so that chunks counted from
the sequence's end show; a mask that looks unlimited there is measured again at :data:`MASK_FRAMES_LONG`."""


MASK_FRAMES_LONG = (2207, 4409)
"""Longer lengths for a mask that looks unlimited at :data:`MASK_FRAMES`: windows up to ~4400 frames are measured."""


def visible(m: np.ndarray, frames: int, consumer: Any, mi: int, di: int, out_rank: int,
             qk: tuple[int, int]) -> np.ndarray:
    """The visible set (bool (F, F), query x key) that mask input ``mi`` of ``consumer``, evaluated as ``m`` at a
    length of ``frames`` frames, leaves to the attention tensor at input ``di`` whose output axes are ``qk``.

    Raises:
        Blocker: the mask is not a two-valued mask of this use (a bias, a 0/1 product before the Softmax).
    """
    t = consumer.inputs[mi]
    full = mask2d(m, t.name, out_rank, qk, frames)
    op = consumer.op
    vals = np.unique(full)
    if op == "Where":
        if mi != 0 or di == 0:
            raise Blocker(f"Where with the mask as a value, not the condition ('{t.name}')")
        return full.astype(bool) if di == 1 else ~full.astype(bool)
    if full.dtype == bool:
        raise Blocker(f"{op} with a boolean mask '{t.name}'")
    if op in ("Add", "Sub"):
        if vals.size > 2 or (vals.size == 2 and not (0 in vals)) or (vals.size == 1 and vals[0] != 0):
            raise Blocker(f"{op} of a bias over query x key time with values {vals[:4].tolist()}... (a relative "
                          "position bias or ALiBi, not a mask of 0 and a large negative): not streamed")
        low = vals.min() if op == "Add" else -vals.max()
        if vals.size == 2 and low > -1e4:
            raise Blocker(f"{op} of a mask '{t.name}' whose hidden value {low} is not large and negative")
        return full == 0
    if op == "Mul":
        if not set(vals.tolist()) <= {0, 1}:
            raise Blocker(f"Mul by a weight over query x key time with values {vals[:4].tolist()}...: not a 0/1 mask")
        return full != 0
    raise Blocker(f"{op} of a mask '{t.name}' (only Where, Add, Sub and Mul apply masks)")


def mask2d(m: np.ndarray, name: str, out_rank: int, qk: tuple[int, int], frames: int) -> np.ndarray:
    """Mask ``m`` (the value of tensor ``name`` at a length of ``frames`` frames) as (F, F) query x key (broadcast
    where it has size 1), as it broadcasts into a tensor of rank ``out_rank`` with query and key on axes ``qk``.

    Raises:
        Blocker: it differs over another axis (a per-head bias).
    """
    m = np.asarray(m)
    shift = out_rank - m.ndim
    kept = [ax for ax in range(m.ndim) if ax + shift in qk and m.shape[ax] != 1]
    sel = tuple(slice(None) if ax in kept else slice(0, 1) for ax in range(m.ndim))
    if not np.array_equal(np.broadcast_to(m[sel], m.shape), m):
        raise Blocker(f"mask '{name}' differs over an axis other than query and key time (a per-head bias such as "
                      "ALiBi?): not a mask streamify can measure")
    m2 = m[sel].reshape([m.shape[ax] for ax in kept])
    roles = [qk.index(ax + shift) for ax in kept]  # 0 query, 1 key
    if roles == [1, 0]:
        m2 = m2.T
    if roles == [0]:
        m2 = m2[:, None]
    elif roles == [1]:
        m2 = m2[None, :]
    elif not roles:
        m2 = m2.reshape(1, 1)
    return np.broadcast_to(m2, (frames, frames))


def region(out: Any, ctx: Any) -> tuple[list, list]:
    """The masks applied between the scores ``out`` and the MatMul with the values: (pre-Softmax, post-Softmax)
    lists of (consumer node, mask input index, data input index, output rank, (query, key) axes), and the partner
    score nodes (list: MatMul/Einsum of two tensors over time added to these scores before the Softmax, such as
    WeNet's ``matrix_bd`` of queries and absolute positional projections)."""
    inside, todo = {out.name}, [out]
    while todo:  # every tensor over query x key time computed from the scores (IsNaN(probs) included)
        for c in todo.pop().outputs:
            for o in c.outputs:
                if o.name and o.name not in inside and ctx.fact(o).axes2 is not None:
                    inside.add(o.name)
                    todo.append(o)
    pre, post, seen, partners = [], [], set(), []
    stack = [(out, len(ctx.fact(out).shape1), ctx.fact(out).axes2, False)]
    while stack:
        t, rank, qk, after = stack.pop()
        if t.name in seen:
            continue
        seen.add(t.name)
        for c in t.outputs:
            di = [i for i, x in enumerate(c.inputs) if x is t][0]
            o = c.outputs[0] if c.outputs else None
            if o is None or not o.name or ctx.fact(o).axes2 is None:
                continue
            orank = len(ctx.fact(o).shape1)
            oqk = (qk[0] + orank - rank, qk[1] + orank - rank)
            if c.op == "Transpose":
                perm = [int(p) for p in c.attrs.get("perm", list(range(rank))[::-1])]
                oqk = (perm.index(qk[0]), perm.index(qk[1]))
            for mi, m in enumerate(c.inputs):
                if mi == di or not m.name or isinstance(m, gs.Constant) or m.name in inside:
                    continue
                f = ctx.fact(m)
                if f.axes2 is None and not f.is_stream:
                    continue
                if m.name in ctx.attention.relative:
                    continue  # a relative-position term (rules/relative.py): built at its node
                why = ctx.masks.data_path(m.name)
                prod = m.inputs[0] if m.inputs else None
                if (why and f.axes2 is not None and not after and c.op in ("Add", "Sub") and prod is not None
                        and prod.op in ("MatMul", "Einsum") and len(prod.inputs) == 2
                        and all(ctx.fact(x).is_stream for x in prod.inputs)):
                    partners.append(prod)  # a second score term (WeNet's positional matrix_bd): same site
                    continue
                if why:
                    if f.axes2 is not None:
                        raise Blocker(f"'{m.name}' over query x key time, applied to its scores by {c.op}, depends on "
                                      f"the values of {why}, not only on the sequence length (a key-padding mask from "
                                      "lengths, or a relative position bias computed from the data): refused, not "
                                      "guessed")
                    continue  # a per-query tensor (a decomposed softmax's max), checked at its node
                (post if after else pre).append((c, mi, di, orank, oqk))
            stack.append((o, orank, oqk, after or c.op in ("Softmax", "LogSoftmax")))
    return pre, post, partners


def classify_site(node: Any, ctx: Any, rate: Fraction, out_qk: tuple[int, int]) -> tuple[Pattern, list, list]:
    """The pattern the masks between the scores of ``node`` (query and key on axes ``out_qk``) and the values leave,
    measured at :data:`MASK_FRAMES` (and :data:`MASK_FRAMES_LONG` when unlimited there); also the masks (consumer,
    input index, ...) and the partner score nodes (:func:`region`).

    Raises:
        Blocker: a mask only after the Softmax, one that cannot be evaluated from shapes, or not a mask.
    """
    out = node.outputs[0]
    pre, post, partners = region(out, ctx)
    if not pre and post:
        raise Blocker("its mask is applied only after the Softmax, which normalised over every key, later ones "
                      "included: the weights depend on the future (apply the mask to the scores before the Softmax)")
    if not pre:
        return Pattern("full"), [], partners
    views = []
    names = sorted({c.inputs[mi].name for c, mi, *_ in pre + post})

    def measure(frames_list):
        for frames in frames_list:
            ticks = ctx.ticks_for_frames(rate, frames)
            f = ctx.masks.shape_at(out.name, ticks)[out_qk[0]]
            try:
                vals = ctx.masks.evaluate(names, ticks)  # every mask at this length in one run
            except RuntimeError as err:
                raise Blocker(f"its mask cannot be evaluated from shapes alone ({err})") from None
            vs = [visible(vals[c.inputs[mi].name], f, c, mi, di, r, qk) for c, mi, di, r, qk in pre]
            ps = [visible(vals[c.inputs[mi].name], f, c, mi, di, r, qk) for c, mi, di, r, qk in post]
            v = np.logical_and.reduce(vs)
            for p in ps:
                if (v & ~p).any():
                    raise Blocker("a mask after the Softmax hides keys the Softmax normalised over (its weights "
                                  "depend on keys the query must not see)")
            views.append(v)

    measure(MASK_FRAMES)
    pat = classify(views)
    if not pat.bounded and pat.kind in ("causal", "chunked"):
        measure(MASK_FRAMES_LONG)  # a window between ~700 and ~4400 frames
        pat = classify(views)
    if pat.kind == "none":
        pat = Pattern("full")
    return pat, pre + post, partners


def vis3(ctx: Any, site: Site) -> Any:
    """bool (N, Fq, L + Fq): which key of this chunk (cache first) each query of this chunk sees (module doc)."""
    if site.vis3 is not None:
        return site.vis3
    base = f"{site.node}/attention_mask"
    i64 = np.int64
    counter = ctx.position_counter(site.rate)  # (N, 1) frames streamed so far
    fq = ctx.frames_tensor(site.rate, base)  # (1,)
    n = ctx.unsqueeze(fq, [0], base, squeeze=True)
    L, d = site.cache, site.delay
    rq = ctx.op("Range", [ctx.const(0), n, ctx.const(1)], base, dtype=i64)
    rk = ctx.op("Range", [ctx.const(-L), n, ctx.const(1)], base, dtype=i64)
    qf = ctx.op("Sub", [ctx.op("Add", [counter, rq], base, dtype=i64), ctx.const([[d]])], base, dtype=i64)
    kf = ctx.op("Sub", [ctx.op("Add", [counter, rk], base, dtype=i64), ctx.const([[d - site.lead]])], base,
                dtype=i64)
    qs = ctx.unsqueeze(qf, [2], base)  # (N, Fq, 1)
    ks = ctx.unsqueeze(kf, [1], base)  # (N, 1, Fk)

    def op(kind, inputs):
        return ctx.op(kind, inputs, base, dtype=bool if kind in BOOL_OPS else i64)

    shift = site.pattern.chunk * (-(-(L + d + 1) // site.pattern.chunk) + 1) if site.pattern.chunk else 0
    vis = pattern_nodes(site.pattern, qs, ks, op, ctx.const, shift)
    vis = op("And", [vis, op("Not", [op("Less", [ks, ctx.const(0)])])])  # keys before the stream's start do not exist
    vis = op("Or", [vis, op("Less", [qs, ctx.const(0)])])  # pre-roll query rows see every key (stay finite)
    site.vis3 = vis
    return vis


BOOL_OPS = ("Less", "Not", "And", "Or")


def pattern_nodes(p: Pattern, qs: Any, ks: Any, op: Any, const: Any, shift: int = 0) -> Any:
    """Build :meth:`Pattern.visible` of query positions ``qs`` x key positions ``ks`` (int64, broadcasting) as ONNX
    nodes, for the chunk graph (:func:`vis3`) and for the bounded full graph (:func:`bound_full_model`) alike.

    Args:
        p (Pattern): ``banded`` or ``chunked``.
        qs, ks: The position tensors (whatever ``op`` takes).
        op (Callable[[str, list], Any]): Adds a node of that op type on those inputs; returns its output.
        const (Callable[[Any], Any]): Makes an int64 constant.
        shift (int): A multiple of the chunk added before the floor division, so that positions before the stream's
            start divide as non-negative numbers (ONNX integer Div truncates towards zero).
    Returns:
        the bool output (query sees key).
    """
    def not_less(a, b):
        return op("Not", [op("Less", [a, b])])

    if p.kind == "banded":
        diff = op("Sub", [qs, ks])
        return op("And", [not_less(diff, const(-p.ahead)), op("Less", [diff, const(p.window)])])
    cq, ck = (op("Div", [op("Add", [x, const(shift)]) if shift else x, const(p.chunk)]) for x in (qs, ks))
    return op("And", [not_less(cq, ck), not_less(ck, op("Sub", [cq, const(p.left)]))])


def vis_for(ctx: Any, site: Site, a: Att, like: Any) -> Any:
    """:func:`vis3` laid out for a tensor ``like`` over query x key time (axes of ``a``): rank ``a.rank``, the batch
    on ``like``'s batch axis (heads folded into it repeated), query and key on ``a.q`` and ``a.k``."""
    b = ctx.batch_axis(like)
    fold = ctx.batch_fold(like)
    key = (a.rank, a.q, a.k, b, fold)
    if key in site.vis_r:
        return site.vis_r[key]
    base = f"{site.node}/attention_mask"
    v = vis3(ctx, site)
    if fold > 1:
        e = ctx.op("Expand", [ctx.unsqueeze(v, [1], base), ctx.const([1, fold, 1, 1])], base, dtype=bool)
        shape = ctx.op("Concat", [ctx.const([-1]), ctx.op("Slice", [ctx.op("Shape", [v], base), ctx.const([1]),
                                                                    ctx.const([3]), ctx.const([0])], base)],
                       base, {"axis": 0}, dtype=np.int64)
        v = ctx.op("Reshape", [e, shape], base, dtype=bool)
    roles = {b: 0, a.q: 1, a.k: 2}
    if len(roles) != 3:
        raise Blocker(f"the batch axis {b} is a time axis of the attention tensor")
    order = sorted(roles)  # target axes in increasing order
    perm = [roles[t] for t in order]
    if perm != [0, 1, 2]:
        v = ctx.op("Transpose", [v], base, {"perm": perm}, dtype=bool)
    others = [i for i in range(a.rank) if i not in roles]
    if others:
        v = ctx.unsqueeze(v, others, base)
    site.vis_r[key] = v
    return v


def bound_vis(p: Pattern, nq: str, nk: str, extra: list, name: Any, c: Any) -> str:
    """Append to ``extra`` the nodes of ``p.visible(i, j)`` over ``Range(nq) x Range(nk)`` (bool (nq, nk)); returns
    its name (for :func:`bound_full_model`)."""
    from onnx import helper

    def op(kind, inputs):
        out = name(kind.lower())
        extra.append(helper.make_node(kind, inputs, [out]))
        return out

    i2 = op("Unsqueeze", [op("Range", [c(0), nq, c(1)]), c([1])])
    j2 = op("Unsqueeze", [op("Range", [c(0), nk, c(1)]), c([0])])
    return pattern_nodes(p, i2, j2, op, c)  # full-graph positions start at 0: no shift


def bound_full_model(model: Any, sites: list[Site]) -> Any:
    """A copy of the full-sequence ``model`` (onnx.ModelProto) whose attention sites bounded by ``--attention-window``
    see only their bounded pattern: ``Where(visible(i, j), scores, lowest)`` after each bounded site's scores, the
    positions from ``Range`` over the scores' own shape. The proof's reference for such a stream graph.

    Args:
        model (onnx.ModelProto): The constant-folded full-sequence graph.
        sites (list[Site]): The walk's sites; those with ``original != pattern`` are bounded.
    Returns:
        onnx.ModelProto: the bounded graph (``model`` itself when no site is bounded).
    """
    import onnx
    from onnx import helper, numpy_helper

    bounded = [s for s in sites if s.original != s.pattern]
    if not bounded:
        return model
    m = onnx.ModelProto()
    m.CopyFrom(model)
    nodes = list(m.graph.node)
    new = []
    uid = [0]

    def name(b):
        uid[0] += 1
        return f"{b}/bound{uid[0]}"

    def c(v, dt=np.int64):
        n = name("c")
        new_inits.append(numpy_helper.from_array(np.asarray(v, dtype=dt), n))
        return n

    new_inits = []
    for node in nodes:
        new.append(node)
        for s in bounded:
            if s.attention_op and node.name == s.node:
                while len(node.input) < 4:
                    node.input.append("")
                q = node.input[0]
                shp = name("shape")
                extra = [helper.make_node("Shape", [q], [shp])]
                g, sq = name("dim"), name("dimsq")
                extra += [helper.make_node("Gather", [shp, c([-2])], [g], axis=0),
                          helper.make_node("Squeeze", [g, c([0])], [sq])]
                vis = bound_vis(s.pattern, sq, sq, extra, name, c)
                new[-1:-1] = extra  # before the Attention node
                node.input[3] = vis
                for a in node.attribute:
                    if a.name == "is_causal":
                        a.i = 0
                continue
            if not s.score or s.score not in node.output:
                continue
            raw = s.score + "/unbounded"
            node.output[list(node.output).index(s.score)] = raw
            shp = name("shape")
            extra = [helper.make_node("Shape", [raw], [shp])]
            dims = []
            for ax in s.qk[:2]:
                g, sq = name("dim"), name("dimsq")
                extra += [helper.make_node("Gather", [shp, c([ax])], [g], axis=0),
                          helper.make_node("Squeeze", [g, c([0])], [sq])]
                dims.append(sq)
            vis = bound_vis(s.pattern, dims[0], dims[1], extra, name, c)
            q_, k_, r_ = s.qk[0], s.qk[1], s.qk[2]
            if q_ > k_:
                vt = name("visT")
                extra.append(helper.make_node("Transpose", [vis], [vt], perm=[1, 0]))
                vis = vt
            others = [i for i in range(r_) if i not in (q_, k_)]
            if others:
                vu = name("visU")
                extra.append(helper.make_node("Unsqueeze", [vis, c(others)], [vu]))
                vis = vu
            low = c(np.finfo(np.float32).min, np.float32)
            extra.append(helper.make_node("Where", [vis, raw, low], [s.score]))
            new += extra
    del m.graph.node[:]
    m.graph.node.extend(new)
    m.graph.initializer.extend(new_inits)
    return m
