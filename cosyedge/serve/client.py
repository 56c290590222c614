"""Stream audio to a cosyedge model served by Triton over gRPC: ``cosyedge run ... --server HOST:PORT``.

:func:`connect` asks the server for the model (``--server-model``, or the one cosyedge model it serves) and builds a
:class:`ServedModel` from its ``config.pbtxt``: the stream contract the repository recorded (``cosyedge.contract``
parameter: sample rate, hop, delay, inputs, outputs) and the chunk every request must carry. A :class:`ServedModel`
is a drop-in :class:`~cosyedge.runtime.engine.Engine`: calling it gives a :class:`TritonStreamSession`, which
:func:`cosyedge.enhance.enhance_file`, :func:`cosyedge.vad.stream.detect_file` and the microphone paths push chunks
to exactly as they push to a local session, so resampling, the delay compensation (``delay_samples`` zeros streamed
at the end and the first ``delay_samples`` output samples dropped) and the VAD segments are the local run's.

One session is one **sequence** on one gRPC bidirectional stream (``start_stream`` / ``async_stream_infer``): a random
63-bit sequence id, ``sequence_start`` on its first request, one hop (one chunk) per request, each request answered
before the next is sent (the server's batcher mixes the chunks of many such sessions into one run); closing the
session sends ``sequence_end`` (on one zero chunk, whose output is dropped) so the server frees the sequence's
slot at once, not after its idle timeout.

Failures are one line: no server at the address, no such model, a model whose contract, chunk or inputs differ from
what the client sends (:class:`~cosyedge.errors.UsageError`), a request the server refuses, the server gone
mid-stream or not answering within :data:`RESPONSE_TIMEOUT_S` (:class:`~cosyedge.errors.ServerError`); a file run
then removes its unfinished output, a microphone run keeps its recording so far (as on a device failure). Without
``--chunk-ms`` the client streams the served chunk (:attr:`ServedModel.chunk_ms`). tritonclient is imported only here (``pip install 'cosyedge[serve]'``).

Source: tritonclient ``grpc`` (``InferenceServerClient.start_stream``, ``async_stream_infer``); Triton's
simple_grpc_sequence_stream_infer_client.py example (one sequence id per stream, START/END flags).
"""

from __future__ import annotations

import json
import queue
import re
import secrets
import time
from typing import Any

import numpy as np

from cosyedge.artifacts import StreamContract
from cosyedge.errors import ArtifactError, DependencyError, ServerError, UsageError, first_line
from cosyedge.runtime.base import DEFAULT_MAX_LATENCY_RECORDS, StreamSession

RESPONSE_TIMEOUT_S = 30.0
"""float: seconds a request may wait for its response before the server is taken for gone."""
CONNECT_TIMEOUT_S = 10.0
"""float: seconds :func:`connect` waits for the server to answer."""
NP_TO_TRITON = {"float32": "FP32", "float16": "FP16", "float64": "FP64", "int64": "INT64", "int32": "INT32",
                "int16": "INT16", "int8": "INT8", "uint8": "UINT8", "bool": "BOOL"}
"""dict[str, str]: numpy dtype name -> the datatype string of a gRPC request."""


def grpc_module() -> Any:
    """``tritonclient.grpc``, or a one-line DependencyError with the install command."""
    try:
        import tritonclient.grpc as grpcclient
    except Exception as err:  # ImportError, or tritonclient's RuntimeError without grpc support
        raise DependencyError(f"--server needs tritonclient with gRPC ({first_line(err, False)}): "
                              f"pip install 'cosyedge[serve]' (or pip install 'tritonclient[grpc]')") from None
    return grpcclient


