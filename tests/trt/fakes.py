"""Test doubles of ``tensorrt``, ``pycuda.driver`` and cuda-python's ``cudart`` for CPU-only machines.

They implement exactly the calls cosyedge makes (documented TensorRT/pycuda API), with checks a real GPU
would enforce loudly or silently:

* device memory is a dict of numpy byte arrays keyed by fake addresses; every copy/allocation asserts
  that a CUDA context is current on the calling thread (pycuda raises otherwise);
* ``execute_async_v3`` reads the inputs at the addresses set with ``set_tensor_address``, runs the real
  ONNX with ONNX Runtime and writes the outputs at their addresses; it refuses an address bound as both
  an input and an output (the aliasing bug ping-pong buffers avoid) and shapes outside the profile;
* the "plan" is JSON naming the TensorRT version, the ONNX, the flags and the profile, so a plan from
  another version fails to deserialize (returns None) like a real one;
* the parsed network has layers named as TensorRT's ONNX parser names them (first layer of a node = node
  name, or ``node_of_<output>``; further layers ``<name>_<counter>``; an ArgMax becomes a TopK layer with a
  float values and an int32 indices output plus an int32 helper layer, a Conv gets two float shuffle helper
  layers), with output dtypes from ONNX shape inference (int64 -> int32 as on 8.6), and one unnamed helper
  layer; per-layer ``precision``/``set_output_type`` calls are recorded in ``trt.calls["layer_precisions"]``;
* CUDA graphs record the H2D/enqueue/D2H calls issued during capture and replay them.

Nothing here is a claim about real TensorRT numerics; GPU behaviour is checked by ``scripts/gpu_check.py``.
"""

from __future__ import annotations

import base64
import importlib.machinery
import itertools
import json
import threading
import types
from pathlib import Path

import numpy as np

# ------------------------------------------------------------------------------------------- pycuda


class FakeCudaState:
    def __init__(self, gpus=(("NVIDIA Orin", (8, 7)),)):
        self.gpus = list(gpus)
        self.memory: dict[int, np.ndarray] = {}
        self.addr = itertools.count(0x1000, 0x1000)
        self.tls = threading.local()
        self.capturing = None  # list of recorded ops while a graph capture is active
        self.log: list[str] = []
        self.contexts_alive = 0

    def stack(self):
        if not hasattr(self.tls, "stack"):
            self.tls.stack = []
        return self.tls.stack

    def require_context(self, what):
        if not self.stack():
            raise RuntimeError(f"fake pycuda: {what} without a current CUDA context on this thread")


