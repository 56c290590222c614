"""The reference enhancer's training side: model (:mod:`~cosyedge.train.reference.model`), losses
(:mod:`~cosyedge.train.reference.losses`), growth steps (:mod:`~cosyedge.train.reference.grow`), the
training loop's helpers (:mod:`~cosyedge.train.reference.loop`) and export
(:mod:`~cosyedge.train.reference.export`). Submodules import torch; import them directly.
"""
