"""Check the rebuilds of ``tests/helpers/models_attention.py`` against the upstream classes themselves (not collected by
pytest: it needs upstream sources that the project does not install).

Get the sources without their dependencies, then run this file::

    pip install --no-deps --target /tmp/up nemo_toolkit==3.0.0 moshi==0.2.13 einops espnet==202511
    git -C <wenet checkout> archive HEAD wenet | tar -x -C /tmp/up        # wenet-e2e/wenet 01546996
    git -C <CosyVoice checkout> archive HEAD cosyvoice | tar -x -C /tmp/up  # FunAudioLLM/CosyVoice ace7c47f
    UPSTREAM_SRC=/tmp/up python tests/verify_attention_upstream.py

Each package's heavy ``__init__`` is bypassed (stub packages whose ``__path__`` points at the real folders), and the
few imports that pull in hydra/lightning/huggingface are stubbed (NeMo's adapter and access mixins, its
``activation_registry``, WeNet's ``class_utils``). The same seeded weights are loaded into both sides with
``load_state_dict(strict=True)`` and the outputs compared on real-speech features. Measured 2026-12 (torch 2.13 CPU):
Mimi 0.0; NeMo rel_pos and abs_pos layers + positional encodings 0.0, ``_create_masks`` equal; WeNet abs / rel /
lengths 0.0; CosyVoice espnet rel_pos and chunk mask without left limit <= 5.4e-6 (CosyVoice's softmax runs without
WeNet's ``.float()`` / ``type_as``). Also: NeMo ``ConvSubsampling`` (dw_striding / striding, x4 / x8,
causal or not) 0.0 and equal lengths; ESPnet's legacy and current relative positions (tables and attention) vs the
rebuilds (the current ones are CosyVoice's): 0.0 each.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import math
import os
import sys
import types
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.helpers import models_attention as M  # noqa: E402

UP = Path(os.environ.get("UPSTREAM_SRC", "/tmp/up"))


def _pkg(name, path=None):
    m = types.ModuleType(name)
    m.__path__ = [str(path)] if path else []
    sys.modules[name] = m
    return m


def _mod(name, **attrs):
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    sys.modules[name] = m
    return m


def _report(what, a, b):
    print(f"{what}: max abs diff {float((a - b).abs().max()):.3g} (output scale {float(a.abs().max()):.3g})")


def mimi():
    sys.path.insert(0, str(UP))  # einops
    _pkg("moshi", UP / "moshi")
    _pkg("moshi.modules", UP / "moshi/modules")
    _pkg("moshi.utils", UP / "moshi/utils")
    mt = importlib.import_module("moshi.modules.transformer")
    up = mt.ProjectedTransformer(input_dimension=16, output_dimensions=[16], d_model=32, num_heads=2, num_layers=1,
                                 dim_feedforward=64, causal=True, context=250, layer_scale=0.01, conv_layout=True,
                                 max_period=10000, gating="none", norm="layer_norm",
                                 positional_embedding="rope").eval()
    mine = M.build("mimi_transformer")
    sd = {}
    for k, v in mine.state_dict().items():
        k = k.replace("self_attn.in_proj.", "self_attn.in_projs.0.").replace("self_attn.out_proj.",
                                                                              "self_attn.out_projs.0.")
        sd["transformer." + k if k.startswith("layers") else k.replace("output_proj.", "output_projs.0.")] = v
    up.load_state_dict(sd, strict=True)
    x = torch.from_numpy(M.speech_features(600, 2))
    with torch.no_grad():
        _report("moshi ProjectedTransformer vs MimiTransformer", up(x)[0], mine(x))


def nemo():
    n = UP / "nemo"
    for name, path in [("nemo", n), ("nemo.collections", n / "collections"),
                       ("nemo.collections.asr", n / "collections/asr"),
                       ("nemo.collections.asr.parts", n / "collections/asr/parts"),
                       ("nemo.collections.asr.parts.submodules", n / "collections/asr/parts/submodules"),
                       ("nemo.collections.asr.parts.utils", n / "collections/asr/parts/utils"),
                       ("nemo.collections.asr.parts.submodules.adapters", None), ("nemo.collections.common", None),
                       ("nemo.collections.common.parts", None), ("nemo.core", None), ("nemo.core.classes", None)]:
        _pkg(name, path)
    _mod("nemo.utils", avoid_float16_autocast_context=contextlib.nullcontext)
    _mod("nemo.collections.asr.parts.submodules.adapters.attention_adapter_mixin",
         AttentionAdapterModuleMixin=type("AttentionAdapterModuleMixin", (), {"is_adapter_available": lambda s: False}))
    _mod("nemo.collections.asr.parts.submodules.batchnorm", FusedBatchNorm1d=None)
    act = importlib.import_module("nemo.collections.asr.parts.utils.activations")
    _mod("nemo.collections.common.parts.utils", activation_registry={"swish": act.Swish})
    _mod("nemo.core.classes.mixins",
         AccessMixin=type("AccessMixin", (), {"is_access_enabled": lambda s, guid=None: False}))
    mha = importlib.import_module("nemo.collections.asr.parts.submodules.multi_head_attention")
    cm = importlib.import_module("nemo.collections.asr.parts.submodules.conformer_modules")
    src = (n / "collections/asr/modules/conformer_encoder.py").read_text()
    fn = next(f for f in ast.walk(ast.parse(src)) if isinstance(f, ast.FunctionDef) and f.name == "_create_masks")
    ns = {"torch": torch}
    exec(compile(ast.Module([fn], []), "conformer_encoder.py", "exec"), ns)
    for name in M.MODELS:
        if not name.startswith("nemo"):
            continue
        mine = M.build(name)
        sam = mine.self_attention_model
        layers = nn.ModuleList(cm.ConformerLayer(d_model=32, d_ff=64, self_attention_model=sam, n_heads=4,
                                                 conv_kernel_size=9, conv_norm_type="layer_norm",
                                                 conv_context_size=[8, 0], dropout=0.0, dropout_att=0.0)
                               for _ in range(2)).eval()
        sd = {}
        for k, v in mine.state_dict().items():
            if k.startswith("layers."):
                k = k[len("layers."):]
                for f in ("feed_forward1", "feed_forward2"):
                    k = k.replace(f"{f}.0.", f"{f}.linear1.").replace(f"{f}.2.", f"{f}.linear2.")
                sd[k] = v
        layers.load_state_dict(sd, strict=True)
        pos = (mha.RelPositionalEncoding if sam == "rel_pos" else mha.PositionalEncoding)(
            d_model=32, dropout_rate=0.0, max_len=5000, xscale=math.sqrt(32))
        pos.extend_pe(5000, torch.device("cpu"), torch.float32)
        x = torch.from_numpy(M.speech_features(300, 2))
        length = torch.full((2,), 300)
        fake = types.SimpleNamespace(self_attention_model=sam, att_context_style=mine.att_context_style)
        with torch.no_grad():
            pad_mask, att_mask = ns["_create_masks"](fake, mine.att_context_size, length, 300, None, x.device)
            mine_masks = mine._create_masks(mine.att_context_size, length, 300, None, x.device)
            assert torch.equal(pad_mask, mine_masks[0]) and torch.equal(att_mask, mine_masks[1]), name
            h, pe = pos(mine.pre_encode(x.transpose(1, 2)))
            for layer in layers:
                h = layer(x=h, att_mask=att_mask, pos_emb=pe, pad_mask=pad_mask)
            _report(f"nemo _create_masks + ConformerLayer x2 + {type(pos).__name__} vs {name}",
                    mine.head(h).transpose(1, 2), mine(x))
    sys.modules["nemo.utils"].logging = __import__("logging").getLogger("nemo")  # subsampling.py logs only
    sub = importlib.import_module("nemo.collections.asr.parts.submodules.subsampling")
    for kind in ("dw_striding", "striding"):
        for factor in (4, 8):
            for causal in (True, False):
                torch.manual_seed(0)
                up = sub.ConvSubsampling(kind, factor, M.C_IN, 32, 8, activation=nn.ReLU(True),
                                         is_causal=causal).eval()
                mine = M.NemoConvSubsampling(kind, factor, M.C_IN, 32, 8, is_causal=causal).eval()
                mine.load_state_dict(up.state_dict(), strict=True)
                x = torch.from_numpy(M.speech_features(77, 1))
                length = torch.full((2,), 77)
                with torch.no_grad():
                    (a, la), (b, lb) = up(x, length), mine(x, length)
                assert torch.equal(la, lb), (kind, factor, causal)
                _report(f"nemo ConvSubsampling {kind} x{factor} causal={causal} vs NemoConvSubsampling", a, b)


def espnet():
    """ESPnet's relative positions (``pip install --no-deps --target /tmp/up espnet==202511``): its
    ``LegacyRelPositionalEncoding`` and ``LegacyRelPositionMultiHeadedAttention``, and the current
    ``RelPositionalEncoding`` and ``RelPositionMultiHeadedAttention`` (the CosyVoice rebuilds) vs the rebuilds."""
    e = UP / "espnet"
    for name, path in [("espnet", e), ("espnet.nets", e / "nets"), ("espnet.nets.pytorch_backend",
                                                                      e / "nets/pytorch_backend"),
                       ("espnet.nets.pytorch_backend.transformer", e / "nets/pytorch_backend/transformer"),
                       ("espnet2", None), ("espnet2.asr", None), ("espnet2.asr.frontend", None)]:
        _pkg(name, path)
    _mod("espnet2.asr.frontend.cnn", dim_1_layer_norm=None)
    att = importlib.import_module("espnet.nets.pytorch_backend.transformer.attention")
    emb = importlib.import_module("espnet.nets.pytorch_backend.transformer.embedding")
    torch.manual_seed(0)
    up_pos, up_att = emb.LegacyRelPositionalEncoding(32, 0.0).eval(), att.LegacyRelPositionMultiHeadedAttention(
        4, 32, 0.0).eval()
    mine_pos, mine_att = M.EspnetLegacyRelPositionalEncoding(32).eval(), \
        M.EspnetLegacyRelPositionMultiHeadedAttention(4, 32).eval()
    mine_att.load_state_dict(up_att.state_dict(), strict=True)
    x = torch.randn(2, 50, 32, generator=torch.Generator().manual_seed(0))
    mask = M.subsequent_chunk_mask(50, 4, 2).unsqueeze(0)
    with torch.no_grad():
        (ux, upe), (mx, mpe) = up_pos(x), mine_pos(x)
        _report("espnet LegacyRelPositionalEncoding vs EspnetLegacyRelPositionalEncoding", upe, mpe)
        _report("espnet LegacyRelPositionMultiHeadedAttention vs the rebuild", up_att(ux, ux, ux, upe, mask),
                mine_att(mx, mx, mx, mask, mpe))
    up_pos, up_att = emb.RelPositionalEncoding(32, 0.0).eval(), att.RelPositionMultiHeadedAttention(4, 32, 0.0).eval()
    mine_pos, mine_att = M.EspnetRelPositionalEncoding(32).eval(), \
        M.WenetRelPositionMultiHeadedAttention(4, 32, rel_shift=True).eval()
    mine_att.load_state_dict(up_att.state_dict(), strict=True)
    with torch.no_grad():
        (ux, upe), (mx, mpe) = up_pos(x), mine_pos(x)
        _report("espnet RelPositionalEncoding vs EspnetRelPositionalEncoding (CosyVoice)", upe, mpe)
        _report("espnet RelPositionMultiHeadedAttention vs WenetRelPositionMultiHeadedAttention(rel_shift=True)",
                up_att(ux, ux, ux, upe, mask), mine_att(mx, mx, mx, mask, mpe))


def wenet_cosyvoice():
    w, c = UP / "wenet", UP / "cosyvoice"
    for name, path in [("wenet", w), ("wenet.utils", w / "utils"), ("wenet.models", w / "models"),
                       ("wenet.models.transformer", w / "models/transformer"), ("cosyvoice", c),
                       ("cosyvoice.transformer", c / "transformer"), ("cosyvoice.utils", c / "utils")]:
        _pkg(name, path)
    _mod("wenet.utils.class_utils", WENET_NORM_CLASSES={"layer_norm": nn.LayerNorm, "batch_norm": nn.BatchNorm1d})
    imp = importlib.import_module
    w_att, w_conv, w_ff = imp("wenet.models.transformer.attention"), imp("wenet.models.transformer.convolution"), \
        imp("wenet.models.transformer.positionwise_feed_forward")
    w_layer, w_emb, w_mask = imp("wenet.models.transformer.encoder_layer"), imp("wenet.models.transformer.embedding"), \
        imp("wenet.utils.mask")
    c_att, c_emb, c_mask = imp("cosyvoice.transformer.attention"), imp("cosyvoice.transformer.embedding"), \
        imp("cosyvoice.utils.mask")
    c_layer, c_conv, c_ff = imp("cosyvoice.transformer.encoder_layer"), imp("cosyvoice.transformer.convolution"), \
        imp("cosyvoice.transformer.positionwise_feed_forward")
    for t in range(1, 41):
        assert torch.equal(w_mask.subsequent_chunk_mask(t, 4, 2), M.subsequent_chunk_mask(t, 4, 2))
        assert torch.equal(c_mask.subsequent_chunk_mask(t, 4, -1), M.subsequent_chunk_mask(t, 4, -1))
    print("masks: WeNet subsequent_chunk_mask(T, 4, 2) and CosyVoice subsequent_chunk_mask(T, 4) equal, T = 1..40")
    for name in ["wenet_conformer_abs", "wenet_conformer_rel", "cosyvoice_conformer_espnet_rel", "wenet_lengths",
                 "cosyvoice_chunk_unlimited"]:
        mine = M.build(name)
        cosy = name.startswith("cosyvoice")
        att, emb, layer_mod, conv, ff = (c_att, c_emb, c_layer, c_conv, c_ff) if cosy else \
            (w_att, w_emb, w_layer, w_conv, w_ff)
        if name == "wenet_conformer_rel":
            attn, pos = (lambda: att.RelPositionMultiHeadedAttention(4, 32, 0.0)), emb.RelPositionalEncoding(32, 0.0)
        elif name == "cosyvoice_conformer_espnet_rel":
            attn = lambda: att.RelPositionMultiHeadedAttention(4, 32, 0.0)  # noqa: E731
            pos = emb.EspnetRelPositionalEncoding(32, 0.0)
        else:
            attn, pos = (lambda: att.MultiHeadedAttention(4, 32, 0.0)), emb.PositionalEncoding(32, 0.0)
        layers = nn.ModuleList(layer_mod.ConformerEncoderLayer(
            32, attn(), ff.PositionwiseFeedForward(32, 64, 0.0, nn.SiLU()),
            ff.PositionwiseFeedForward(32, 64, 0.0, nn.SiLU()),
            conv.ConvolutionModule(32, 8, nn.SiLU(), "layer_norm", causal=True), 0.0, True) for _ in range(2)).eval()
        layers.load_state_dict({k[len("encoders."):]: v for k, v in mine.state_dict().items()
                                if k.startswith("encoders.")}, strict=True)
        x = torch.from_numpy(M.speech_features(300, 1))
        lens = torch.tensor([300, 290] if name == "wenet_lengths" else [300, 300])
        with torch.no_grad():
            xs, pos_emb = pos.eval()(mine.embed_out(x))
            masks = ~w_mask.make_pad_mask(lens, 300).unsqueeze(1)
            chunk = c_mask.subsequent_chunk_mask(300, 4) if name == "cosyvoice_chunk_unlimited" else \
                w_mask.subsequent_chunk_mask(300, 4, 2)
            chunk_masks = masks & chunk
            for layer in layers:
                xs, chunk_masks, _, _ = layer(xs, chunk_masks, pos_emb, masks)
            want = mine.head(mine.after_norm(xs))
            got = mine(x, lens) if name == "wenet_lengths" else mine(x)
        n = 290 if name == "wenet_lengths" else 300  # WeNet's conv zeroes padded frames (mask_pad); ours does not
        _report(f"{'CosyVoice' if cosy else 'WeNet'} ConformerEncoderLayer x2 vs {name}", want[:, :n], got[:, :n])


if __name__ == "__main__":
    mimi()
    nemo()
    wenet_cosyvoice()
    espnet()
