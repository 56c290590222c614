"""The file driver: an audio file, block by block, through an engine's stream loop into a sink.

:func:`stream_file` reads an open :class:`~cosyedge.audio.AudioReader` block by block, mixes each block to mono,
resamples it to the model rate (``soxr.ResampleStream``, HQ: the one-shot output, however the file is split),
pushes fixed chunks (state carried; a :class:`~cosyedge.runtime.stream.DelayCompensator` keeps what is short of a
chunk, drops the sink's ``delay_samples`` leading outputs and flushes the tail with zeros) and hands every chunk's
outputs to a sink. Memory stays at a few blocks however long the file is.

A sink has:

* ``delay_samples`` (int): leading model outputs to drop (an enhancer's model delay; 0 for a VAD);
* ``chunk(outputs, x) -> y``: the outputs of one pushed chunk (``outputs``: the session's name -> array mapping,
  read at once; ``x``: the chunk pushed, float32 (1, 1, chunk)) -> the model-rate audio of that chunk, float32
  (1, 1, chunk) (a sink with no audio returns zeros);
* ``output(y, start, final)``: the model-rate audio known so far after the delay, float32 (n,), ``start`` the
  model-rate index of ``y[0]``; ``final`` on the flush;
* ``advance(frames_read, final)``: the input frames read so far (file rate); ``final`` once at the end.

:class:`AudioFileSink` is the enhancer's (:func:`cosyedge.enhance.enhance_file`);
:class:`cosyedge.vad.stream.SegmentSink` the VAD's (:func:`cosyedge.vad.stream.detect_file`).
"""

from __future__ import annotations

import numpy as np

from cosyedge.errors import ArtifactError


def stream_file(reader, session, sink, block_frames: int | None = None, progress: bool = False,
                label: str = "enhance") -> tuple[FileStream, float]:
    """Stream every block of ``reader`` through ``session`` into ``sink``, then flush.

    Args:
        reader (AudioReader): Open reader (any rate and channel count: mixed to mono).
        session (StreamSession): Active session, batch 1; its ``chunk_samples`` is the chunk.
        sink: See the module docstring.
        block_frames (int | None): Input frames read per block (default :data:`~cosyedge.audio.BLOCK_FRAMES`);
            the result does not depend on it.
        progress (bool): A tqdm bar on stderr, in seconds of audio.
        label (str): The bar's label.
    Returns:
        tuple[FileStream, float]: the streamer (``fed``, ``chunks``) and the elapsed wall time, s (the whole loop:
        decoding, resampling, the model and the sink).
    Raises:
        CosyEdgeError: from the reader, the session or the sink.
    """
    import time

    from cosyedge.audio import BLOCK_FRAMES

    t0 = time.perf_counter()
    streamer = FileStream(session, reader.sample_rate_hz, sink)
    for x in with_progress(reader, block_frames or BLOCK_FRAMES, progress, label):
        streamer.feed(x.mean(axis=1) if x.shape[1] > 1 else x[:, 0], reader.frames_read)
    streamer.finish(reader.frames_read)
    return streamer, time.perf_counter() - t0


def with_progress(reader, block_frames: int, show: bool, label: str = "enhance"):
    """Yield ``reader``'s blocks, with a tqdm bar in seconds of audio when ``show``."""
    if not show:
        yield from reader.blocks(block_frames)
        return
    import logging

    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    sr = reader.sample_rate_hz
    with logging_redirect_tqdm(loggers=[logging.getLogger("cosyedge")]), \
            tqdm(total=reader.duration_s, unit="s", desc=label, leave=False,
                 bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} s audio [{elapsed}<{remaining}]") as bar:
        for x in reader.blocks(block_frames):
            bar.update(min(x.shape[0] / sr, max(bar.total - bar.n, 0.0)))  # a header that undercounts
            yield x


