"""File-level API: enhance one audio file by streaming it chunk by chunk through an engine.

``enhance_file("noisy.wav", "clean.wav")`` reads any sample rate and channel count block by block,
downmixes to mono, resamples to the model rate, streams fixed chunks through an
:class:`~cosyedge.runtime.ort.OrtStreamSession` (state carried), compensates the model delay, resamples
back and writes a **mono** file at the input's sample rate with the input's length, aligned with it.
Memory does not grow with the file's length. The loop is the file driver's
(:func:`cosyedge.drivers.file.stream_file`) with the audio sink (:class:`~cosyedge.drivers.file.AudioFileSink`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cosyedge.errors import UsageError
from cosyedge.log import LOG


MAX_RECORDED_CHUNKS = 1 << 20
"""int: per-chunk latencies kept for a file's report (8 MB; 2.9 h of 10 ms chunks; a longer file reports
the percentiles of its last this many chunks)."""
PROGRESS_MIN_S = 30.0
"""float: inputs longer than this (seconds) get a progress bar on a terminal."""


def enhance_file(input: str | Path, output: str | Path, engine: str | Path | None = None,
                 chunk_samples: int | None = None, threads: int = 1, chunk_ms: float | None = None,
                 progress: bool | None = None, block_frames: int | None = None) -> dict:
    """Enhance an audio file with a streaming model and write the result, block by block.

    The file is streamed through: a block of the input is read (:class:`~cosyedge.audio.AudioReader`),
    downmixed, resampled to the model rate (``soxr.ResampleStream``), pushed chunk by chunk (state
    carried), resampled back and appended to the output (:class:`~cosyedge.audio.IncrementalAudioWriter`).
    Memory stays at a few blocks however long the file is, and the samples written are bit-identical
    to processing the whole file at once (soxr's stream resampler gives its one-shot output; the model
    sees the same chunks). The output path is validated before any processing and written to a temp
    file renamed at the end: an existing file survives any failure or interrupt. Output: mono, float
    clipped to [-1, 1], the input's sample rate and length (frames), aligned with the input (the model
    delay is compensated: ``delay_samples`` zeros flush the tail and the first ``delay_samples`` model
    outputs are dropped).

    Args:
        input (str | Path): Input audio (wav/flac/ogg), any sample rate, any channel count (mixed to mono).
        output (str | Path): Output audio; ``.wav``/``.flac`` (PCM 16-bit) or ``.ogg`` (Vorbis).
        engine (str | Path | Engine | None): Engine folder or streaming ``.onnx`` (loaded here), or an engine object
            already loaded (:func:`cosyedge.builders.cache.load_or_rebuild`; a model on a Triton server:
            :func:`cosyedge.serve.client.connect`), used as it is; defaults to the bundled reference engine (built
            on first use, see :func:`cosyedge.builders.cache.default_engine`).
        chunk_samples (int | None): Samples per chunk at the model rate (multiple of the total stride);
            defaults to one hop.
        threads (int): ONNX Runtime threads.
        chunk_ms (float | None): Chunk length in ms instead of ``chunk_samples`` (e.g. 10.0).
        progress (bool | None): tqdm progress bar on stderr; None: only on a terminal, not under ``-q``, and
            for inputs over :data:`PROGRESS_MIN_S`.
        block_frames (int | None): Input frames read per block (default
            :data:`~cosyedge.audio.BLOCK_FRAMES`); the result does not depend on it.
    Returns:
        dict: ``duration_s`` (float, s), ``elapsed_s`` (float, s: the whole streaming loop, decoding,
        resampling and writing included), ``rtf`` (float), ``latency_ms_p50`` / ``latency_ms_p99``
        (float, ms per chunk, over the last :data:`MAX_RECORDED_CHUNKS` chunks), ``chunks`` (int),
        ``chunk_samples`` (int), ``chunk_ms`` (float), ``delay_samples`` (int, model rate),
        ``delay_ms`` (float), ``sample_rate_hz_in`` / ``sample_rate_hz_out`` / ``model_sample_rate_hz``
        (int, Hz), ``channels_in`` (int), ``engine`` (str), ``output`` (str).
    Raises:
        UsageError: unsupported output extension, NaN/Inf input, bad chunk length, both chunk options, a
            model that does not map a waveform to a waveform (a VAD model: one line saying so and how to get
            its speech segments, ``cosyedge run FILE --vad``).
        ArtifactError: unwritable output path, input missing/corrupt/empty, engine missing/stale, model
            output not finite.
    """
    from cosyedge.artifacts import check_not_input
    from cosyedge.audio import AudioReader, IncrementalAudioWriter, check_output_path
    from cosyedge.builders.cache import default_engine, load_or_rebuild
    from cosyedge.drivers import pick_sink
    from cosyedge.drivers.file import AudioFileSink, stream_file

    if chunk_samples is not None and chunk_ms is not None:
        raise UsageError("give chunk_samples or chunk_ms, not both")
    check_output_path(output)
    check_not_input(input, output)
    with AudioReader(input) as reader:
        sr = reader.sample_rate_hz
        eng = load_or_rebuild(engine if engine is not None else default_engine())
        c = eng.contract
        pick_sink(eng, vad=False, where=None if engine is None else str(engine))
        if chunk_ms is not None:
            chunk_samples = c.chunk_samples(chunk_ms)
        chunk = int(c.hop_samples if chunk_samples is None else chunk_samples)
        c.check_chunk(chunk)
        expect = -(-(reader.frames * c.sample_rate_hz // sr + c.delay_samples) // chunk) + 1
        session = eng(chunk_samples=chunk, threads=threads, max_latency_records=min(expect, MAX_RECORDED_CHUNKS))
        if progress is None:
            progress = LOG.progress_wanted() and reader.duration_s > PROGRESS_MIN_S
        with LOG.stage(f"enhance {input} -> {output}"), session:
            writer = IncrementalAudioWriter(output, sr)
            try:
                sink = AudioFileSink(writer, c, sr, str(eng.model_path))
                streamer, elapsed = stream_file(reader, session, sink, block_frames, progress)
            except BaseException:
                writer.discard()
                raise
            writer.close()
            lat = session.latencies_ms
    duration = streamer.fed / c.sample_rate_hz
    return dict(
        duration_s=duration,
        elapsed_s=elapsed,
        rtf=elapsed / duration if duration > 0 else 0.0,
        latency_ms_p50=float(np.percentile(lat, 50)) if lat.size else 0.0,
        latency_ms_p99=float(np.percentile(lat, 99)) if lat.size else 0.0,
        chunks=streamer.chunks,
        chunk_samples=chunk,
        delay_samples=c.delay_samples,
        chunk_ms=1000.0 * chunk / c.sample_rate_hz,
        delay_ms=1000.0 * c.delay_samples / c.sample_rate_hz,
        sample_rate_hz_in=sr,
        sample_rate_hz_out=sr,
        model_sample_rate_hz=c.sample_rate_hz,
        channels_in=reader.channels,
        engine=str(eng.folder or eng.model_path),
        output=str(output),
    )

