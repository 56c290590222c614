"""Stream audio files through a cosyedge model served by Triton Inference Server: one sequence id per file.

Every file is one stream: its chunks go to the server as requests of one sequence (``sequence_id``), the first
with ``sequence_start=True``, the last with ``sequence_end=True``; the server keeps each stream's state
(implicit state) and batches the streams' chunks together (sequence batcher, oldest strategy). The client
sends the files' chunks round-robin, as concurrent live streams would arrive, pads the last chunk with zeros,
feeds ``delay_samples`` more zeros so the delayed tail comes out, drops the first ``delay_samples`` output
samples, and writes ``<out-dir>/<file stem>.enhanced.wav`` at the file's own rate. tritonclient is imported only
when the script talks to a server (``pip install 'tritonclient[grpc]'`` or ``'tritonclient[http]'``).

Build and serve (https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/implicit_state_management.html)::

    cosyedge build --backend triton -o engines
    docker run --rm --gpus all -p 8000:8000 -p 8001:8001 -v $PWD/engines/reference-fp32-triton:/models \\
        nvcr.io/nvidia/tritonserver:25.01-py3 tritonserver --model-repository=/models
    python scripts/triton_client.py --repo engines/reference-fp32-triton cosyedge/assets/demo/noisy.wav \\
        --copies 8 --out-dir out/triton

Reports duration, elapsed time, real-time factor and the requests sent.
"""

from __future__ import annotations

import argparse
import sys
import json
import time
from pathlib import Path

import numpy as np


class TritonTransport:
    """One request to Triton: ``infer(sequence_id, start, end, chunk) -> output`` via tritonclient.

    Args:
        url (str): ``localhost:8001`` (grpc) or ``localhost:8000`` (http).
        protocol (str): ``grpc`` | ``http``.
        model (str): Model name in the repository.
        input_name (str): Audio input, e.g. ``audio``; the chunk is float32 (1, 1, chunk_samples).
        output_name (str): Audio output, e.g. ``enhanced``.
    """

    def __init__(self, url: str, protocol: str, model: str, input_name: str, output_name: str):
        import importlib

        try:
            self.tc = importlib.import_module(f"tritonclient.{protocol}")
        except Exception as err:  # ImportError, or tritonclient's RuntimeError without grpc/http support
            _fail(4, f"this client needs tritonclient with {protocol} support ({err}): "
                     f"pip install 'tritonclient[{protocol}]'")
        self.client = self.tc.InferenceServerClient(url=url)
        self.model, self.input_name, self.output_name = model, input_name, output_name

    def infer(self, sequence_id: int, start: bool, end: bool, chunk: np.ndarray) -> np.ndarray:
        """Send one chunk (float32 (1, 1, T)) of sequence ``sequence_id``; return the output (float32 (1, 1, T))."""
        inp = self.tc.InferInput(self.input_name, list(chunk.shape), "FP32")
        inp.set_data_from_numpy(np.ascontiguousarray(chunk, dtype=np.float32))
        res = self.client.infer(self.model, [inp], sequence_id=sequence_id, sequence_start=start, sequence_end=end,
                                outputs=[self.tc.InferRequestedOutput(self.output_name)])
        return res.as_numpy(self.output_name)


def _fail(code: int, message: str) -> None:
    """Print one ``[!]`` line and exit with ``code`` (3: a missing or corrupt file, 4: a missing dependency)."""
    print(f"[!] {message}", file=sys.stderr)
    raise SystemExit(code)


def model_info(repo: str | None, model: str | None, chunk: int | None) -> dict:
    """Model name, audio tensor names, sample rate, chunk and delay from a repository's manifest.json (``repo``),
    else the bundled reference model's values; ``model``/``chunk`` override."""
    info = {"model": "reference", "input": "audio", "output": "enhanced", "sample_rate_hz": 16000,
            "chunk_samples": 160, "delay_samples": 160}
    if repo:
        path = Path(repo) / "manifest.json"
        try:
            m = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            _fail(3, f"{repo} is not a cosyedge Triton repository: cannot read {path} "
                     f"({getattr(err, 'strerror', None) or err}); build one with cosyedge build --backend triton")
        c = m["contract"]
        info.update(model=m["triton"]["model_name"], input=c["cosyedge.input"], output=c["cosyedge.output"],
                    sample_rate_hz=int(c["cosyedge.sample_rate_hz"]), chunk_samples=int(m["triton"]["chunk_samples"]),
                    delay_samples=int(c.get("cosyedge.delay_samples", "0")))
    if model:
        info["model"] = model
    if chunk:
        info["chunk_samples"] = int(chunk)
    return info


