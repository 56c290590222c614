"""The model a Python-backend Triton repository runs: many live streams of one cosyedge engine, batched.

``cosyedge build --backend triton --triton-backend python`` writes ``<model>/1/model.py``, three lines that import
:class:`TritonPythonModel` from here, beside the precision ``model.onnx``. Triton's Python backend then calls:

* ``initialize(args)`` once per instance: reads ``config.pbtxt`` (its ``parameters``: chunk, slots, threads, the
  versions the repository was built with) and opens a :class:`~cosyedge.runtime.pool.StreamPool` over ``model.onnx``
  with one state slot per concurrent sequence (``--max-sequences``);
* ``execute(requests)`` with the requests the sequence batcher formed: **one batched tick** over them (a request of a
  sequence never shares a call with another of the same sequence; if it ever did, it would run in a second tick);
* ``finalize()`` at unload.

Every request carries the sequence batcher's control inputs (``config.pbtxt``: ``START``, ``END``, ``READY`` as
fp32 0/1, ``CORRID`` uint64), each of shape (1, 1). Each sequence's state is keyed by its correlation id:

* ``START`` = 1: a fresh slot at the initial (zero) state, whatever that id held before (a new sequence never sees
  another's state);
* ``END`` = 1: the slot is freed after the request ran;
* ``READY`` = 0 (the *direct* strategy hands the model idle batch slots, CORRID 0): answered with zeros, no state
  touched;
* a request of an id that holds no state (no ``START`` seen, or already freed): an error for that request only.

**Idle sequences.** Triton ends a sequence that sent nothing for ``max_sequence_idle_microseconds``
(``--idle-timeout-ms``) and frees its batcher slot, but the Python backend is **not told** (no request, no control).
The model therefore keeps each sequence's last-seen time and, at every ``execute``, frees the slots of sequences
unseen for longer than that timeout (its clock starts when a request *ran*, after Triton's started at its arrival, so
it never frees a sequence Triton still holds); and when a ``START`` finds every slot taken (Triton has admitted a new
sequence into the slot of one it timed out), the least recently seen sequence is freed for it. Either way a later
request of the freed id is refused (Triton refuses it first: a sequence it ended needs a new ``START``).

Counts are exported as Triton custom metrics on the metrics port (``cosyedge_sequences_active``,
``cosyedge_sequences_started``, ``cosyedge_sequences_ended``, ``cosyedge_sequences_idle_freed``,
``cosyedge_requests_refused``), labelled by model.

A model whose graph takes one stream per run (an adopted model with a fixed batch of 1) gets one single-slot pool per
sequence instead: same semantics, one run per sequence per call.

Source: Triton Python backend (``TritonPythonModel``, ``pb_utils.InferenceResponse``/``TritonError``, custom metrics
``pb_utils.MetricFamily``), https://github.com/triton-inference-server/python_backend; sequence batcher control inputs
and idle sequences: https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/model_configuration.html#sequence-batcher
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from cosyedge.errors import ArtifactError, CosyEdgeError, UsageError, first_line

CONTROLS = {"start": "START", "end": "END", "ready": "READY", "corrid": "CORRID"}
"""dict[str, str]: the control input names the repository's config.pbtxt declares."""
PARAM = "cosyedge."
"""str: prefix of the cosyedge entries of ``config.pbtxt`` ``parameters``."""


def _pb() -> Any:
    """Triton's ``triton_python_backend_utils`` (present only inside the Python backend's stub)."""
    import triton_python_backend_utils as pb_utils  # noqa: PLC0415 - only inside the stub

    return pb_utils


TENSOR_EXCHANGE_ENV = "COSYEDGE_TRITON_TENSORS"
"""str: environment variable that forces the tensor exchange (``numpy`` or ``dlpack``; for diagnosis only)."""


