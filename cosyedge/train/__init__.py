"""Training code of the reference enhancer (PyTorch; the ``train`` extra; not in the default wheel).

Layout: :mod:`cosyedge.train.nn` (causal streaming blocks), :mod:`cosyedge.train.reference` (the model,
its losses, growth steps, export, and the training loop's library part). The data it trains on lives in
:mod:`cosyedge.data` (shared with the default INT8 calibration set); the signal metrics in
:mod:`cosyedge.signal`. Nothing outside this package imports it, except ``cosyedge export`` (lazily, inside
the command), scripts and tests (``tests/test_imports.py`` checks).
"""