def stream_all(transport, signals: list[np.ndarray], chunk: int, delay: int, first_id: int = 1) -> list[np.ndarray]:
    """Stream every signal (float32 (T_i,) at the model rate) as its own sequence, chunks sent round-robin.

    Args:
        transport: object with ``infer(sequence_id, start, end, chunk (1, 1, chunk)) -> (1, 1, chunk)``.
        signals (list[np.ndarray]): One mono float32 signal per stream.
        chunk (int): Samples per request (the repository's ``chunk_samples``).
        delay (int): The model's ``delay_samples``: that many extra zeros are streamed and dropped from the front.
        first_id (int): Sequence id of the first stream (ids are ``first_id + i``; 0 is not a valid id).
    Returns:
        list[np.ndarray]: float32 (T_i,) outputs aligned with their inputs.
    """
    padded = []
    for x in signals:
        n = -(-(x.size + delay) // chunk) * chunk
        padded.append(np.concatenate([x.astype(np.float32), np.zeros(n - x.size, np.float32)]))
    outs: list[list[np.ndarray]] = [[] for _ in signals]
    n_chunks = [p.size // chunk for p in padded]
    for k in range(max(n_chunks)):
        for i, p in enumerate(padded):
            if k < n_chunks[i]:
                y = transport.infer(first_id + i, k == 0, k == n_chunks[i] - 1,
                                    p[k * chunk:(k + 1) * chunk].reshape(1, 1, chunk))
                outs[i].append(np.asarray(y, dtype=np.float32).reshape(-1))
    return [np.concatenate(o)[delay:delay + x.size] for o, x in zip(outs, signals)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("files", nargs="+", help="audio files; each is one stream (sequence)")
    ap.add_argument("--repo", default=None, help="the Triton repository folder (reads model name, chunk, delay)")
    ap.add_argument("--url", default=None, help="server address (default localhost:8001 grpc, localhost:8000 http)")
    ap.add_argument("--protocol", choices=["grpc", "http"], default="grpc")
    ap.add_argument("--model", default=None, help="model name (default: from --repo, else 'reference')")
    ap.add_argument("--chunk-samples", type=int, default=None, help="samples per request (default: from --repo)")
    ap.add_argument("--copies", type=int, default=1, help="stream every file this many times at once")
    ap.add_argument("--out-dir", default="out/triton", help="where <stem>.enhanced.wav files go")
    args = ap.parse_args(argv)

    from cosyedge.audio import from_model_output, load_audio, to_model_input, write_audio

    info = model_info(args.repo, args.model, args.chunk_samples)
    url = args.url or ("localhost:8001" if args.protocol == "grpc" else "localhost:8000")
    transport = TritonTransport(url, args.protocol, info["model"], info["input"], info["output"])
    sources = [Path(f) for f in args.files for _ in range(max(1, args.copies))]
    loaded = [load_audio(f) for f in sources]
    signals = [to_model_input(x, sr, info["sample_rate_hz"]) for x, sr in loaded]
    t0 = time.perf_counter()
    outs = stream_all(transport, signals, info["chunk_samples"], info["delay_samples"])
    elapsed = time.perf_counter() - t0
    out_dir = Path(args.out_dir)
    for i, (f, (x, sr), y) in enumerate(zip(sources, loaded, outs)):
        suffix = f".{i}" if args.copies > 1 else ""
        write_audio(out_dir / f"{f.stem}{suffix}.enhanced.wav",
                    from_model_output(y, info["sample_rate_hz"], sr, x.shape[0]), sr)
    duration = sum(s.size for s in signals) / info["sample_rate_hz"]
    requests = sum(-(-(s.size + info["delay_samples"]) // info["chunk_samples"]) for s in signals)
    print(f"{len(signals)} streams, {duration:.2f} s of audio, {requests} requests, elapsed {elapsed:.2f} s, "
          f"RTF {elapsed / duration:.3f} (all streams), outputs in {out_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
