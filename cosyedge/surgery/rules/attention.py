"""Attention over time with a bounded context becomes a key/value cache state; its mask is measured, not guessed.

A full-sequence graph computes self-attention as a tensor over **query time x key time** (its fact has two time axes,
:attr:`cosyedge.surgery.facts.TimeFact.axes2`): ``scores = Q @ K^T`` (MatMul, or an Einsum, of two streaming tensors),
a mask or bias (``Add``, ``Where``, masked fill, also after the Softmax), ``Softmax`` over the key axis, and
``probs @ V`` back to one time axis. One **site** is one such attention. On a chunk of ``F`` frames:

* the keys (the score MatMul's second input, after the key projection and after RoPE) and the values (the second
  input of ``probs @ V``) each get a **cache** state of ``L`` frames, batch-first: ``Concat(cache, K)`` on time, the
  last ``L`` frames go out (:meth:`Walker.add_state`, kinds ``"key"`` / ``"value"``); multi-head reshapes and
  transposes before the MatMul are followed like every other time axis, and a batch that folds heads
  (``(N*H, T, d)``) is stored ``(N, H, ...)``;
* the mask is **measured**: every mask input must depend on shapes only (each path back to the graph's inputs passes
  through ``Shape``/``Size``, :class:`cosyedge.surgery.masks.MaskEvaluator`; a mask from a lengths input or from the
  data is refused), is evaluated at two long lengths from the measured shapes and classified
  (:func:`cosyedge.surgery.masks.classify`): ``banded`` (window ``W``: ``L = W - 1``), ``chunked`` (chunk ``C``,
  ``n`` left chunks: ``L = n * C``, the hop a multiple of ``C`` and the site's delay a multiple of ``C``; its
  look-ahead of ``C - 1`` frames is inside each chunk). ``causal`` with unlimited left context (and chunked with
  every earlier chunk) is refused unless ``--attention-window N`` bounds it (the model then differs from the
  original: streamify proves against the full graph with the same bound and reports the deviation); ``full``
  (bidirectional) and any other pattern are refused by name;
* each mask input is replaced by the same pattern computed from each stream's **positions** (the position counter
  state, :meth:`Walker.position_counter`), query positions ``p .. p + F - 1`` and key positions ``p - L .. p + F - 1``
  (minus the site's delay), and the scores get ``Where(visible, scores, lowest)`` so that cache slots before the
  stream's start are hidden as the full graph hides keys before frame 0 (the pre-roll is exact); rows of queries
  before the stream's start (delay) see every key, so they stay finite;
* ops between the scores and ``probs @ V``: elementwise with constants, masks or per-query tensors, Cast, Softmax /
  LogSoftmax over the key axis, reductions over the key axis (a decomposed softmax), Transpose.

Sources: Vaswani et al. 2017 (arXiv:1706.03762) scaled dot-product attention; WeNet ``wenet/utils/mask.py``
(``subsequent_chunk_mask``) and its ``att_cache``; NeMo cache-aware streaming (``cache_last_channel``,
arXiv:2312.17279); Kyutai Mimi/moshi ``transformer.py`` (KV cache with ``end_offset``, context 250); sonos/tract
``pulse/src/blockify.rs`` (chunk masks recognised from their values).
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.log import plural
from cosyedge.surgery.masks import Pattern, classify, window_rounding
from cosyedge.surgery.rules import ANY, QUERY_KEY, STREAM, Blocker, attr_str, register
from cosyedge.surgery.rules.attention_mask import (MASK_FRAMES, MASK_FRAMES_LONG, classify_site, mask2d, vis3,
                                                   vis_for)

gs = lazy_import("onnx_graphsurgeon")

KEY, VALUE = "key", "value"
"""str: :class:`~cosyedge.artifacts.StateSpec` kinds of an attention's key and value caches."""

_UNARY = set("Cast Identity Dropout Exp Neg Abs Relu Sigmoid Tanh Clip Log Sqrt Reciprocal Softplus IsNaN IsInf Not"
             .split())