class FileStream:
    """Input blocks (file rate, mono) -> model-rate chunks -> ``sink``.

    Keeps, between blocks, only what cannot be used yet: model-rate samples short of a chunk (in the
    :class:`~cosyedge.runtime.stream.DelayCompensator`) and the input resampler's filter state. At the end
    (:meth:`finish`) the resampler is flushed and the compensator pushes ``sink.delay_samples`` zeros and the last
    chunk's zero padding, cutting the model output to the model-rate input length.

    Args:
        session (StreamSession): Active session, batch 1.
        sample_rate_hz (int): The file's rate, Hz.
        sink: See :mod:`cosyedge.drivers.file`.
    """

    def __init__(self, session, sample_rate_hz: int, sink):
        from cosyedge.audio import soxr
        from cosyedge.runtime.stream import DelayCompensator

        self.session, self.sink = session, sink
        self.rate, self.model_rate = int(sample_rate_hz), int(session.contract.sample_rate_hz)
        self.rs_in = None
        if self.rate != self.model_rate:
            self.rs_in = soxr.ResampleStream(self.rate, self.model_rate, 1, dtype="float32", quality="HQ")
        self.comp = DelayCompensator(self._push, session.chunk_samples, int(sink.delay_samples))

    def _push(self, x: np.ndarray) -> np.ndarray:
        return self.sink.chunk(self.session.push(x, copy=False), x)

    @property
    def fed(self) -> int:
        """int: model-rate input samples streamed (the file's, not the flush)."""
        return self.comp.fed

    @property
    def chunks(self) -> int:
        """int: chunks pushed."""
        return self.comp.chunks

    def feed(self, mono: np.ndarray, frames_read: int) -> None:
        """Stream one block: float32 (t,) mono at the file rate; ``frames_read`` frames read so far."""
        mono = np.ascontiguousarray(mono, dtype=np.float32)
        xm = self.rs_in.resample_chunk(mono, last=False) if self.rs_in is not None else mono
        self._output(self.comp.feed(xm))
        self.sink.advance(frames_read, final=False)

    def finish(self, frames_read: int) -> None:
        """Flush everything (the sink's ``advance`` then gets ``final``)."""
        tail = self.rs_in.resample_chunk(np.zeros(0, np.float32), last=True) if self.rs_in is not None else None
        if tail is not None and tail.shape[0]:
            self._output(self.comp.feed(tail))
        self._output(self.comp.finish(ndim=1), final=True)
        self.sink.advance(frames_read, final=True)

    def _output(self, y: np.ndarray, final: bool = False) -> None:
        self.sink.output(y, self.comp.kept - y.shape[0], final)


class AudioFileSink:
    """The enhancer's file sink: the model output, delay dropped, resampled back to the file rate and written,
    never ahead of the input read so far; at the end zero-padded to exactly the input's frames.

    Args:
        writer (IncrementalAudioWriter): Receives float32 (n,) blocks at the file rate.
        contract (StreamContract): The model's (``output``, ``delay_samples``, ``sample_rate_hz``).
        sample_rate_hz (int): The file's rate, Hz.
        model_name (str): The model as the NaN message names it.
    Attributes:
        written (int): File-rate samples written.
    Raises (from :meth:`output`):
        ArtifactError: the model produced NaN/Inf samples (the message gives the first one's time).
    """

    def __init__(self, writer, contract, sample_rate_hz: int, model_name: str):
        from cosyedge.audio import soxr

        self.writer, self.model_name = writer, model_name
        self.out_name = contract.output
        self.delay_samples = int(contract.delay_samples)
        self.rate, self.model_rate = int(sample_rate_hz), int(contract.sample_rate_hz)
        self.rs_out = None
        if self.rate != self.model_rate:
            self.rs_out = soxr.ResampleStream(self.model_rate, self.rate, 1, dtype="float32", quality="HQ")
        self.ahead = np.zeros(0, np.float32)  # file-rate output beyond the input frames read so far
        self.written = 0

    def chunk(self, outputs, x: np.ndarray) -> np.ndarray:
        """np.ndarray: the chunk's audio output, float32 (1, 1, chunk) (copied at once by the compensator)."""
        return outputs[self.out_name]

    def output(self, y: np.ndarray, start: int, final: bool) -> None:
        """Check the model-rate outputs ``y`` (float32 (n,), delay dropped, the first at model-rate index
        ``start``) and resample them to the file rate."""
        if not np.isfinite(y).all():
            bad = start + int(np.flatnonzero(~np.isfinite(y))[0])
            raise ArtifactError(f"model {self.model_name} produced NaN/Inf samples (first at "
                                f"{bad / self.model_rate:.3f} s); output not written")
        z = self.rs_out.resample_chunk(y, last=final) if self.rs_out is not None else y
        self.ahead = np.concatenate([self.ahead, z]) if self.ahead.shape[0] else z

    def advance(self, frames_read: int, final: bool) -> None:
        """Write the output samples up to ``frames_read``; at the end zero-pad to exactly that length."""
        n = min(self.ahead.shape[0], frames_read - self.written)
        if n > 0:
            self.writer.write(self.ahead[:n])
            self.written += n
            self.ahead = self.ahead[n:]
        if final and self.written < frames_read:
            self.writer.write(np.zeros(frames_read - self.written, np.float32))
            self.written = frames_read
