"""One version shim for TensorRT 8.6, 10.x and 11.x: pure-Python decisions, no TensorRT import.

Everything that differs between TensorRT versions is decided here from the version string (and, where a
real or fake ``tensorrt`` module is passed, from the enum members it actually has), so the decisions are
unit-tested on CPU with fake modules:

===========================  ==================  ======================  ==========================
decision                     8.6                 10.x (and 9.x)          11.x
===========================  ==================  ======================  ==========================
network creation flag        ``EXPLICIT_BATCH``  ``STRONGLY_TYPED``      none (always strongly typed)
precision builder flags      FP16 / INT8+FP16    none (GPU); FP16/INT8   none: removed
                                                 on DLA (weakly typed)
INT8 calibrators             exist (unused)      deprecated (unused)     removed
``SPARSE_WEIGHTS``           yes                 yes                     yes
DLA                          yes                 yes                     refused (not on JetPack)
FP32 layers of the ONNX      pinned (FP16 flag)  pinned on DLA only      nothing to pin
enqueue                      ``execute_async_v3``  ``execute_async_v3``  ``execute_async_v3``
===========================  ==================  ======================  ==========================

``execute_async_v2`` with a bindings list is chosen only for 8.0-8.4, where ``execute_async_v3`` /
``set_tensor_address`` do not exist yet (both were added in 8.5 and are documented in the 8.6 Python API).
On 8.6 both exist; the shim prefers v3 so that 8.6, 10.x and 11.x run one code path.

Precision always lives in the ONNX (FP16 casts, explicit Q/DQ): on 10.x/11.x the network is strongly typed
and no precision flag is set; on 8.6 (no strong typing) the FP16/INT8 flags are what allow the builder to
pick the reduced-precision kernels the ONNX asks for (explicit quantization needs ``INT8`` on 8.x).
But ``FP16`` lets a weakly typed build (8.6 GPU, any DLA build) run *any* layer in FP16, the FP32 region of
the ONNX included (e.g. the reference model's MatMul -> ArgMax pitch search), so those builds pin the layers
of :func:`fp32_pin_nodes` to FP32 (``ILayer.precision``, ``set_output_type`` and
``PREFER_PRECISION_CONSTRAINTS``; :func:`layers_to_pin` maps layer names to nodes).

Sources (NVIDIA docs):
  * TensorRT 10.x -> 11.x Python migration, removed APIs:
    https://docs.nvidia.com/deeplearning/tensorrt/latest/api/migration/tensorrt-10x-to-11x-python-api-reference.html
    (``BuilderFlag.FP16/INT8/BF16/FP8/INT4/FP4``, ``OBEY/PREFER_PRECISION_CONSTRAINTS``, ``DIRECT_IO``,
    ``IBuilderConfig.int8_calibrator`` removed; strong typing always on)
  * ``NetworkDefinitionCreationFlag`` (``EXPLICIT_BATCH`` ignored since 10.0, ``STRONGLY_TYPED``):
    https://docs.nvidia.com/deeplearning/tensorrt/latest/_static/python-api/infer/Core/Builder.html and the
    8.4 page .../archives/tensorrt-843/api/python_api/infer/Core/Builder.html (``EXPLICIT_BATCH`` required)
  * TensorRT 8.x -> 10.x Python migration (name-based tensors, ``execute_async_v3``):
    https://docs.nvidia.com/deeplearning/tensorrt/latest/api/migration/tensorrt-8x-to-10x-python-api-reference.html
  * DLA on 11.x ("not supported for Linux SBSA, NVIDIA JetPack, or NVIDIA DriveOS deployments in 11.4.0"):
    https://docs.nvidia.com/deeplearning/tensorrt/11.4.0/inference-library/dla-build-and-run.html; DLA runs
    FP16 and INT8 only (same page, "Running on DLA during TensorRT Inference").
  * Per-layer precision in weakly typed networks (``ILayer::setPrecision`` / ``setOutputType``): TensorRT
    Developer Guide, "Precision Control",
    https://docs.nvidia.com/deeplearning/tensorrt/latest/inference-library/precision-control.html
  * ONNX parser layer names (onnx-tensorrt ``ImporterContext::registerLayer``/``generateUniqueName``,
    ``getNodeName``): a node's first layer is named after the node (``node_of_<first output>`` when the node
    has no name), further layers of the same node get ``<name>_<counter>``.
  * Sparsity log lines ("(Sparsity) Layers eligible for sparse math: ...", "(Sparsity) TRT inference plan
    picked sparse implementation for layers: ..."): TensorRT Developer Guide, "Structured Sparsity".
  * Plans are tied to the TensorRT version and the GPU model they were built on: TensorRT Developer Guide,
    "Serialized engines are not portable across platforms or TensorRT versions" (hardware/version
    compatibility modes excepted; cosyedge does not enable them).

Size: over 500 lines on purpose: every TensorRT version difference cosyedge knows is decided here, in one
pure-Python module (tested without TensorRT by ``tests/trt/test_compat.py`` and the API conformance test);
splitting it would scatter the version table. It lives in ``runtime/`` because running needs the checks too.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable
from typing import Any

from cosyedge.artifacts import PRECISIONS  # defined once, with the manifest schema
from cosyedge.errors import ArtifactError, DependencyError, UsageError

MIN_VERSION = (8, 6)
"""tuple[int, int]: oldest TensorRT cosyedge builds with (JetPack 5 ships 8.5/8.6; 8.6 is the floor)."""
MAX_MAJOR = 11
"""int: newest TensorRT major version this shim knows; newer majors are refused with a message."""

_INSTALL = "pip install 'cosyedge[trt]' (or the TensorRT of your JetPack on Jetson)"


def parse_version(text: str) -> tuple[int, int, int]:
    """Parse a TensorRT version string such as ``"10.3.0.26"``, ``"8.6.1.post1"`` or ``"11.0.0"``.

    Args:
        text (str): ``tensorrt.__version__``.
    Returns:
        tuple[int, int, int]: (major, minor, patch); missing parts are 0.
    Raises:
        DependencyError: the string does not start with a number.
    """
    m = re.match(r"\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?", str(text))
    if not m:
        raise DependencyError(f"cannot read the TensorRT version {text!r}; reinstall TensorRT: {_INSTALL}")
    return tuple(int(g) if g else 0 for g in m.groups())  # type: ignore[return-value]


def check_supported(version: tuple[int, int, int]) -> None:
    """Refuse TensorRT versions this shim does not know.

    Args:
        version (tuple[int, int, int]): from :func:`parse_version`.
    Raises:
        DependencyError: older than 8.6, or a major version above :data:`MAX_MAJOR`.
    """
    v = ".".join(map(str, version))
    if tuple(version[:2]) < MIN_VERSION:
        raise DependencyError(f"TensorRT {v} is too old: cosyedge needs TensorRT 8.6, 10.x or 11.x ({_INSTALL})")
    if version[0] > MAX_MAJOR:
        raise DependencyError(f"TensorRT {v} is newer than this cosyedge knows (8.6, 10.x, 11.x); upgrade cosyedge "
                              f"or install TensorRT 10.x/11.x")


@dataclasses.dataclass(frozen=True)
class TrtFeatures:
    """What one TensorRT version offers, as far as cosyedge cares.

    Attributes:
        version (tuple[int, int, int]): (major, minor, patch).
        strongly_typed (bool): ``NetworkDefinitionCreationFlag.STRONGLY_TYPED`` exists (9.x/10.x; on 11.x
            it exists but is ignored because strong typing is always on).
        always_strongly_typed (bool): 11.x: every network is strongly typed, no flag needed.
        explicit_batch_flag (bool): 8.x: ``EXPLICIT_BATCH`` must be passed to ``create_network``.
        precision_flags (bool): ``BuilderFlag.FP16/INT8`` exist (< 11).
        calibrators (bool): ``IInt8EntropyCalibrator2`` and ``IBuilderConfig.int8_calibrator`` exist (< 11).
        execute_api (str): ``"v3"`` (``set_tensor_address`` + ``execute_async_v3``, >= 8.5) or ``"v2"``
            (bindings + ``execute_async_v2``).
        dla (bool): DLA builds are allowed (< 11; 11.x docs: not supported on JetPack/DriveOS/SBSA).
        inspector_io_key (str): key of the I/O tensor list in ``IEngineInspector`` JSON (``"Bindings"``
            before 11, ``"I/O Tensors"`` on 11.x; 11.x migration guide, "IEngineInspector JSON Output").
    """

    version: tuple
    strongly_typed: bool
    always_strongly_typed: bool
    explicit_batch_flag: bool
    precision_flags: bool
    calibrators: bool
    execute_api: str
    dla: bool
    inspector_io_key: str

    @property
    def version_text(self) -> str:
        """str: ``"major.minor.patch"``."""
        return ".".join(map(str, self.version))


def _enum_has(module: Any, enum: str, member: str) -> bool | None:
    """True/False when ``module.<enum>.<member>`` exists / not; None when no module was given."""
    if module is None:
        return None
    holder = getattr(module, enum, None)
    return holder is not None and hasattr(holder, member)


def features(version: str | tuple, trt: Any = None) -> TrtFeatures:
    """Decide what TensorRT ``version`` offers; when ``trt`` (a real or fake module) is given, flag
    presence is read from its enums instead of assumed from the version.

    Args:
        version (str | tuple): ``tensorrt.__version__`` or a parsed tuple.
        trt (module | None): the ``tensorrt`` module (or a test double with ``BuilderFlag`` and
            ``NetworkDefinitionCreationFlag`` namespaces, and ``IExecutionContext``).
    Returns:
        TrtFeatures
    Raises:
        DependencyError: unsupported version (see :func:`check_supported`).
    """
    v = parse_version(version) if isinstance(version, str) else tuple(version) + (0,) * (3 - len(version))
    check_supported(v)
    major = v[0]
    st = _enum_has(trt, "NetworkDefinitionCreationFlag", "STRONGLY_TYPED")
    fp16 = _enum_has(trt, "BuilderFlag", "FP16")
    v3 = None
    if trt is not None and getattr(trt, "IExecutionContext", None) is not None:
        v3 = hasattr(trt.IExecutionContext, "execute_async_v3")
    return TrtFeatures(
        version=v,
        strongly_typed=st if st is not None else major >= 9,
        always_strongly_typed=major >= 11,
        explicit_batch_flag=major < 10,
        precision_flags=fp16 if fp16 is not None else major < 11,
        calibrators=major < 11 and (trt is None or hasattr(trt, "IInt8EntropyCalibrator2")),
        execute_api="v3" if (v3 if v3 is not None else v[:2] >= (8, 5)) else "v2",
        dla=major < 11,
        inspector_io_key="I/O Tensors" if major >= 11 else "Bindings",
    )


@dataclasses.dataclass
class BuildPlan:
    """The TensorRT build settings for one engine (names of enum members, resolved by the builder).

    Attributes:
        network_flags (list[str]): ``NetworkDefinitionCreationFlag`` members to OR into ``create_network``.
        builder_flags (list[str]): ``BuilderFlag`` members to set on the ``IBuilderConfig``.
        strongly_typed (bool): The network is strongly typed (precision taken from ONNX tensor types).
        dla_core (int | None): DLA core for ``config.DLA_core`` with ``default_device_type = DLA``.
        precision (str): ``fp32`` | ``fp16`` | ``int8`` (what the ONNX holds).
        sparse (bool): ``SPARSE_WEIGHTS`` requested.
        notes (list[str]): Human-readable reasons, logged and stored in the manifest.
    """

    network_flags: list
    builder_flags: list
    strongly_typed: bool
    dla_core: int | None
    precision: str
    sparse: bool
    notes: list = dataclasses.field(default_factory=list)

    def as_dict(self) -> dict:
        """Return the plan as a JSON-serialisable dict (stored in the engine manifest)."""
        return dataclasses.asdict(self)


def plan_build(feat: TrtFeatures, precision: str = "fp32", sparse: bool = False, dla_core: int | None = None,
               gpu_fallback: bool = False, available_builder_flags: Iterable[str] | None = None) -> BuildPlan:
    """Decide network and builder flags for one build.

    Rules (see module docstring): GPU builds are strongly typed wherever TensorRT can (>= 9) and set no
    precision flag; 8.6 sets ``FP16`` for fp16 and ``INT8`` + ``FP16`` for int8 (explicit Q/DQ). DLA builds
    on 8.6/10.x are weakly typed with the same precision flags (the documented DLA path,
    ``trtexec --useDLACore=N --fp16|--int8``), need fp16 or int8, and are refused on 11.x.
    ``sparse`` adds ``SPARSE_WEIGHTS``; ``gpu_fallback`` adds ``GPU_FALLBACK`` (DLA only).

    Args:
        feat (TrtFeatures): from :func:`features`.
        precision (str): ``fp32`` | ``fp16`` | ``int8``.
        sparse (bool): Allow 2:4 sparse tactics.
        dla_core (int | None): DLA core index (Jetson), or None for the GPU.
        gpu_fallback (bool): Let layers DLA cannot run fall back to the GPU.
        available_builder_flags (iterable[str] | None): ``BuilderFlag`` member names of the installed
            TensorRT; every chosen flag must be among them.
    Returns:
        BuildPlan
    Raises:
        UsageError: unknown precision; ``gpu_fallback`` without ``dla_core``; negative ``dla_core``; DLA
            with fp32 or on TensorRT 11.x.
        DependencyError: a flag this plan needs is missing from ``available_builder_flags``.
    """
    if precision not in PRECISIONS:
        raise UsageError(f"unknown precision {precision!r} (use one of {', '.join(PRECISIONS)})")
    notes: list[str] = []
    if gpu_fallback and dla_core is None:
        raise UsageError("--gpu-fallback only applies to DLA builds: add --dla-core N (Jetson)")
    if dla_core is not None:
        if int(dla_core) < 0:
            raise UsageError(f"--dla-core must be >= 0, got {dla_core}")
        if not feat.dla:
            raise UsageError(f"DLA builds need TensorRT 10.x or 8.6 (JetPack 6/5); TensorRT {feat.version_text} "
                             f"does not support DLA on Jetson: drop --dla-core to build for the GPU")
        if precision == "fp32":
            raise UsageError("DLA runs FP16 and INT8 only: build the DLA engine with --fp16 or --int8")

    network_flags: list[str] = []
    builder_flags: list[str] = []
    weak_precision = False
    if feat.always_strongly_typed:
        strongly_typed = True
        notes.append(f"TensorRT {feat.version_text}: networks are always strongly typed; precision from the ONNX")
    elif dla_core is not None or not feat.strongly_typed:
        strongly_typed = False
        weak_precision = True
        if feat.explicit_batch_flag:
            network_flags.append("EXPLICIT_BATCH")
        why = "DLA build" if dla_core is not None else f"TensorRT {feat.version_text} has no strong typing"
        notes.append(f"{why}: weakly typed network, precision flags allow the ONNX's {precision} kernels")
    else:
        strongly_typed = True
        network_flags.append("STRONGLY_TYPED")
        notes.append("strongly typed network: precision from the ONNX tensor types (casts, Q/DQ)")
    if weak_precision:
        if not feat.precision_flags and precision != "fp32":
            raise DependencyError(f"TensorRT {feat.version_text} has neither strong typing nor precision flags")
        if precision == "fp16":
            builder_flags.append("FP16")
        elif precision == "int8":
            builder_flags += ["INT8", "FP16"]  # explicit Q/DQ needs INT8 on 8.x; FP16 for unquantized layers
    if sparse:
        builder_flags.append("SPARSE_WEIGHTS")
        notes.append("SPARSE_WEIGHTS: TensorRT times sparse and dense tactics per layer and keeps the faster")
    if gpu_fallback:
        builder_flags.append("GPU_FALLBACK")
    if available_builder_flags is not None:
        have = set(available_builder_flags)
        missing = [f for f in builder_flags if f not in have]
        if missing:
            raise DependencyError(f"TensorRT {feat.version_text} has no BuilderFlag {', '.join(missing)} needed for "
                                  f"this build ({precision}{', sparse' if sparse else ''})")
    return BuildPlan(network_flags=network_flags, builder_flags=builder_flags, strongly_typed=strongly_typed,
                     dla_core=None if dla_core is None else int(dla_core), precision=precision, sparse=bool(sparse),
                     notes=notes)


def network_flags_mask(names: Iterable[str], enum: Any) -> int:
    """OR ``1 << int(enum.<name>)`` over ``names`` (the ``create_network`` argument).

    Args:
        names (iterable[str]): ``NetworkDefinitionCreationFlag`` member names.
        enum: ``tensorrt.NetworkDefinitionCreationFlag`` (or a test double with int-convertible members).
    Returns:
        int: the flags bit mask (0 when empty).
    Source: Builder.html: "pass a value of 1 << int(NetworkDefinitionCreationFlag.STRONGLY_TYPED)".
    """
    mask = 0
    for n in names:
        mask |= 1 << int(getattr(enum, n))
    return mask


# ------------------------------------------------------------------------------- FP32 pins (weak typing)
PIN_SKIP_OPS = ("Cast", "CastLike", "Constant", "QuantizeLinear", "DequantizeLinear")
"""tuple[str]: ONNX ops never pinned: casts and Q/DQ carry their own output types, a Constant makes no layer."""

_FLOAT_TYPES = (1, 10, 11, 16)  # onnx.TensorProto FLOAT, FLOAT16, DOUBLE, BFLOAT16
_FLOAT, _FLOAT16 = 1, 10
_LAYER_SUFFIX = re.compile(r"^(.*)_\d+$")


def parser_node_name(node: Any) -> str:
    """Return the name TensorRT's ONNX parser gives the first layer of ``node`` (str): the node name, or
    ``node_of_<first output>`` for an unnamed node. Source: onnx-tensorrt ``getNodeName``."""
    if not node.name and len(node.output):
        return f"node_of_{node.output[0]}"
    return node.name


def _tensor_types(model: Any) -> dict[str, int]:
    """ONNX elem type of every typed tensor (graph I/O, initializers, value_info after shape inference)."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - inference is best effort; the declared types are used then
        inferred = model
    g = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type for v in (*g.input, *g.output, *g.value_info)}
    types.update({t.name: t.data_type for t in g.initializer})
    return {k: v for k, v in types.items() if v}