_BINARY = set("Add Sub Mul Div Where Max Min Pow".split())
_REDUCE = set("ReduceMax ReduceSum ReduceMean ReduceLogSumExp ReduceMin".split())


@dataclasses.dataclass
class Site:
    """One attention: its classified pattern, cache length, delay and the chunk's visibility tensor."""

    node: str
    pattern: Pattern
    original: Pattern
    delay: int
    rate: Fraction
    cache: int
    vis3: Any = None  # bool (N, Fq, L + Fq): query x key visible in this chunk (built once)
    vis_r: dict = dataclasses.field(default_factory=dict)
    score: str = ""  # the score tensor's name in the full graph (the --attention-window bound goes there)
    attention_op: bool = False  # an ONNX Attention node (the bound goes into its attn_mask)
    qk: tuple = (0, 1, 2)  # the score tensor's query axis, key axis and rank
    masks: list = dataclasses.field(default_factory=list)  # (node name, input index) of the masks replaced
    lead: int = 0  # frames the keys and values run ahead of the queries (per-frame chunked attention: chunk - 1)
    rounding: str = ""  # how --attention-window was rounded to whole chunks (masks.window_rounding), "" when exact

    def info(self) -> dict:
        """What the contract records of this attention (dict, JSON-able)."""
        d = {"node": self.node, "pattern": self.pattern.describe(), "cache_frames": self.cache,
             "lookahead_frames": self.pattern.lookahead_frames, "delay_frames": self.delay}
        if self.original != self.pattern:
            d["bounded_from"] = self.original.describe()
        if self.rounding:
            d["window_rounding"] = self.rounding
        if self.lead:
            d["per_frame_lead_frames"] = self.lead
        return d


@dataclasses.dataclass
class Att:
    """A tensor over query time x key time in the chunk graph: its site and where its two axes are."""

    site: Site | None  # None: its site was refused (consumers add no further blockers)
    q: int = 0
    k: int = 0
    rank: int = 0


@dataclasses.dataclass
class AttentionFamily:
    """What one walk knows of attention (:attr:`cosyedge.surgery.walker.Walker.attention`)."""

    window: int | None = None  # --attention-window: bound unlimited left context to this many frames
    per_frame: bool = False  # --attention-per-frame: chunked attention at any hop (queries wait for their chunk)
    tensors: dict = dataclasses.field(default_factory=dict)  # Att by name of every tensor over query x key time
    sites: list = dataclasses.field(default_factory=list)  # Site of every attention streamed, in walk order
    partners: dict = dataclasses.field(default_factory=dict)  # Site by name of a site's second score node
    replaced: set = dataclasses.field(default_factory=set)  # nodes computing only masks a site replaces
    relative: dict = dataclasses.field(default_factory=dict)  # RelTerm by term name (rules/relative.py)
    relative_nodes: set = dataclasses.field(default_factory=set)  # nodes of those terms the walk leaves alone


def find_replaced(ctx: Any) -> None:
    """Fill ``ctx.attention.replaced`` with the nodes that only compute attention masks from shapes (the attention
    rules replace the masks with the chunk's own): every output depends on shapes only and feeds only such nodes or
    ops that apply a mask to a tensor over query x key time (not a MatMul/Einsum operand, not an Attention op's
    queries, keys or values: positional projections of the keys are streamed). The walk leaves them as they are
    (role :data:`~cosyedge.surgery.rules.REPLACED`; they become dead)."""
    if ctx.masks is None or not any(f.axes2 for f in ctx.facts.values()):
        return
    outs = {t.name for t in ctx.graph.outputs}
    for node in reversed(list(ctx.graph.nodes)):
        o = [t for t in node.outputs if t.name]
        if not o or any(t.name in outs for t in o) or any(ctx.masks.data_path(t.name) for t in o):
            continue
        uses = [(c, [i for i, x in enumerate(c.inputs) if x is t]) for t in o for c in t.outputs]
        if uses and all(c.name in ctx.attention.replaced or (
                involved(c, ctx) and any(ctx.masks.data_path(t.name) for t in c.outputs if t.name)
                and c.op not in ("MatMul", "Einsum") and not (c.op == "Attention" and min(idx) < 3))
                for c, idx in uses):
            ctx.attention.replaced.add(node.name)


