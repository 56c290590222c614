"""Drive a live stream: start, wait for the end (duration, Ctrl-C, error), stop, keep the recording.

:func:`run_live` is independent of the audio library: ``stream`` is anything with ``start()``,
``stop()``, ``close()`` and an ``active`` attribute (a ``sounddevice`` stream, or a fake one in
tests) whose callback feeds a :class:`~cosyedge.realtime.enhancer.RealtimeEnhancer`.
"""

from __future__ import annotations

import time

from cosyedge.errors import ArtifactError, UsageError
from cosyedge.log import LOG
from cosyedge.realtime.enhancer import RealtimeEnhancer


def run_live(enhancer: RealtimeEnhancer, stream, writer=None, duration_s: float | None = None,
             poll_s: float = 0.02, on_started=None, input_writer=None) -> dict:
    """Run ``stream`` into ``enhancer`` until ``duration_s`` of audio was captured, Ctrl-C, or an error.

    Whatever ends the stream, the stream is stopped and closed, the worker drains what was captured,
    and ``writer`` and ``input_writer`` are closed (the files renamed into place), so a partial
    recording is kept.

    Args:
        enhancer (RealtimeEnhancer): Core fed by ``stream``'s callback (its worker is started here).
        stream: ``start()``/``stop()``/``close()``/``active`` (e.g. ``sounddevice.InputStream``).
        writer (IncrementalAudioWriter | None): Closed at the end (the enhancer writes into it).
        duration_s (float | None): Stop after this much captured audio, s (device frames / rate);
            None: until Ctrl-C (KeyboardInterrupt) or an error.
        poll_s (float): Main-thread polling period, s.
        on_started (Callable[[], None] | None): Called once the stream runs (tests wait on it).
        input_writer (IncrementalAudioWriter | None): The enhancer's ``input_writer`` (the model-rate
            input), closed at the end like ``writer``.
    Returns:
        dict: :meth:`RealtimeStats.as_dict` plus ``interrupted`` (bool, stopped by Ctrl-C),
        ``output`` (str | None, the file written), ``output_s`` (float, seconds in the file) and
        ``saved_input`` (str | None, the input file written).
    Raises:
        UsageError: ``duration_s`` not positive; the input rate changed mid-stream.
        ArtifactError: the stream stopped by itself (device unplugged, audio server gone).
        CosyEdgeError: from the session or the writer. In every case the recording so far is kept.
    """
    if duration_s is not None and not float(duration_s) > 0:
        raise UsageError(f"--duration must be a positive number of seconds, got {duration_s}")
    interrupted = False
    out_path = in_path = None
    enhancer.start()
    try:
        try:
            stream.start()
            if on_started is not None:
                on_started()
            want = None if duration_s is None else round(float(duration_s) * enhancer.device_rate_hz)
            while True:
                enhancer.check()
                if not enhancer.running:
                    enhancer.check()
                    break
                if want is not None and enhancer.in_ring.written >= want:
                    break
                if not stream.active:
                    got = enhancer.in_ring.written / enhancer.device_rate_hz
                    raise ArtifactError(f"the audio stream stopped by itself after {got:.2f} s (device unplugged "
                                        f"or audio server gone); the recording so far is kept")
                time.sleep(poll_s)
        except KeyboardInterrupt:
            interrupted = True
            LOG.info("stopped by Ctrl-C")
        finally:
            try:
                stream.stop()
            finally:
                stream.close()
        enhancer.stop(drain=True)
    finally:
        if enhancer.running:
            enhancer.stop(drain=False)
        try:
            if input_writer is not None:
                in_path = input_writer.close()
        finally:
            if writer is not None:
                out_path = writer.close()
    result = enhancer.stats().as_dict()
    result.update(interrupted=interrupted, output=None if out_path is None else str(out_path),
                  output_s=0.0 if writer is None else writer.duration_s,
                  saved_input=None if in_path is None else str(in_path))
    return result
