"""``cosyedge devices``: list the audio devices PortAudio sees (thin layer over :mod:`cosyedge.realtime.devices`)."""

from __future__ import annotations

import click

from cosyedge.cli.options import log_opts


@click.command("devices")
@log_opts
def devices():
    """List audio devices: index, input/output channels, default rate, host API, name.

    '>' marks the default input, '<' the default output. Give the index or the name to
    'cosyedge run mic --device'. Needs the audio extra (pip install 'cosyedge[audio]') and PortAudio.
    Exits 4 when no device is found (no audio server running and no sound card).
    """
    from cosyedge.errors import DependencyError
    from cosyedge.realtime.devices import NO_SERVER_HINT, format_devices, list_devices

    found = list_devices()
    if not found:
        raise DependencyError(f"no audio devices found: {NO_SERVER_HINT}")
    click.echo(format_devices(found))