def involved(node: Any, ctx: Any) -> bool:
    """bool: ``node`` takes or makes a tensor over time x time (an attention op for :func:`attend`)."""
    for t in list(node.inputs) + list(node.outputs):
        if t.name and (t.name in ctx.attention.tensors or ctx.fact(t).axes2 is not None):
            return True
    return False


def _after_refused(node: Any, ctx: Any) -> bool:
    """bool: an input of ``node`` belongs to a site that was refused already: its outputs over query x key time are
    marked so (consumers add no further blockers) and it is left as it is."""
    if not any((a := ctx.attention.tensors.get(t.name)) is not None and a.site is None for t in node.inputs):
        return False
    for o in node.outputs:
        if o.name and ctx.fact(o).axes2 is not None:
            ctx.attention.tensors[o.name] = Att(None)
    ctx.pass_delay(node)
    return True


@register(ANY, roles=(QUERY_KEY,))
def attend(node: Any, ctx: Any) -> None:
    """The rule for every node that :func:`involved` names (role :data:`~cosyedge.surgery.rules.QUERY_KEY`; module
    doc), the ONNX Attention op aside (:func:`attention_op`).

    Raises:
        Blocker: the node does not fit the attention family, or its mask is unbounded, full, not banded or chunked,
            or computed from data.
    """
    if _after_refused(node, ctx):
        return
    ins = [ctx.attention.tensors.get(t.name) for t in node.inputs]
    data = [i for i, a in enumerate(ins) if a is not None]
    if not data:
        return _scores(node, ctx)
    a = ins[data[0]]
    if len({id(ins[i].site) for i in data}) > 1:
        raise Blocker("tensors of two different attentions meet")
    op = node.op
    if op in ("MatMul", "Einsum") and not (node.outputs[0].name and ctx.fact(node.outputs[0]).axes2):
        return _values(node, ctx, a, data[0])
    if op in ("Softmax", "LogSoftmax"):
        ax = int(node.attrs.get("axis", -1 if ctx.opset >= 13 else 1)) % a.rank
        if ctx.opset < 13 and not (ax == a.rank - 1 == a.k):
            raise Blocker(f"{op} (opset {ctx.opset}) flattens axes {ax}.. of a tensor over query x key time")
        if ax != a.k:
            raise Blocker(f"{op} over the query axis {ax} (normalises over the whole sequence)")
        _out(node, ctx, a)
        return
    if op in _REDUCE:
        return _reduce(node, ctx, a)
    if op == "Transpose":
        perm = [int(p) for p in node.attrs.get("perm", list(range(a.rank))[::-1])]
        _out(node, ctx, dataclasses.replace(a, q=perm.index(a.q), k=perm.index(a.k)))
        return
    if op in _UNARY:
        _out(node, ctx, a)
        return
    if op in _BINARY:
        return _binary(node, ctx, a, data)
    raise Blocker(f"no streaming rule for {op} on a tensor over query x key time (closed world: the attention "
                  "rules take elementwise ops, Softmax over keys, reductions over keys, Transpose, MatMul with values)")


# ---------------------------------------------------------------------------------------------- helpers
def _out(node: Any, ctx: Any, a: Att) -> None:
    rank = len(ctx.fact(node.outputs[0]).shape1)
    shift = rank - a.rank
    ctx.attention.tensors[node.outputs[0].name] = dataclasses.replace(a, q=a.q + shift, k=a.k + shift, rank=rank)
    for o in node.outputs:
        ctx.set_delay(o, a.site.delay)