def fp32_pin_nodes(model: Any, contract: Any = None) -> dict[str, str]:
    """Decide which ONNX nodes a weakly typed build with the ``FP16`` flag pins to FP32.

    * An ONNX holding FP16 tensors (the FP16 ONNX of ``cosyedge build --fp16``) says itself what stays FP32:
      every node whose float tensors are all FP32 (its outputs; its inputs when it has no float output, e.g.
      ArgMax) is pinned, i.e. what :func:`cosyedge.precision.fp16.fp32_node_plan` kept (and the converter's
      FP32 output Identities).
    * Otherwise every float tensor is FP32 (the FP32 ONNX, or the INT8 Q/DQ ONNX made from it), so the types
      say nothing: the nodes of :func:`~cosyedge.precision.fp16.fp32_node_plan` of that ONNX are pinned (the
      index-picking chains, the overflow-prone ops, the boundary convs), minus the nodes reading a
      ``DequantizeLinear`` output (quantized compute: their precision is the Q/DQ's), not every node.

    Nodes of :data:`PIN_SKIP_OPS` are never pinned.

    Args:
        model (onnx.ModelProto): The ONNX handed to TensorRT (external data need not be loaded).
        contract (StreamContract | None): Its stream contract; read from ``model`` when None.
    Returns:
        dict[str, str]: parser layer name of the node (:func:`parser_node_name`) -> reason, in graph order.
    Raises:
        ArtifactError: ``model`` has no cosyedge stream contract (FP32/INT8 ONNX only).
    Source: NVIDIA TensorRT Developer Guide, "Precision Control" (reduced precision in weakly typed
        networks: the builder may run any layer in FP16 unless constrained).
    """
    nodes = list(model.graph.node)
    types = _tensor_types(model)
    if _FLOAT16 in types.values():
        pins: dict[str, str] = {}
        for n in nodes:
            if n.op_type in PIN_SKIP_OPS:
                continue
            floats = [types[o] for o in n.output if types.get(o) in _FLOAT_TYPES]
            floats = floats or [types[i] for i in n.input if i and types.get(i) in _FLOAT_TYPES]
            if floats and all(t == _FLOAT for t in floats):
                pins[parser_node_name(n)] = f"FP32 in the FP16 ONNX ({n.op_type})"
        return pins

    import onnx

    from cosyedge.artifacts import StreamContract
    from cosyedge.precision.fp16 import fp32_node_plan

    contract = contract if contract is not None else StreamContract.from_onnx(model)
    named = onnx.ModelProto()  # the nodes, named as the parser names their layers, and the weights (copy convs)
    named.graph.node.extend(nodes)
    named.graph.initializer.extend(model.graph.initializer)
    for n in named.graph.node:
        n.name = parser_node_name(n)
    dq_out = {o for n in nodes if n.op_type == "DequantizeLinear" for o in n.output}
    by_name = {n.name: n for n in named.graph.node}
    plan = fp32_node_plan(named, contract)
    return {name: why for name, why in plan.items()
            if by_name[name].op_type not in PIN_SKIP_OPS and not any(i in dq_out for i in by_name[name].input)}


