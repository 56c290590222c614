"""TensorRT + pycuda backend of :class:`~cosyedge.runtime.base.StreamSession` (GPU; written against the
documented APIs, imported lazily: this module imports on a machine without TensorRT, pycuda or a GPU).

One :class:`TrtStreamSession` owns:

* **one CUDA context**, created in :meth:`~TrtStreamSession.activate` and pushed/popped around every call
  on whichever thread makes it (an audio callback or a thread pool may call ``push``; calls are
  serialised by a lock), so it never depends on ``pycuda.autoinit`` or on the creating thread;
* **pinned (page-locked) host buffers** for the chunk in and out (``pycuda.driver.pagelocked_empty``) and
  **device buffers** for every I/O tensor (``mem_alloc``);
* **one CUDA stream**: async H2D copy -> ``execute_async_v3`` (tensor addresses set with
  ``set_tensor_address``; ``execute_async_v2`` with a bindings list on TensorRT < 8.5) -> async D2H copy,
  one synchronisation per chunk;
* **states on the device in ping-pong buffers**: set A feeds ``state_in.*`` while ``state_out.*`` is
  written into set B, then the addresses swap; states never travel to the host (only :meth:`state` copies
  them out for inspection), and one buffer is never both input and output of one enqueue;
* optional **CUDA graphs**: one graph per ping-pong parity (the tensor addresses differ) captures
  H2D + enqueue + D2H after a warm-up enqueue, then each chunk is one ``cudaGraphLaunch``. pycuda has no
  released graph API (graph support is an open pull request, inducer/pycuda#343/#424), so capture uses
  cuda-python's runtime bindings (``cuda.bindings.runtime`` or the older ``cuda.cudart``) on the pycuda
  stream handle; the runtime API uses the driver context that is current on the thread;
* **CUDA events** around each chunk's work: :attr:`TrtStreamSession.gpu_latencies_ms` (stream time of
  copies + inference) next to the wall-clock :attr:`latencies_ms` of the base class.

Sources:
  * TensorRT Python API, ``IExecutionContext`` (``set_input_shape``, ``set_tensor_address``,
    ``execute_async_v3``; 8.6: .../archives/tensorrt-861/api/python_api/infer/Core/ExecutionContext.html),
    ``ICudaEngine`` (``num_io_tensors``, ``get_tensor_name``, ``get_tensor_mode``, ``get_tensor_dtype``),
    ``Runtime.deserialize_cuda_engine``, ``tensorrt.nptype``.
  * TensorRT 8.x -> 10.x Python migration guide ("Migrating I/O Buffer Allocation to Named Tensors",
    ``execute_async_v2(bindings, stream_handle)`` before, ``execute_async_v3(stream_handle)`` after):
    https://docs.nvidia.com/deeplearning/tensorrt/latest/api/migration/tensorrt-8x-to-10x-python-api-patterns.html
  * PyCUDA driver docs (https://documen.tician.de/pycuda/driver.html): ``init``, ``Device(n)``,
    ``Device.make_context``, ``Context.push``/``pop``/``detach``, ``pagelocked_empty``, ``mem_alloc``,
    ``memcpy_htod_async``/``memcpy_dtoh_async`` (host side must be page-locked), ``Stream``, ``Event.record``,
    ``Event.time_since``. ``Stream.handle`` is what NVIDIA's TensorRT samples pass as ``stream_handle``.
  * CUDA graphs with TensorRT: TensorRT Developer Guide, "CUDA Graphs" (enqueue once before capture; the
    graph fixes shapes and tensor addresses); cuda-python ``cudaStreamBeginCapture``,
    ``cudaStreamEndCapture``, ``cudaGraphInstantiate``, ``cudaGraphLaunch``, ``cudaGraphExecDestroy``.
    Not verified on hardware here (no GPU on the development machines): see ``scripts/gpu_check.py``.

Loading: :class:`TrtEngine`, :func:`validate_trt_folder` and :func:`load_trt_engine` (folder checks against
the manifest and this machine's TensorRT/GPU; a foreign plan is rebuilt only through an injected ``rebuild``
callable, never by importing the build stage) sit beside the session they create.

Size: over 500 lines on purpose: one backend's session and loader side by side, as Polygraphy keeps
``backend/trt/{loader,runner}.py`` together; the session alone is about 400 lines of documented CUDA handling.
What the session needs of the machine (:func:`require_stack`, :func:`trt_logger`, :func:`device_info`, cuda-python's
runtime bindings) is in :mod:`cosyedge.runtime.trt_stack` (re-exported here).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from cosyedge.artifacts import MANIFEST_NAME, EngineManifest, StreamContract, load_manifest, sha256_file
from cosyedge.errors import ArtifactError, CosyEdgeError, UsageError
from cosyedge.log import LOG
from cosyedge.runtime.base import DEFAULT_MAX_LATENCY_RECORDS, StreamSession
from cosyedge.runtime.trt_compat import check_engine_compat
from cosyedge.runtime.trt_stack import (JETSON_HINT, TRT_PIP, _LOGGERS, _cuda_check, _cudart,  # noqa: F401
                                        device_info, missing_stack_message, require_stack, trt_logger)

BACKEND = "tensorrt"
MODEL_FILE = "model.onnx"
PLAN_FILE = "engine.plan"


def require_one_waveform(contract: StreamContract, where: str) -> None:
    """Refuse a model the TensorRT path cannot stream: anything but one waveform input to one waveform output.

    :class:`TrtStreamSession` binds one audio input and one audio output buffer (plus the states), and the
    TensorRT build's smoke test and manifest use that chunk; a model with several streaming inputs (``audio`` and
    ``ref``) or feature inputs/outputs has no TensorRT session yet.

    Args:
        contract (StreamContract): The model's contract.
        where (str): The model as the message names it (its path).
    Raises:
        UsageError: ``contract.is_audio`` is False (exit 2); the message names the inputs and says to build for
            ONNX Runtime or Triton (both stream every input).
    """
    if not contract.is_audio:
        ins = ", ".join(f"{i.name}{list(i.shape)}" for i in contract.stream_inputs)
        outs = ", ".join(f"{o.name}{list(o.shape)}" for o in contract.stream_outputs)
        raise UsageError(f"the TensorRT backend cannot stream {where}: it maps {ins} to {outs}, and cosyedge's TensorRT "
                         f"session binds one waveform input and one waveform output (N, 1, T); build it with "
                         f"--backend onnxruntime or --backend triton, which stream every input")


class TrtStreamSession(StreamSession):
    """Stream a TensorRT plan (built by :func:`cosyedge.builders.trt.build_trt`) one chunk per :meth:`push`.

    ``__init__`` only stores the configuration; TensorRT, pycuda, the CUDA context and all buffers are
    created in :meth:`activate` (``with session:``) and released in :meth:`deactivate`.

    Args:
        plan_path (str | Path): ``engine.plan``.
        contract (StreamContract): The model's stream contract (from the engine folder's ONNX/manifest).
        chunk_samples (int | None): Samples per chunk; must equal ``built_chunk_samples`` when given
            (the optimization profile fixes the chunk length). Defaults to it, else one hop.
        batch (int): Streams per push (axis ``N``), 1..``max_batch``.
        max_batch (int | None): Largest batch of the engine's optimization profile.
        built_chunk_samples (int | None): Chunk length the plan was built for (samples).
        cuda_graph (bool): Capture each step (H2D, enqueue, D2H) in CUDA graphs (needs cuda-python).
        device (int): CUDA device index.
        max_latency_records (int): Size of the latency ring buffers (chunks).
    Raises:
        UsageError: chunk length other than the built one, batch outside 1..max_batch.
    """

    def __init__(self, plan_path: str | Path, contract: StreamContract, chunk_samples: int | None = None,
                 batch: int = 1, max_batch: int | None = None, built_chunk_samples: int | None = None,
                 cuda_graph: bool = False, device: int = 0,
                 max_latency_records: int = DEFAULT_MAX_LATENCY_RECORDS):
        require_one_waveform(contract, str(plan_path))
        if chunk_samples is None and built_chunk_samples is not None:
            chunk_samples = built_chunk_samples
        super().__init__(contract, chunk_samples=chunk_samples, batch=batch,
                         max_latency_records=max_latency_records)
        if built_chunk_samples is not None and self.chunk_samples != int(built_chunk_samples):
            sr = contract.sample_rate_hz
            raise UsageError(
                f"this TensorRT engine streams chunks of {built_chunk_samples} samples "
                f"({1000.0 * built_chunk_samples / sr:g} ms), not {self.chunk_samples}: use --chunk-ms "
                f"{1000.0 * built_chunk_samples / sr:g} or rebuild with --chunk-ms {1000.0 * self.chunk_samples / sr:g}"
            )
        if max_batch is not None and self.batch > int(max_batch):
            raise UsageError(f"batch {self.batch} is above the engine's optimization profile maximum {max_batch} "
                             f"(rebuild with --max-batch {self.batch})")
        self.plan_path = Path(plan_path)
        self.cuda_graph = bool(cuda_graph)
        self.device = int(device)
        self._lock = threading.Lock()
        self._ctx = None
        self._gpu = np.zeros(int(max_latency_records), dtype=np.float64)
        self._gpu_count = 0

    # ------------------------------------------------------------------ context handling
    @contextlib.contextmanager
    def _current(self):
        """Make this session's CUDA context current on the calling thread for the block (push/pop)."""
        with self._lock:
            self._ctx.push()
            try:
                yield
            finally:
                self._cuda.Context.pop()

    # ------------------------------------------------------------------ activation
    def activate_impl(self) -> None:
        """Create the CUDA context, deserialize the plan, check its tensors against the contract, allocate
        pinned host and device buffers, zero both state sets, and capture the CUDA graphs if asked.

        Raises:
            DependencyError: tensorrt, pycuda or a GPU is missing (one line, with the install command).
            ArtifactError: the plan cannot be deserialized (other TensorRT version or GPU: rebuild), or its
                tensors disagree with the contract.
        """
        trt, cuda = require_stack("run TensorRT engines", self.device)
        self._trt, self._cuda = trt, cuda
        self._ctx = cuda.Device(self.device).make_context()  # created current on this thread
        try:
            self._setup()
        except BaseException:
            self._release()
            cuda.Context.pop()
            self._ctx.detach()
            self._ctx = None
            raise
        cuda.Context.pop()

    def _setup(self) -> None:
        from cosyedge.runtime.trt_compat import features

        trt, cuda, c = self._trt, self._cuda, self.contract
        self._feat = features(trt.__version__, trt)
        self._logger = trt_logger(trt)
        self._runtime = trt.Runtime(self._logger)
        try:
            data = self.plan_path.read_bytes()
        except OSError as err:
            raise ArtifactError(f"cannot read TensorRT plan {self.plan_path}: {err.strerror or err}") from None
        self._engine = self._runtime.deserialize_cuda_engine(data)
        if self._engine is None:
            raise ArtifactError(f"TensorRT {trt.__version__} cannot deserialize {self.plan_path} (built with another "
                                f"TensorRT version or GPU, or corrupt); rebuild it with 'cosyedge build --backend "
                                f"tensorrt --onnx {self.plan_path.parent / 'model.onnx'}'")
        self._context = self._engine.create_execution_context()
        eng = self._engine
        v3 = self._feat.execute_api == "v3"
        if v3:
            names = [eng.get_tensor_name(i) for i in range(eng.num_io_tensors)]
            is_input = {n: eng.get_tensor_mode(n) == trt.TensorIOMode.INPUT for n in names}
            dtype = {n: np.dtype(trt.nptype(eng.get_tensor_dtype(n))) for n in names}
        else:  # TensorRT 8.0-8.4: bindings API
            names = [eng.get_binding_name(i) for i in range(eng.num_bindings)]
            is_input = {n: eng.binding_is_input(n) for n in names}
            dtype = {n: np.dtype(trt.nptype(eng.get_binding_dtype(n))) for n in names}
        want_in = [c.input] + [s.input for s in c.states]
        want_out = [c.output] + [s.output for s in c.states]
        for n in want_in + want_out:
            if n not in is_input:
                raise ArtifactError(f"{self.plan_path}: tensor '{n}' of the stream contract is not an engine tensor "
                                    f"(engine tensors: {sorted(is_input)}); rebuild the engine")
        for n in want_in:
            if not is_input[n]:
                raise ArtifactError(f"{self.plan_path}: '{n}' is an output of the engine, the contract says input")

        audio = (self.batch, 1, self.chunk_samples)
        shapes = {c.input: audio, c.output: audio}
        for s in c.states:
            shapes[s.input] = shapes[s.output] = s.concrete_shape(self.batch)
        for n in want_in:
            ok = (self._context.set_input_shape(n, shapes[n]) if v3
                  else self._context.set_binding_shape(eng.get_binding_index(n), shapes[n]))
            if ok is False:
                raise ArtifactError(f"{self.plan_path}: shape {shapes[n]} of '{n}' is outside the engine's "
                                    f"optimization profile (batch {self.batch}, chunk {self.chunk_samples}); rebuild")

        def nbytes(n: str) -> int:
            return int(np.prod(shapes[n])) * dtype[n].itemsize

        self._x_host = cuda.pagelocked_empty(audio, dtype[c.input])
        self._y_host = cuda.pagelocked_empty(audio, dtype[c.output])
        # an FP16 engine output is cast into this float32 host buffer (reused too; push copies it by default)
        self._y32 = self._y_host if dtype[c.output] == np.float32 else np.zeros(audio, np.float32)
        self._x_dev = cuda.mem_alloc(nbytes(c.input))
        self._y_dev = cuda.mem_alloc(nbytes(c.output))
        # ping-pong: _state_dev[k][i] is set k (0 = A, 1 = B) of state i; same size for in and out
        for s in c.states:
            if nbytes(s.input) != nbytes(s.output):
                raise ArtifactError(f"{self.plan_path}: state '{s.input}' and '{s.output}' differ in dtype or shape")
        self._state_dev = ([cuda.mem_alloc(nbytes(s.input)) for s in c.states],
                           [cuda.mem_alloc(nbytes(s.input)) for s in c.states])
        self._state_init = [np.full(shapes[s.input], s.init, dtype=dtype[s.input]) for s in c.states]
        self._state_dtype = [dtype[s.input] for s in c.states]
        self._stream = cuda.Stream()
        self._ev_start, self._ev_end = cuda.Event(), cuda.Event()
        if v3:
            self._context.set_tensor_address(c.input, int(self._x_dev))
            self._context.set_tensor_address(c.output, int(self._y_dev))
            self._bindings = None
        else:
            index = {n: eng.get_binding_index(n) for n in names}
            self._bindings = []
            for k in (0, 1):
                b = [0] * len(names)
                b[index[c.input]], b[index[c.output]] = int(self._x_dev), int(self._y_dev)
                for i, s in enumerate(c.states):
                    b[index[s.input]] = int(self._state_dev[k][i])
                    b[index[s.output]] = int(self._state_dev[1 - k][i])
                self._bindings.append(b)
        self._graphs = None
        self._zero_states()
        if self.cuda_graph:
            self._graphs = [self._capture(0), self._capture(1)]
            self._zero_states()  # warm-up enqueues advanced the state
        LOG.debug("TensorRT %s session %s: chunk %d, batch %d, %d state pair(s), api %s, graphs %s", trt.__version__,
                  self.plan_path, self.chunk_samples, self.batch, len(c.states), self._feat.execute_api,
                  self.cuda_graph)

    def _zero_states(self) -> None:
        """Copy the initial state values into both ping-pong sets (context must be current)."""
        self._stream.synchronize()
        for k in (0, 1):
            for dev, init in zip(self._state_dev[k], self._state_init):
                self._cuda.memcpy_htod(dev, init)
        self._parity = 0

    def _enqueue_step(self, k: int) -> None:
        """Queue one chunk on the stream: H2D, inference reading state set ``k`` and writing set ``1 - k``,
        D2H. Context must be current."""
        cuda, ctx, c = self._cuda, self._context, self.contract
        cuda.memcpy_htod_async(self._x_dev, self._x_host, self._stream)
        if self._bindings is None:
            for i, s in enumerate(c.states):
                ctx.set_tensor_address(s.input, int(self._state_dev[k][i]))
                ctx.set_tensor_address(s.output, int(self._state_dev[1 - k][i]))
            ok = ctx.execute_async_v3(self._stream.handle)
        else:
            ok = ctx.execute_async_v2(self._bindings[k], self._stream.handle)
        if ok is False:
            raise ArtifactError(f"TensorRT enqueue failed for {self.plan_path} (see the TensorRT log above)")
        cuda.memcpy_dtoh_async(self._y_host, self._y_dev, self._stream)

    def _capture(self, k: int) -> Any:
        """Capture the step of parity ``k`` into an instantiated CUDA graph (context must be current)."""
        cudart = _cudart()
        self._enqueue_step(k)  # warm-up outside capture (TensorRT: enqueue once before capturing)
        self._stream.synchronize()
        h = self._stream.handle
        mode = cudart.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
        _cuda_check(cudart.cudaStreamBeginCapture(h, mode))
        try:
            self._enqueue_step(k)
        finally:
            graph = _cuda_check(cudart.cudaStreamEndCapture(h))
        try:
            res = cudart.cudaGraphInstantiate(graph, 0)  # CUDA 12 signature (graph, flags)
        except TypeError:
            res = cudart.cudaGraphInstantiate(graph, b"", 0)  # CUDA 11 signature (graph, log, size)
        exe = _cuda_check(res[:2])
        _cuda_check(cudart.cudaGraphDestroy(graph))
        return exe

    def _release(self) -> None:
        """Free graphs, buffers, context objects (the CUDA context must be current)."""
        graphs = getattr(self, "_graphs", None)
        if graphs:
            cudart = _cudart()
            for g in graphs:
                cudart.cudaGraphExecDestroy(g)
        self._graphs = None
        stream = getattr(self, "_stream", None)
        if stream is not None:
            stream.synchronize()
        for name in ("_x_dev", "_y_dev"):
            buf = getattr(self, name, None)
            if buf is not None:
                buf.free()
        for bufs in getattr(self, "_state_dev", None) or ():
            for b in bufs:
                b.free()
        # drop TensorRT objects in dependency order: context, engine, runtime
        for name in ("_context", "_engine", "_runtime", "_stream", "_ev_start", "_ev_end", "_x_host", "_y_host",
                     "_y32", "_x_dev", "_y_dev", "_state_dev", "_bindings"):
            setattr(self, name, None)

    def deactivate_impl(self) -> None:
        """Synchronise, free every buffer and graph, and release the CUDA context."""
        if self._ctx is None:
            return
        try:
            with self._current():
                self._release()
        finally:
            self._ctx.detach()
            self._ctx = None

    def reset_impl(self) -> None:
        """Both ping-pong sets back to the initial state values (zeros); restart at set A."""
        with self._current():
            self._zero_states()

    # ------------------------------------------------------------------ streaming
    def push_impl(self, chunk: np.ndarray) -> dict[str, np.ndarray]:
        """Copy ``chunk`` into the pinned input buffer, run H2D -> enqueue -> D2H (or the CUDA graph of the
        current parity) on the stream, wait for it, swap the state sets.

        Returns:
            dict[str, np.ndarray]: ``{contract.output: (batch, 1, chunk_samples) float32}``, the pinned output
            buffer itself when the engine output is float32, else a preallocated float32 host buffer it is cast
            into. Reused by the next chunk: :meth:`push` copies it unless called with ``copy=False``.
        Raises:
            ArtifactError: the enqueue or a graph launch failed.
        """
        with self._current():
            np.copyto(self._x_host, chunk, casting="same_kind")
            k = self._parity
            self._ev_start.record(self._stream)
            if self._graphs is not None:
                _cuda_check(_cudart().cudaGraphLaunch(self._graphs[k], self._stream.handle))
            else:
                self._enqueue_step(k)
            self._ev_end.record(self._stream)
            self._ev_end.synchronize()
            ms = self._ev_end.time_since(self._ev_start)
            self._parity = 1 - k
        self._gpu[self._gpu_count % self._gpu.size] = ms
        self._gpu_count += 1
        if self._y32 is not self._y_host:
            np.copyto(self._y32, self._y_host, casting="unsafe")
        return {self.contract.output: self._y32}

    def state_impl(self) -> dict[str, np.ndarray]:
        """Copies of the current states (the set the next push reads), copied device -> host."""
        out = {}
        with self._current():
            self._stream.synchronize()
            for i, s in enumerate(self.contract.states):
                host = np.empty(self._state_init[i].shape, dtype=self._state_dtype[i])
                self._cuda.memcpy_dtoh(host, self._state_dev[self._parity][i])
                out[s.input] = host
        return out

    @property
    def gpu_latencies_ms(self) -> np.ndarray:
        """np.ndarray: float64 (K,), GPU stream time per chunk in ms (CUDA events around H2D, inference and
        D2H), oldest first, bounded like :attr:`latencies_ms`."""
        n, size = self._gpu_count, self._gpu.size
        if n <= size:
            return self._gpu[:n].copy()
        i = n % size
        return np.concatenate([self._gpu[i:], self._gpu[:i]])

    @property
    def state_addresses(self) -> list[tuple[int, int]]:
        """list[tuple[int, int]]: per state pair, the device addresses of its (set A, set B) buffers; for
        tests and debugging (distinct, never aliased). Empty when inactive."""
        if not self.is_active:
            return []
        return [(int(a), int(b)) for a, b in zip(*self._state_dev)]


