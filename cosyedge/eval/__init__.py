"""Quality evaluation of streaming enhancers: ``cosyedge eval`` and its Python API.

* :mod:`cosyedge.eval.pairs`: find and validate (noisy, clean) files (folder layouts, JSON/CSV manifests).
* :mod:`cosyedge.eval.metrics`: SI-SNR, PESQ-WB, STOI, DNSMOS P.835 (metric libraries imported lazily).
* :mod:`cosyedge.eval.align`: cross-correlation delay estimate (+-50 ms) and alignment.
* :mod:`cosyedge.eval.baseline`: RNNoise (pyrnnoise) baseline.
* :mod:`cosyedge.eval.evaluate`: :func:`evaluate` (stream, align, score, summarise).
* :mod:`cosyedge.eval.report` / :mod:`cosyedge.eval.plot`: terminal table, JSON, spectrogram PNGs.

Example::

    from cosyedge.eval import evaluate, format_table
    report = evaluate("~/.cache/cosyedge/testset")      # bundled engine + RNNoise baseline
    print(format_table(report))

Importing this package imports no metric library (``pip install 'cosyedge[eval]'`` for them).
"""

from cosyedge.eval.align import align_to, estimate_delay
from cosyedge.eval.evaluate import evaluate, score_item
from cosyedge.eval.pairs import EvalItem, find_items, validate_items
from cosyedge.eval.report import format_table, summarize, write_report

__all__ = ["EvalItem", "align_to", "estimate_delay", "evaluate", "find_items", "format_table", "score_item",
           "summarize", "validate_items", "write_report"]
