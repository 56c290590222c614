"""Re-export the bundled reference models after a graph-only change, and prove that nothing audible changed.

For a change to how the model is written as a graph (not to its weights), e.g. the pitch comb's dense identity
framing conv replaced by :class:`cosyedge.train.nn.CausalFraming`:

1. both weight files (``reference.safetensors`` and the 2:4 ``reference.sparse.safetensors``) are loaded (a
   legacy checkpoint is upgraded by :func:`cosyedge.train.reference.model.load_reference`) and, when their tensors
   changed, saved again with the same config and notes;
2. both streaming ONNX files are exported again, and the sparse one is stamped with the new dense file's
   SHA-256 (:func:`cosyedge.precision.sparsity.stamp_dense_parent`), as ``scripts/training/finetune_sparse.py`` does;
3. the bundled demo recording (noisy and clean) is streamed through each old and new ONNX in chunks of
   160 and 480 samples (ONNX Runtime, 1 thread): every output sample must match within ``--atol`` (default
   0: bit-identical), else the old files are put back and the script exits 1.

Afterwards re-measure what is keyed by the model's SHA-256: ``cosyedge check --update-baseline --precisions
fp16,int8-sparse`` and ``python scripts/data/make_testset.py --eval-json docs/eval/testset.json``.

Usage::

    python scripts/training/reexport_bundled.py [--atol 0]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def stream_outputs(onnx_path: Path, signals: list[np.ndarray]) -> list[np.ndarray]:
    """Stream each float32 (T,) signal through ``onnx_path`` with chunks of 160 and 480 samples.

    Returns:
        list[np.ndarray]: float32 (T,) outputs, signal-major, chunk-minor.
    """
    from cosyedge.runtime.ort import OrtStreamSession
    from cosyedge.runtime.stream import enhance_array

    outs = []
    for x in signals:
        for chunk in (160, 480):
            with OrtStreamSession(onnx_path, chunk_samples=chunk) as session:
                outs.append(enhance_array(session, x))
    return outs


def resave_if_upgraded(weights: Path) -> bool:
    """Load ``weights`` and save them again when the loaded state dict differs from the file's tensors (a
    legacy checkpoint upgraded on load); config and notes are kept. Returns True when the file was rewritten."""
    from safetensors import safe_open

    from cosyedge.train.reference.model import load_reference, save_reference

    with safe_open(str(weights), framework="pt") as f:
        meta = f.metadata() or {}
        keys = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    model = load_reference(weights)
    if keys == {k: tuple(v.shape) for k, v in model.state_dict().items()}:
        return False
    save_reference(model, weights, extra=json.loads(meta["notes"]) if "notes" in meta else None)
    return True


def main(argv: list[str] | None = None) -> int:
    """Re-export, stamp and verify; returns the exit code (0 ok, 1 outputs differ)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--atol", type=float, default=0.0, help="largest allowed output difference, old vs new")
    args = ap.parse_args(argv)

    import soundfile as sf

    from cosyedge.train.reference.export import export_reference
    from cosyedge.models import (REFERENCE_SPARSE_STREAM_ONNX, REFERENCE_SPARSE_WEIGHTS, REFERENCE_STREAM_ONNX,
                                 REFERENCE_WEIGHTS)
    from cosyedge.precision.sparsity import stamp_dense_parent

    pairs = [(REFERENCE_WEIGHTS, REFERENCE_STREAM_ONNX), (REFERENCE_SPARSE_WEIGHTS, REFERENCE_SPARSE_STREAM_ONNX)]
    demo = REPO / "cosyedge" / "assets" / "demo"
    signals = [sf.read(str(demo / name), dtype="float32")[0] for name in ("noisy.wav", "clean.wav")]
    with tempfile.TemporaryDirectory(prefix="cosyedge-reexport-") as tmp:
        backups = []
        for weights, onnx_path in pairs:
            for path in (weights, onnx_path):
                backups.append((path, Path(tmp) / path.name))
                shutil.copy2(path, backups[-1][1])
        before = {onnx_path: stream_outputs(onnx_path, signals) for _, onnx_path in pairs}
        for weights, onnx_path in pairs:
            print(f"{weights.name}: {'rewritten (upgraded)' if resave_if_upgraded(weights) else 'unchanged'}")
            export_reference(weights, onnx_path)
        sha = stamp_dense_parent(REFERENCE_SPARSE_STREAM_ONNX, REFERENCE_STREAM_ONNX)
        print(f"{REFERENCE_SPARSE_STREAM_ONNX.name}: dense parent {sha}")
        worst = 0.0
        for _, onnx_path in pairs:
            diff = max(float(np.abs(a - b).max()) for a, b in zip(before[onnx_path], stream_outputs(onnx_path, signals)))
            print(f"{onnx_path.name}: max |old - new| = {diff:.3g} over the demo (noisy, clean; chunks 160, 480)")
            worst = max(worst, diff)
        if worst > args.atol:
            for path, backup in backups:
                shutil.copy2(backup, path)
            print(f"[!] outputs changed by {worst:.3g} > --atol {args.atol}: old files restored", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