def layers_to_pin(layer_names: Iterable[str], pin_nodes: Iterable[str], node_names: Iterable[str]) -> dict[str, str]:
    """Match parsed-network layer names to ONNX nodes and keep the layers of the nodes to pin.

    TensorRT's ONNX parser names a node's first layer after the node and any further layer of that node
    ``<node>_<counter>`` (a counter shared by the whole parse, so the suffix is not a per-node index). A layer
    name equal to a node name belongs to that node; otherwise one ``_<digits>`` suffix is removed and the rest
    must be a node name. Layers the parser adds without a node name (``(Unnamed Layer* 12) [Shuffle]``,
    weights constants) match nothing. Ambiguity: a helper layer ``/Add_7`` of node ``/Add`` is taken for node
    ``/Add_7`` when the graph has both names.

    Args:
        layer_names (Iterable[str]): ``network.get_layer(i).name`` for every layer, in network order.
        pin_nodes (Iterable[str]): Node names to pin (keys of :func:`fp32_pin_nodes`).
        node_names (Iterable[str]): Parser names of all ONNX nodes (:func:`parser_node_name`).
    Returns:
        dict[str, str]: layer name -> node name, for the layers to pin, in network order.
    Source: onnx-tensorrt ``ImporterContext::registerLayer`` / ``generateUniqueName``.
    """
    pin = set(pin_nodes)
    names = set(node_names) | pin
    out: dict[str, str] = {}
    for layer in layer_names:
        node = layer if layer in names else None
        if node is None:
            m = _LAYER_SUFFIX.match(layer)
            node = m.group(1) if m and m.group(1) in names else None
        if node in pin:
            out[layer] = node
    return out


