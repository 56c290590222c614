"""``cosyedge adopt``: thin click wrapper over :func:`cosyedge.surgery.adopt.adopt` (no logic here)."""

from __future__ import annotations

from pathlib import Path

import click

from cosyedge.cli.options import log_opts

_PATH = click.Path(dir_okay=True, path_type=Path)


def _name_values(values: tuple[str, ...], option: str, cast, example: str) -> dict:
    from cosyedge.errors import UsageError

    out, raw = {}, {}
    for v in values:
        name, sep, value = v.rpartition("=")
        if sep and name in raw:
            raise UsageError(f"{option} {name} is given twice ({raw[name]} and {value}): give it once")
        raw[name] = value
        try:
            if not sep or not name:
                raise ValueError
            out[name] = cast(value)
        except ValueError as err:
            why = f": {err}" if sep and name and " " in str(err) and "invalid literal" not in str(err) else ""
            raise UsageError(f"{option} takes NAME=VALUE (e.g. {example}), got '{v}'{why}") from None
    return out


@click.command("adopt")
@log_opts
@click.argument("onnx_in", type=_PATH)
@click.option("-o", "--output", "out_onnx", type=_PATH, required=True, help="Stream ONNX to write.")
@click.option("--state", "states", multiple=True, metavar="IN=OUT|NAME=SHAPE",
              help="A state pair: input name = output name (repeatable), or a state input's shape where the graph "
                   "does not tell it, at batch 1, N marking the batch axis (e.g. state=2x1x128, h=1xNx32). "
                   "Pairs not given are found from the names (x_in/x_out, "
                   "cache/new_cache, state/stateN, h/hn, a state-named input whose output has its shape) or metadata.")
@click.option("--sample-rate-hz", type=click.IntRange(min=1), required=True, help="Sample rate of the model.")
@click.option("--hop-samples", type=click.IntRange(min=1), required=True,
              help="Samples per call of the graph (its step); chunks are multiples of it.")
@click.option("--delay-samples", type=click.IntRange(min=0), default=0, show_default=True,
              help="Delay of the output behind the input, in samples (e.g. DTLN: 384).")
@click.option("--name", type=str, default=None, help="Model name. Default: the file stem.")
@click.option("--batch-axis", "batch_axis", multiple=True, metavar="NAME=AXIS",
              help="Batch axis of a state input whose shape does not tell (repeatable), e.g. h0=1.")
@click.option("--init", "init", multiple=True, metavar="NAME=VALUE",
              help="Initial value of a state input (repeatable). Default 0.")
@click.option("--const", "consts", multiple=True, metavar="NAME=VALUE",
              help="Fix an input at adopt time (repeatable), e.g. sr=16000 (dtype and shape from the graph).")
@click.option("--frame-samples", type=click.IntRange(min=1), default=None,
              help="Samples per call of a waveform block input of unfixed size (e.g. Silero: 576 with "
                   "--hop-samples 512: 64 samples of context, kept as a state). Default: its fixed size, else the hop.")
@click.option("--time-axis", "time_axis", multiple=True, metavar="NAME=AXIS",
              help="Time axis of a features input or output whose shape does not tell (repeatable), e.g. mix=2.")
@click.option("--atol", type=click.FloatRange(min=0, max=1, min_open=True), default=1e-6, show_default=True,
              help="Proof tolerance: max abs error against the graph's own state loop, relative to max(1, peak).")
def adopt(onnx_in: Path, out_onnx: Path, states: tuple[str, ...], sample_rate_hz: int, hop_samples: int,
          delay_samples: int, name: str | None, batch_axis: tuple[str, ...], init: tuple[str, ...],
          consts: tuple[str, ...], frame_samples: int | None, time_axis: tuple[str, ...], atol: float) -> None:
    """Adopt an ONNX that already streams (its own state inputs/outputs) into a proved cosyedge stream ONNX.

    States become state_in.NN / state_out.NN, batch-first (a Transpose where the graph has the batch on
    another axis), the batch made dynamic where the graph allows it (else batch 1 only: StreamPool and Triton
    refuse it), a one-hop graph is wrapped in a Scan so any multiple of the hop streams. Before writing, the
    result is streamed on real speech against the graph's own state loop (exit 5 when they differ) and every
    state must change the output (exit 2 for a state that carries nothing or a graph that does not stream).
    State pairs are given (--state IN=OUT) or found from names (x_in/x_out, h_in/h_out, cache/new_cache,
    states_in/states_out, a state_pairs metadata entry); the original names stay in the cosyedge.adopted
    metadata. build --fp16, --int8 and --sparse convert inside the Scan bodies. See docs/adopt.md.

    Inputs: one waveform (N, 1, T); or a block of L samples per call ((N, L), (N, 1, L), (L,)): with
    --hop-samples H < L the graph expects L - H samples of context, kept as a state; or features (STFT frames,
    several inputs allowed, time axis from the shape or --time-axis). Side inputs such as sr: --const. Outputs
    of one value per call (a VAD's probability) stream as one frame per hop.

    Example: cosyedge adopt model_1.onnx -o m.stream.onnx --state h_in=h_out --sample-rate-hz 16000
    --hop-samples 160; Silero: cosyedge adopt silero_vad.onnx -o vad.stream.onnx --const sr=16000
    --frame-samples 576 --hop-samples 512 --sample-rate-hz 16000
    """
    from cosyedge.cli.export import _check_stream_output
    from cosyedge.surgery.adopt import adopt as adopt_api
    from cosyedge.surgery.adopt.canon import parse_const

    _check_stream_output(out_onnx, False, [onnx_in])  # a .onnx file name, as streamify's (exit 2)
    adopt_api(onnx_in, out_onnx, state_pairs=list(states) or None, sample_rate_hz=sample_rate_hz,
              hop_samples=hop_samples, delay_samples=delay_samples, name=name,
              batch_axes=_name_values(batch_axis, "--batch-axis", int, "h0=1"),
              init=_name_values(init, "--init", float, "h0=0.5"), atol=atol,
              consts=_name_values(consts, "--const", parse_const, "sr=16000"), frame_samples=frame_samples,
              time_axes=_name_values(time_axis, "--time-axis", int, "mix=2"))
    click.echo(str(out_onnx))