def parse_server(spec: str) -> str:
    """Check a ``--server`` value: ``HOST:PORT`` (``[v6]:PORT`` for IPv6); returns it as tritonclient takes it (str).

    Raises:
        UsageError: no port, a port outside 1..65535, an empty host, a scheme (``http://``) given.
    """
    s = str(spec).strip()
    if "://" in s:
        raise UsageError(f"--server {spec}: give HOST:PORT of the gRPC endpoint (e.g. 127.0.0.1:8001), no scheme")
    m = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[^\s:\[\]/]+):(\d+)", s)
    if not m or not 1 <= int(m.group(2)) <= 65535:
        raise UsageError(f"--server {spec}: give HOST:PORT of Triton's gRPC endpoint (e.g. 127.0.0.1:8001; "
                         f"'cosyedge serve' prints it)")
    return s


def _server_error(url: str, err: BaseException) -> ServerError:
    text = first_line(err, False) or type(err).__name__
    if re.search(r"UNAVAILABLE|failed to connect|Connection refused|Socket closed|Deadline Exceeded|"
                 r"DEADLINE_EXCEEDED|connection", text, re.I):
        return ServerError(f"no Triton server answers at {url} (gRPC): {text}; start one with 'cosyedge serve REPO' "
                           f"(it prints its gRPC address)")
    return ServerError(f"Triton server at {url}: {text}")


class ServedModel:
    """A cosyedge model on a Triton server, used like a local engine (a factory of :class:`TritonStreamSession`).

    Made by :func:`connect`.

    Attributes:
        url (str): ``HOST:PORT`` of the gRPC endpoint.
        name (str): The model's name on the server.
        contract (StreamContract): Its stream contract (from the repository's ``cosyedge.contract`` parameter).
        chunk_samples (int): Samples every request carries (the config fixes the input dims to one chunk);
            :attr:`chunk_ms` is the same in ms.
        config (dict): The model's config as the server reports it (Triton's JSON).
        metadata (dict[str, str]): ONNX metadata the repository recorded for clients (``recipe``: a VAD's task).
        model_path (str): ``grpc://HOST:PORT/<model>`` (what messages and reports name).
        folder, manifest: None (no local files).
    """

    def __init__(self, url: str, name: str, config: dict, contract: StreamContract, chunk_samples: int,
                 metadata: dict[str, str]):
        self.url, self.name, self.config = url, name, config
        self.contract, self.chunk_samples = contract, int(chunk_samples)
        self.metadata = metadata
        self.model_path = f"grpc://{url}/{name}"
        self.folder = None
        self.manifest = None

    def __str__(self) -> str:
        return f"model '{self.name}' at {self.url}"

    @property
    def chunk_ms(self) -> float:
        """float: the served chunk in ms at the contract's rate (what ``--chunk-ms`` defaults to with ``--server``)."""
        return 1000.0 * self.chunk_samples / self.contract.sample_rate_hz

    def __call__(self, chunk_samples: int | None = None, batch: int = 1, threads: int = 1,
                 providers: list[str] | None = None, max_latency_records: int | None = None) -> TritonStreamSession:
        """Return a new inactive :class:`TritonStreamSession` (one sequence) on this model.

        Args:
            chunk_samples (int | None): Must be the served chunk (None: it).
            batch (int): Must be 1 (one sequence per session).
            threads, providers: Ignored (the server runs the model).
            max_latency_records (int | None): Per-request latencies kept.
        Raises:
            UsageError: another chunk length (the server's config fixes it) or batch > 1.
        """
        if chunk_samples is not None and int(chunk_samples) != self.chunk_samples:
            sr = self.contract.sample_rate_hz
            raise UsageError(f"{self} takes chunks of {self.chunk_samples} samples ({self.chunk_ms:g} ms at {sr} Hz) "
                             f"per request, not {chunk_samples} ({1000 * chunk_samples / sr:g} ms): give --chunk-ms "
                             f"{self.chunk_ms:g} (the default with --server), or build the repository with "
                             f"--chunk-samples {chunk_samples}")
        if int(batch) != 1:
            raise UsageError(f"a session on {self} streams one sequence (batch 1), not {batch}")
        return TritonStreamSession(self, max_latency_records=max_latency_records or DEFAULT_MAX_LATENCY_RECORDS)

    session = __call__