def tensor_exchange() -> str:
    """How tensors cross the Python backend's stub under the running numpy: ``"dlpack"`` or ``"numpy"`` (str).

    Triton 2.51's stub is built with pybind11 against numpy 1.x, and neither exchange works under both numpys
    (measured with the real tritonserver 2.51 of nvidia-pytriton 0.7.0):

    * numpy 2 (2.4.6): ``as_numpy()`` gives zeros and ``pb_utils.Tensor(name, array)`` sends 0 bytes (numpy 2's
      array descriptors are read wrongly); DLPack (``np.from_dlpack`` / ``pb_utils.Tensor.from_dlpack``) is right;
    * numpy 1 (1.26.4, what ``pip install cosyedge[serve]`` resolves: nvidia-pytriton pins numpy<2):
      ``pb_utils.Tensor(name, array)`` and ``as_numpy()`` are right; ``pb_utils.Tensor.from_dlpack`` of a bare
      array crashed the stub ("PyCapsule_GetPointer called with incorrect name": the stub marks a consumed capsule
      ``used_dlpack``, not ``used_dltensor``), and is right with the capsule handed over by :func:`_dlpack_handover`.

    So: ``"numpy"`` under numpy < 2, ``"dlpack"`` under numpy >= 2; :data:`TENSOR_EXCHANGE_ENV` overrides it.
    """
    import os

    forced = os.environ.get(TENSOR_EXCHANGE_ENV, "").strip().lower()
    if forced in ("numpy", "dlpack"):
        return forced
    return "numpy" if int(np.__version__.split(".")[0]) < 2 else "dlpack"


def tensor_array(tensor: Any, exchange: str | None = None) -> np.ndarray:
    """A request tensor as a numpy array, by the exchange that works under the running numpy (:func:`tensor_exchange`).

    Args:
        tensor (pb_utils.Tensor): An input tensor of a request (CPU memory).
        exchange (str | None): ``"numpy"`` (``as_numpy()``) or ``"dlpack"`` (``np.from_dlpack``); None: ask
            :func:`tensor_exchange`.
    Returns:
        np.ndarray: a view of the request's memory (valid while the request is; copy what you keep).
    """
    if (exchange or tensor_exchange()) == "numpy":
        return tensor.as_numpy()
    return np.from_dlpack(tensor)


def output_tensor(pb: Any, name: str, array: np.ndarray, exchange: str | None = None) -> Any:
    """``pb_utils.Tensor`` of a numpy array (a contiguous, writable copy the tensor owns), made by the exchange that
    works under the running numpy (:func:`tensor_exchange`): ``pb_utils.Tensor(name, array)``, or DLPack with the
    capsule handed over by :func:`_dlpack_handover`."""
    a = np.array(array, order="C", copy=True)
    if (exchange or tensor_exchange()) == "numpy":
        return pb.Tensor(name, a)
    return _dlpack_handover(pb, name, a)


_CAPSULE_API: list = []
"""[] until first used, then [(PyCapsule_GetName, PyCapsule_SetName, name buffer, ctypes)], or [None] where ctypes
cannot reach Python's C API; the buffer is the new name and must outlive every capsule renamed (see
:func:`_dlpack_handover`)."""


def _capsule_api() -> tuple | None:
    if not _CAPSULE_API:
        try:
            import ctypes  # noqa: PLC0415 - only on the DLPack path

            api = ctypes.pythonapi  # own prototypes: pythonapi's shared function objects may carry others' argtypes
            get_name = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object)(("PyCapsule_GetName", api))
            set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p)(("PyCapsule_SetName", api))
            buf = ctypes.create_string_buffer(b"used_dltensor")
            _CAPSULE_API.append((get_name, set_name, buf, ctypes))
        except (AttributeError, OSError):  # no C API through ctypes: capsules stay as the stub left them
            _CAPSULE_API.append(None)
    return _CAPSULE_API[0]


class _Handover:
    """What ``pb.Tensor.from_dlpack`` takes in place of the array: gives the array's DLPack capsule (unversioned: the
    stub reads the pointer as a plain DLManagedTensor) and keeps it, so :func:`_dlpack_handover` can rename it."""

    __slots__ = ("array", "capsule")

    def __init__(self, array: np.ndarray):
        self.array, self.capsule = array, None

    def __dlpack__(self, stream: Any = None, **_: Any) -> Any:
        self.capsule = self.array.__dlpack__()
        return self.capsule

    def __dlpack_device__(self) -> tuple:
        return self.array.__dlpack_device__()