def rebuild_command(manifest: dict, folder: Path | None = None) -> str:
    """Return the ``cosyedge build`` command line (str) that rebuilds an engine from its manifest."""
    m = EngineManifest.from_dict(manifest)
    flags = m.flags
    src = (Path(folder) / MODEL_FILE) if folder is not None else Path(m.parent_path or "MODEL.onnx")
    cmd = ["cosyedge build --backend tensorrt", f"--onnx {src}", f"--name {m.name or 'model'}"]
    if flags.get("precision") in ("fp16", "int8"):
        cmd.append(f"--{flags['precision']}")
    if flags.get("sparse"):
        cmd.append("--sparse")
    if flags.get("dla_core") is not None:
        cmd.append(f"--dla-core {flags['dla_core']}")
    if flags.get("gpu_fallback"):
        cmd.append("--gpu-fallback")
    return " ".join(cmd)


# --------------------------------------------------------------------------------------------- loading
@dataclasses.dataclass
class TrtEngine:
    """A validated TensorRT engine folder: a factory of :class:`~cosyedge.runtime.trt.TrtStreamSession`.

    Attributes:
        folder (Path): Engine folder.
        plan_path (Path): ``engine.plan``.
        model_path (Path): The ONNX it was built from (``model.onnx``).
        contract (StreamContract): Stream contract.
        manifest (dict): The manifest.
    """

    folder: Path
    plan_path: Path
    model_path: Path
    contract: StreamContract
    manifest: dict

    def __call__(self, chunk_samples: int | None = None, batch: int = 1, threads: int = 1,
                 providers: list[str] | None = None, cuda_graph: bool = False, device: int = 0,
                 max_latency_records: int | None = None):
        """Return a new inactive :class:`~cosyedge.runtime.trt.TrtStreamSession`.

        Args:
            chunk_samples (int | None): Must be the built chunk length (default).
            batch (int): Streams per push, up to the manifest's ``max_batch``.
            threads (int): Ignored (ONNX Runtime option; same signature as :class:`OrtEngine`).
            providers (list[str] | None): Ignored.
            cuda_graph (bool): Capture steps in CUDA graphs.
            device (int): CUDA device.
            max_latency_records (int | None): Per-chunk latencies kept (default
                :data:`~cosyedge.runtime.base.DEFAULT_MAX_LATENCY_RECORDS`).
        """
        return TrtStreamSession(self.plan_path, self.contract, chunk_samples=chunk_samples, batch=batch,
                                max_batch=EngineManifest.from_dict(self.manifest).max_batch,
                                built_chunk_samples=EngineManifest.from_dict(self.manifest).chunk_samples,
                                cuda_graph=cuda_graph,
                                device=device, max_latency_records=max_latency_records or DEFAULT_MAX_LATENCY_RECORDS)

    session = __call__