def _time_letters(node: Any, ctx: Any) -> tuple[int, tuple[int, int]]:
    """For a score MatMul/Einsum ``Q x K``: K's time axis (int) and the output's (query, key) axes (tuple[int, int]).

    Raises:
        Blocker: the operands' time axes do not make query x key scores.
    """
    fq, fk, fo = ctx.fact(node.inputs[0]), ctx.fact(node.inputs[1]), ctx.fact(node.outputs[0])
    if node.op == "MatMul":
        rq, rk, ro = len(fq.shape1), len(fk.shape1), len(fo.shape1)
        if fq.axis != rq - 2 or fk.axis != rk - 1:
            raise Blocker(f"multiplies two streaming tensors with time on axes {fq.axis} (of {rq}) and {fk.axis} (of "
                          f"{rk}): not query x key^T (attention scores)")
        return fk.axis, (ro - 2, ro - 1)
    from cosyedge.surgery.rules.perframe import _einsum_terms

    eq = attr_str(node, "equation", "")
    terms, rhs = _einsum_terms(eq, [len(fq.shape1), len(fk.shape1)])
    a, b = terms[0][fq.axis], terms[1][fk.axis]
    if a == b or a not in rhs or b not in rhs or a in terms[1] or b in terms[0]:
        raise Blocker(f"'{eq}' does not make query x key scores of two streaming tensors")
    return fk.axis, (rhs.index(a), rhs.index(b))


def _key_side(node: Any, ctx: Any, site: Site, ka: int) -> None:
    """Give the key side (input 1) of a score node ``node`` the site's cache: positions (a lifted tensor: WeNet's
    positional projections of the key frames) first become an ordinary stream (batch axis 0), then both are aligned
    to the site's delay and get ``site.cache`` frames of state."""
    k = node.inputs[1]
    if k.name in ctx.positions.lifted:
        from cosyedge.surgery.rules.lifted import _join

        _join(node, 1, ctx, len(ctx.fact(k).shape1), 0, f"{node.name}/positions")
    if site.lead:  # per-frame chunked attention: the queries wait site.lead frames for the end of their chunk
        for i, want in ((0, site.delay), (1, site.delay - site.lead)):
            di = ctx.delay_of(node.inputs[i]) or 0
            if di > want:
                raise Blocker(f"its {'queries' if i == 0 else 'keys'} are {plural(di - want, 'frame')} later than the "
                              "attention's other scores")
            if di < want:
                node.inputs[i] = ctx.delay_line(node.inputs[i], want - di, node.name)
        if site.cache:
            node.inputs[1] = ctx.add_state(node.inputs[1], site.cache, ka, KEY, node.name)
        return
    d = ctx.align(node, [0, 1], minimum=site.delay)
    if d != site.delay:
        raise Blocker(f"its queries or keys are {plural(d - site.delay, 'frame')} later than the attention's other "
                      "scores")
    if site.cache:
        node.inputs[1] = ctx.add_state(node.inputs[1], site.cache, ka, KEY, node.name)