def make_fake_cuda(state: FakeCudaState) -> types.ModuleType:
    cuda = types.ModuleType("pycuda.driver")

    class Context:
        def __init__(self, dev):
            self.dev = dev
            state.contexts_alive += 1
            self.alive = True

        def push(self):
            state.stack().append(self)

        @staticmethod
        def pop():
            if not state.stack():
                raise RuntimeError("fake pycuda: pop on an empty context stack")
            state.stack().pop()

        def detach(self):
            assert self.alive
            self.alive = False
            state.contexts_alive -= 1

    class Device:
        def __init__(self, n):
            if n >= len(state.gpus):
                raise RuntimeError("invalid device ordinal")
            self.n = n

        @staticmethod
        def count():
            return len(state.gpus)

        def name(self):
            return state.gpus[self.n][0]

        def compute_capability(self):
            return state.gpus[self.n][1]

        def total_memory(self):
            return 8 << 30

        def make_context(self, flags=0):
            ctx = Context(self)
            state.stack().append(ctx)
            return ctx

    class DeviceAllocation:
        def __init__(self, nbytes):
            state.require_context("mem_alloc")
            self.address = next(state.addr)
            state.memory[self.address] = np.zeros(nbytes, np.uint8)

        def __int__(self):
            return self.address

        __index__ = __int__

        def free(self):
            state.require_context("free")
            state.memory.pop(self.address)

    class Stream:
        _h = itertools.count(1)

        def __init__(self, flags=0):
            state.require_context("Stream()")
            self.handle = next(Stream._h)

        def synchronize(self):
            state.require_context("Stream.synchronize")

    class Event:
        def __init__(self, flags=0):
            self.t = 0.0

        def record(self, stream=None):
            state.require_context("Event.record")
            self.t = len(state.log) * 0.01
            return self

        def synchronize(self):
            return self

        def time_since(self, other):
            return 0.05 + max(0.0, self.t - other.t)

    def _bytes(addr):
        return state.memory[int(addr)]

    def memcpy_htod(dest, src):
        state.require_context("memcpy_htod")
        b = np.ascontiguousarray(src).view(np.uint8).reshape(-1)
        _bytes(dest)[: b.size] = b

    def memcpy_dtoh(dest, src):
        state.require_context("memcpy_dtoh")
        flat = dest.reshape(-1).view(np.uint8)
        flat[:] = _bytes(src)[: flat.size]

    def memcpy_htod_async(dest, src, stream=None):
        state.require_context("memcpy_htod_async")
        op = ("htod", int(dest), src)
        if state.capturing is not None:
            state.capturing.append(op)
        else:
            memcpy_htod(dest, src)
        state.log.append("htod")

    def memcpy_dtoh_async(dest, src, stream=None):
        state.require_context("memcpy_dtoh_async")
        op = ("dtoh", dest, int(src))
        if state.capturing is not None:
            state.capturing.append(op)
        else:
            memcpy_dtoh(dest, src)
        state.log.append("dtoh")

    def pagelocked_empty(shape, dtype, order="C", mem_flags=0):
        state.require_context("pagelocked_empty")
        return np.empty(shape, dtype)

    cuda.Context, cuda.Device, cuda.DeviceAllocation, cuda.Stream, cuda.Event = (
        Context, Device, DeviceAllocation, Stream, Event)
    cuda.init = lambda flags=0: None
    cuda.mem_alloc = DeviceAllocation
    cuda.memcpy_htod, cuda.memcpy_dtoh = memcpy_htod, memcpy_dtoh
    cuda.memcpy_htod_async, cuda.memcpy_dtoh_async = memcpy_htod_async, memcpy_dtoh_async
    cuda.pagelocked_empty = pagelocked_empty
    cuda._state = state
    return cuda


def make_fake_cudart(state: FakeCudaState, cuda_mod) -> types.ModuleType:
    rt = types.ModuleType("cuda.bindings.runtime")
    rt.cudaStreamCaptureMode = types.SimpleNamespace(cudaStreamCaptureModeThreadLocal=1, cudaStreamCaptureModeGlobal=0)
    graphs: dict[int, list] = {}
    ids = itertools.count(1)
    rt.launched = []

    def begin(stream, mode):
        state.require_context("cudaStreamBeginCapture")
        state.capturing = []
        return (0,)

    def end(stream):
        ops, state.capturing = state.capturing, None
        g = next(ids)
        graphs[g] = ops
        return (0, g)

    def instantiate(graph, flags):
        e = next(ids)
        graphs[e] = list(graphs[graph])
        return (0, e)

    def launch(exe, stream):
        state.require_context("cudaGraphLaunch")
        rt.launched.append(exe)
        for op in graphs[exe]:
            if op[0] == "htod":
                cuda_mod.memcpy_htod(op[1], op[2])
            elif op[0] == "dtoh":
                cuda_mod.memcpy_dtoh(op[1], op[2])
            else:
                op[1]()
        return (0,)

    rt.cudaStreamBeginCapture, rt.cudaStreamEndCapture = begin, end
    rt.cudaGraphInstantiate, rt.cudaGraphLaunch = instantiate, launch
    rt.cudaGraphDestroy = lambda g: (0,)
    rt.cudaGraphExecDestroy = lambda g: (0,)
    rt._graphs = graphs
    return rt


# ----------------------------------------------------------------------------------------- tensorrt
ALL_BUILDER_FLAGS = ["FP16", "INT8", "DEBUG", "GPU_FALLBACK", "REFIT", "DISABLE_TIMING_CACHE", "TF32",
                     "SPARSE_WEIGHTS", "SAFETY_SCOPE", "OBEY_PRECISION_CONSTRAINTS", "PREFER_PRECISION_CONSTRAINTS",
                     "DIRECT_IO", "BF16", "FP8"]
