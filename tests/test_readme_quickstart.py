"""The README's "Bring your own model" quickstart runs as written (both exporters) and names every flag it
needs; the set-up commands come before any table."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DEMO_REL = "cosyedge/assets/demo/noisy.wav"


def _section(title: str) -> str:
    text = README.read_text()
    assert f"\n## {title}\n" in text, f"README has no '## {title}' section"
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _blocks(section: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", section, flags=re.S)


def _tiny_causal_model():
    """A small causal waveform model of the kind the quickstart is for: a strided analysis conv (window 320, hop
    160, left-padded), a GRU over frames and a transposed-conv synthesis; float32 (N, 1, T) -> (N, 1, T)."""
    import torch
    from torch import nn

    class MyModel(nn.Module):
        def __init__(self, ch: int = 8):
            super().__init__()
            self.enc = nn.Conv1d(1, ch, 320, stride=160)
            self.gru = nn.GRU(ch, ch, batch_first=True)
            self.dec = nn.ConvTranspose1d(ch, 1, 320, stride=160)

        def forward(self, audio):
            h = torch.relu(self.enc(nn.functional.pad(audio, (160, 0))))
            h, _ = self.gru(h.transpose(1, 2))
            return self.dec(h.transpose(1, 2))[..., : audio.shape[-1]]

    torch.manual_seed(0)
    return MyModel


def _dims(value_info) -> list:
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


def test_setup_commands_come_before_any_table_or_benchmark():
    """A newcomer reaches the set-up commands early (in the set-up section, before any table); the order and the
    titles of the other sections are the README's to choose."""
    text = README.read_text()
    first_cmd = text.index("```bash\n")
    assert text.index("## Set-up") < first_cmd < text.index("|---|"), "a table stands before the first command"
    assert text[:first_cmd].count("\n") < 30


def test_quickstart_names_the_export_and_every_flag_it_needs():
    sec = _section("Bring your own model")
    (py,) = _blocks(sec, "python")
    assert 'input_names=["audio"]' in py and 'output_names=["enhanced"]' in py
    assert '"audio": {0: "N", 2: "T"}' in py and '"enhanced": {0: "N", 2: "T"}' in py
    assert len(py.strip().splitlines()) <= 6
    assert "dynamo=True" in sec and "dynamic_shapes=" in sec
    (sh,) = _blocks(sec, "bash")
    cmds = [shlex.split(c)[1] for c in sh.strip().splitlines()]
    assert cmds == ["streamify", "build", "run", "compare"]
    assert "--sample-rate-hz 16000 --hop-samples 160" in sh


def test_quickstart_runs_as_written(tmp_path, monkeypatch):
    """The README's python block (with a small causal conv + GRU + ConvTranspose model as ``MyModel``) and then
    each of its shell commands, run in a fresh folder: exit 0, no traceback, and the files each one promises."""
    import onnx
    import soundfile as sf

    sec = _section("Bring your own model")
    (py,) = _blocks(sec, "python")
    (sh,) = _blocks(sec, "bash")
    monkeypatch.chdir(tmp_path)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's own deprecation and folding notes
        exec(compile(py, "README.md (Bring your own model)", "exec"), {"MyModel": _tiny_causal_model()})
    m = onnx.load(tmp_path / "my.onnx")
    assert [i.name for i in m.graph.input] == ["audio"] and [o.name for o in m.graph.output] == ["enhanced"]
    assert _dims(m.graph.input[0]) == ["N", 1, "T"] and _dims(m.graph.output[0]) == ["N", 1, "T"]

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               COSYEDGE_ENGINES_DIR=str(tmp_path / "engines-env"))
    outs = {}
    for line in sh.strip().splitlines():
        argv = shlex.split(line)
        assert argv[0] == "cosyedge"
        argv = [str(ROOT / DEMO_REL) if a == DEMO_REL else a for a in argv[1:]]  # "from the repository root"
        p = subprocess.run([sys.executable, "-m", "cosyedge.cli.main", *argv], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, f"{line}\n{p.stdout}\n{p.stderr}"
        assert "Traceback" not in p.stderr
        outs[argv[0]] = p
    assert "proved on" in outs["streamify"].stderr and "max abs error" in outs["streamify"].stderr
    stream = onnx.load(tmp_path / "my.stream.onnx")
    assert any(i.name.startswith("state_in.") for i in stream.graph.input)
    engine = tmp_path / "engines" / "my-fp16-onnxruntime"
    assert (engine / "manifest.json").is_file() and (engine / "model.onnx").is_file()
    assert outs["build"].stdout.strip().splitlines()[-1].endswith("engines/my-fp16-onnxruntime")
    y, sr = sf.read(tmp_path / "my-enhanced.wav", dtype="float32")
    info = sf.info(ROOT / DEMO_REL)
    assert sr == info.samplerate and len(y) == info.frames and np.isfinite(y).all() and np.abs(y).max() > 0
    assert "PASS: fp16 within tolerance" in outs["compare"].stdout


def test_quickstart_dynamo_variant_streams(tmp_path):
    """The ``dynamic_shapes=`` the quickstart gives for ``dynamo=True`` exports a causal conv model whose ONNX
    keeps a symbolic batch and time axis, and streamify proves it (exit 0)."""
    import onnx
    import torch
    from torch import nn

    sec = _section("Bring your own model")
    spec_src = re.search(r"`(dynamic_shapes=\{.*?\}\})`", sec.replace("\n", " "), flags=re.S).group(1)
    spec = eval(spec_src.split("=", 1)[1], {"torch": torch})

    class Conv(nn.Module):
        def __init__(self):
            super().__init__()
            self.c = nn.Conv1d(1, 4, 3)
            self.o = nn.Conv1d(4, 1, 1)

        def forward(self, audio):
            return self.o(torch.tanh(self.c(nn.functional.pad(audio, (2, 0)))))

    torch.manual_seed(0)
    onnx_path = tmp_path / "my.onnx"
    torch.onnx.export(Conv().eval(), (torch.randn(1, 1, 16000),), str(onnx_path), input_names=["audio"],
                      output_names=["enhanced"], dynamo=True, dynamic_shapes=spec, verbose=False)
    m = onnx.load(onnx_path)
    assert _dims(m.graph.input[0]) == ["N", 1, "T"] and _dims(m.graph.output[0])[2] == "T"
    from cosyedge.cli.main import main

    assert main(["streamify", str(onnx_path), "-o", str(tmp_path / "my.stream.onnx"), "--sample-rate-hz", "16000",
                 "--hop-samples", "160", "-q"]) == 0
    assert (tmp_path / "my.stream.onnx").is_file()
