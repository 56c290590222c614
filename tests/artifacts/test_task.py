"""A stream model's task: streamify, adopt and the recipes write ``cosyedge.task``; a model without it (the bundled
one, older exports) resolves to what the old guess said; a task cosyedge does not know is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import soundfile as sf

from cosyedge.artifacts import StreamContract, StreamIO, resolve_task
from cosyedge.errors import ArtifactError
from tests.helpers.cli_errors import refused
from tests.helpers.graphs import conv_onnx

HOP = 512


def _meta(path: Path) -> dict:
    return {p.key: p.value for p in onnx.load(str(path)).metadata_props}


def _old_vad_output(contract, meta=None):
    """cosyedge.vad.stream.vad_output as it was before the task was in the contract (the reference the fallback must
    keep answering)."""
    if not contract.audio_in:
        return None
    cands = [o for o in contract.stream_outputs if o.kind != "audio" and o.frames_per_hop == 1
             and len(o.shape) == 3 and o.shape[1] == 1]
    try:
        task = json.loads((meta or {}).get("recipe") or "{}").get("task")
    except (ValueError, AttributeError):
        task = None
    if task == "vad" and cands:
        named = [o for o in cands if "prob" in o.name.lower()]
        return (named or cands)[0].name
    return cands[0].name if len(cands) == 1 else None


def _io(name, kind="features", shape=("N", 1, "T"), fph=1):
    return StreamIO(name, list(shape), "float32", 2, HOP if kind == "audio" else fph, 0, kind)


def _contract(outputs, inputs=None, task=""):
    inputs = inputs or [_io("audio", "audio")]
    return StreamContract(input=inputs[0].name, output=outputs[0].name, sample_rate_hz=16000, hop_samples=HOP,
                          total_stride=HOP, inputs=inputs, outputs=outputs, task=task)


VAD_RECIPE = {"recipe": json.dumps({"recipe": "silero-vad", "task": "vad"})}
OLD_MODELS = {  # contract outputs, metadata -> the task the guess gives
    "enhancer": ([_io("enhanced", "audio")], {}, "enhancer"),
    "one probability": ([_io("output")], {}, "vad"),
    "two per-hop outputs": ([_io("a"), _io("b")], {}, "features"),
    "two per-hop outputs, VAD recipe": ([_io("a"), _io("speech_prob")], VAD_RECIPE, "vad"),
    "audio beside one per-hop output": ([_io("enhanced", "audio"), _io("vad")], {}, "enhancer"),
    "features of 32 bins": ([_io("erb", shape=("N", 32, "T"))], {}, "features"),
    "two frames per hop": ([_io("x", fph=2)], {}, "features"),
}


@pytest.mark.parametrize("case", sorted(OLD_MODELS))
def test_a_contract_without_a_task_resolves_as_the_old_guess(case):
    outputs, meta, want = OLD_MODELS[case]
    c = _contract(outputs)
    got = resolve_task(c, meta)
    assert (got.task, got.declared) == (want, False)
    assert got.speech_output == _old_vad_output(c, meta)  # --vad accepts what it accepted before
    # the VAD refusal of an enhancer command fired for exactly "a probability and no audio output"
    old_refused = _old_vad_output(c, meta) is not None and not any(o.kind == "audio" for o in c.stream_outputs)
    assert (got.task == "vad") == old_refused


def test_a_features_input_is_no_vad_even_with_one_per_hop_output():
    c = _contract([_io("p")], inputs=[_io("feats", shape=("N", 1, "T"))])
    assert resolve_task(c).task == "features" and _old_vad_output(c) is None


def test_the_bundled_model_has_no_task_and_resolves_an_enhancer():
    from cosyedge.models import REFERENCE_STREAM_ONNX

    assert "cosyedge.task" not in _meta(REFERENCE_STREAM_ONNX)  # the bundled file is not rewritten
    got = resolve_task(StreamContract.from_onnx(REFERENCE_STREAM_ONNX))
    assert (got.task, got.speech_output, got.declared) == ("enhancer", None, False)


def test_a_declared_task_wins_over_the_guess():
    c = _contract([_io("enhanced", "audio"), _io("vad")], task="enhancer")
    assert resolve_task(c).speech_output is None  # an enhancer said so: --vad refuses it
    c = _contract([_io("a"), _io("speech_prob")], task="vad")
    assert resolve_task(c) == resolve_task(c, VAD_RECIPE)  # no provenance needed
    assert resolve_task(c).speech_output == "speech_prob" and resolve_task(c).declared


def test_the_task_round_trips_through_the_metadata():
    c = _contract([_io("output")], task="vad")
    meta = c.to_metadata()
    assert meta["cosyedge.task"] == "vad"
    assert StreamContract.from_metadata(meta).task == "vad"
    assert "cosyedge.task" not in _contract([_io("output")]).to_metadata()  # none: nothing written, as before


def test_streamify_writes_the_task(tmp_path):
    from cosyedge.surgery.streamify import streamify

    src = conv_onnx(tmp_path / "c.onnx")
    c = streamify(src, tmp_path / "c.stream.onnx", sample_rate_hz=16000, hop_samples=160)
    assert c.task == "enhancer" and _meta(tmp_path / "c.stream.onnx")["cosyedge.task"] == "enhancer"
    back = resolve_task(StreamContract.from_onnx(tmp_path / "c.stream.onnx"))
    assert (back.task, back.declared) == ("enhancer", True)
    streamify(src, tmp_path / "plain.stream.onnx", sample_rate_hz=16000, hop_samples=160, task="")
    assert "cosyedge.task" not in _meta(tmp_path / "plain.stream.onnx")  # a pinned recipe export: none written
    with pytest.raises(ArtifactError, match="task 'denoiser' is not one of enhancer, vad, features"):
        streamify(src, tmp_path / "bad.stream.onnx", sample_rate_hz=16000, hop_samples=160, task="denoiser")
    assert not (tmp_path / "bad.stream.onnx").exists()


def test_adopt_writes_the_task(tmp_path):
    from cosyedge.surgery.adopt import adopt
    from tests.surgery.test_adopt import HOP as AHOP, SR, packed_model

    src = packed_model(tmp_path / "packed.onnx")
    c = adopt(src, tmp_path / "a.stream.onnx", sample_rate_hz=SR, hop_samples=AHOP)
    assert c.task == "enhancer" and _meta(tmp_path / "a.stream.onnx")["cosyedge.task"] == "enhancer"
    assert "cosyedge.adopted" in _meta(tmp_path / "a.stream.onnx")
    c = adopt(src, tmp_path / "b.stream.onnx", sample_rate_hz=SR, hop_samples=AHOP, task="features")
    assert StreamContract.from_onnx(tmp_path / "b.stream.onnx").task == "features"


def test_recipes_declare_their_task_and_pinned_exports_do_not_write_it():
    from cosyedge.recipes import recipes

    known = recipes()
    assert known["silero-vad"].task == "vad" and known["silero-vad"].write_task
    for name in ("dtln", "gtcrn", "nsnet2", "dfn3"):
        assert known[name].task == "enhancer", name
    assert known["dtln"].write_task
    for name in ("nsnet2", "dfn3", "gtcrn"):  # their content hashes are pinned by compare/baselines/
        assert not known[name].write_task, name


def test_a_model_with_an_unknown_task_is_refused_in_one_line(cli, tmp_path):
    from cosyedge.surgery.streamify import streamify

    model = tmp_path / "c.stream.onnx"
    streamify(conv_onnx(tmp_path / "c.onnx"), model, sample_rate_hz=16000, hop_samples=160)
    m = onnx.load(str(model))
    next(p for p in m.metadata_props if p.key == "cosyedge.task").value = "denoiser"
    onnx.save(m, str(model))
    with pytest.raises(ArtifactError, match="'denoiser'"):
        StreamContract.from_onnx(model)
    sf.write(str(tmp_path / "in.wav"), np.zeros(16000, np.float32), 16000)
    rc, _, err = cli("run", tmp_path / "in.wav", "-o", tmp_path / "out.wav", "--engine", model)
    line = refused(rc, err, 3)
    assert "task 'denoiser'" in line and str(model) in line
    assert not (tmp_path / "out.wav").exists()
