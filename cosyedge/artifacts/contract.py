"""Self-describing artifacts: the streaming contract in ONNX metadata, manifests, atomic writes.

The **stream contract** is what any runtime needs to start a stream without guessing: the audio input
and output names, sample rate (Hz), hop (samples per model step), total stride (the chunk length must be
a multiple of it), algorithmic delay (samples), and one entry per state pair (input name, output name,
shape with the batch axis written ``"N"``, dtype, zero initial value). It is stored as ONNX
``metadata_props`` under ``cosyedge.*`` keys (values are strings; lists/dicts are JSON).

A **manifest** (``manifest.json``) sits next to every built artifact: schema version, stage, cosyedge
version, parent hashes, flags, tool versions and a copy of the contract. :func:`load_manifest` names any
missing key.

Every file is written through :func:`atomic_output` (temp file in the destination folder, then
``os.replace``) so a failure never leaves a partial file or destroys the previous one.

Source: k2-fsa/icefall ``export-onnx-streaming.py`` ``add_meta_data`` (metadata in the ONNX).

About 680 lines, kept whole for now (issue 36): contract, manifest and atomic writes are imported together from
this one path by about 100 call sites (including the build stage, being moved on another branch); splitting it
into contract / manifest / atomic-write modules is a follow-up once that move has landed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from cosyedge.errors import ArtifactError, UsageError, first_line

SCHEMA_VERSION = 1
META_PREFIX = "cosyedge."
BATCH_DIM = "N"
BOOKKEEPING = "~stream"
"""str: part of the name of every node that computes stream positions (tick counter, pre-roll masks, start
gates); a naming contract between surgery (which writes them) and the precision stages (which keep them
in FP32, since positions in FP16 round, and never quantize them)."""

_NP_DTYPES = {"float32": np.float32, "float16": np.float16, "int64": np.int64, "int32": np.int32}


@dataclasses.dataclass
class StateSpec:
    """One streaming state pair (cache) of a model.

    Attributes:
        input (str): ONNX input name, e.g. ``"state_in.03"``; fed the previous ``output`` (zeros at start).
        output (str): ONNX output name, e.g. ``"state_out.03"``.
        shape (list): Shape with the batch axis as ``"N"``, e.g. ``["N", 96, 4]`` = (batch, channels,
            frames). The last axis is time (samples or frames of that layer).
        dtype (str): numpy dtype name, ``"float32"`` by default.
        node (str): Name of the node (Conv) whose causal left pad this state replaces; informational.
        init (float): Initial value of every element at stream start (0.0).
        kind (str): What the state carries: ``"context"`` (past frames of a conv or pool input),
            ``"delay"`` (a delay line re-aligning paths), ``"recurrent"`` (GRU/LSTM/RNN hidden or cell
            state), ``"overlap"`` (transposed-conv overlap-add tail), ``"running"`` (running sum of a
            CumSum), ``"counter"`` (ticks since the stream's start, saturating).
    """

    input: str
    output: str
    shape: list
    dtype: str = "float32"
    node: str = ""
    init: float = 0.0
    kind: str = "context"

    @property
    def batch_axis(self) -> int:
        """int: index of the ``"N"`` axis in :attr:`shape`."""
        for i, d in enumerate(self.shape):
            if d == BATCH_DIM:
                return i
        raise ArtifactError(f"state '{self.input}' has no batch axis '{BATCH_DIM}' in shape {self.shape}")

    def concrete_shape(self, batch: int = 1) -> tuple[int, ...]:
        """Return the shape (tuple[int]) with the batch axis set to ``batch`` (int >= 1)."""
        return tuple(batch if d == BATCH_DIM else int(d) for d in self.shape)

    def zeros(self, batch: int = 1) -> np.ndarray:
        """Return the initial state, an array of shape :meth:`concrete_shape` and dtype :attr:`dtype`."""
        return np.full(self.concrete_shape(batch), self.init, dtype=_NP_DTYPES.get(self.dtype, np.float32))


TIME_DIM = "T"


@dataclasses.dataclass
class StreamIO:
    """One streaming input or output of a model: where time is and how many frames a hop holds.

    Attributes:
        name (str): ONNX tensor name.
        shape (list): Shape with the batch axis as ``"N"`` and the time axis as ``"T"``, e.g.
            ``["N", 1, "T"]`` (audio) or ``["N", 1, "T", 32]`` (DeepFilterNet's ERB features).
        dtype (str): numpy dtype name.
        time_axis (int): Index of ``"T"`` in :attr:`shape`.
        frames_per_hop (int): Frames of the time axis per hop (``hop_samples`` for audio at the model rate,
            1 for one feature frame per hop, 2 for a x2 upsampled output...).
        delay_frames (int): Outputs only: frames this output is late with respect to the full-sequence
            graph (look-ahead found by streamify); 0 for inputs.
        kind (str): ``"audio"`` (a waveform at the model rate) or ``"features"`` (anything else).
    """

    name: str
    shape: list
    dtype: str = "float32"
    time_axis: int = 2
    frames_per_hop: int = 1
    delay_frames: int = 0
    kind: str = "features"

    def frames(self, chunk_samples: int, hop_samples: int) -> int:
        """Frames (int) of the time axis in a chunk of ``chunk_samples`` (a multiple of the total stride)."""
        return self.frames_per_hop * chunk_samples // hop_samples

    def concrete_shape(self, batch: int, frames: int) -> tuple[int, ...]:
        """The shape (tuple[int]) with ``"N"`` = ``batch`` and ``"T"`` = ``frames``."""
        return tuple(batch if d == BATCH_DIM else frames if d == TIME_DIM else int(d) for d in self.shape)


@dataclasses.dataclass
class StreamContract:
    """Everything a runtime needs to stream a model (see module docstring).

    Attributes:
        input (str): Audio input name; tensor (N, 1, T) float32, T = chunk samples, range [-1, 1].
        output (str): Audio output name; tensor (N, 1, T) float32.
        sample_rate_hz (int): Model sample rate, e.g. 16000.
        hop_samples (int): Samples per model step (the natural chunk), e.g. 160 (10 ms at 16 kHz).
        total_stride (int): Chunk lengths must be a multiple of this (samples); usually == hop.
        delay_samples (int): Algorithmic delay of the output w.r.t. the input, beyond the chunk itself.
        states (list[StateSpec]): State pairs; empty before streamify.
        name (str): Model name used for artifact folders.
        inputs (list[StreamIO]): Every streaming input (the audio input first when there is one);
            empty in contracts written before multi-input models (then it is ``input`` alone, (N, 1, T)).
        outputs (list[StreamIO]): Every streaming output, likewise.
        proof (dict): What streamify measured when it proved the stream graph (max abs error, SNR per
            output and chunk); empty when not proved.
    """

    input: str
    output: str
    sample_rate_hz: int
    hop_samples: int
    total_stride: int
    delay_samples: int = 0
    states: list = dataclasses.field(default_factory=list)
    name: str = "model"
    inputs: list = dataclasses.field(default_factory=list)
    outputs: list = dataclasses.field(default_factory=list)
    proof: dict = dataclasses.field(default_factory=dict)

    @property
    def stream_inputs(self) -> list[StreamIO]:
        """list[StreamIO]: :attr:`inputs`, or the single audio input (N, 1, T) of an older contract."""
        if self.inputs:
            return list(self.inputs)
        return [StreamIO(self.input, [BATCH_DIM, 1, TIME_DIM], "float32", 2, self.hop_samples, 0, "audio")]

    @property
    def stream_outputs(self) -> list[StreamIO]:
        """list[StreamIO]: :attr:`outputs`, or the single audio output (N, 1, T) of an older contract."""
        if self.outputs:
            return list(self.outputs)
        return [StreamIO(self.output, [BATCH_DIM, 1, TIME_DIM], "float32", 2, self.hop_samples, 0, "audio")]

    @property
    def audio_in(self) -> bool:
        """bool: the model streams one input and it is a waveform (N, 1, T): ``push`` takes an array."""
        ins = self.stream_inputs
        return len(ins) == 1 and ins[0].kind == "audio"

    @property
    def is_audio(self) -> bool:
        """bool: one audio input (N, 1, T) and an audio output named by :attr:`input` / :attr:`output`:
        what ``cosyedge run``, StreamPool and the precision stages stream."""
        ins, outs = self.stream_inputs, self.stream_outputs
        return (len(ins) == 1 and ins[0].kind == "audio" and ins[0].name == self.input
                and any(o.name == self.output and o.kind == "audio" for o in outs))

    @property
    def algorithmic_latency_ms(self) -> float:
        """float: chunk (one hop) plus delay, in ms: the earliest an input sample can be heard."""
        return 1000.0 * (self.hop_samples + self.delay_samples) / self.sample_rate_hz

    @property
    def is_streaming(self) -> bool:
        """bool: True once the model is a stream graph (after streamify: explicit state inputs/outputs, or
        a proved model without any, which streams as it is)."""
        return bool(self.states) or bool(self.proof)

    def require_streaming(self, where: Any) -> None:
        """Refuse a model that is not a stream graph yet (see :attr:`is_streaming`).

        Args:
            where (str | Path): The model, as the message names it (usually its path).
        Raises:
            ArtifactError: ``"<where> has no streaming state (state_in.*/state_out.*); run 'cosyedge
                streamify' first"`` (exit code 3).
        """
        if not self.is_streaming:
            from cosyedge.errors import ArtifactError

            raise ArtifactError(f"{where} has no streaming state (state_in.*/state_out.*); run 'cosyedge streamify' "
                                f"first")

    def check_chunk(self, chunk_samples: int) -> None:
        """Raise :class:`~cosyedge.errors.UsageError` unless ``chunk_samples`` (int) is a positive
        multiple of :attr:`total_stride`."""
        from cosyedge.errors import UsageError

        if chunk_samples <= 0 or chunk_samples % self.total_stride:
            raise UsageError(
                f"chunk of {chunk_samples} samples is not a positive multiple of the model's total stride "
                f"{self.total_stride} samples (use {self.total_stride}, {2 * self.total_stride}, ...)"
            )

    def to_metadata(self) -> dict[str, str]:
        """Return the contract as ``cosyedge.*`` string key/values for ONNX ``metadata_props``."""
        meta = {
            "schema_version": str(SCHEMA_VERSION),
            "name": self.name,
            "input": self.input,
            "output": self.output,
            "sample_rate_hz": str(self.sample_rate_hz),
            "hop_samples": str(self.hop_samples),
            "total_stride": str(self.total_stride),
            "delay_samples": str(self.delay_samples),
            "algorithmic_latency_ms": f"{self.algorithmic_latency_ms:g}",
            "state": json.dumps([dataclasses.asdict(s) for s in self.states]),
        }
        if self.inputs or self.outputs:
            meta["io"] = json.dumps({"inputs": [dataclasses.asdict(i) for i in self.inputs],
                                     "outputs": [dataclasses.asdict(o) for o in self.outputs]})
        if self.proof:
            meta["proof"] = json.dumps(self.proof)
        return {META_PREFIX + k: v for k, v in meta.items()}

    @classmethod
    def from_metadata(cls, meta: dict[str, str], where: str = "model") -> "StreamContract":
        """Parse ``cosyedge.*`` metadata (dict[str, str]).

        Raises:
            ArtifactError: a key is missing or malformed; the message names it and ``where``.
        """
        def get(key: str) -> str:
            full = META_PREFIX + key
            if full not in meta:
                raise ArtifactError(
                    f"{where} has no cosyedge metadata '{full}' (export it with 'cosyedge export' or "
                    f"'cosyedge streamify --sample-rate-hz ... --hop-samples ...' first)"
                )
            return meta[full]

        try:
            schema = int(meta.get(META_PREFIX + "schema_version", SCHEMA_VERSION))
            if schema > SCHEMA_VERSION:
                raise ArtifactError(f"{where} has cosyedge metadata schema {schema}, newer than this cosyedge "
                                    f"understands ({SCHEMA_VERSION}); upgrade cosyedge")
            states = [StateSpec(**s) for s in json.loads(meta.get(META_PREFIX + "state", "[]"))]
            io = json.loads(meta.get(META_PREFIX + "io", "{}"))
            contract = cls(
                input=get("input"),
                output=get("output"),
                sample_rate_hz=int(get("sample_rate_hz")),
                hop_samples=int(get("hop_samples")),
                total_stride=int(meta.get(META_PREFIX + "total_stride", get("hop_samples"))),
                delay_samples=int(meta.get(META_PREFIX + "delay_samples", "0")),
                states=states,
                name=meta.get(META_PREFIX + "name", "model"),
                inputs=[StreamIO(**i) for i in io.get("inputs", [])],
                outputs=[StreamIO(**o) for o in io.get("outputs", [])],
                proof=json.loads(meta.get(META_PREFIX + "proof", "{}")),
            )
        except (ValueError, TypeError, AttributeError, json.JSONDecodeError) as err:
            raise ArtifactError(f"{where} has malformed cosyedge metadata ({err})") from None
        contract.validate(where)
        return contract

    def validate(self, where: str = "model") -> None:
        """Check the contract's numbers are sane.

        Raises:
            ArtifactError: sample rate, hop or total stride not positive; hop not a multiple of the total
                stride; delay negative or longer than 10 s; a state shape with a non-positive dimension.
        """
        bad = None
        if self.sample_rate_hz <= 0 or self.hop_samples <= 0 or self.total_stride <= 0:
            bad = (f"sample_rate_hz {self.sample_rate_hz}, hop_samples {self.hop_samples} and total_stride "
                   f"{self.total_stride} must be positive")
        elif self.hop_samples % self.total_stride:
            bad = f"hop_samples {self.hop_samples} is not a multiple of total_stride {self.total_stride}"
        elif not 0 <= self.delay_samples <= 10 * self.sample_rate_hz:
            bad = f"delay_samples {self.delay_samples} is outside 0..{10 * self.sample_rate_hz} (10 s)"
        else:
            for s in self.states:
                if any(d != BATCH_DIM and (not isinstance(d, int) or d <= 0) for d in s.shape):
                    bad = f"state '{s.input}' has shape {s.shape} (dimensions must be positive integers or 'N')"
                    break
        if bad:
            raise ArtifactError(f"{where} has invalid cosyedge metadata: {bad}")

    @classmethod
    def from_onnx(cls, model: Any) -> "StreamContract":
        """Read the contract from an ONNX file path (str/Path) or ``onnx.ModelProto``.

        Raises:
            ArtifactError: file missing/corrupt or metadata missing.
        """
        where = "ONNX model"
        if isinstance(model, (str, Path)):
            where = str(model)
            model = load_onnx(model, load_external_data=False)
        meta = {p.key: p.value for p in model.metadata_props}
        return cls.from_metadata(meta, where=where)

    def write_to_onnx(self, model: Any) -> Any:
        """Set this contract into ``model.metadata_props`` (onnx.ModelProto), replacing old cosyedge keys.
        Returns the same ModelProto."""
        keep = [(p.key, p.value) for p in model.metadata_props if not p.key.startswith(META_PREFIX)]
        del model.metadata_props[:]
        for k, v in keep + sorted(self.to_metadata().items()):
            p = model.metadata_props.add()
            p.key, p.value = k, v
        return model

    def chunk_samples(self, chunk_ms: float) -> int:
        """Convert a chunk length in ms to samples at :attr:`sample_rate_hz` (Hz).

        Args:
            chunk_ms (float): Chunk length, ms, in (0, :data:`MAX_CHUNK_MS`].
        Returns:
            int: samples per chunk, a multiple of :attr:`total_stride`.
        Raises:
            UsageError: ``chunk_ms`` is not finite, not positive, too long, not a whole number of samples, or
                not a multiple of the total stride (the message gives the multiple in ms).
        """
        sample_rate_hz, total_stride = self.sample_rate_hz, self.total_stride
        chunk_ms = float(chunk_ms)
        step_ms = 1000.0 * total_stride / sample_rate_hz
        if not (0 < chunk_ms <= MAX_CHUNK_MS):  # also rejects NaN
            raise UsageError(f"chunk of {chunk_ms} ms: give a positive multiple of {step_ms:g} ms up to "
                             f"{MAX_CHUNK_MS:g} ms")
        samples = chunk_ms * sample_rate_hz / 1000.0
        if abs(samples - round(samples)) > 1e-6:
            raise UsageError(f"chunk of {chunk_ms} ms is not a positive whole number of samples at {sample_rate_hz} Hz")
        samples = int(round(samples))
        if samples % total_stride:
            raise UsageError(f"chunk of {chunk_ms:g} ms ({samples} samples) is not a multiple of the model's total "
                             f"stride {total_stride} samples = {step_ms:g} ms (use {step_ms:g}, {2 * step_ms:g}, ... ms)")
        return samples


MAX_CHUNK_MS = 10_000.0
"""float: longest chunk accepted by :meth:`StreamContract.chunk_samples`, ms (a chunk is buffered whole; 10 s
bounds memory)."""


def load_onnx(path: str | Path, load_external_data: bool = True) -> Any:
    """Load an ONNX file as ``onnx.ModelProto``.

    Raises:
        ArtifactError: the file is missing, empty (0 bytes) or is not a valid ONNX protobuf.
    """
    import onnx

    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"ONNX file not found: {path}")
    if path.stat().st_size == 0:  # onnx.load reads 0 bytes as an empty, "valid" ModelProto
        raise ArtifactError(f"ONNX file {path} is empty (0 bytes)")
    try:
        return onnx.load(str(path), load_external_data=load_external_data)
    except Exception as err:  # protobuf DecodeError and friends
        raise ArtifactError(f"cannot read ONNX file {path}: {first_line(err)}") from None


def sha256_file(path: str | Path, chunk_bytes: int = 1 << 20) -> str:
    """Return the hex SHA-256 (str) of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk_bytes), b""):
            h.update(block)
    return h.hexdigest()