def _scores(node: Any, ctx: Any) -> None:
    """The score MatMul/Einsum (two streaming inputs, output over query x key time): a new site."""
    out = node.outputs[0]
    if node.op not in ("MatMul", "Einsum") or len(node.inputs) != 2 or ctx.fact(out).axes2 is None \
            or len(ctx.stream_inputs(node)) != 2:
        if ctx.fact(out).axes2 is not None and not ctx.stream_inputs(node):
            raise Blocker("makes a tensor over query x key time from the data (not a mask of the sequence length)")
        for o in node.outputs:
            if o.name and ctx.fact(o).axes2 is not None:
                ctx.attention.tensors[o.name] = Att(None)
        data = [x for x in node.inputs if x.name and ctx.masks.data_path(x.name)]
        if data and node.op not in ("MatMul", "Einsum"):
            raise Blocker(f"makes a mask over query x key time from '{data[0].name}', which depends on the values of "
                          f"{ctx.masks.data_path(data[0].name)}, not only on the sequence length (a mask from the "
                          "data, e.g. frames masked by their energy): refused, not guessed")
        raise Blocker(f"{node.op} makes a tensor over query x key time that is not attention scores of two streaming "
                      "tensors")
    try:
        ka, (oq, ok) = _time_letters(node, ctx)
        fq, fk = ctx.fact(node.inputs[0]), ctx.fact(node.inputs[1])
        if fq.rate != fk.rate:
            raise Blocker(f"queries at {fq.rate} and keys at {fk.rate} frames per tick (cross-attention between rates)")
        rate = fq.rate
        rank = len(ctx.fact(out).shape1)
        if node.name in ctx.attention.partners:  # a second score term of a site made at its partner
            site = ctx.attention.partners[node.name]
            _key_side(node, ctx, site, ka)
            ctx.attention.tensors[out.name] = Att(site, oq, ok, rank)
            ctx.set_delay(out, site.delay)
            return
        pat, masks, partners = classify_site(node, ctx, rate, (oq, ok))
        if node.inputs[0].name in ctx.positions.lifted:
            raise Blocker("its queries are positions (a position term of queries x keys is not streamed)")
        site = _site(node, ctx, pat, [0], rate, [(c.name, mi) for c, mi, *_ in masks], out.name)
        site.qk = (oq, ok, rank)
        for p in partners:
            ctx.attention.partners[p.name] = site
        _key_side(node, ctx, site, ka)
        a = Att(site, oq, ok, rank)
        vis = vis_for(ctx, site, a, out)
        raw = ctx.op(node.op, list(node.inputs), node.name, dict(node.attrs))
        low = np.finfo(_dtype(ctx, out)).min
        node.op, node.attrs = "Where", {}
        node.inputs.clear()
        node.inputs.extend([vis, raw, ctx.const(low, dtype=_dtype(ctx, out))])
        ctx.attention.tensors[out.name] = a
        ctx.set_delay(out, site.delay)
    except Blocker:
        ctx.attention.tensors[out.name] = Att(None)
        raise


def chunk_choices(node: Any, chunk: int, rate: Fraction) -> str:
    """Why a chunked attention needs whole chunks per hop, and the two ways to stream it (str, for the stride
    message of :func:`cosyedge.surgery.streamify.streamify_graph`): a hop of whole chunks with no delay, or one frame
    per hop where each query waits for the end of its chunk (``chunk - 1`` frames of delay per attention layer in
    series, ``--attention-per-frame``: a layer's keys come one frame per hop, so the next layer waits again; the
    model's own look-ahead stays ``chunk - 1`` frames, which only whole chunks keep). ``rate``: the attention's frames
    per input tick."""
    at = "" if rate == 1 else f" at {rate} of the input's rate"
    return (f"chunked attention at {node.op} node '{node.name}' (chunks of {plural(chunk, 'frame')}{at}): either a "
            f"hop of whole chunks ({plural(chunk, 'frame')}), which streams it with no delay, or one frame per hop, "
            f"where each query waits for the end of its chunk: {plural(chunk - 1, 'frame')} of delay per chunked "
            "attention layer (give "
            "--attention-per-frame, attention_per_frame=True)")