def _dlpack_handover(pb: Any, name: str, array: np.ndarray) -> Any:
    """``pb.Tensor.from_dlpack`` of ``array``, its DLPack capsule renamed ``used_dltensor`` once the stub took it.

    Triton 2.51's stub marks a capsule it consumed ``used_dlpack``, not DLPack's ``used_dltensor``, so numpy 2's
    capsule destructor (``PyCapsule_GetPointer(capsule, "dltensor")``) fails with ValueError "PyCapsule_GetPointer
    called with incorrect name" and prints it as an unraisable traceback, on every output tensor: 0.12 ms of the
    stub's one Python thread (0.005 ms renamed; measured on the 2-core test machine) and five lines through the
    server's log pipe per tensor (20 paced streams: 2000 tensors/s, about 0.24 of a core, and 10,000 log lines/s).
    Renamed, numpy's destructor skips the capsule as the DLPack protocol intends. Ownership is
    unchanged: the tensor owns the DLManagedTensor either way (the stub calls its deleter, releasing the array).

    Args:
        pb (module): ``triton_python_backend_utils``.
        name (str): The output's name.
        array (np.ndarray): C-contiguous array the tensor will own.
    Returns:
        pb_utils.Tensor: the output tensor.
    """
    handover = _Handover(array)
    tensor = pb.Tensor.from_dlpack(name, handover)
    api = _capsule_api() if handover.capsule is not None else None
    if api is not None:
        get_name, set_name, buf, ctypes = api
        now = get_name(handover.capsule)
        if now and ctypes.string_at(now) == b"used_dlpack":  # consumed by this stub: only then renamed
            set_name(handover.capsule, ctypes.addressof(buf))
    return tensor


def config_parameters(model_config: dict) -> dict[str, str]:
    """The ``cosyedge.*`` parameters of a parsed model config (Triton's JSON), prefix removed: dict[str, str]."""
    out = {}
    for k, v in (model_config.get("parameters") or {}).items():
        if k.startswith(PARAM):
            out[k[len(PARAM):]] = v.get("string_value", "") if isinstance(v, dict) else str(v)
    return out


def check_versions(required: dict[str, str | None]) -> list[str]:
    """Compare the versions the repository was built with against this Python environment.

    Args:
        required (dict[str, str | None]): package -> version recorded at build time (``cosyedge``, ``onnxruntime``).
    Returns:
        list[str]: one line per package of another version (outputs may then differ in rounding).
    Raises:
        ArtifactError: a required package is not installed in the server's Python (the fix: start tritonserver with
            the virtual environment's bin/ first on PATH, as ``cosyedge serve`` does).
    """
    from importlib.metadata import PackageNotFoundError, version

    diffs = []
    for pkg, want in required.items():
        try:
            have = version(pkg)
        except PackageNotFoundError:
            have = None
        if have is None:
            try:  # an uninstalled source tree on PYTHONPATH (cosyedge from a clone) still counts
                mod = __import__(pkg)
                have = getattr(mod, "__version__", None)
            except ImportError:
                raise ArtifactError(f"the server's Python has no {pkg} (the repository needs {pkg} {want}): start "
                                    f"tritonserver with the virtual environment's bin/ first on PATH, as 'cosyedge "
                                    f"serve' does") from None
        if want and have != want:
            diffs.append(f"{pkg} {have} here, {want} at build time")
    return diffs


class _Log:
    """Log lines into Triton's own log (``pb_utils.Logger``) inside the stub, else through cosyedge's LOG."""

    def __init__(self):
        try:
            self._tl = _pb().Logger
        except Exception:  # noqa: BLE001 - not inside the stub
            self._tl = None

    def _emit(self, level: str, msg: str, *args) -> None:
        text = msg % args if args else msg
        if self._tl is not None:
            {"debug": self._tl.log_verbose, "info": self._tl.log_info, "warning": self._tl.log_warn,
             "error": self._tl.log_error}[level](text)
        else:
            from cosyedge.log import LOG

            getattr(LOG, level)(text)

    def debug(self, msg: str, *args) -> None:
        self._emit("debug", msg, *args)

    def info(self, msg: str, *args) -> None:
        self._emit("info", msg, *args)

    def warning(self, msg: str, *args) -> None:
        self._emit("warning", msg, *args)