def connect(server: str, model: str | None = None, timeout_s: float = CONNECT_TIMEOUT_S) -> ServedModel:
    """Find a cosyedge model on a Triton server and check it is one a client can stream to.

    Args:
        server (str): ``HOST:PORT`` of Triton's gRPC endpoint.
        model (str | None): The model's name; None: the one cosyedge model the server serves.
        timeout_s (float): How long to wait for the server to answer.
    Returns:
        ServedModel
    Raises:
        UsageError: a bad ``server``; the model is not a cosyedge model (no stream contract in its config), its
            config's inputs/outputs are not the contract's for one chunk, or several cosyedge models and no ``model``.
        ServerError: no server answers, the model is not on it or not ready.
        DependencyError: tritonclient[grpc] missing.
    """
    from cosyedge.serve.model import config_parameters

    url = parse_server(server)
    grpcclient = grpc_module()
    from tritonclient.utils import InferenceServerException

    try:
        client = grpcclient.InferenceServerClient(url=url)
    except Exception as err:  # noqa: BLE001 - a malformed address
        raise UsageError(f"--server {server}: {first_line(err, False)}") from None
    try:
        try:
            if not client.is_server_live(client_timeout=timeout_s):
                raise ServerError(f"the Triton server at {url} is not live")
            index = client.get_model_repository_index(as_json=True, client_timeout=timeout_s).get("models", [])
        except InferenceServerException as err:
            raise _server_error(url, err) from None
        names = sorted({m.get("name") for m in index if m.get("name")})
        ready = sorted({m.get("name") for m in index if m.get("state") == "READY"})
        if model is None:
            cosy = []
            for n in ready:
                cfg = client.get_model_config(n, as_json=True, client_timeout=timeout_s).get("config", {})
                if "contract" in config_parameters(cfg):
                    cosy.append(n)
            if len(cosy) != 1:
                raise (ServerError if not cosy else UsageError)(
                    f"the Triton server at {url} serves "
                    f"{'no cosyedge model' if not cosy else 'several cosyedge models'}"
                    f" ({', '.join(cosy or names) or 'no model at all'}): "
                    f"{'serve one with cosyedge serve REPO' if not cosy else 'pick one with --server-model NAME'}")
            model = cosy[0]
        if model not in names:
            raise ServerError(f"the Triton server at {url} has no model '{model}' (it serves "
                              f"{', '.join(names) or 'nothing'}); give --server-model NAME")
        if model not in ready:
            state = next((m.get("state", "?") + (": " + m["reason"] if m.get("reason") else "") for m in index
                          if m.get("name") == model), "?")
            raise ServerError(f"model '{model}' on the Triton server at {url} is not ready ({state})")
        try:
            cfg = client.get_model_config(model, as_json=True, client_timeout=timeout_s).get("config", {})
        except InferenceServerException as err:
            raise _server_error(url, err) from None
    finally:
        client.close()
    return served_model(url, model, cfg)