def _site(node: Any, ctx: Any, pat: Pattern, idxs: list[int], rate: Fraction, masks: list, score: str) -> Site:
    """Bound ``pat`` by ``--attention-window`` where unlimited (else refuse it), align the inputs ``idxs`` (queries,
    keys, values) to one delay (a multiple of the chunk for a chunked mask) and register the site."""
    original, rounding = pat, ""
    if not pat.bounded and pat.kind in ("causal", "chunked") and ctx.attention.window:
        pat = pat.bound(int(ctx.attention.window))
        rounding = window_rounding(original, int(ctx.attention.window))
    if not pat.bounded:
        if pat.kind in ("causal", "chunked"):
            raise Blocker(f"its attention is {pat.describe()}: a stream would need a key cache that grows without "
                          "end; give --attention-window N to bound it to N frames (that changes the model: the "
                          "proof then compares with the bounded full graph and reports the deviation)")
        raise Blocker(f"its attention mask is {pat.describe()}: not streamable")
    d = ctx.align(node, idxs, minimum=0) or 0
    if pat.kind == "chunked" and ctx.attention.per_frame and pat.chunk > 1:
        lead = pat.chunk - 1  # the keys stay at the queries' delay d; the queries wait for the end of their chunk
        return _lead_site(node, ctx, Site(node.name, pat, original, d + lead, rate, pat.cache_frames + 2 * lead,
                                          score=score, masks=masks, lead=lead, rounding=rounding), idxs)
    if pat.kind == "banded" and pat.ahead:  # the queries wait pat.ahead frames for the keys they see ahead
        return _lead_site(node, ctx, Site(node.name, pat, original, d + pat.ahead, rate, pat.cache_frames + pat.ahead,
                                          score=score, masks=masks, lead=pat.ahead, rounding=rounding), idxs)
    if pat.kind == "chunked" and d % pat.chunk:
        d = ctx.align(node, idxs, minimum=d + (-d) % pat.chunk)
    site = Site(node.name, pat, original, d, rate, pat.cache_frames, score=score, masks=masks, rounding=rounding)
    if pat.kind == "chunked":
        ctx.require_stride((rate / pat.chunk).denominator, chunk_choices(node, pat.chunk, rate))
    ctx.attention.sites.append(site)
    return site


def _lead_site(node: Any, ctx: Any, site: Site, idxs: list[int]) -> Site:
    """Register a site whose keys and values run ``site.lead`` frames ahead of its queries (a band that looks ahead,
    per-frame chunked attention). A score MatMul/Einsum (``idxs`` ``[0]``) delays its queries at the key side
    (:func:`_key_side`); the ONNX Attention op (``idxs`` ``[0, 1, 2]``, aligned to one delay) gets its queries through
    a delay line of ``site.lead`` frames here."""
    if idxs != [0]:
        node.inputs[0] = ctx.delay_line(node.inputs[0], site.lead, node.name)
    ctx.attention.sites.append(site)
    return site