#: Metadata keys left out of :func:`model_content_sha256`: figures *measured* on the machine that wrote the file.
MACHINE_MEASURED_KEYS = ("cosyedge.proof",)


def model_content_sha256(path: str | Path) -> str:
    """Return the hex SHA-256 (str) of an ONNX model without its machine-measured metadata.

    The stream model records its proof's measured error (``cosyedge.proof``: max abs error, SNR). That figure depends on
    the CPU kernels ONNX Runtime picks (measured: the DeepFilterNet3 export differs only in that key between AVX-512
    and AVX2, under ``qemu-x86_64 -cpu Haswell``), so two machines exporting the same model write files with
    different :func:`sha256_file`. This hash covers everything else (graph, weights, the other metadata), in the
    model's own serialization (external data files are not read). Committed baselines use it to recognise their model
    on any CPU.

    Raises:
        ArtifactError: the file is missing or not an ONNX model.
    """
    import onnx

    from cosyedge.errors import ArtifactError

    try:
        model = onnx.load(str(path), load_external_data=False)
    except OSError as err:
        raise ArtifactError(f"{path} is not readable ({err.strerror or err})") from None
    except Exception as err:  # protobuf's DecodeError and onnx's own errors
        raise ArtifactError(f"{path} is not a readable ONNX model ({type(err).__name__})") from None
    keep = [p for p in model.metadata_props if p.key not in MACHINE_MEASURED_KEYS]
    del model.metadata_props[:]
    model.metadata_props.extend(keep)
    return hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()