def validate_trt_folder(folder: str | Path, manifest: dict | None = None) -> tuple[dict, Path, Path]:
    """Check a TensorRT engine folder's files against its manifest (no TensorRT needed).

    Args:
        folder (str | Path): Engine folder.
        manifest (dict | None): Already loaded manifest.
    Returns:
        tuple: (manifest, plan path, model path).
    Raises:
        ArtifactError: manifest missing/invalid or not for tensorrt; plan or model missing; a SHA-256
            differs from the manifest (stale/corrupt: the message gives the rebuild command).
    """
    folder = Path(folder)
    manifest = manifest if manifest is not None else load_manifest(folder)
    m = EngineManifest.from_dict(manifest)
    if m.backend != BACKEND:
        raise ArtifactError(f"engine {folder} is for backend '{m.backend}', not '{BACKEND}'")
    model_path = folder / (m.model_file or MODEL_FILE)
    plan_path = folder / (m.plan_file or PLAN_FILE)
    if not model_path.is_file():
        raise ArtifactError(f"engine {folder} has no {model_path.name}; rebuild it from the precision ONNX: "
                            f"{rebuild_command(manifest)}")
    cmd = rebuild_command(manifest, folder)
    if not plan_path.is_file():
        raise ArtifactError(f"engine {folder} has no {plan_path.name}; rebuild: {cmd}")
    for want, path in ((m.model_sha256, model_path), (m.plan_sha256, plan_path)):
        got = sha256_file(path)
        if got != want:
            raise ArtifactError(f"engine {folder} is stale or corrupt: {path.name} sha256 {got[:12]}... does not "
                                f"match the manifest ({str(want)[:12]}...); rebuild: {cmd}")
    return manifest, plan_path, model_path