@register("Attention", roles=(STREAM, QUERY_KEY))
def attention_op(node: Any, ctx: Any) -> None:
    """The ONNX ``Attention`` operator (opset 23): Q, K, V (N, S, hidden) or (N, heads, S, d), an optional
    ``attn_mask`` (bool: True attends; float: added) and ``is_causal``. Its mask is measured like any other; the keys
    and values get caches; the chunk's mask (bool, (N, 1, S_q, L + S_q)) replaces ``attn_mask`` and ``is_causal``
    becomes 0. Source: https://onnx.ai/onnx/operators/onnx__Attention.html.

    Raises:
        Blocker: past_key/past_value given (the graph already streams its own cache), present_* or the scores used,
            time not on the sequence axis, or a mask refused as for every attention.
    """
    if _after_refused(node, ctx):
        return
    ins = list(node.inputs)
    if getattr(ctx, "masks", None) is None:
        raise Blocker("attention over the whole sequence (no model to measure its mask from)")
    if len(ins) > 4 and any(t.name for t in ins[4:]):
        raise Blocker("already takes a key/value cache (past_key/past_value): the graph streams its own cache "
                      "('cosyedge adopt' takes such graphs)")
    if any(o.name and o.outputs for o in node.outputs[1:]):
        raise Blocker("its present_key/present_value or qk_matmul_output outputs are used")
    if ctx.stream_inputs(node)[:3] != [0, 1, 2]:
        raise Blocker("its queries, keys and values do not all run over time")
    facts = [ctx.fact(t) for t in ins[:3]]
    for f in facts:
        if f.axis != len(f.shape1) - 2:
            raise Blocker(f"time on axis {f.axis} of a rank-{len(f.shape1)} input (the sequence axis is "
                          f"{len(f.shape1) - 2})")
    if len({f.rate for f in facts}) > 1:
        raise Blocker("queries, keys and values at different frame rates")
    rate = facts[0].rate
    causal = bool(int(node.attrs.get("is_causal", 0)))
    mask = ins[3] if len(ins) > 3 and ins[3].name else None
    if mask is not None and not isinstance(mask, gs.Constant) and ctx.masks.data_path(mask.name):
        raise Blocker(f"its mask '{mask.name}' depends on the values of {ctx.masks.data_path(mask.name)}, not only on "
                      "the sequence length (a key-padding mask from lengths?): refused, not guessed")
    if mask is None and not causal:
        pat = Pattern("full")
    else:
        views = []
        pat = None
        for frames in MASK_FRAMES + MASK_FRAMES_LONG:
            if frames in MASK_FRAMES_LONG and (pat.bounded or pat.kind not in ("causal", "chunked")):
                break
            ticks = ctx.ticks_for_frames(rate, frames)
            f = int(rate * ticks + facts[0].extra)
            v = np.ones((f, f), dtype=bool)
            if causal:
                v &= np.tri(f, dtype=bool)
            if mask is not None:
                try:
                    m = mask2d(ctx.masks.evaluate([mask.name], ticks)[mask.name], mask.name, 4, (2, 3), f)
                except RuntimeError as err:
                    raise Blocker(f"its mask cannot be evaluated from shapes alone ({err})") from None
                v &= m.astype(bool) if m.dtype == bool else (m == 0)
            views.append(v)
            pat = classify(views)
        if pat.kind == "none":
            pat = Pattern("full")
    site = _site(node, ctx, pat, [0, 1, 2], rate, [], "")
    site.attention_op = True
    if site.cache:
        for i in (1, 2):
            node.inputs[i] = ctx.add_state(node.inputs[i], site.cache, facts[i].axis, KEY if i == 1 else VALUE,
                                           node.name)
    vis = ctx.unsqueeze(vis3(ctx, site), [1], f"{node.name}/attention_mask")
    while len(node.inputs) < 4:
        node.inputs.append(gs.Variable.empty())
    node.inputs[3] = vis
    node.attrs["is_causal"] = 0
    for o in node.outputs[:1]:
        ctx.set_delay(o, site.delay)


def _dtype(ctx: Any, t: Any) -> Any:
    v = ctx.value(t)
    return np.asarray(v).dtype if v is not None else np.dtype(np.float32)


def _replacement(node: Any, ctx: Any, a: Att, mi: int, di: int) -> Any:
    """The chunk's value of mask input ``mi`` of ``node`` (used on the attention tensor at ``di``): the site's
    pattern, in the mask's own values (bool condition, additive 0 / hidden value, 0/1 weights)."""
    t = node.inputs[mi]
    vis = vis_for(ctx, a.site, a, node.inputs[di])
    base = f"{node.name}/attention_mask"
    if node.op == "Where":
        return vis if di == 1 else ctx.op("Not", [vis], base, dtype=bool)
    m = np.asarray(ctx.value(t))
    dt = m.dtype
    if node.op in ("Add", "Sub"):
        hidden = (m.min() if node.op == "Add" else m.max()) if m.size and (m != 0).any() else \
            (np.finfo(dt).min if node.op == "Add" else np.finfo(dt).max)
        return ctx.op("Where", [vis, ctx.const(0, dtype=dt), ctx.const(hidden, dtype=dt)], base, dtype=dt)
    from onnx import helper

    return ctx.op("Cast", [vis], base, {"to": int(helper.np_dtype_to_tensor_dtype(dt))}, dtype=dt)