class _PoolSlots:
    """All sequences of one instance in one :class:`~cosyedge.runtime.pool.StreamPool` (one run per tick)."""

    def __init__(self, model_path: Path, slots: int, chunk_samples: int, threads: int, batch_rewrite: bool = True):
        from cosyedge.runtime.pool import StreamPool

        self.pool = StreamPool(model_path, max_streams=slots, chunk_samples=chunk_samples, threads=threads,
                               max_pending=2, batch_rewrite=batch_rewrite).activate()
        self.capacity = slots

    def join(self) -> int:
        return self.pool.join()

    def leave(self, key: int) -> None:
        self.pool.leave(key)

    def submit(self, key: int, feed: Any) -> None:
        self.pool.submit(key, feed)

    def tick(self) -> dict:
        return self.pool.tick()

    def close(self) -> None:
        self.pool.deactivate()


class _SoloSlots:
    """One single-slot :class:`~cosyedge.runtime.pool.StreamPool` per sequence (a graph with a fixed batch of 1)."""

    def __init__(self, model_path: Path, slots: int, chunk_samples: int, threads: int):
        self.args = (model_path, chunk_samples, threads)
        self.capacity = slots
        self.pools: dict[int, Any] = {}
        self.queued: list[int] = []
        self._next = 0

    def join(self) -> int:
        from cosyedge.runtime.pool import StreamPool

        path, chunk, threads = self.args
        pool = StreamPool(path, max_streams=1, chunk_samples=chunk, threads=threads, max_pending=2).activate()
        key, self._next = self._next, self._next + 1
        self.pools[key] = (pool, pool.join())
        return key

    def leave(self, key: int) -> None:
        pool, _ = self.pools.pop(key)
        pool.deactivate()

    def submit(self, key: int, feed: Any) -> None:
        pool, sid = self.pools[key]
        pool.submit(sid, feed)
        self.queued.append(key)

    def tick(self) -> dict:
        keys, self.queued = self.queued, []
        out = {}
        for k in keys:
            pool, sid = self.pools[k]
            out[k] = pool.tick()[sid]
        return out

    def close(self) -> None:
        for pool, _ in self.pools.values():
            pool.deactivate()
        self.pools.clear()


