"""``cosyedge build --backend triton``: the model repository, its config.pbtxt parsed with Triton's own protobuf
and checked field by field against the ONNX, and Triton's documented sequence-batcher semantics with implicit
state played over the repository's model.onnx with ONNX Runtime (oldest strategy: zero state at START, state
carried per sequence id, batches mixing sequences, at most one request of a sequence per batch, a backlog, ended
sequences freeing their candidate slot for new ones): every stream equals its own OrtStreamSession run.

Triton itself cannot run here (no server on PyPI or Debian); the emulator follows
https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/implicit_state_management.html
("Oldest" and "State Initialization") and reads nothing but config.pbtxt and model.onnx.
"""

from __future__ import annotations

import collections
import json
import shutil

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import soundfile as sf

from cosyedge.artifacts import MANIFEST_NAME, StreamContract, load_manifest, sha256_file
from cosyedge.builders import triton as tb
from cosyedge.builders.triton import build as tb_build
from cosyedge.errors import ArtifactError, DependencyError
from cosyedge.models import REFERENCE_STREAM_ONNX
from cosyedge.runtime.ort import OrtStreamSession

pytest.importorskip("tritonclient")  # the dev extra installs it: Triton's model_config_pb2

DEMO = REFERENCE_STREAM_ONNX.parents[1] / "assets" / "demo" / "noisy.wav"
NP = {"TYPE_FP32": np.float32, "TYPE_FP16": np.float16, "TYPE_INT64": np.int64, "TYPE_INT32": np.int32}


# ------------------------------------------------------------------------------ Triton's sequence batcher
class OldestSequenceBatcher:
    """Triton's sequence batcher, oldest strategy, with implicit state, as documented (link in module doc).

    Only config.pbtxt (parsed with Triton's protobuf) and the ONNX it names are read. ``infer`` is a client
    request (``sequence_id``, ``sequence_start``, ``sequence_end`` as in tritonclient); ``step`` is one model
    execution: a dynamic batch of the oldest pending requests of candidate sequences, at most one per sequence,
    at most ``max_batch_size``. A START request reads the initial state (zero_data), any other the output state
    of its sequence's previous request; an END request frees the sequence's state and candidate slot, which the
    oldest backlogged sequence then takes.
    """

    def __init__(self, repo):
        name = load_manifest(repo)["triton"]["model_name"]
        self.cfg = tb.load_model_config(repo / name / "config.pbtxt")
        self.sess = ort.InferenceSession(str(repo / name / "1" / self.cfg.default_model_filename),
                                         providers=["CPUExecutionProvider"])
        self.names = [o.name for o in self.sess.get_outputs()]
        self.max_batch = self.cfg.max_batch_size
        self.max_cand = self.cfg.sequence_batching.oldest.max_candidate_sequences * \
            sum(g.count for g in self.cfg.instance_group)
        self.states = list(self.cfg.sequence_batching.state)
        self.candidates: list[int] = []
        self.backlog: collections.deque = collections.deque()
        self.queue: dict[int, collections.deque] = {}
        self.state: dict[int, dict[str, np.ndarray]] = {}
        self.outputs: dict[int, list] = collections.defaultdict(list)
        self.arrival = 0
        self.batches: list[list[int]] = []
        self.promoted: list[int] = []
        self.admitted_after_end: list[int] = []
        self._ended: set[int] = set()

    def infer(self, sequence_id: int, inputs: dict, sequence_start: bool = False, sequence_end: bool = False):
        if sequence_start:
            assert sequence_id not in self.queue, "a sequence id is reused while active"
            self.queue[sequence_id] = collections.deque()
            if len(self.candidates) < self.max_cand:
                self.candidates.append(sequence_id)
            else:
                self.backlog.append(sequence_id)
        self.queue[sequence_id].append((self.arrival, inputs, sequence_start, sequence_end))
        self.arrival += 1

    def pending(self) -> int:
        return sum(len(q) for q in self.queue.values())

    def step(self) -> int:
        ready = sorted((self.queue[c][0][0], c) for c in self.candidates if self.queue[c])
        picked = [c for _, c in ready[:self.max_batch]]
        if not picked:
            return 0
        reqs = [self.queue[c].popleft() for c in picked]
        feed = {t.name: np.concatenate([r[1][t.name] for r in reqs]).astype(NP[tb.model_config_pb2().DataType.Name(
            t.data_type)]) for t in self.cfg.input}
        for st in self.states:
            rows = []
            for c, (_, _, start, _) in zip(picked, reqs):
                if start:
                    init = st.initial_state[0]
                    assert init.WhichOneof("state_data") == "zero_data"
                    rows.append(np.zeros([1, *init.dims], NP[tb.model_config_pb2().DataType.Name(init.data_type)]))
                else:
                    rows.append(self.state[c][st.input_name])
            feed[st.input_name] = np.concatenate(rows)
        res = dict(zip(self.names, self.sess.run(None, feed)))
        for b, (c, (_, _, _, end)) in enumerate(zip(picked, reqs)):
            self.outputs[c].append({t.name: res[t.name][b:b + 1] for t in self.cfg.output})
            if end:
                self.state.pop(c, None)
                del self.queue[c]
                self.candidates.remove(c)
                self._ended.add(c)
                if self.backlog:
                    nxt = self.backlog.popleft()
                    self.candidates.append(nxt)
                    self.promoted.append(nxt)
            else:
                self.state[c] = {st.input_name: res[st.output_name][b:b + 1].copy() for st in self.states}
        self.batches.append(picked)
        return len(picked)


