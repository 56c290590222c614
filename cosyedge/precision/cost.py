"""What a reduced-precision or pruned build costs: its output SNR vs the FP32 parent on speech, logged at build time.

``cosyedge compare`` is the full measurement (both modes, states, PESQ-WB, SI-SNR); this is the one number a build
prints so that a build that changes the model audibly says so at once. It streams the first
:data:`SECONDS` of the bundled noisy recording (``cosyedge/assets/demo/noisy.wav``) from zero state, free-running, as
``cosyedge compare`` does (measured: GTCRN INT8 about 13 dB, 2:4 without fine-tuning about 5 dB, both warned; the
bundled reference INT8 and NSNet2 INT8 far above the limit).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cosyedge.log import LOG

WARN_SNR_DB = 20.0
"""float: below this output SNR (dB) of the built model vs its FP32 parent on speech, the build warns."""
SECONDS = 8.0
"""float: seconds of the bundled noisy recording streamed by :func:`output_cost`."""
DEMO_NOISY = Path(__file__).resolve().parents[1] / "assets" / "demo" / "noisy.wav"


def output_cost(source: Any, candidate: str | Path, who: str, what: str, advice: str) -> float | None:
    """Output SNR (dB) of ``candidate`` vs ``source`` over the first :data:`SECONDS` of the bundled noisy recording
    (at the model rate), both streamed from zero state one hop per call (free-running); logged, with a warning below
    :data:`WARN_SNR_DB`.

    Args:
        source (SourceModel): The FP32 parent (its parsed contract is reused).
        candidate (str | Path): The built model (same contract).
        who (str): Log prefix (``"sparsify"``, ``"int8"``).
        what (str): What changed the model, for the warning (``"INT8 quantization"``).
        advice (str): What to do about it, for the warning.
    Returns:
        float | None: the SNR in dB (``inf`` when identical); None for a model that does not stream one audio input
        to audio (a VAD, a features model: ``cosyedge compare`` measures those) or that does not run.
    """
    snr = demo_snr(source, candidate)
    if snr is None:
        return None
    on = f"on noisy speech (the first {SECONDS:g} s of the demo recording)"
    if snr < WARN_SNR_DB:
        LOG.warning("%s: output SNR %.1f dB vs the FP32 model %s: %s changed this model audibly (measure with "
                    "cosyedge compare; %s)", who, snr, on, what, advice)
    else:
        LOG.info("%s: output SNR %.1f dB vs the FP32 model %s", who, snr, on)
    return snr


def demo_snr(source: Any, candidate: str | Path) -> float | None:
    """The number :func:`output_cost` logs, without logging it: output SNR (dB, float; ``inf`` when identical) of
    ``candidate`` vs ``source`` (SourceModel) over the first :data:`SECONDS` of the bundled noisy recording, both
    streamed from zero state one hop per call; None for a model that does not stream one audio input to audio or
    does not run."""
    from cosyedge.audio import load_audio, to_model_input
    from cosyedge.errors import CosyEdgeError
    from cosyedge.precision.output_snr import output_snr_db

    try:
        contract = source.contract
        if not contract.is_audio or len(contract.stream_inputs) != 1:
            return None
        x, sr = load_audio(DEMO_NOISY)
        speech = to_model_input(x[: int(SECONDS * sr)], sr, contract.sample_rate_hz)
        speech = speech[: len(speech) // contract.hop_samples * contract.hop_samples]
        return float(output_snr_db(source, candidate, speech))
    except (CosyEdgeError, ValueError, KeyError):
        return None