class TritonPythonModel:
    """Triton Python-backend model over a cosyedge streaming engine (see the module docstring).

    Attributes (after :meth:`initialize`):
        contract (StreamContract): The engine's contract.
        chunk_samples (int): Samples per request (the config fixes the input dims to it).
        idle_s (float): Triton's ``max_sequence_idle_microseconds`` in seconds.
        exchange (str): How tensors cross the stub: ``"numpy"`` or ``"dlpack"`` (:func:`tensor_exchange`).
        sequences (dict[int, list]): correlation id -> [slot key, last-seen monotonic time, requests run].
        counts (dict[str, int]): ``started``, ``ended``, ``idle_freed``, ``refused``, ``not_ready``, ``executions``.
    """

    def initialize(self, args: dict) -> None:
        """Open the engine for this instance.

        Args:
            args (dict): Triton's: ``model_config`` (JSON str), ``model_repository`` (the model's folder),
                ``model_version``, ``model_name``, ``model_instance_name``.
        Raises:
            ArtifactError: missing model file or parameters, cosyedge/onnxruntime missing from the server's Python,
                ONNX Runtime cannot load the model (Triton then reports the model UNAVAILABLE with this message).
        """
        from cosyedge.artifacts import StreamContract

        self.log = _Log()
        LOG = self.log
        self.exchange = tensor_exchange()
        cfg = json.loads(args["model_config"])
        self.name = cfg.get("name", args.get("model_name", "model"))
        params = config_parameters(cfg)
        for key in ("model_file", "chunk_samples", "slots"):
            if key not in params:
                raise ArtifactError(f"model '{self.name}': config.pbtxt has no parameter '{PARAM}{key}' (rebuild the "
                                    f"repository with 'cosyedge build --backend triton --triton-backend python')")
        diffs = check_versions(json.loads(params.get("requires", "{}")))
        if diffs:
            LOG.warning("model '%s' was built with other versions (%s): outputs may differ in rounding from the "
                        "build's checks", self.name, "; ".join(diffs))
        version_dir = Path(args["model_repository"]) / str(args.get("model_version") or "1")
        model_path = version_dir / params["model_file"]
        if not model_path.is_file():
            raise ArtifactError(f"model '{self.name}': {model_path} not found")
        self.contract = StreamContract.from_onnx(model_path)
        self.chunk_samples = int(params["chunk_samples"])
        slots = int(params["slots"])
        threads = int(params.get("threads", "1"))
        sb = cfg.get("sequence_batching") or {}
        self.idle_s = int(sb.get("max_sequence_idle_microseconds") or 1_000_000) / 1e6
        self.controls = json.loads(params.get("controls", "null")) or dict(CONTROLS)
        try:
            self.slots = _PoolSlots(model_path, slots, self.chunk_samples, threads,
                                    batch_rewrite=params.get("batch_rewrite", "1") != "0")
        except CosyEdgeError as err:
            if "one stream per run" not in str(err):
                raise
            LOG.info("model '%s' takes one stream per run: one single-slot pool per sequence", self.name)
            self.slots = _SoloSlots(model_path, slots, self.chunk_samples, threads)
        c = self.contract
        hop = c.hop_samples
        self.audio = c.is_audio
        self.in_shapes = {i.name: tuple(i.concrete_shape(1, i.frames(self.chunk_samples, hop)))
                          for i in c.stream_inputs}
        self.in_dtypes = {i.name: np.dtype(i.dtype) for i in c.stream_inputs}
        self.out_shapes = {o.name: tuple(o.concrete_shape(1, o.frames(self.chunk_samples, hop)))
                           for o in c.stream_outputs}
        self.out_dtypes = {o.name: np.dtype(o.dtype) for o in c.stream_outputs}
        if self.audio:  # the pool takes and gives the one waveform as (chunk,)
            self.in_shapes = {c.input: self.in_shapes[c.input]}
            self.out_shapes = {c.output: self.out_shapes[c.output]}
        self.sequences: dict[int, list] = {}
        self.counts = {k: 0 for k in ("started", "ended", "idle_freed", "refused", "not_ready", "executions")}
        self._metrics = self._make_metrics()
        LOG.info("model '%s': %s, %d-sample requests, %d slots, idle timeout %g s, tensors by %s (numpy %s)",
                 self.name, c.name, self.chunk_samples, slots, self.idle_s, self.exchange, np.__version__)

    # ------------------------------------------------------------------ metrics
    def _make_metrics(self) -> dict | None:
        """Triton custom metrics (None outside the stub or when the backend has none)."""
        try:
            pb = _pb()
            fam = pb.MetricFamily
        except Exception:  # noqa: BLE001 - not in a stub (unit tests) or an old backend
            return None
        labels = {"model": self.name}
        try:
            gauge = fam(name="cosyedge_sequences_active", description="sequences holding a state slot",
                        kind=fam.GAUGE)
            out = {"active": gauge.Metric(labels=labels)}
            self._families = [gauge]  # a family must outlive its metrics
            for key, desc in (("started", "sequences started (START)"), ("ended", "sequences ended (END)"),
                              ("idle_freed", "sequences freed after Triton's idle timeout"),
                              ("refused", "requests answered with an error")):
                f = fam(name=f"cosyedge_sequences_{key}" if key != "refused" else "cosyedge_requests_refused",
                        description=desc, kind=fam.COUNTER)
                out[key] = f.Metric(labels=labels)
                self._families.append(f)
            return out
        except Exception as err:  # noqa: BLE001 - metrics are a convenience, never a failure
            self.log.debug("no custom metrics: %s", first_line(err))
            return None

    def _count(self, key: str, n: int = 1) -> None:
        self.counts[key] += n
        if self._metrics is not None and key in self._metrics:
            try:
                self._metrics[key].increment(n)
            except Exception as err:  # noqa: BLE001 - a metric never fails a request
                self._metrics = None
                self.log.warning("custom metrics off: %s", first_line(err))

    def _gauge(self) -> None:
        """Set the active-sequences gauge when the count changed (each set is a message from the stub to the server:
        about 0.3 ms, measured at one request per execute())."""
        if self._metrics is not None and len(self.sequences) != getattr(self, "_gauge_value", None):
            self._gauge_value = len(self.sequences)
            try:
                self._metrics["active"].set(len(self.sequences))
            except Exception as err:  # noqa: BLE001
                self._metrics = None
                self.log.warning("custom metrics off: %s", first_line(err))

    # ------------------------------------------------------------------ sequences
    def _free(self, corrid: int, why: str) -> None:
        rec = self.sequences.pop(corrid, None)
        if rec is not None:
            self.slots.leave(rec[0])
            if why == "idle":
                self._count("idle_freed")
                self.log.info("model '%s': sequence %d freed after %.3g s idle (%d requests run)", self.name, corrid,
                              time.monotonic() - rec[1], rec[2])

    def _sweep(self, now: float, live: set[int]) -> None:
        """Free the sequences unseen for longer than Triton's idle timeout (except ``live``: ids with a request in
        this call, which Triton still holds)."""
        for corrid in [k for k, r in self.sequences.items() if now - r[1] > self.idle_s and k not in live]:
            self._free(corrid, "idle")

    def _start(self, corrid: int, now: float, live: set[int]) -> None:
        if corrid in self.sequences:  # the id is reused by a new sequence: fresh state
            self._free(corrid, "restart")
        if len(self.sequences) >= self.slots.capacity:  # Triton admitted it into a slot it timed out
            idle = [k for k in self.sequences if k not in live]
            if not idle:
                raise UsageError(f"all {self.slots.capacity} state slots hold sequences with a request in this batch "
                                 f"(max_candidate_sequences must not exceed the model's cosyedge.slots)")
            self._free(min(idle, key=lambda k: self.sequences[k][1]), "idle")
        self.sequences[corrid] = [self.slots.join(), now, 0]
        self._count("started")

    # ------------------------------------------------------------------ requests
    def _scalar(self, pb: Any, request: Any, name: str, default: float | None = None) -> float | None:
        t = pb.get_input_tensor_by_name(request, name)
        if t is None:
            return default
        a = tensor_array(t, self.exchange)
        return a.reshape(-1)[0].item() if a.size else default

    def _feed(self, pb: Any, request: Any) -> Any:
        """The request's chunk as the pool takes it. Raises UsageError (shape, dtype, missing input)."""
        feeds = {}
        for name, shape in self.in_shapes.items():
            t = pb.get_input_tensor_by_name(request, name)
            if t is None:
                raise UsageError(f"request has no input '{name}'")
            a = tensor_array(t, self.exchange)
            if a.dtype != self.in_dtypes[name]:
                raise UsageError(f"input '{name}' is {a.dtype}, expected {self.in_dtypes[name]}")
            if a.shape != (1,) + shape[1:]:
                raise UsageError(f"input '{name}' has shape {list(a.shape)}, expected {[1, *shape[1:]]} (one chunk "
                                 f"of {self.chunk_samples} samples per request)")
            feeds[name] = a
        if self.audio:
            return next(iter(feeds.values())).reshape(-1)
        return {k: v.reshape(self.in_shapes[k][1:]) for k, v in feeds.items()}

    def _response(self, pb: Any, out: Any) -> Any:
        if self.audio:
            name, shape = next(iter(self.out_shapes.items()))
            tensors = [output_tensor(pb, name, np.asarray(out, dtype=self.out_dtypes[name]).reshape(shape),
                                     self.exchange)]
        else:
            tensors = [output_tensor(pb, k, np.asarray(out[k], dtype=self.out_dtypes[k]).reshape(s), self.exchange)
                       for k, s in self.out_shapes.items()]
        return pb.InferenceResponse(output_tensors=tensors)

    def _zeros(self, pb: Any) -> Any:
        return pb.InferenceResponse(output_tensors=[output_tensor(pb, k, np.zeros(s, self.out_dtypes[k]), self.exchange)
                                                    for k, s in self.out_shapes.items()])

    def _error(self, pb: Any, msg: str) -> Any:
        self._count("refused")
        return pb.InferenceResponse(output_tensors=[], error=pb.TritonError(msg))

    def execute(self, requests: list) -> list:
        """Run one batched tick over ``requests`` (one response each, in order; errors per request).

        Args:
            requests (list[pb_utils.InferenceRequest]): Each with the model's inputs (batch 1, one chunk) and the
                control inputs.
        Returns:
            list[pb_utils.InferenceResponse]: the outputs (batch 1, one chunk each), zeros for READY = 0, or an error
            for that request only (no state for the id, a wrong shape or dtype, NaN samples).
        """
        pb = _pb()
        now = time.monotonic()
        self._count("executions")
        ctl = self.controls
        live = set()
        controls: list = []  # per request: (ready, corrid, start, end), or the error reading them; read once
        for r in requests:
            try:
                ready = self._scalar(pb, r, ctl["ready"], 1.0)
            except Exception as err:  # noqa: BLE001 - a malformed request is answered below
                controls.append(err)
                continue
            try:
                cid = self._scalar(pb, r, ctl["corrid"], None)
                corrid = int(cid) if cid is not None else int(r.correlation_id())
                live.add(corrid)
                controls.append((ready, corrid, self._scalar(pb, r, ctl["start"], 0.0),
                                 bool(self._scalar(pb, r, ctl["end"], 0.0))))
            except Exception as err:  # noqa: BLE001 - answered below (READY = 0: zeros, as before)
                controls.append((0, None, 0.0, False) if ready == 0 else err)
        self._sweep(now, live)
        responses: list = [None] * len(requests)
        todo = list(range(len(requests)))
        while todo:
            batch: dict[int, int] = {}  # slot key -> request index
            later, ending = [], []
            for i in todo:
                r = requests[i]
                corrid, end = None, False
                try:
                    if isinstance(controls[i], Exception):
                        raise controls[i]
                    ready, corrid, start, end = controls[i]
                    if ready == 0:
                        responses[i] = self._zeros(pb)
                        self._count("not_ready")
                        continue
                    seq = self.sequences.get(corrid)
                    if seq is not None and seq[0] in batch:  # a second request of one sequence: next tick
                        later.append(i)
                        continue
                    if start:
                        self._start(corrid, now, live)
                    seq = self.sequences.get(corrid)
                    if seq is None:
                        raise UsageError(f"sequence {corrid} holds no state: its first request must set "
                                         f"sequence_start (a sequence idle for more than {self.idle_s:g} s is ended)")
                    seq[1] = now
                    feed = self._feed(pb, r)
                    try:
                        self.slots.submit(seq[0], feed)
                    except UsageError as err:  # the pool names its own stream id: name the client's sequence id
                        import re

                        raise UsageError(re.sub(r"\bstream \d+", f"sequence {corrid}", str(err))) from None
                    seq[1], seq[2] = now, seq[2] + 1
                    batch[seq[0]] = i
                    if end:
                        ending.append(corrid)
                except CosyEdgeError as err:
                    responses[i] = self._error(pb, str(err))
                    if end and corrid in self.sequences:  # Triton ends the sequence even when its last request fails
                        self._free(corrid, "end")
                        self._count("ended")
            if batch:
                try:
                    outs = self.slots.tick()
                    for key, i in batch.items():
                        responses[i] = self._response(pb, outs[key])
                except Exception as err:  # noqa: BLE001 - ONNX Runtime failure: every request of the tick fails
                    for i in batch.values():
                        responses[i] = self._error(pb, f"model '{self.name}' failed: {first_line(err)}")
            for corrid in ending:
                self._free(corrid, "end")
                self._count("ended")
            todo = later
        self._gauge()
        return responses

    def finalize(self) -> None:
        """Release the engine (Triton unloads the model)."""
        slots = getattr(self, "slots", None)
        if slots is not None:
            slots.close()
        self.sequences = {}