def served_model(url: str, model: str, cfg: dict) -> ServedModel:
    """Make the :class:`ServedModel` of a model config (Triton's JSON) after checking it (see :func:`connect`).

    Raises:
        UsageError: not a cosyedge model, or its config's tensors are not its contract's for one chunk.
    """
    from cosyedge.serve.model import config_parameters

    params = config_parameters(cfg)
    where = f"model '{model}' at {url}"
    if "contract" not in params or "chunk_samples" not in params:
        ins = [(t.get("name"), t.get("data_type"), t.get("dims")) for t in cfg.get("input", [])]
        raise UsageError(f"{where} is not a cosyedge model (its config has no cosyedge.contract parameter; inputs "
                         f"{ins}): cosyedge streams audio chunks only to a repository made with 'cosyedge build "
                         f"--backend triton --triton-backend python'")
    try:
        contract = StreamContract.from_metadata(json.loads(params["contract"]), where)
        chunk = int(params["chunk_samples"])
        contract.check_chunk(chunk)
    except (ValueError, ArtifactError, UsageError) as err:
        raise UsageError(f"{where}: its recorded stream contract is unusable ({first_line(err, False)})") from None
    hop = contract.hop_samples
    for kind, ios in (("input", contract.stream_inputs), ("output", contract.stream_outputs)):
        want = {i.name: (f"TYPE_{NP_TO_TRITON.get(i.dtype, '?')}",
                         [int(d) for d in i.concrete_shape(1, i.frames(chunk, hop))[1:]]) for i in ios}
        got = {t.get("name"): (t.get("data_type"), [int(d) for d in t.get("dims", [])]) for t in cfg.get(kind, [])}
        if got != want:
            raise UsageError(f"{where}: its {kind}s {got} differ from its stream contract's for one chunk of {chunk} "
                             f"samples {want} (a repository edited by hand?); rebuild it")
    meta = {}
    if "recipe" in params:
        meta["recipe"] = params["recipe"]
    return ServedModel(url, model, cfg, contract, chunk, meta)


