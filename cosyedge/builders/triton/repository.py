"""Read a Triton model repository back: the ``model_config_pb2`` module, ``config.pbtxt`` parsing and
:func:`check_repository` (files, hashes, config against manifest and model).

See :mod:`cosyedge.builders.triton` for the repository layout.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from cosyedge.artifacts import EngineManifest, StreamContract, load_onnx, sha256_file
from cosyedge.builders.triton.config import (
    BACKEND,
    CONFIG_FILE,
    STRATEGY,
    TRITON_DTYPES,
    _np_name,
    _shape,
    state_names_problem,
    triton_config,
)
from cosyedge.errors import ArtifactError, DependencyError, first_line



# ------------------------------------------------------------------------------ reading back
def model_config_pb2() -> Any:
    """Return Triton's model-config protobuf module (``inference.ModelConfig`` and friends) from tritonclient.

    It is loaded from ``tritonclient/grpc/model_config_pb2.py`` by path, because importing the
    ``tritonclient.grpc`` package needs grpcio, which the protobuf definitions do not.

    Returns:
        module: with ``ModelConfig``, ``ModelSequenceBatching``, ``DataType``...
    Raises:
        DependencyError: tritonclient is not installed (``pip install tritonclient``).

    Source: https://github.com/triton-inference-server/common/blob/main/protobuf/model_config.proto
    """
    import sys

    key = "cosyedge._triton_model_config_pb2"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.find_spec("tritonclient")
    path = Path(spec.origin).parent / "grpc" / "model_config_pb2.py" if spec and spec.origin else None
    if path is None or not path.is_file():
        raise DependencyError("parsing config.pbtxt needs Triton's protobuf definitions from tritonclient: "
                              "pip install tritonclient")
    mspec = importlib.util.spec_from_file_location(key, path)
    mod = importlib.util.module_from_spec(mspec)
    try:
        mspec.loader.exec_module(mod)
    except Exception as err:  # protobuf runtime too old for the generated code
        raise DependencyError(f"cannot load Triton's model_config_pb2 ({first_line(err)}); pip install -U protobuf") from None
    sys.modules[key] = mod
    return mod


def load_model_config(path: str | Path) -> Any:
    """Parse a config.pbtxt with Triton's own protobuf definitions.

    Args:
        path (str | Path): config.pbtxt.
    Returns:
        inference.ModelConfig: the parsed message.
    Raises:
        ArtifactError: missing file or text that is not a valid ``ModelConfig`` (unknown field, bad enum...).
        DependencyError: tritonclient is missing.

    Source: https://github.com/triton-inference-server/common/blob/main/protobuf/model_config.proto
    """
    from google.protobuf import text_format

    mc = model_config_pb2()
    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"{path} not found")
    try:
        return text_format.Parse(path.read_text(), mc.ModelConfig())
    except text_format.ParseError as err:
        raise ArtifactError(f"{path} is not a valid Triton model configuration: {first_line(err, False)}") from None


def check_repository(repo: str | Path, parse: bool = True) -> dict:
    """Check a Triton repository written by :func:`build_triton` field by field against its model.

    Checked: manifest (backend, hashes of model.onnx and config.pbtxt), config name = folder, backend,
    ``max_batch_size`` >= 1, oldest strategy, no control inputs, every input/output name, type and dims
    against the ONNX graph (batch axis dynamic and dropped, other dims equal where the graph fixes them), every
    state's names, type and dims against the graph's state input *and* output and its zero (or file) initial
    state, every ONNX input covered by an input or a state, state names safe (:func:`state_names_problem`),
    the manifest's state map against the config and the copy's contract.

    Args:
        repo (str | Path): The repository folder (with manifest.json).
        parse (bool): Parse config.pbtxt with Triton's protobuf (needs tritonclient); False skips the check of
            the text itself (used at build time when tritonclient is missing).
    Returns:
        dict: ``model_name``, ``max_batch_size``, ``inputs``, ``outputs`` (name -> dims), ``states`` (list of
        (input_name, output_name, dims)), ``parsed`` (bool).
    Raises:
        ArtifactError: the first disagreement, in one line.
        DependencyError: ``parse`` and tritonclient missing.

    Source: https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/implicit_state_management.html
    """
    repo = Path(repo)
    m = EngineManifest.load(repo)
    manifest = m.raw
    if m.backend != BACKEND:
        raise ArtifactError(f"{repo} is a '{m.backend}' engine, not a Triton repository")
    tri = manifest.get("triton") or {}
    name = tri.get("model_name")
    if tri.get("backend") == "python":
        return check_python_repository(repo, manifest, parse)
    model_path = repo / str(manifest["model"]["file"])
    cfg_path = repo / str(name) / CONFIG_FILE
    for p, want in ((model_path, m.model_sha256), (cfg_path, manifest.get("artifact", {}).get("sha256"))):
        if not p.is_file():
            raise ArtifactError(f"Triton repository {repo} has no {p.relative_to(repo)}; rebuild it")
        if sha256_file(p) != want:
            raise ArtifactError(f"Triton repository {repo}: {p.relative_to(repo)} does not match its manifest hash "
                                f"(edited or corrupt); rebuild it with 'cosyedge build --backend triton'")
    model = load_onnx(model_path, load_external_data=False)
    contract = StreamContract.from_onnx(model)
    g_in = {v.name: v for v in model.graph.input}
    g_out = {v.name: v for v in model.graph.output}

    def fail(msg: str) -> None:
        raise ArtifactError(f"Triton repository {repo}: {msg}")

    if parse:
        cfg = load_model_config(cfg_path)
        mc = model_config_pb2()
        dtype_name = mc.DataType.Name
        sb = cfg.sequence_batching
        summary_cfg = {
            "name": cfg.name, "backend": cfg.backend, "max_batch_size": cfg.max_batch_size,
            "strategy": sb.WhichOneof("strategy_choice"), "controls": len(sb.control_input),
            "inputs": [(t.name, dtype_name(t.data_type), list(t.dims)) for t in cfg.input],
            "outputs": [(t.name, dtype_name(t.data_type), list(t.dims)) for t in cfg.output],
            "states": [(s.input_name, s.output_name, dtype_name(s.data_type), list(s.dims),
                        [(dtype_name(i.data_type), list(i.dims), i.WhichOneof("state_data")) for i in s.initial_state])
                       for s in sb.state],
            "instances": [(g.count, mc.ModelInstanceGroup.Kind.Name(g.kind)) for g in cfg.instance_group],
            "scheduling": cfg.WhichOneof("scheduling_choice"),
        }
    else:  # re-derive from the model: checks the manifest and the model, not the text
        c = triton_config(model, contract, name=str(name), chunk_samples=int(tri.get("chunk_samples")),
                          max_batch_size=int(tri.get("max_batch_size", 1)))
        summary_cfg = {
            "name": c.name, "backend": c.backend, "max_batch_size": c.max_batch_size, "strategy": STRATEGY,
            "controls": 0, "inputs": [(t.name, t.data_type, t.dims) for t in c.inputs],
            "outputs": [(t.name, t.data_type, t.dims) for t in c.outputs],
            "states": [(s.input_name, s.output_name, s.data_type, s.dims,
                        [(s.data_type, s.dims, "data_file" if s.data_file else "zero_data")]) for s in c.states],
            "instances": [(c.instance_count, c.instance_kind)], "scheduling": "sequence_batching",
        }
    s = summary_cfg
    if s["name"] != name or cfg_path.parent.name != name:
        fail(f"config name '{s['name']}' is not its folder '{cfg_path.parent.name}'")
    if s["backend"] != tri.get("backend", "onnxruntime"):
        fail(f"config backend '{s['backend']}' is not the manifest's '{tri.get('backend')}'")
    if s["scheduling"] != "sequence_batching" or s["strategy"] != STRATEGY:
        fail(f"config schedules with {s['scheduling']}/{s['strategy']}, not sequence_batching/{STRATEGY}")
    if not 1 <= s["max_batch_size"] or s["max_batch_size"] != tri.get("max_batch_size"):
        fail(f"max_batch_size {s['max_batch_size']} (manifest {tri.get('max_batch_size')}) must be >= 1: states are "
             f"batched on axis 0")
    if s["controls"]:
        fail("config declares control inputs the model does not read")
    if not s["instances"] or any(n < 1 for n, _ in s["instances"]):
        fail("config has no instance group with count >= 1")

    def check_tensor(tname: str, ttype: str, dims: list, table: dict, kind: str) -> None:
        if tname not in table:
            fail(f"config {kind} '{tname}' is not an ONNX {kind} ({sorted(table)})")
        v = table[tname]
        g = _shape(v)
        want = TRITON_DTYPES.get(_np_name(v.type.tensor_type.elem_type))
        if ttype != want:
            fail(f"{kind} '{tname}' is {ttype} in the config but {want} in the ONNX")
        if not g or isinstance(g[0], int):
            fail(f"ONNX {kind} '{tname}' has shape {g}: its batch axis (0) must be dynamic for max_batch_size > 0")
        if len(g) != len(dims) + 1 or any(isinstance(a, int) and a != b for a, b in zip(g[1:], dims)):
            fail(f"{kind} '{tname}' has dims {list(dims)} in the config but shape {g} in the ONNX")
        if any(int(d) <= 0 for d in dims):
            fail(f"{kind} '{tname}' has dims {list(dims)} in the config: every dim must be fixed")

    for tname, ttype, dims in s["inputs"]:
        check_tensor(tname, ttype, dims, g_in, "input")
    for tname, ttype, dims in s["outputs"]:
        check_tensor(tname, ttype, dims, g_out, "output")
    st_pairs = []
    for iname, oname, ttype, dims, inits in s["states"]:
        check_tensor(iname, ttype, dims, g_in, "input")
        check_tensor(oname, ttype, dims, g_out, "output")
        if [d for d in _shape(g_in[iname])[1:]] != [d for d in _shape(g_out[oname])[1:]]:
            fail(f"state '{iname}' and '{oname}' have different shapes in the ONNX")
        if len(inits) != 1 or inits[0][0] != ttype or list(inits[0][1]) != list(dims) or \
                inits[0][2] not in ("zero_data", "data_file"):
            fail(f"state '{iname}' needs one initial_state of its own type and dims (zero_data or data_file), got {inits}")
        st_pairs.append((iname, oname))
    covered = {t[0] for t in s["inputs"]} | {p[0] for p in st_pairs}
    missing = sorted(set(g_in) - covered)
    if missing:
        fail(f"ONNX inputs {missing} are neither config inputs nor states (Triton would never feed them)")
    if sorted({t[0] for t in s["outputs"]} | {p[1] for p in st_pairs}) != sorted(g_out):
        fail(f"ONNX outputs {sorted(g_out)} are not exactly the config outputs and state outputs")
    problem = state_names_problem(st_pairs)
    if problem:
        fail(f"{problem}: Triton would swap states (server#8586)")
    if st_pairs != [(x.input, x.output) for x in contract.states]:
        fail("config states are not the model's contract states (in order)")
    if st_pairs != [(m["triton_input"], m["triton_output"]) for m in tri.get("states", [])]:
        fail("manifest triton.states does not match the config")
    return {"model_name": name, "max_batch_size": s["max_batch_size"],
            "inputs": {t[0]: list(t[2]) for t in s["inputs"]}, "outputs": {t[0]: list(t[2]) for t in s["outputs"]},
            "states": [(a, b, list(d)) for a, b, _, d, _ in s["states"]], "parsed": bool(parse)}


def check_python_repository(repo: str | Path, manifest: dict, parse: bool = True) -> dict:
    """Check a Python-backend repository (:mod:`cosyedge.builders.triton.python`) against its manifest and model.

    Checked: the hashes of model.onnx, model.py and config.pbtxt; config name = folder, backend ``python``,
    ``max_batch_size`` >= 1, oldest strategy, the four control inputs (START/END/READY fp32, CORRID uint64), no
    implicit state, every input/output name, type and dims against the model's contract (one chunk), and the
    ``cosyedge.*`` parameters the model reads (model file, chunk, slots).

    Args:
        repo (str | Path): The repository folder.
        manifest (dict): Its loaded manifest.
        parse (bool): Parse config.pbtxt with Triton's protobuf (needs tritonclient); False checks the files only.
    Returns:
        dict: ``model_name``, ``max_batch_size``, ``inputs``, ``outputs`` (name -> dims), ``states`` ([]),
        ``controls`` (list[str]), ``parsed`` (bool).
    Raises:
        ArtifactError: the first disagreement, in one line.
    """
    repo = Path(repo)
    tri = manifest["triton"]
    name = str(tri.get("model_name"))

    def fail(msg: str) -> None:
        raise ArtifactError(f"Triton repository {repo}: {msg}")

    model_path = repo / str(manifest["model"]["file"])
    cfg_path = repo / name / CONFIG_FILE
    py = tri.get("model_py") or {}
    for p, want in ((model_path, manifest["model"].get("sha256")), (cfg_path, manifest.get("artifact", {}).get("sha256")),
                    (repo / str(py.get("file", f"{name}/1/model.py")), py.get("sha256"))):
        if not p.is_file():
            fail(f"no {p.relative_to(repo)}; rebuild it")
        if sha256_file(p) != want:
            fail(f"{p.relative_to(repo)} does not match its manifest hash (edited or corrupt); rebuild it with "
                 f"'cosyedge build --backend triton --triton-backend python'")
    contract = StreamContract.from_onnx(model_path)
    chunk = int(tri.get("chunk_samples") or contract.hop_samples)
    hop = contract.hop_samples
    want_in = {i.name: [TRITON_DTYPES[i.dtype], list(i.concrete_shape(1, i.frames(chunk, hop))[1:])]
               for i in contract.stream_inputs}
    want_out = {o.name: [TRITON_DTYPES[o.dtype], list(o.concrete_shape(1, o.frames(chunk, hop))[1:])]
                for o in contract.stream_outputs}
    out = {"model_name": name, "max_batch_size": int(tri.get("max_batch_size", 0)),
           "inputs": {k: v[1] for k, v in want_in.items()}, "outputs": {k: v[1] for k, v in want_out.items()},
           "states": [], "controls": list(tri.get("control_inputs", [])), "parsed": False}
    if not parse:
        return out
    cfg = load_model_config(cfg_path)
    mc = model_config_pb2()
    dt = mc.DataType.Name
    sb = cfg.sequence_batching
    if cfg.name != name or cfg_path.parent.name != name:
        fail(f"config name '{cfg.name}' is not its folder '{cfg_path.parent.name}'")
    if cfg.backend != "python":
        fail(f"config backend '{cfg.backend}' is not 'python'")
    if cfg.max_batch_size < 1 or cfg.max_batch_size != tri.get("max_batch_size"):
        fail(f"max_batch_size {cfg.max_batch_size} (manifest {tri.get('max_batch_size')}) must be >= 1")
    if cfg.WhichOneof("scheduling_choice") != "sequence_batching" or sb.WhichOneof("strategy_choice") != STRATEGY:
        fail(f"config does not schedule with sequence_batching/{STRATEGY}")
    if len(sb.state):
        fail("config declares implicit state, which the Python backend's model keeps itself")
    kinds = {c.name: [(mc.ModelSequenceBatching.Control.Kind.Name(k.kind), dt(k.data_type), list(k.fp32_false_true))
                      for k in c.control] for c in sb.control_input}
    want_ctl = {"START": "CONTROL_SEQUENCE_START", "END": "CONTROL_SEQUENCE_END", "READY": "CONTROL_SEQUENCE_READY",
                "CORRID": "CONTROL_SEQUENCE_CORRID"}
    for cname, kind in want_ctl.items():
        got = kinds.get(cname)
        ok = got and len(got) == 1 and got[0][0] == kind and (
            got[0][1] == "TYPE_UINT64" if cname == "CORRID" else got[0][2] == [0.0, 1.0])
        if not ok:
            fail(f"control input '{cname}' must be {kind} ({'uint64' if cname == 'CORRID' else 'fp32 0/1'}), got {got}")
    for kind, tensors, want in (("input", cfg.input, want_in), ("output", cfg.output, want_out)):
        got = {t.name: [dt(t.data_type), list(t.dims)] for t in tensors}
        if got != want:
            fail(f"config {kind}s {got} are not the model's {want} (one chunk of {chunk} samples)")
    params = {k: v.string_value for k, v in cfg.parameters.items()}
    for key, value in (("cosyedge.model_file", manifest["model"]["file"].rsplit("/", 1)[-1]),
                       ("cosyedge.chunk_samples", str(chunk)), ("cosyedge.slots", str(tri.get("max_candidate_sequences")))):
        if params.get(key) != value:
            fail(f"parameter '{key}' is {params.get(key)!r}, expected {value!r}")
    out["parsed"] = True
    return out
