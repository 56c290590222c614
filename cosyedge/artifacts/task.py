"""A stream model's task (enhancer, voice activity detector, feature extractor): the one place that says it.

The contract stores it as ``cosyedge.task`` (as sherpa-onnx reads ``model_type`` from ONNX metadata); streamify,
adopt and the recipes write it. A model written before the key existed (the bundled models, recipe exports whose
content hash a committed baseline pins) has none: :func:`resolve` then guesses it from the outputs' shapes and the
recipe provenance exactly as cosyedge always did (:func:`guess`), so such a model loads and behaves as before.
Every caller asks :func:`resolve` (or :func:`task_of` for a loaded engine); none tests shapes itself.
"""

from __future__ import annotations

import dataclasses
import json

ENHANCER = "enhancer"
"""str: waveform in, waveform out (``cosyedge run FILE -o OUT.wav``)."""
VAD = "vad"
"""str: waveform in, one speech probability per hop out (``cosyedge run FILE --vad``)."""
FEATURES = "features"
"""str: anything else a stream model gives (features, masks, embeddings): streamed, not written as audio."""
TASKS = (ENHANCER, VAD, FEATURES)
"""tuple[str, ...]: the values ``cosyedge.task`` may hold."""
RECIPE_META_KEY = "recipe"
"""str: ONNX metadata key of a recipe's provenance (JSON with a ``task``; as
:data:`cosyedge.recipes.base.RECIPE_META_KEY`)."""


@dataclasses.dataclass(frozen=True)
class ModelTask:
    """What a stream model does, as :func:`resolve` found it.

    Attributes:
        task (str): One of :data:`TASKS`.
        speech_output (str | None): The speech-probability output a ``--vad`` run reads (float32 (N, 1, T / hop));
            None: the model cannot be run with ``--vad``. An old model guessed an enhancer may still carry one (an
            audio output beside a one-value-per-hop output): it was accepted by ``--vad`` before and still is.
        declared (bool): True when the contract's ``cosyedge.task`` said it; False when guessed (an older model).
    """

    task: str
    speech_output: str | None
    declared: bool


def check_task(task: str, where: str = "model") -> str:
    """Return ``task`` when it is one of :data:`TASKS`.

    Raises:
        ArtifactError: ``"<where> has invalid cosyedge metadata: task 'x' is not one of enhancer, vad, features"``
            (exit 3).
    """
    if task not in TASKS:
        from cosyedge.errors import ArtifactError

        raise ArtifactError(f"{where} has invalid cosyedge metadata: task {task!r} is not one of {', '.join(TASKS)}")
    return task


def _probability_candidates(contract) -> list:
    """list[StreamIO]: non-audio outputs of one channel and one frame per hop (N, 1, T / hop) of a waveform-in
    model; empty when the model does not take one waveform."""
    if not contract.audio_in:
        return []
    return [o for o in contract.stream_outputs if o.kind != "audio" and o.frames_per_hop == 1
            and len(o.shape) == 3 and o.shape[1] == 1]


def _pick(cands: list) -> str | None:
    """str | None: the candidate named like a probability, else the first."""
    named = [o for o in cands if "prob" in o.name.lower()]
    return (named or cands)[0].name if cands else None


def guess(contract, meta: dict | None = None) -> ModelTask:
    """The task of a model whose contract has no ``cosyedge.task`` (written before it existed), guessed as cosyedge
    always did.

    A VAD takes one waveform, and either records recipe provenance with ``task`` ``"vad"`` or streams exactly one
    non-audio output of one channel and one frame per hop (its probability, whatever its name, e.g. ``output`` of
    Silero's own ONNX adopted with ``cosyedge adopt``), and streams no audio. A model with an audio output is an
    enhancer; anything else gives features.

    Args:
        contract (StreamContract): The model's contract.
        meta (dict | None): Its ONNX metadata (:func:`model_metadata`); None: provenance not looked at.
    Returns:
        ModelTask: ``declared`` False.
    """
    cands = _probability_candidates(contract)
    try:
        recipe_task = json.loads((meta or {}).get(RECIPE_META_KEY) or "{}").get("task")
    except (ValueError, AttributeError):
        recipe_task = None
    if recipe_task == VAD and cands:
        out = _pick(cands)
    else:
        out = cands[0].name if len(cands) == 1 else None
    if any(o.kind == "audio" for o in contract.stream_outputs):
        task = ENHANCER
    else:
        task = VAD if out is not None else FEATURES
    return ModelTask(task, out, False)


def resolve(contract, meta: dict | None = None) -> ModelTask:
    """The task of a model: its contract's ``task`` when written, else :func:`guess`.

    Args:
        contract (StreamContract): The model's contract (``task`` ``""``: not written).
        meta (dict | None): Its ONNX metadata, for the guess (recipe provenance).
    Returns:
        ModelTask: for a declared VAD, ``speech_output`` is its one-value-per-hop output (the one named like a
        probability first), None when it has none; a declared enhancer or feature extractor has none.
    """
    task = getattr(contract, "task", "")
    if not task:
        return guess(contract, meta)
    out = _pick(_probability_candidates(contract)) if task == VAD else None
    return ModelTask(task, out, True)


def to_write(task: str | None, contract, meta: dict | None, where: str = "model") -> str:
    """The task streamify and adopt write into a new contract.

    Args:
        task (str | None): The task the caller gives (a recipe's); None: the source's own ``cosyedge.task`` if it
            has one, else :func:`guess` from the new contract and the source's metadata; ``""``: none written (the
            contract of an older model, for exports whose content hash a committed baseline pins).
        contract (StreamContract): The new contract (its outputs).
        meta (dict | None): The source model's metadata (and any provenance to be added).
        where (str): The model as a refusal names it.
    Returns:
        str: one of :data:`TASKS`, or ``""``.
    Raises:
        ArtifactError: ``task`` (or the source's) is not one of :data:`TASKS`.
    """
    if task == "":
        return ""
    if task is None:
        task = (meta or {}).get("cosyedge.task") or guess(contract, meta).task
    return check_task(task, where)


def model_metadata(model) -> dict:
    """The ONNX ``metadata_props`` of a model (empty when it cannot be read).

    Args:
        model (str | Path | Engine): An ``.onnx`` path (read here); or an engine object: a model on a Triton server
            (its ``metadata``), a loaded engine holding its read model (``source``: not read again), another engine
            (its ``model_path`` read here).
    Returns:
        dict[str, str]: key -> value.
    """
    if hasattr(model, "metadata") and hasattr(model, "contract"):
        return dict(model.metadata)
    try:
        source = getattr(model, "source", None)
        if source is not None:
            proto = source.proto
        else:
            from cosyedge.artifacts import load_onnx

            proto = load_onnx(getattr(model, "model_path", model), load_external_data=False)
        return {p.key: p.value for p in proto.metadata_props}
    except Exception:  # the engine loader already validated it; no metadata: not a recipe
        return {}


def task_of(engine) -> ModelTask:
    """:func:`resolve` for a loaded engine (its ``contract``; :func:`model_metadata` read only to guess)."""
    contract = engine.contract
    return resolve(contract, None if getattr(contract, "task", "") else model_metadata(engine))