def load_trt_engine(folder: str | Path, manifest: dict | None = None,
                    rebuild: Callable[..., Path] | None = None, device: int = 0) -> TrtEngine:
    """Load a TensorRT engine folder, checking it fits this machine before any deserialization.

    The manifest's TensorRT version and GPU are compared with the installed ones
    (:func:`~cosyedge.runtime.trt_compat.check_engine_compat`). On a mismatch the plan is rebuilt in place
    from the stored ``model.onnx`` with the stored flags (logged), or, with ``rebuild=False`` or when the
    rebuild fails, a one-line :class:`ArtifactError` gives the rebuild command.

    Args:
        folder (str | Path): Engine folder made by :func:`cosyedge.builders.trt.build_trt`.
        manifest (dict | None): Already loaded manifest.
        rebuild (callable | None): ``rebuild(folder, manifest, device=device) -> Path`` that rebuilds a foreign
            plan in place; None (or False) refuses to run it.
        device (int): CUDA device the engine will run on.
    Returns:
        TrtEngine
    Raises:
        ArtifactError: invalid folder (see :func:`validate_trt_folder`), or a foreign plan not rebuilt.
        DependencyError: tensorrt, pycuda or a GPU is missing (one line with the install command).
    """
    folder = Path(folder)
    manifest, plan_path, model_path = validate_trt_folder(folder, manifest)
    trt, cuda = require_stack("run TensorRT engines", device)
    gpu = device_info(cuda, device)
    decision = check_engine_compat(manifest, trt.__version__, gpu["name"], gpu["compute_capability"])
    if decision.action == "warn":
        LOG.warning_once(f"engine {folder}: {decision.reason}")
    elif decision.action == "rebuild":
        cmd = rebuild_command(manifest, folder)
        if not rebuild:
            raise ArtifactError(f"engine {folder} cannot run here: {decision.reason}; rebuild: {cmd}")
        LOG.info("engine %s: %s; rebuilding from %s", folder, decision.reason, model_path)
        try:
            folder = rebuild(folder, manifest, device=device)
        except CosyEdgeError as err:
            raise ArtifactError(f"engine {folder} cannot run here ({decision.reason}) and the rebuild failed "
                                f"({err}); rebuild by hand: {cmd}") from None
        manifest, plan_path, model_path = validate_trt_folder(folder)
    contract = StreamContract.from_metadata(manifest["contract"], where=str(folder / MANIFEST_NAME))
    return TrtEngine(folder=folder, plan_path=plan_path, model_path=model_path, contract=contract, manifest=manifest)