class TritonStreamSession(StreamSession):
    """One sequence on a Triton server: :meth:`push` sends one chunk and returns the server's outputs for it.

    The :class:`~cosyedge.runtime.base.StreamSession` interface (``with``, ``push``, ``reset``, ``latencies_ms``), so
    the file and microphone paths run it as a local session. ``latencies_ms`` are round trips (request sent ->
    response received), in ms.

    Args:
        model (ServedModel): The served model.
        max_latency_records (int): Per-request latencies kept.
    Attributes:
        sequence_id (int | None): The current sequence's id (None before the first push).
        requests (int): Requests answered on this session.
    Raises:
        ServerError: (push) the server refuses a request, does not answer within :data:`RESPONSE_TIMEOUT_S`, or
            the stream breaks (server gone); the session is then unusable.
    """

    def __init__(self, model: ServedModel, max_latency_records: int = DEFAULT_MAX_LATENCY_RECORDS):
        super().__init__(model.contract, chunk_samples=model.chunk_samples, batch=1,
                         max_latency_records=max_latency_records)
        self.model = model
        self.model_path = model.model_path
        self.sequence_id: int | None = None
        self.requests = 0
        self.response_timeout_s = RESPONSE_TIMEOUT_S
        self._client = None
        self._q: queue.Queue = queue.Queue()
        self._started = False
        self._broken: str | None = None
        c = model.contract
        hop = c.hop_samples
        self._ins = [(i.name, i.concrete_shape(1, i.frames(self.chunk_samples, hop)), NP_TO_TRITON[i.dtype])
                     for i in c.stream_inputs]
        self._outs = [o.name for o in c.stream_outputs]

    # ------------------------------------------------------------------ life cycle
    def activate_impl(self) -> None:
        """Open the gRPC stream (the sequence starts with the first push).

        Raises:
            ServerError: the stream cannot be opened.
        """
        grpcclient = grpc_module()
        self._grpc = grpcclient
        self._client = grpcclient.InferenceServerClient(url=self.model.url)
        self._q = queue.Queue()
        self._broken = None
        try:
            self._client.start_stream(callback=self._on_response)
        except Exception as err:  # noqa: BLE001 - InferenceServerException
            self._client.close()
            self._client = None
            raise _server_error(self.model.url, err) from None
        self._new_sequence()

    def _new_sequence(self) -> None:
        self.sequence_id = secrets.randbits(63) or 1
        self._started = False

    def _on_response(self, result: Any, error: Any) -> None:
        self._q.put((result, error))

    def _end_sequence(self) -> None:
        """Send END (on a zero chunk; output dropped) for a started sequence, so its slot is freed at once."""
        if self._started and self._broken is None:
            try:
                self._send({n: np.zeros(s, np.dtype(self._np(t))) for n, s, t in self._ins}, end=True)
            except ServerError:
                pass  # the server is gone or refused: its idle timeout frees the slot
        self._started = False

    @staticmethod
    def _np(triton: str) -> str:
        return {v: k for k, v in NP_TO_TRITON.items()}[triton]

    def deactivate_impl(self) -> None:
        """End the sequence (END), close the stream and the connection."""
        try:
            self._end_sequence()
        finally:
            if self._client is not None:
                try:
                    self._client.stop_stream(cancel_requests=self._broken is not None)
                except Exception:  # noqa: BLE001 - a broken stream: nothing left to stop
                    pass
                self._client.close()
            self._client = None

    def reset_impl(self) -> None:
        """End the current sequence and start a new one (new id, zero state on the server)."""
        self._end_sequence()
        self._new_sequence()

    # ------------------------------------------------------------------ streaming
    def _send(self, feeds: dict[str, np.ndarray], end: bool = False) -> dict[str, np.ndarray]:
        if self._broken is not None:
            raise ServerError(self._broken)
        g = self._grpc
        inputs = []
        for name, shape, dtype in self._ins:
            x = g.InferInput(name, list(shape), dtype)
            x.set_data_from_numpy(np.ascontiguousarray(feeds[name]).reshape(shape))
            inputs.append(x)
        start = not self._started
        try:
            self._client.async_stream_infer(self.model.name, inputs, request_id=str(self.requests),
                                            sequence_id=self.sequence_id, sequence_start=start, sequence_end=end)
        except Exception as err:  # noqa: BLE001 - the stream is closed
            self._broken = f"the Triton server at {self.model.url} stopped mid-stream ({first_line(err, False)})"
            raise ServerError(self._broken) from None
        self._started = True
        try:
            result, error = self._q.get(timeout=self.response_timeout_s)
        except queue.Empty:
            self._broken = (f"the Triton server at {self.model.url} did not answer request {self.requests} of "
                            f"sequence {self.sequence_id} within {self.response_timeout_s:g} s")
            raise ServerError(self._broken) from None
        if error is not None:
            text = first_line(error, False) or str(error)
            gone = re.search(r"UNAVAILABLE|Socket closed|CANCELLED|cancelled|RST_STREAM|connection|EOF|Broken pipe",
                             text, re.I) and not re.search(r"sequence|shape|datatype|input", text, re.I)
            if gone:
                self._broken = f"the Triton server at {self.model.url} stopped mid-stream ({text})"
                raise ServerError(self._broken)
            raise ServerError(f"{self.model} refused request {self.requests} of sequence {self.sequence_id}: {text}")
        self.requests += 1
        return {n: result.as_numpy(n) for n in self._outs}  # views of this response: push() copies them by default

    def push_impl(self, chunk: np.ndarray | dict) -> dict[str, np.ndarray]:
        """Send one validated chunk (float32 (1, 1, chunk_samples), or a dict per input) as the next request of
        the sequence; return the server's outputs by ONNX name (read-only views of the response, which
        :meth:`push` copies unless ``copy=False``)."""
        feeds = chunk if isinstance(chunk, dict) else {self.contract.input: chunk}
        return self._send(feeds)

    def round_trip_ms(self) -> np.ndarray:
        """np.ndarray: float64 (K,), the kept request round trips in ms (same as ``latencies_ms``)."""
        return self.latencies_ms


def served_engine(server: str, model: str | None = None, engine: Any = None) -> ServedModel:
    """What ``cosyedge run --server`` runs: :func:`connect`, refusing ``--engine``/``--model`` beside it.

    Raises:
        UsageError: ``engine`` given too (the server's model runs, not a local one).
    """
    if engine is not None:
        raise UsageError(f"--server runs the served model; --engine/--model {engine} runs one here: give one of them")
    t0 = time.perf_counter()
    m = connect(server, model)
    from cosyedge.log import LOG

    LOG.debug("connected to %s in %.1f ms", m, 1000 * (time.perf_counter() - t0))
    return m