def _binary(node: Any, ctx: Any, a: Att, data: list[int]) -> None:
    rank = len(ctx.fact(node.outputs[0]).shape1)
    shift = rank - a.rank
    aq = a.q + shift
    masks = {m for (n, m) in a.site.masks if n == node.name}
    for i, t in enumerate(node.inputs):
        if i in data or not t.name or isinstance(t, gs.Constant):
            continue
        f = ctx.fact(t)
        if i in masks:
            node.inputs[i] = _replacement(node, ctx, a, i, data[0])
            continue
        if t.name in ctx.attention.relative:
            if node.op != "Add" or a.site.pattern.kind not in ("banded", "chunked"):
                raise Blocker(f"{node.op} of the relative-position term '{t.name}' (only added to the scores)")
            from cosyedge.surgery.rules.relative import chunk_term

            try:
                node.inputs[i] = chunk_term(node, i, ctx, a.site)
            except Blocker:
                for o in node.outputs:  # its consumers add no further blockers
                    if o.name and ctx.fact(o).axes2 is not None:
                        ctx.attention.tensors[o.name] = Att(None)
                raise
            continue
        if f.axes2 is not None:
            raise Blocker(f"'{t.name}' over query x key time is neither this attention's mask nor its scores")
        if not f.is_stream:
            continue  # constant along time (a scale)
        r = len(f.shape1)
        if f.axis + rank - r != aq:
            raise Blocker(f"'{t.name}' runs over the key time axis but is computed from data (a relative position "
                          "bias? rel_shift is not streamed)")
        if f.rate != a.site.rate:
            raise Blocker(f"'{t.name}' is at {f.rate} frames per tick, the attention at {a.site.rate}")
        dt = ctx.delay_of(t)
        if dt is not None and dt != a.site.delay:
            if dt > a.site.delay:
                raise Blocker(f"'{t.name}' is {plural(dt - a.site.delay, 'frame')} later than the attention's queries")
            node.inputs[i] = ctx.delay_line(t, a.site.delay - dt, node.name)
    _out(node, ctx, a)


def _reduce(node: Any, ctx: Any, a: Att) -> None:
    axes = node.attrs.get("axes")
    if axes is None and len(node.inputs) > 1 and node.inputs[1].name:
        v = ctx.value(node.inputs[1])
        axes = None if v is None else v.reshape(-1).tolist()
    axes = [int(x) % a.rank for x in (axes or [])]
    if axes != [a.k]:
        raise Blocker(f"{node.op} over axes {axes} of a tensor over query x key time (only over the key axis {a.k})")
    for o in node.outputs:
        ctx.set_delay(o, a.site.delay)


def _values(node: Any, ctx: Any, a: Att, di: int) -> None:
    """``probs @ V``: the values get a cache of the site's ``L`` frames; the output streams at the site's delay."""
    if di != 0:
        raise Blocker("multiplies values by attention weights in an order streamify does not follow (V @ probs)")
    v = node.inputs[1]
    fv = ctx.fact(v)
    if not fv.is_stream:
        raise Blocker("attention weights multiply a tensor that does not run over time")
    if node.op == "MatMul":
        if a.k != a.rank - 1 or fv.axis != len(fv.shape1) - 2:
            raise Blocker(f"weights @ values with the key axis {a.k} of weights and time axis {fv.axis} of values")
    else:
        from cosyedge.surgery.rules.perframe import _einsum_terms

        eq = attr_str(node, "equation", "")
        terms, rhs = _einsum_terms(eq, [a.rank, len(fv.shape1)])
        if terms[0][a.k] != terms[1][fv.axis] or terms[0][a.k] in rhs:
            raise Blocker(f"'{eq}' does not sum attention weights over the values' time")
    if fv.rate != a.site.rate:
        raise Blocker(f"values at {fv.rate} frames per tick, queries at {a.site.rate}")
    d, dv = a.site.delay - a.site.lead, ctx.delay_of(v)  # values with the keys (site.lead frames before the queries)
    if dv is not None and dv != d:
        if dv > d:
            raise Blocker(f"the values are {plural(dv - d, 'frame')} later than the keys (a look-ahead on the value "
                          "path only)")
        v = ctx.delay_line(v, d - dv, node.name)
    if a.site.cache:
        v = ctx.add_state(v, a.site.cache, fv.axis, VALUE, node.name)
    node.inputs[1] = v
    for o in node.outputs:
        ctx.set_delay(o, a.site.delay)