REMOVED_IN_11 = {"FP16", "INT8", "BF16", "FP8", "OBEY_PRECISION_CONSTRAINTS", "PREFER_PRECISION_CONSTRAINTS",
                 "DIRECT_IO"}


def _enum(name, members):
    ns = types.SimpleNamespace(**{m: i for i, m in enumerate(members)})
    ns.__name__ = name
    return ns


def make_fake_trt(version: str, cuda_state: FakeCudaState, dla_cores: int = 0, sparse_picked=("conv_b",),
                  fail_build: bool = False) -> types.ModuleType:
    major = int(version.split(".")[0])
    trt = types.ModuleType("tensorrt")
    trt.__version__ = version
    flags = [f for f in ALL_BUILDER_FLAGS if not (major >= 11 and f in REMOVED_IN_11)]
    trt.BuilderFlag = _enum("BuilderFlag", flags)
    net_flags = ["EXPLICIT_BATCH"] + (["STRONGLY_TYPED"] if major >= 9 else [])
    trt.NetworkDefinitionCreationFlag = types.SimpleNamespace(**{"EXPLICIT_BATCH": 0, **({"STRONGLY_TYPED": 1}
                                                                                       if major >= 9 else {})})
    trt.MemoryPoolType = types.SimpleNamespace(WORKSPACE="WORKSPACE")
    trt.DeviceType = types.SimpleNamespace(GPU="GPU", DLA="DLA")
    trt.ProfilingVerbosity = types.SimpleNamespace(DETAILED="DETAILED", LAYER_NAMES_ONLY="LAYER_NAMES_ONLY")
    trt.LayerInformationFormat = types.SimpleNamespace(JSON="JSON", ONELINE="ONELINE")
    trt.TensorIOMode = types.SimpleNamespace(INPUT="INPUT", OUTPUT="OUTPUT", NONE="NONE")
    trt.calls = {"network_flags": None, "builder_flags": [], "profile": {}, "workspace": None, "dla": None,
                 "timing_cache_in": None, "builds": 0, "layer_precisions": {}, "layer_names": []}
    trt.DataType = types.SimpleNamespace(FLOAT="DataType.FLOAT", HALF="DataType.HALF", INT8="DataType.INT8",
                                         INT32="DataType.INT32", BOOL="DataType.BOOL")
    trt.float32, trt.float16, trt.int8, trt.int32 = (trt.DataType.FLOAT, trt.DataType.HALF, trt.DataType.INT8,
                                                     trt.DataType.INT32)
    trt.bool = trt.DataType.BOOL
    if major < 11:
        trt.IInt8EntropyCalibrator2 = type("IInt8EntropyCalibrator2", (), {})
    del net_flags

    class ILogger:
        Severity = types.SimpleNamespace(INTERNAL_ERROR=0, ERROR=1, WARNING=2, INFO=3, VERBOSE=4)

        def __init__(self):
            pass

    class Logger(ILogger):
        WARNING = 2

        def __init__(self, severity=2):
            super().__init__()

        def log(self, severity, msg):
            pass

    trt.ILogger, trt.Logger = ILogger, Logger
    trt.nptype = lambda dt: {"float32": np.float32, "float16": np.float16}[dt]

    class Tensor:
        def __init__(self, name, dtype):
            self.name, self.dtype = name, dtype

    class Layer:
        def __init__(self, name, dtypes):
            self.name = name
            self._outputs = [Tensor(f"({name}_output_{i})", d) for i, d in enumerate(dtypes)]
            self._precision = None
            self.output_types = {}

        @property
        def num_outputs(self):
            return len(self._outputs)

        def get_output(self, i):
            return self._outputs[i]

        @property
        def precision(self):
            return self._precision if self._precision is not None else trt.float32

        @precision.setter
        def precision(self, dtype):
            assert dtype in vars(trt.DataType).values(), dtype
            self._precision = dtype

        @property
        def precision_is_set(self):
            return self._precision is not None

        def set_output_type(self, index, dtype):
            assert 0 <= index < self.num_outputs and dtype in vars(trt.DataType).values(), (index, dtype)
            self.output_types[index] = dtype

    def layers_from_onnx(model):
        """Layers as the ONNX parser names them (see the module docstring)."""
        import onnx

        g = onnx.shape_inference.infer_shapes(model).graph
        elem = {v.name: v.type.tensor_type.elem_type for v in (*g.input, *g.output, *g.value_info)}
        elem.update({t.name: t.data_type for t in g.initializer})
        to_trt = {1: trt.float32, 10: trt.float16, 6: trt.int32, 7: trt.int32, 9: trt.bool, 3: trt.int8}
        used, counter = set(), itertools.count()

        def unique(base):  # onnx-tensorrt generateUniqueName: base, else base_<shared counter>
            cand = base
            while cand in used:
                cand = f"{base}_{next(counter)}"
            used.add(cand)
            return cand

        layers = []
        for n in g.node:
            if n.op_type == "Constant":  # the parser adds no layer for a Constant node
                continue
            base = n.name or f"node_of_{n.output[0]}"
            outs = [to_trt.get(elem.get(o), trt.float32) for o in n.output]
            if n.op_type in ("ArgMax", "ArgMin"):  # TopK (values, indices) + a shuffle of the indices
                layers.append(Layer(unique(base), [to_trt.get(elem.get(n.input[0]), trt.float32), trt.int32]))
                layers.append(Layer(unique(base), [trt.int32]))
            elif n.op_type == "Conv":  # 1-D conv: unsqueeze shuffle, 2-D conv, squeeze shuffle
                layers.append(Layer(unique(base), outs))
                layers.append(Layer(unique(base), outs))
                layers.append(Layer(unique(base), outs))
            else:
                layers.append(Layer(unique(base), outs))
        layers.append(Layer(f"(Unnamed Layer* {len(layers)}) [Shape]", [trt.int32]))
        return layers

    class Network:
        def __init__(self, flags):
            self.flags = flags
            self.onnx = None
            self.layers = []

        @property
        def num_layers(self):
            return len(self.layers)

        def get_layer(self, i):
            return self.layers[i]

    class Parser:
        def __init__(self, network, logger):
            self.network, self.errors = network, []

        def parse_from_file(self, path):
            import onnx

            try:
                model = onnx.load(path, load_external_data=False)
            except Exception as err:  # noqa: BLE001
                self.errors.append(f"ModelImporter.cpp:1: failed to parse: {err}")
                return False
            self.network.layers = layers_from_onnx(model)
            self.network.onnx = base64.b64encode(Path(path).read_bytes()).decode()  # a plan embeds the weights
            return True

        @property
        def num_errors(self):
            return len(self.errors)

        def get_error(self, i):
            return self.errors[i]

    class TimingCache:
        def __init__(self, data):
            self.data = bytes(data)

        def serialize(self):
            return self.data + b"+tactics"

    class Profile:
        def __init__(self):
            self.shapes = {}

        def set_shape(self, name, mn, opt, mx):
            self.shapes[name] = (tuple(mn), tuple(opt), tuple(mx))

    class Config:
        def __init__(self):
            self.flags, self.profiles, self.cache = [], [], None
            self.default_device_type, self.DLA_core, self.profiling_verbosity = "GPU", -1, None

        def set_memory_pool_limit(self, pool, nbytes):
            trt.calls["workspace"] = (pool, nbytes)

        def set_flag(self, flag):
            self.flags.append(flag)

        def add_optimization_profile(self, p):
            self.profiles.append(p)

        def create_timing_cache(self, data):
            trt.calls["timing_cache_in"] = bytes(data)
            return TimingCache(data)

        def set_timing_cache(self, cache, ignore_mismatch):
            self.cache = cache

        def get_timing_cache(self):
            return self.cache

    class Builder:
        num_DLA_cores = dla_cores

        def __init__(self, logger):
            self.logger = logger

        def create_network(self, flags=0):
            trt.calls["network_flags"] = flags
            return Network(flags)

        def create_builder_config(self):
            return Config()

        def create_optimization_profile(self):
            return Profile()

        def build_serialized_network(self, network, config):
            trt.calls["builds"] += 1
            names = {v: k for k, v in vars(trt.BuilderFlag).items() if not k.startswith("_")}
            bflags = [names[f] for f in config.flags]
            trt.calls["builder_flags"] = bflags
            trt.calls["profile"] = config.profiles[0].shapes
            trt.calls["dla"] = (config.default_device_type, config.DLA_core)
            trt.calls["layer_names"] = [layer.name for layer in network.layers]
            trt.calls["layer_precisions"] = {
                layer.name: {"precision": layer._precision, "output_types": dict(layer.output_types)}
                for layer in network.layers if layer.precision_is_set or layer.output_types}
            if fail_build:
                self.logger.log(ILogger.Severity.ERROR, "[optimizer] no implementation for layer conv_x")
                return None
            if "SPARSE_WEIGHTS" in bflags:
                self.logger.log(ILogger.Severity.INFO, "(Sparsity) Layers eligible for sparse math: conv_a, conv_b")
                self.logger.log(ILogger.Severity.INFO, "(Sparsity) TRT inference plan picked sparse implementation "
                                                        f"for layers: {', '.join(sparse_picked)}")
            return json.dumps({"trt": version, "onnx": network.onnx, "flags": bflags,
                               "profile": {k: [list(s) for s in v] for k, v in config.profiles[0].shapes.items()},
                               "sparse": "SPARSE_WEIGHTS" in bflags}).encode()

    class Inspector:
        def __init__(self, eng):
            self.eng = eng

        def get_engine_information(self, fmt):
            assert fmt == "JSON"
            layers = [{"Name": "conv_a", "LayerType": "CaskConvolution", "TacticName": "sm87_xmma_fprop_conv1d"},
                      {"Name": "conv_b", "LayerType": "CaskConvolution",
                       "TacticName": "sm87_xmma_fprop_sparse_conv_interior" if self.eng.meta["sparse"] else "dense"}]
            return json.dumps({"Layers": layers, "Bindings": list(self.eng.names)})

    class Engine:
        def __init__(self, meta):
            import onnxruntime as ort

            self.meta = meta
            so = ort.SessionOptions()
            so.intra_op_num_threads = 1
            self.sess = ort.InferenceSession(meta["onnx_bytes"], sess_options=so, providers=["CPUExecutionProvider"])
            self.inputs = [i.name for i in self.sess.get_inputs()]
            self.outputs = [o.name for o in self.sess.get_outputs()]
            self.names = self.inputs + self.outputs
            self.profile = {k: [tuple(s) for s in v] for k, v in meta["profile"].items()}

        @property
        def num_io_tensors(self):
            return len(self.names)

        def get_tensor_name(self, i):
            return self.names[i]

        def get_tensor_mode(self, name):
            return "INPUT" if name in self.inputs else "OUTPUT"

        def get_tensor_dtype(self, name):
            return "float32"

        def create_execution_context(self):
            return ExecContext(self)

        # TensorRT 8.x bindings API (used when IExecutionContext has no execute_async_v3)
        @property
        def num_bindings(self):
            return len(self.names)

        def get_binding_name(self, i):
            return self.names[i]

        def get_binding_index(self, name):
            return self.names.index(name)

        def binding_is_input(self, name):
            return name in self.inputs

        def get_binding_dtype(self, name):
            return "float32"

        def create_engine_inspector(self):
            return Inspector(self)

    class ExecContext:
        def __init__(self, engine):
            self.engine, self.shapes, self.addr = engine, {}, {}
            self.enqueues = []

        def set_input_shape(self, name, shape):
            mn, _, mx = self.engine.profile[name]
            if not all(a <= s <= b for a, s, b in zip(mn, shape, mx)):
                return False
            self.shapes[name] = tuple(shape)
            return True

        def set_tensor_address(self, name, addr):
            self.addr[name] = int(addr)
            return True

        def _run(self, addr):
            ins = {n: addr[n] for n in self.engine.inputs}
            outs = {n: addr[n] for n in self.engine.outputs}
            alias = set(ins.values()) & set(outs.values())
            if alias:
                raise RuntimeError(f"fake TensorRT: address bound as input and output: {sorted(alias)}")
            self.enqueues.append(dict(addr))
            feed = {}
            for n, a in ins.items():
                shape = self.shapes[n]
                nb = int(np.prod(shape)) * 4
                feed[n] = cuda_state.memory[a][:nb].view(np.float32).reshape(shape).copy()
            res = self.engine.sess.run(self.engine.outputs, feed)
            for n, y in zip(self.engine.outputs, res):
                b = np.ascontiguousarray(y, np.float32).view(np.uint8).reshape(-1)
                cuda_state.memory[outs[n]][: b.size] = b

        def set_binding_shape(self, index, shape):
            return self.set_input_shape(self.engine.names[index], shape)

        def execute_async_v2(self, bindings, stream_handle):
            cuda_state.require_context("execute_async_v2")
            addr = {n: int(b) for n, b in zip(self.engine.names, bindings)}
            if cuda_state.capturing is not None:
                cuda_state.capturing.append(("run", lambda a=addr: self._run(a)))
            else:
                self._run(addr)
            cuda_state.log.append("enqueue")
            return True

        def execute_async_v3(self, stream_handle):
            cuda_state.require_context("execute_async_v3")
            addr = dict(self.addr)
            missing = [n for n in self.engine.names if n not in addr]
            if missing:
                raise RuntimeError(f"fake TensorRT: no address for {missing}")
            if cuda_state.capturing is not None:
                cuda_state.capturing.append(("run", lambda a=addr: self._run(a)))
            else:
                self._run(addr)
            cuda_state.log.append("enqueue")
            return True

    class Runtime:
        def __init__(self, logger):
            pass

        def deserialize_cuda_engine(self, data):
            try:
                meta = json.loads(bytes(data))
            except ValueError:
                return None
            if meta.get("trt") != version:
                return None
            meta["onnx_bytes"] = base64.b64decode(meta["onnx"])
            return Engine(meta)

    class IExecutionContext:
        def execute_async_v3(self, stream_handle):  # presence only (features())
            raise NotImplementedError

    trt.Builder, trt.OnnxParser, trt.Runtime, trt.IExecutionContext = Builder, Parser, Runtime, IExecutionContext
    return trt