@contextlib.contextmanager
def atomic_output(dest: str | Path, suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path next to ``dest``; on success rename it onto ``dest``, on error delete it.

    The previous ``dest`` (if any) survives any failure. The parent folder must exist or be creatable.

    Args:
        dest (str | Path): Final path.
        suffix (str | None): Temp file suffix (defaults to ``dest``'s, so format sniffing by extension works).
    Raises:
        ArtifactError: the destination folder cannot be created or written.
    """
    dest = Path(dest)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=suffix if suffix is not None else dest.suffix,
                                   dir=dest.parent)
        os.close(fd)
    except OSError as err:
        raise ArtifactError(f"cannot write {dest}: {err.strerror or err}") from None
    tmp = Path(tmp)
    try:
        yield tmp
        if tmp.exists():  # mkstemp makes 0600 files: give the mode a plain open() would
            os.chmod(tmp, default_file_mode())
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextlib.contextmanager
def atomic_folder(dest: str | Path, what: str = "folder") -> Iterator[Path]:
    """Yield an empty temporary folder next to ``dest``; on success it replaces ``dest`` (see
    :func:`replace_dir`), on any error (or interrupt) it is deleted and a previous ``dest`` is kept.

    Args:
        dest (str | Path): Final folder; its parent is created if needed.
        what (str): Name of the folder in error messages (e.g. ``"engine folder"``).
    Raises:
        ArtifactError: the parent cannot be created or written, or the rename fails.
    """
    dest = Path(dest)
    root = dest.parent
    try:
        root.mkdir(parents=True, exist_ok=True)
        remove_stale_temp_folders(dest)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=root))
        (tmp / OWNER_FILE).write_text(f"{os.getpid()}\n")
    except OSError as err:
        raise ArtifactError(f"cannot write {what} in {root}: {err.strerror or err}") from None
    try:
        yield tmp
        (tmp / OWNER_FILE).unlink(missing_ok=True)
        os.chmod(tmp, default_file_mode(0o777))  # mkdtemp creates 0700
        replace_dir(tmp, dest, what)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


OWNER_FILE = ".cosyedge-owner"
"""str: file in an :func:`atomic_folder` temp folder holding the writing process's pid (removed before the rename)."""


def remove_stale_temp_folders(dest: str | Path) -> list[Path]:
    """Remove temp folders that a killed writer of ``dest`` left (``.<name>.XXXX`` beside it, whose owner
    pid is no longer running; a SIGKILL or power loss skips every cleanup). A folder of a live writer (a
    concurrent build) is kept.

    Args:
        dest (str | Path): The final folder.
    Returns:
        list[Path]: the folders removed.
    """
    dest = Path(dest)
    removed = []
    for cand in dest.parent.glob(f".{dest.name}.*"):
        owner = cand / OWNER_FILE
        if not cand.is_dir() or cand.is_symlink() or not owner.is_file():
            continue
        try:
            pid = int(owner.read_text().strip())
            os.kill(pid, 0)
            if pid != os.getpid():
                continue  # a live writer
        except ProcessLookupError:
            pass  # its writer is gone
        except (ValueError, OSError):
            continue
        shutil.rmtree(cand, ignore_errors=True)
        removed.append(cand)
    return removed


def replace_dir(tmp: Path, dest: Path, what: str = "folder") -> None:
    """Rename folder ``tmp`` onto ``dest``; an existing ``dest`` is moved aside first and removed after
    (restored if the rename fails).

    Raises:
        ArtifactError: a rename fails (the message names ``what`` and ``dest``).
    """
    old = None
    try:
        if dest.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old.", dir=dest.parent))
            os.rmdir(old)
            os.rename(dest, old)
        os.rename(tmp, dest)
    except OSError as err:
        if old is not None and not dest.exists():
            os.rename(old, dest)
            old = None
        raise ArtifactError(f"cannot write {what} {dest}: {err.strerror or err}") from None
    finally:
        if old is not None:
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old, ignore_errors=True)
            else:
                old.unlink(missing_ok=True)


def check_not_input(src: str | Path, dest: str | Path) -> None:
    """Refuse an output path that is the input file (any spelling: ``./x``, ``a/../x``, a symlink to it),
    so a stage never replaces what it reads.

    Args:
        src (str | Path): Input file.
        dest (str | Path): Output file (need not exist).
    Raises:
        UsageError: ``dest`` is ``src`` (the input is kept).
    """
    src, dest = Path(src), Path(dest)
    if src.exists() and dest.exists() and src.resolve() == dest.resolve():
        raise UsageError(f"output {dest} is the input file: give another output path (the input is kept)")


def check_writable(dest: str | Path) -> Path:
    """Fail early, before any work, when ``dest`` cannot be written as a file.

    Args:
        dest (str | Path): Output file path; missing parent folders are allowed (they are created later).
    Returns:
        Path: ``dest`` as a Path.
    Raises:
        ArtifactError: ``dest`` is a folder, an ancestor is a file, or the nearest existing folder is not
            writable.
    """
    dest = Path(dest)
    if dest.is_dir():
        raise ArtifactError(f"cannot write {dest}: it is a folder (give a file path)")
    parent = dest.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ArtifactError(f"cannot write {dest}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ArtifactError(f"cannot write {dest}: no write permission in {parent}")
    # Permission bits do not show everything (root on a read-only or virtual file system such as /proc):
    # create and delete a probe file.
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{dest.name}.probe.", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ArtifactError(f"cannot write {dest}: cannot create files in {parent} ({err.strerror or err})") from None
    return dest


class Stage:
    """Base of the lazy pipeline stages (``OnnxFromTorch``, ``StatefulOnnxFromOnnx``, ...).

    ``__init__`` only stores the configuration; calling the stage runs :meth:`call_impl` and returns the
    artifact path. A stage accepts another stage wherever it takes an input path, so stages compose:
    ``StatefulOnnxFromOnnx(OnnxFromTorch(model, "m.onnx"), "m.stream.onnx")()``. Each stage has a
    function twin (``onnx_from_torch``, ``streamify``) that builds and calls it at once.

    Source: Polygraphy ``backend/base/loader.py`` (``BaseLoader.__call__`` -> ``call_impl``).
    """

    def __call__(self) -> Path:
        return self.call_impl()

    def call_impl(self) -> Path:
        """Run the stage and return the path (Path) of the artifact it wrote."""
        raise NotImplementedError


def resolve_artifact(src: "str | Path | Stage") -> Path:
    """Return the path of ``src``: a :class:`Stage` (any callable) is run first, a str/Path is returned as Path."""
    return Path(src()) if callable(src) else Path(src)


def default_file_mode(mode: int = 0o666) -> int:
    """Return ``mode`` (int) masked by the process umask: what ``open()``/``mkdir()`` would give.

    Temp files from :func:`tempfile.mkstemp` are 0600 and folders from ``mkdtemp`` 0700; artifacts get
    this mode before their rename.
    """
    umask = os.umask(0)
    os.umask(umask)
    return mode & ~umask


def write_json(path: str | Path, data: dict) -> None:
    """Atomically write ``data`` (JSON-serialisable dict) to ``path``, pretty-printed."""
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


MANIFEST_NAME = "manifest.json"
MANIFEST_REQUIRED = ("schema_version", "stage", "cosyedge_version", "model", "contract")


def write_manifest(folder: str | Path, manifest: dict) -> Path:
    """Write ``folder/manifest.json`` atomically, adding ``schema_version`` and ``cosyedge_version``.

    Returns:
        Path: the manifest path.
    """
    from cosyedge import __version__

    data = {"schema_version": SCHEMA_VERSION, "cosyedge_version": __version__, **manifest}
    path = Path(folder) / MANIFEST_NAME
    write_json(path, data)
    return path


def load_manifest(folder: str | Path) -> dict:
    """Load and validate ``folder/manifest.json``.

    Returns:
        dict: the manifest; ``manifest["contract"]`` is the contract's metadata dict.
    Raises:
        ArtifactError: missing file, bad JSON, a missing required key (named in the message), or a
            ``schema_version`` that is not an integer or is newer than :data:`SCHEMA_VERSION` (written by a
            newer cosyedge: its fields may mean something else).
    """
    path = Path(folder) / MANIFEST_NAME
    if not path.is_file():
        raise ArtifactError(f"{path} not found (is {folder} an engine folder made by 'cosyedge build'?)")
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ArtifactError(f"{path} is not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise ArtifactError(f"{path} is not a manifest (a JSON object); rebuild it with 'cosyedge build'")
    for key in MANIFEST_REQUIRED:
        if key not in data:
            raise ArtifactError(f"{path} missing '{key}' (rebuild it with 'cosyedge build')")
    version = data["schema_version"]
    if not isinstance(version, int) or isinstance(version, bool):
        raise ArtifactError(f"{path} has schema_version {version!r}, not an integer (rebuild it with 'cosyedge build')")
    if version > SCHEMA_VERSION:
        raise ArtifactError(f"{path} has schema_version {version}, newer than this cosyedge understands "
                            f"({SCHEMA_VERSION}); upgrade cosyedge, or rebuild the engine with this one "
                            f"('cosyedge build')")
    return data


# ------------------------------------------------------------------------------------- typed artifacts
class SourceModel:
    """A streaming ONNX on disk, parsed and hashed once, passed down a build instead of its path.

    The SHA-256 and the stream contract are computed on first use and cached; the ModelProto is loaded
    lazily (without external data). The file must not change while the object is in use.

    Args:
        path (str | Path | SourceModel): The ``.onnx`` file (a SourceModel is returned as is by :meth:`of`).
    Attributes:
        path (Path): The file.
    Raises:
        ArtifactError: (on first use of a property) the file is missing or is not a readable ONNX with a
            ``cosyedge.*`` stream contract.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._sha256: str | None = None
        self._contract: StreamContract | None = None
        self._proto: Any = None

    @classmethod
    def of(cls, source: "str | Path | SourceModel") -> "SourceModel":
        """Return ``source`` if it is a SourceModel, else a new one for the path (SourceModel)."""
        return source if isinstance(source, SourceModel) else cls(source)

    @property
    def sha256(self) -> str:
        """str: hex SHA-256 of the file (hashed once)."""
        if self._sha256 is None:
            self._sha256 = sha256_file(self.path)
        return self._sha256

    @property
    def proto(self) -> Any:
        """onnx.ModelProto: the model without external data (loaded once)."""
        if self._proto is None:
            self._proto = load_onnx(self.path, load_external_data=False)
        return self._proto

    @property
    def contract(self) -> StreamContract:
        """StreamContract: parsed once from the file's ``cosyedge.*`` metadata."""
        if self._contract is None:
            self._contract = StreamContract.from_onnx(self.path)
        return self._contract

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        return f"SourceModel({str(self.path)!r})"


@dataclasses.dataclass(frozen=True)
class EngineManifest:
    """An engine folder's ``manifest.json`` with named fields; the one place that knows old key spellings.

    Attributes:
        raw (dict): The manifest as loaded (validated by :func:`load_manifest` when read from a folder).
        stage (str | None): ``build``.
        name (str | None): Engine (model) name.
        backend (str | None): ``onnxruntime`` | ``tensorrt`` | ``triton``.
        precision (str): ``fp32`` | ``fp16`` | ``int8`` (``fp32`` when absent).
        sparse (bool): 2:4-pruned.
        model_file (str | None): File name of the model (``model.file``), None when absent.
        model_sha256 (str | None): Its SHA-256 (``model.sha256``).
        plan_file (str | None): TensorRT plan file name (``plan.file``).
        plan_sha256 (str | None): Its SHA-256 (``plan.sha256``).
        parent_sha256 (str | None): SHA-256 of the FP32 streaming ONNX it was built from.
        parent_path (str | None): Path of that ONNX when built.
        flags (dict): Build flags (``{}`` when absent).
        chunk_samples (int | None): Chunk length the engine was built for.
        max_batch (int | None): TensorRT: the profile's largest batch.
        calibration_sha256 (str | None): INT8 calibration set manifest hash.
        reports (dict): ``sparsity``/``fp16``/``int8`` reports (``{}`` when absent).
    """

    raw: dict
    stage: str | None = None
    name: str | None = None
    backend: str | None = None
    precision: str = "fp32"
    sparse: bool = False
    model_file: str | None = None
    model_sha256: str | None = None
    plan_file: str | None = None
    plan_sha256: str | None = None
    parent_sha256: str | None = None
    parent_path: str | None = None
    flags: dict = dataclasses.field(default_factory=dict)
    chunk_samples: int | None = None
    max_batch: int | None = None
    calibration_sha256: str | None = None
    reports: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: "dict | EngineManifest") -> "EngineManifest":
        """Wrap a manifest dict (an EngineManifest is returned as is)."""
        if isinstance(raw, EngineManifest):
            return raw
        model = raw.get("model") or {}
        plan = raw.get("plan") or {}
        return cls(raw=raw, stage=raw.get("stage"), name=raw.get("name"), backend=raw.get("backend"),
                   precision=str(raw.get("precision", "fp32")), sparse=bool(raw.get("sparse", False)),
                   model_file=model.get("file"), model_sha256=model.get("sha256"), plan_file=plan.get("file"),
                   plan_sha256=plan.get("sha256"), parent_sha256=raw.get("parent_sha256"),
                   parent_path=raw.get("parent_path"), flags=dict(raw.get("flags") or {}),
                   chunk_samples=raw.get("chunk_samples"), max_batch=raw.get("max_batch"),
                   calibration_sha256=raw.get("calibration_sha256"), reports=dict(raw.get("reports") or {}))

    @classmethod
    def load(cls, folder: str | Path) -> "EngineManifest":
        """Load and validate ``folder/manifest.json`` (:func:`load_manifest`).

        Raises:
            ArtifactError: see :func:`load_manifest`.
        """
        return cls.from_dict(load_manifest(folder))

    @property
    def int8(self) -> dict:
        """dict: the INT8 report: ``reports.int8``, or the top-level ``int8`` of old manifests; ``{}`` when none."""
        rep = self.reports.get("int8") or self.raw.get("int8") or {}
        return rep if isinstance(rep, dict) else {}

    @property
    def contract_metadata(self) -> dict:
        """dict: the stream contract's metadata (``contract``)."""
        return self.raw["contract"]