def _speech() -> np.ndarray:
    x, sr = sf.read(str(DEMO), dtype="float32")
    assert sr == 16000 and x.ndim == 1
    return x


def _streams(chunk: int, lengths: list[int], seed: int) -> list[np.ndarray]:
    """Segments of the real demo recording (noisy speech), ``lengths[i]`` chunks each, at seeded offsets."""
    x = _speech()
    rng = np.random.default_rng(seed)
    out = []
    for n in lengths:
        off = int(rng.integers(0, x.size - n * chunk))
        out.append(x[off:off + n * chunk].copy())
    return out


def _alone(model, audio: np.ndarray, chunk: int, name: str) -> np.ndarray:
    with OrtStreamSession(model, chunk_samples=chunk) as s:
        return np.concatenate([s.push(audio[i:i + chunk].reshape(1, 1, chunk))[name].copy().ravel()
                               for i in range(0, audio.size, chunk)])


def _serve(repo, streams: list[np.ndarray], chunk: int, in_name: str, out_name: str, seed: int):
    """Clients send their chunks in a seeded interleaving (staggered starts, random skips), the server runs 0-2
    executions per round; returns (batcher, {sequence id: output samples})."""
    server = OldestSequenceBatcher(repo)
    rng = np.random.default_rng(seed)
    starts = sorted(rng.integers(0, 40, len(streams)))
    sent = [0] * len(streams)
    n_chunks = [s.size // chunk for s in streams]
    ids = [1000 + 7 * i for i in range(len(streams))]
    rnd = 0
    while any(sent[i] < n_chunks[i] for i in range(len(streams))) or server.pending():
        for i in rng.permutation(len(streams)):
            if starts[i] <= rnd and sent[i] < n_chunks[i] and rng.random() < 0.75:
                k = sent[i]
                server.infer(ids[i], {in_name: streams[i][k * chunk:(k + 1) * chunk].reshape(1, 1, chunk)},
                             sequence_start=k == 0, sequence_end=k == n_chunks[i] - 1)
                sent[i] += 1
        for _ in range(int(rng.integers(0, 3))):
            server.step()
        rnd += 1
        assert rnd < 10_000
    outs = {sid: np.concatenate([o[out_name].ravel() for o in server.outputs[sid]]) for sid in ids}
    return server, [outs[sid] for sid in ids], ids


def _assert_streams_equal_alone(src, repo, chunk: int, lengths: list[int], seed: int, atol: float = 1e-5):
    c = StreamContract.from_onnx(src)
    streams = _streams(chunk, lengths, seed)
    server, got, ids = _serve(repo, streams, chunk, c.input, c.output, seed)
    errs = []
    for audio, y in zip(streams, got):
        ref = _alone(src, audio, chunk, c.output)
        assert y.shape == ref.shape == audio.shape
        assert np.abs(ref).max() > 1e-3  # real output, not silence
        errs.append(float(np.abs(y - ref).max()))
    assert max(errs) <= atol, errs
    # the schedule really exercised the batcher
    sizes = [len(b) for b in server.batches]
    assert max(sizes) == server.max_batch and all(len(set(b)) == len(b) for b in server.batches)
    assert sum(len(set(b)) >= 2 for b in server.batches) >= 10  # batches mixing sequences
    assert len(server.promoted) >= 1  # sequences waited in the backlog and took the slot of an ended one
    assert not server.state and not server.queue and not server.candidates  # every sequence ended, state freed
    # carrying the state matters for this model: the same stream with zero state every chunk is far off
    with OrtStreamSession(src, chunk_samples=chunk) as s:
        stateless = []
        for i in range(0, streams[0].size, chunk):
            s.reset()
            stateless.append(s.push(streams[0][i:i + chunk].reshape(1, 1, chunk))[c.output].copy().ravel())
    assert float(np.abs(np.concatenate(stateless) - got[0]).max()) > 100 * atol
    return errs, server


# ------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def ref_repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("triton")
    return tb.build_triton(REFERENCE_STREAM_ONNX, out_dir=root, max_batch_size=3, max_sequences=4,
                           instance_kind="cpu", instances=1)


@pytest.fixture(scope="module")
def gru_onnx(tmp_path_factory):
    """A tiny recurrent enhancer (causal strided conv -> GRU -> LSTM -> transposed conv gain), exported with
    TorchScript (dynamo=False: nn.LSTM) and streamified: 4 states (context, GRU h, LSTM h and c)."""
    torch = pytest.importorskip("torch")
    nn, F = torch.nn, torch.nn.functional
    from cosyedge.surgery import streamify

    class TinyRecurrentEnhancer(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Conv1d(1, 16, 320, stride=160)
            self.gru = nn.GRU(16, 24, batch_first=True)
            self.lstm = nn.LSTM(24, 20, batch_first=True)
            self.dec = nn.ConvTranspose1d(20, 1, 160, stride=160)

        def forward(self, x):
            h = torch.tanh(self.enc(F.pad(x, (160, 0))))
            r, _ = self.gru(h.transpose(1, 2))
            r, _ = self.lstm(r)
            return x * torch.sigmoid(self.dec(r.transpose(1, 2)))

    root = tmp_path_factory.mktemp("gru")
    torch.manual_seed(0)
    torch.onnx.export(TinyRecurrentEnhancer().eval(), (torch.randn(2, 1, 1600),), str(root / "gru.onnx"),
                      input_names=["audio"], output_names=["enhanced"],
                      dynamic_axes={"audio": {0: "N", 2: "T"}, "enhanced": {0: "N", 2: "T"}}, opset_version=17,
                      dynamo=False)
    c = streamify(root / "gru.onnx", root / "gru.stream.onnx", sample_rate_hz=16000, hop_samples=160, name="tinygru")
    assert [s.kind for s in c.states] == ["context", "recurrent", "recurrent", "recurrent"]
    return root / "gru.stream.onnx"


def _edited(src, dest, *, meta_state=None, graph=None):
    """Copy ``src`` to ``dest`` with the cosyedge.state metadata replaced by ``meta_state(states)`` and/or the
    graph edited in place by ``graph(model)``."""
    m = onnx.load(str(src))
    if graph:
        graph(m)
    if meta_state:
        for p in m.metadata_props:
            if p.key == "cosyedge.state":
                p.value = json.dumps(meta_state(json.loads(p.value)))
    onnx.save(m, str(dest))
    return dest


# ------------------------------------------------------------------------------ the repository
def test_reference_config_parsed_by_triton_and_checked_against_the_model(ref_repo):
    assert ref_repo.name == "reference-fp32-triton"
    assert sorted(p.name for p in ref_repo.iterdir()) == [MANIFEST_NAME, "reference"]  # Triton sees one model
    assert sorted(p.name for p in (ref_repo / "reference").iterdir()) == ["1", "config.pbtxt"]
    cfg = tb.load_model_config(ref_repo / "reference" / "config.pbtxt")
    mc = tb.model_config_pb2()
    model = onnx.load(str(ref_repo / "reference" / "1" / "model.onnx"))
    src = onnx.load(str(REFERENCE_STREAM_ONNX))
    c = StreamContract.from_onnx(REFERENCE_STREAM_ONNX)

    def shape(v):
        return [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]

    g_in = {v.name: shape(v) for v in model.graph.input}
    g_out = {v.name: shape(v) for v in model.graph.output}
    assert (cfg.name, cfg.backend, cfg.max_batch_size, cfg.default_model_filename) == \
        ("reference", "onnxruntime", 3, "model.onnx")
    assert cfg.WhichOneof("scheduling_choice") == "sequence_batching"
    sb = cfg.sequence_batching
    assert sb.WhichOneof("strategy_choice") == "oldest"
    assert (sb.oldest.max_candidate_sequences, sb.oldest.max_queue_delay_microseconds,
            sb.max_sequence_idle_microseconds) == (4, 1000, 5_000_000)
    assert len(sb.control_input) == 0  # the model reads only audio and state
    assert [(g.count, mc.ModelInstanceGroup.Kind.Name(g.kind)) for g in cfg.instance_group] == [(1, "KIND_CPU")]
    assert [(t.name, mc.DataType.Name(t.data_type), list(t.dims)) for t in cfg.input] == [("audio", "TYPE_FP32", [1, 160])]
    assert [(t.name, mc.DataType.Name(t.data_type), list(t.dims)) for t in cfg.output] == \
        [("enhanced", "TYPE_FP32", [1, 160])]
    assert g_in["audio"] == ["N", 1, "T"] and g_out["enhanced"] == ["N", 1, "T"]
    # one state per contract pair, dims = ONNX shape without the batch axis, zero initial state of those dims
    assert len(sb.state) == len(c.states) == 14
    for st, spec in zip(sb.state, c.states):
        assert (st.input_name, st.output_name) == (spec.input, spec.output)
        assert mc.DataType.Name(st.data_type) == "TYPE_FP32"
        assert g_in[st.input_name][0] == g_out[st.output_name][0] == "N"
        assert list(st.dims) == g_in[st.input_name][1:] == g_out[st.output_name][1:] == spec.shape[1:]
        (init,) = st.initial_state
        assert init.zero_data and list(init.dims) == list(st.dims) and init.data_type == st.data_type
    assert [list(s.dims) for s in sb.state][:3] == [[1, 160], [1, 864], [160, 3]] and list(sb.state[13].dims) == [322, 1]
    # every ONNX input is fed (audio or a state), every output is an output or a state
    assert sorted(g_in) == sorted(["audio"] + [s.input_name for s in sb.state])
    assert sorted(g_out) == sorted(["enhanced"] + [s.output_name for s in sb.state])
    # same weights and graph as the source (FP32 copy; only I/O dims/metadata may differ)
    assert [n.op_type for n in model.graph.node] == [n.op_type for n in src.graph.node]
    # manifest: hashes, versions, flags, the state map (identity: cosyedge names are fixed width)
    m = load_manifest(ref_repo)
    assert (m["stage"], m["backend"], m["precision"], m["name"]) == ("build", "triton", "fp32", "reference")
    assert m["model"] == {"file": "reference/1/model.onnx", "sha256": sha256_file(ref_repo / "reference/1/model.onnx")}
    assert m["artifact"]["sha256"] == sha256_file(ref_repo / "reference/config.pbtxt")
    assert m["parent_sha256"] == sha256_file(REFERENCE_STREAM_ONNX)
    assert m["tools"]["onnxruntime"] == ort.__version__ and m["tools"]["tritonclient"]
    assert m["triton"]["strategy"] == "oldest" and m["triton"]["states_renamed"] is False
    assert [(s["contract_input"], s["triton_input"]) for s in m["triton"]["states"]][:2] == \
        [("state_in.00", "state_in.00"), ("state_in.01", "state_in.01")]
    assert m["triton"]["batch_independence_max_abs"] <= 1e-6
    assert (m["flags"]["max_batch_size"], m["flags"]["max_sequences"], m["flags"]["chunk_samples"]) == (3, 4, 160)
    summary = tb.check_repository(ref_repo)
    assert summary["parsed"] and summary["inputs"] == {"audio": [1, 160]} and len(summary["states"]) == 14
    derived = tb.check_repository(ref_repo, parse=False)  # the build-time check without tritonclient
    assert derived["states"] == summary["states"] and derived["outputs"] == summary["outputs"]


def test_check_repository_catches_edits(ref_repo, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(ref_repo, repo)
    cfg = repo / "reference" / "config.pbtxt"
    text = cfg.read_text()
    cfg.write_text(text.replace("dims: [ 96, 64 ]", "dims: [ 96, 63 ]", 1))
    with pytest.raises(ArtifactError, match="config.pbtxt does not match its manifest hash"):
        tb.check_repository(repo)

    def rehash():
        m = json.loads((repo / MANIFEST_NAME).read_text())
        m["artifact"]["sha256"] = sha256_file(cfg)
        (repo / MANIFEST_NAME).write_text(json.dumps(m))

    rehash()  # a consistent manifest, a config that disagrees with the ONNX
    with pytest.raises(ArtifactError, match=r"input 'state_in.08' has dims \[96, 63\] in the config but shape "
                                            r"\['N', 96, 64\] in the ONNX"):
        tb.check_repository(repo)
    cfg.write_text(text.replace('name: "audio"', 'name: "wave"'))
    rehash()
    with pytest.raises(ArtifactError, match="config input 'wave' is not an ONNX input"):
        tb.check_repository(repo)
    cfg.write_text(text.replace("zero_data: true", "zero_dta: true", 1))
    rehash()
    with pytest.raises(ArtifactError, match="is not a valid Triton model configuration"):
        tb.check_repository(repo)
    cfg.write_text(text.replace("max_batch_size: 3", "max_batch_size: 0"))
    rehash()
    with pytest.raises(ArtifactError, match="max_batch_size 0"):
        tb.check_repository(repo)


# ------------------------------------------------------------------------------ sequence-batcher semantics
def test_reference_streams_through_the_sequence_batcher_equal_their_own_session(ref_repo):
    errs, server = _assert_streams_equal_alone(REFERENCE_STREAM_ONNX, ref_repo, 160,
                                               lengths=[61, 118, 37, 90, 146, 52, 79], seed=3)
    assert len(server.batches) < sum([61, 118, 37, 90, 146, 52, 79])  # batching happened


def test_recurrent_model_streams_through_the_sequence_batcher(gru_onnx, tmp_path):
    repo = tb.build_triton(gru_onnx, out_dir=tmp_path, max_batch_size=4, max_sequences=5, chunk_samples=320)
    cfg = tb.load_model_config(repo / "tinygru" / "config.pbtxt")
    assert [list(s.dims) for s in cfg.sequence_batching.state] == [[1, 160], [1, 24], [1, 20], [1, 20]]
    assert list(cfg.input[0].dims) == [1, 320]
    _assert_streams_equal_alone(gru_onnx, repo, 320, lengths=[45, 80, 23, 66, 51, 30, 72, 38], seed=5)


# ------------------------------------------------------------------------------ state names
def test_state_names_problem_and_renames():
    cosy = [(f"state_in.{i:02d}", f"state_out.{i:02d}") for i in range(14)]
    assert tb.state_names_problem(cosy) is None and tb.triton_state_names(cosy) == cosy
    # the pair of server#8586
    nemo = [("cache_last_channel", "cache_last_channel_next"), ("cache_last_channel_len", "cache_last_channel_len_next")]
    assert "prefix" in tb.state_names_problem(nemo)
    assert tb.triton_state_names(nemo) == [("state_in.00", "state_out.00"), ("state_in.01", "state_out.01")]
    # sort orders differ without any prefix
    assert "sort order" in tb.state_names_problem([("a", "y"), ("b", "x")])
    unpadded = [(f"state_in.{i}", f"state_out.{i}") for i in range(120)]
    assert "'state_in.1' is a prefix of 'state_in.10'" in tb.state_names_problem(unpadded)
    new = tb.triton_state_names(unpadded)
    assert new[5] == ("state_in.005", "state_out.005") and tb.state_names_problem(new) is None
    with pytest.raises(ArtifactError, match="tensor 'state_in.00' already exists"):
        tb.triton_state_names(nemo, taken={"state_in.00"})


def test_prefix_state_names_are_renamed_in_the_copy_and_still_stream(tmp_path):
    """States named state_in.0 .. state_in.13 (state_in.1 is a prefix of state_in.10..13): the repository copy uses
    state_in.00 .. state_in.13, the manifest keeps the map, and the streams still equal the original model's."""
    def rename(m):
        for v in list(m.graph.input) + list(m.graph.output):
            for pre in ("state_in.", "state_out."):
                if v.name.startswith(pre):
                    old, new = v.name, pre + str(int(v.name[len(pre):]))
                    v.name = new
                    for n in m.graph.node:
                        n.input[:] = [new if x == old else x for x in n.input]
                        n.output[:] = [new if x == old else x for x in n.output]

    def meta(states):
        for s in states:
            s["input"] = "state_in." + str(int(s["input"].split(".")[1]))
            s["output"] = "state_out." + str(int(s["output"].split(".")[1]))
        return states

    src = _edited(REFERENCE_STREAM_ONNX, tmp_path / "unpadded.stream.onnx", meta_state=meta, graph=rename)
    assert StreamContract.from_onnx(src).states[10].input == "state_in.10"
    repo = tb.build_triton(src, out_dir=tmp_path / "engines", name="unpadded", max_batch_size=3, max_sequences=3)
    m = load_manifest(repo)
    assert m["triton"]["states_renamed"] is True
    pairs = {s["contract_input"]: s["triton_input"] for s in m["triton"]["states"]}
    assert pairs["state_in.1"] == "state_in.01" and pairs["state_in.10"] == "state_in.10"
    outs = {s["contract_output"]: s["triton_output"] for s in m["triton"]["states"]}
    assert outs["state_out.3"] == "state_out.03"
    cfg = tb.load_model_config(repo / "unpadded" / "config.pbtxt")
    assert [s.input_name for s in cfg.sequence_batching.state] == [f"state_in.{i:02d}" for i in range(14)]
    copy = StreamContract.from_onnx(repo / "unpadded" / "1" / "model.onnx")
    assert [s.input for s in copy.states] == [f"state_in.{i:02d}" for i in range(14)]
    assert tb.check_repository(repo)["parsed"]
    _assert_streams_equal_alone(src, repo, 160, lengths=[40, 75, 22, 58], seed=11)


# ------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize("edit, match", [
    (lambda st: [dict(s, shape=s["shape"][1:]) if s["input"] == "state_in.13" else s for s in st],
     r"state 'state_in.13' has shape \[322, 1\] without a batch axis 'N'"),
    (lambda st: [dict(s, shape=["N", 96, "T"]) if s["input"] == "state_in.05" else s for s in st],
     r"state 'state_in.05' has shape \['N', 96, 'T'\] with dynamic dimension 'T'"),
    (lambda st: [dict(s, shape=[96, "N", 2]) if s["input"] == "state_in.03" else s for s in st],
     r"state 'state_in.03' has shape \[96, 'N', 2\]: Triton's implicit state needs the batch axis 'N' first"),
])
def test_contracts_triton_cannot_express_are_refused_in_one_line(tmp_path, edit, match):
    src = _edited(REFERENCE_STREAM_ONNX, tmp_path / "bad.stream.onnx", meta_state=edit)
    with pytest.raises(ArtifactError, match=match) as err:
        tb.build_triton(src, out_dir=tmp_path / "engines")
    assert "\n" not in str(err.value) and "implicit_state_management" in str(err.value)
    assert not (tmp_path / "engines").exists() or not any((tmp_path / "engines").iterdir())


def test_dynamic_state_dim_in_the_graph_is_refused(tmp_path):
    def dyn(m):
        for v in list(m.graph.input):
            if v.name == "state_in.06":
                d = v.type.tensor_type.shape.dim[2]
                d.Clear()
                d.dim_param = "S"

    src = _edited(REFERENCE_STREAM_ONNX, tmp_path / "dyn.stream.onnx", graph=dyn)
    with pytest.raises(ArtifactError, match=r"state 'state_in.06' has shape \['N', 96, 'S'\] in the graph but the "
                                            r"contract says \['N', 96, 16\]"):
        tb.build_triton(src, out_dir=tmp_path / "engines")
    assert not (tmp_path / "engines").exists() or not any((tmp_path / "engines").iterdir())  # atomic: nothing left


def test_failed_rebuild_keeps_the_previous_repository(ref_repo, tmp_path, monkeypatch):
    root = tmp_path / "engines"
    first = tb.build_triton(REFERENCE_STREAM_ONNX, out_dir=root)
    digest = sha256_file(first / "reference" / "config.pbtxt")

    def broken(*a, **k):
        raise ArtifactError("injected")

    monkeypatch.setattr(tb_build, "_check_batch_independent", broken)
    with pytest.raises(ArtifactError, match="injected"):
        tb.build_triton(REFERENCE_STREAM_ONNX, out_dir=root, max_batch_size=8)
    assert sha256_file(first / "reference" / "config.pbtxt") == digest
    assert sorted(p.name for p in root.iterdir()) == ["reference-fp32-triton"]


def test_tensorrt_hook_says_what_is_missing(tmp_path):
    import importlib.util

    if importlib.util.find_spec("tensorrt") is not None:
        pytest.skip("TensorRT installed: the hook would ask for the plan build instead")
    with pytest.raises(DependencyError, match="tensorrt backend needs TensorRT"):
        tb.build_triton(REFERENCE_STREAM_ONNX, out_dir=tmp_path, triton_backend="tensorrt")
    assert not any(tmp_path.iterdir())


# ------------------------------------------------------------------------------ CLI
def test_cli_build_backend_triton(cli, tmp_path):
    rc, out, err = cli("build", "--backend", "triton", "-o", tmp_path, "--max-batch-size", "16",
                       "--max-sequences", "96", "--instances", "2", "--instance-kind", "gpu")
    assert rc == 0, err
    repo = tmp_path / "reference-fp32-triton"
    assert out.strip().splitlines()[-1] == str(repo)
    cfg = tb.load_model_config(repo / "reference" / "config.pbtxt")
    assert (cfg.max_batch_size, cfg.sequence_batching.oldest.max_candidate_sequences) == (16, 96)
    assert [(g.count, g.kind) for g in cfg.instance_group] == [(2, tb.model_config_pb2().ModelInstanceGroup.KIND_GPU)]
    rc, out, err = cli("build", "-o", tmp_path, "--max-batch-size", "16")
    assert rc == 2 and "[!] --max-batch-size applies to --backend triton only" in err
    rc, out, err = cli("build", "--backend", "triton", "-o", tmp_path, "--chunk-samples", "100")
    assert rc == 2 and "multiple of the model's total stride 160" in err
    bad = _edited(REFERENCE_STREAM_ONNX, tmp_path / "bad.stream.onnx",
                  meta_state=lambda st: [dict(s, shape=s["shape"][1:]) for s in st])
    rc, out, err = cli("build", "--backend", "triton", "--onnx", bad, "-o", tmp_path / "x")
    assert rc == 3 and err.count("\n") == 1 and "without a batch axis 'N'" in err


def test_fp16_repository_asks_triton_for_extended_optimizations_only(ref_repo, tmp_path):
    """An FP16 model crashes ONNX Runtime's ORT_ENABLE_ALL layout pass (NchwcTransformer):
    its config.pbtxt sets optimization.graph.level 1 (ORT_ENABLE_EXTENDED in Triton's onnxruntime backend); an
    FP32 repository keeps Triton's default."""
    from cosyedge.builders.triton.repository import load_model_config

    repo = tb.build_triton(REFERENCE_STREAM_ONNX, out_dir=tmp_path, precision="fp16", max_batch_size=2,
                           max_sequences=2, instance_kind="cpu")
    cfgs = list(repo.rglob("config.pbtxt"))
    assert len(cfgs) == 1
    cfg = load_model_config(cfgs[0])
    assert cfg.optimization.graph.level == 1
    fp32 = load_model_config(next(ref_repo.rglob("config.pbtxt")))
    assert not fp32.HasField("optimization")