def install(monkeypatch, version="10.3.0", gpus=(("NVIDIA Orin", (8, 7)),), dla_cores=0, fail_build=False,
            with_cudart=True, v3=True):
    """Put fake ``tensorrt``, ``pycuda``, ``pycuda.driver`` (and ``cuda.bindings.runtime``) in sys.modules.

    Returns:
        SimpleNamespace(trt=..., cuda=..., cudart=..., state=FakeCudaState)
    """
    import sys

    state = FakeCudaState(gpus)
    cuda = make_fake_cuda(state)
    trt = make_fake_trt(version, state, dla_cores=dla_cores, fail_build=fail_build)
    if not v3:  # a TensorRT without execute_async_v3 (8.0-8.4 API): bindings + execute_async_v2
        trt.IExecutionContext = type("IExecutionContext", (), {"execute_async_v2": lambda *a: True})
    pycuda = types.ModuleType("pycuda")
    pycuda.driver = cuda
    mods = {"tensorrt": trt, "pycuda": pycuda, "pycuda.driver": cuda}
    rt = None
    if with_cudart:
        rt = make_fake_cudart(state, cuda)
        cuda_pkg = types.ModuleType("cuda")
        bindings = types.ModuleType("cuda.bindings")
        cuda_pkg.bindings, bindings.runtime = bindings, rt
        mods.update({"cuda": cuda_pkg, "cuda.bindings": bindings, "cuda.bindings.runtime": rt})
    for name, mod in mods.items():
        mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
        monkeypatch.setitem(sys.modules, name, mod)
    return types.SimpleNamespace(trt=trt, cuda=cuda, cudart=rt, state=state)