# ---------------------------------------------------------------------------------------- sparsity report
_ELIGIBLE = re.compile(r"\(Sparsity\)\s*Layers eligible for sparse math:\s*(.*)$")
_PICKED = re.compile(r"\(Sparsity\)\s*TRT inference plan picked sparse implementation for layers:\s*(.*)$")


def _split_layers(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


def sparse_layers_from_log(lines: Iterable[str]) -> dict:
    """Read TensorRT's structured-sparsity build log lines.

    Args:
        lines (iterable[str]): Messages the builder logged (any severity; timestamps/prefixes allowed).
    Returns:
        dict: ``{"eligible": [layer names], "picked": [layer names]}`` (empty lists when not logged).
    Source: TensorRT Developer Guide, "Structured Sparsity" (example log lines).
    """
    eligible: list[str] = []
    picked: list[str] = []
    for line in lines:
        line = str(line).rstrip()
        m = _ELIGIBLE.search(line)
        if m:
            eligible += [n for n in _split_layers(m.group(1)) if n not in eligible]
        m = _PICKED.search(line)
        if m:
            picked += [n for n in _split_layers(m.group(1)) if n not in picked]
    return {"eligible": eligible, "picked": picked}


def layers_from_inspector(info: str | dict) -> list[dict]:
    """Summarise ``IEngineInspector.get_engine_information(LayerInformationFormat.JSON)``.

    Each layer becomes ``{"name", "type", "tactic", "sparse"}``; ``sparse`` is True when the tactic
    (kernel) name contains ``sparse`` (TensorRT's sparse kernels are named so; a heuristic, the log lines
    of :func:`sparse_layers_from_log` are authoritative). With ``ProfilingVerbosity.LAYER_NAMES_ONLY``
    layers are plain strings and only ``name`` is known.

    Args:
        info (str | dict): The inspector JSON (text or parsed).
    Returns:
        list[dict]: one entry per engine layer, in engine order.
    Raises:
        ArtifactError: the text is not JSON or has no ``"Layers"`` list.
    Source: TensorRT Python API ``IEngineInspector`` / ``LayerInformationFormat``; 11.x migration guide,
        "IEngineInspector JSON Output". The per-layer keys (``Name``, ``LayerType``, ``TacticName``) are
        not a documented schema: they are the keys public tools read from ``ProfilingVerbosity.DETAILED``
        output; not verified on hardware here, hence the tolerant parsing.
    """
    try:
        data = json.loads(info) if isinstance(info, (str, bytes)) else info
        layers = data["Layers"]
    except (ValueError, TypeError, KeyError) as err:
        raise ArtifactError(f"engine inspector output is not the expected JSON ({err})") from None
    out = []
    for layer in layers:
        if isinstance(layer, str):
            out.append({"name": layer, "type": "", "tactic": "", "sparse": False})
            continue
        tactic = str(layer.get("TacticName", layer.get("Tactic", "")) or "")
        out.append({"name": str(layer.get("Name", "")), "type": str(layer.get("LayerType", "")),
                    "tactic": tactic, "sparse": "sparse" in tactic.lower()})
    return out


# ------------------------------------------------------------------------------------ plan portability
@dataclasses.dataclass(frozen=True)
class CompatDecision:
    """Whether a stored plan can be deserialized here.

    Attributes:
        action (str): ``"ok"``, ``"warn"`` (same TensorRT and compute capability, other GPU model: TensorRT
            warns but loads) or ``"rebuild"``.
        reason (str): one line, empty when ``ok``.
    """

    action: str
    reason: str = ""


def check_engine_compat(manifest: dict, installed_version: str, gpu_name: str,
                        compute_capability: tuple | list | str) -> CompatDecision:
    """Compare an engine manifest with the installed TensorRT and the current GPU.

    A plan is tied to the exact TensorRT version that built it and to the GPU architecture; cosyedge does
    not build version- or hardware-compatible plans. Same version and compute capability on a different
    GPU model loads (TensorRT logs a warning), hence ``warn``.

    Args:
        manifest (dict): Engine manifest with ``tools.tensorrt`` (str) and ``gpu`` ``{"name": str,
            "compute_capability": "8.7"}``.
        installed_version (str): ``tensorrt.__version__`` here.
        gpu_name (str): Current GPU name, e.g. ``"Orin"``.
        compute_capability (tuple | list | str): Current GPU, e.g. ``(8, 7)`` or ``"8.7"``.
    Returns:
        CompatDecision
    Raises:
        ArtifactError: the manifest lacks the TensorRT version or GPU entry (not made by this builder).
    """
    tools = manifest.get("tools") or {}
    built = tools.get("tensorrt")
    gpu = manifest.get("gpu") or {}
    if not built or "compute_capability" not in gpu:
        raise ArtifactError("engine manifest has no TensorRT version or GPU entry (rebuild it with "
                            "'cosyedge build --backend tensorrt')")
    cc_here = format_cc(compute_capability)
    cc_built = format_cc(gpu["compute_capability"])
    if str(built).strip() != str(installed_version).strip():
        return CompatDecision("rebuild", f"plan built with TensorRT {built}, this machine has {installed_version}")
    if cc_built != cc_here:
        return CompatDecision("rebuild", f"plan built for compute capability {cc_built} ({gpu.get('name', '?')}), "
                                         f"this GPU is {cc_here} ({gpu_name})")
    if gpu.get("name") and gpu_name and gpu["name"] != gpu_name:
        return CompatDecision("warn", f"plan built on {gpu['name']}, running on {gpu_name} (same compute "
                                      f"capability {cc_here}); rebuild for best performance")
    return CompatDecision("ok")


def format_cc(cc: tuple | list | str) -> str:
    """Return a compute capability as ``"major.minor"`` (str) from ``(8, 7)``, ``[8, 7]`` or ``"8.7"``."""
    if isinstance(cc, str):
        parts = cc.replace("sm_", "").replace("sm", "").split(".")
        if len(parts) == 1 and len(parts[0]) >= 2:  # "87" -> 8.7
            return f"{parts[0][:-1]}.{parts[0][-1]}"
        return ".".join(parts[:2])
    return f"{int(cc[0])}.{int(cc[1])}"
