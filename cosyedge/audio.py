"""Audio file I/O and validation for file-level streaming (``cosyedge run IN -o OUT``).

* :class:`AudioReader` opens wav/flac/ogg (anything libsndfile decodes) and yields validated float32
  (t, C) blocks (``cosyedge run`` streams files through with it); :func:`load_audio` reads a whole file
  the same way. Missing, corrupt, empty and non-finite files get a one-line error; heavy clipping only
  warns.
* :func:`to_model_input` downmixes to mono (channel mean) and resamples to the model rate (soxr, HQ);
  :func:`from_model_output` resamples back and fixes the length to the input's.
* :func:`check_output_path` validates an output path *before* any processing (extension, folder,
  write permission by probing, see :func:`cosyedge.artifacts.check_writable`); :func:`write_audio` writes atomically (temp file + rename), so a
  failure never leaves a partial file and never destroys an existing one.
* :class:`IncrementalAudioWriter` writes blocks as they come (``cosyedge run`` files and live recordings) into
  a hidden temp file next to the destination (``.<name>.<pid>-<host>-<random>.part<ext>``) and renames it onto the
  destination in :meth:`~IncrementalAudioWriter.close` (libsndfile rewrites the WAV/FLAC header on close, so
  the renamed file is complete and valid, also after Ctrl-C); a recording with no frames leaves no file
  and keeps any existing one. A part file left by a killed process (SIGKILL) is deleted by the next writer of the
  same destination (:func:`remove_stale_parts`).

Errors follow :mod:`cosyedge.errors`: a missing/corrupt/empty audio file is an
:class:`~cosyedge.errors.ArtifactError` (exit 3), and so is an unwritable output path; NaN/Inf samples
and an unsupported output extension are :class:`~cosyedge.errors.UsageError` (exit 2).

Reading and resampling are in :mod:`cosyedge.audio_read`, writing and part files in :mod:`cosyedge.audio_write`; this
module re-exports both.
"""

from cosyedge.audio_read import (  # noqa: F401 - re-exported
    BLOCK_FRAMES, CANCEL_WARN_DB, CLIP_LEVEL, CLIP_WARN_FRACTION, MIN_SAMPLE_RATE_HZ, OUT_OF_RANGE_LEVEL, SILENT_POWER,
    AudioReader, _wav_declared_frames, from_model_output, load_audio, sf, soxr, to_model_input)
from cosyedge.audio_write import (  # noqa: F401 - re-exported
    EXACT_FORMATS, OUTPUT_FORMATS, SFE_SYSTEM, IncrementalAudioWriter, _host_tag, _libsndfile_os_error, _part_owner,
    _pid_alive, _write_failed, check_output_path, remove_stale_parts, write_audio)
