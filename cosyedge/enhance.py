"""File-level API: enhance one audio file by streaming it chunk by chunk through an engine.

``enhance_file("noisy.wav", "clean.wav")`` reads any sample rate and channel count, downmixes to mono,
resamples to the model rate, streams fixed chunks through an
:class:`~cosyedge.runtime.ort.OrtStreamSession` (state carried), compensates the model delay, resamples
back and writes a **mono** file at the input's sample rate with the input's length, aligned with it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cosyedge.errors import ArtifactError, UsageError
from cosyedge.log import LOG


MAX_CHUNK_MS = 10_000.0
"""float: longest chunk accepted, ms (a chunk is buffered whole; 10 s bounds memory)."""


def chunk_samples_from_ms(chunk_ms: float, sample_rate_hz: int, total_stride: int = 1) -> int:
    """Convert a chunk length in ms to samples at ``sample_rate_hz`` (Hz).

    Args:
        chunk_ms (float): Chunk length, ms, in (0, :data:`MAX_CHUNK_MS`].
        sample_rate_hz (int): Model sample rate, Hz.
        total_stride (int): The chunk must be a multiple of this many samples (the model's total stride).
    Raises:
        UsageError: ``chunk_ms`` is not finite, not positive, too long, not a whole number of samples, or
            not a multiple of the total stride (the message gives the multiple in ms).
    """
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


def enhance_file(input: str | Path, output: str | Path, engine: str | Path | None = None,
                 chunk_samples: int | None = None, threads: int = 1, chunk_ms: float | None = None) -> dict:
    """Enhance an audio file with a streaming model and write the result.

    The output path is validated before any processing; the output is written atomically (an existing
    file survives any failure). Output: mono, float clipped to [-1, 1], the input's sample rate and
    length (frames), aligned with the input (model delay compensated).

    Args:
        input (str | Path): Input audio (wav/flac/ogg), any sample rate, any channel count (mixed to mono).
        output (str | Path): Output audio; ``.wav``/``.flac`` (PCM 16-bit) or ``.ogg`` (Vorbis).
        engine (str | Path | None): Engine folder or streaming ``.onnx``; defaults to the bundled
            reference engine (built on first use, see :func:`cosyedge.build.ort.default_engine`).
        chunk_samples (int | None): Samples per chunk at the model rate (multiple of the total stride);
            defaults to one hop.
        threads (int): ONNX Runtime threads.
        chunk_ms (float | None): Chunk length in ms instead of ``chunk_samples`` (e.g. 10.0).
    Returns:
        dict: ``duration_s`` (float, s), ``elapsed_s`` (float, s, streaming loop only), ``rtf`` (float),
        ``latency_ms_p50`` / ``latency_ms_p99`` (float, ms per chunk), ``chunks`` (int),
        ``chunk_samples`` (int), ``chunk_ms`` (float), ``delay_samples`` (int, model rate),
        ``delay_ms`` (float), ``sample_rate_hz_in`` / ``sample_rate_hz_out`` / ``model_sample_rate_hz``
        (int, Hz), ``channels_in`` (int), ``engine`` (str), ``output`` (str).
    Raises:
        UsageError: unsupported output extension, NaN/Inf input, bad chunk length, both chunk options.
        ArtifactError: unwritable output path, input missing/corrupt/empty, engine missing/stale, model
            output not finite.
    """
    from cosyedge.artifacts import check_not_input
    from cosyedge.audio import check_output_path, from_model_output, load_audio, to_model_input, write_audio
    from cosyedge.build.ort import default_engine, load_engine
    from cosyedge.runtime.stream import enhance_array

    if chunk_samples is not None and chunk_ms is not None:
        raise UsageError("give chunk_samples or chunk_ms, not both")
    check_output_path(output)
    check_not_input(input, output)
    x, sr = load_audio(input)
    eng = load_engine(engine if engine is not None else default_engine())
    c = eng.contract
    if chunk_ms is not None:
        chunk_samples = chunk_samples_from_ms(chunk_ms, c.sample_rate_hz, c.total_stride)
    session = eng(chunk_samples=chunk_samples, threads=threads)
    with LOG.stage(f"enhance {input} -> {output}"):
        xm = to_model_input(x, sr, c.sample_rate_hz)
        with session:
            ym, stats = enhance_array(session, xm, return_stats=True)
        if not np.isfinite(ym).all():
            bad = np.flatnonzero(~np.isfinite(ym))
            raise ArtifactError(f"model {eng.model_path} produced {bad.size} NaN/Inf samples "
                                f"(first at {bad[0] / c.sample_rate_hz:.3f} s); output not written")
        y = from_model_output(ym, c.sample_rate_hz, sr, length=x.shape[0])
        write_audio(output, y, sr)
    result = stats.as_dict()
    result.update(
        chunk_ms=1000.0 * stats.chunk_samples / c.sample_rate_hz,
        delay_ms=1000.0 * c.delay_samples / c.sample_rate_hz,
        sample_rate_hz_in=sr,
        sample_rate_hz_out=sr,
        model_sample_rate_hz=c.sample_rate_hz,
        channels_in=int(x.shape[1]),
        engine=str(eng.folder or eng.model_path),
        output=str(output),
    )
    result.pop("sample_rate_hz", None)
    return result
