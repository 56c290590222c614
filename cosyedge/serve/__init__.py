"""Serve cosyedge engines with a real Triton Inference Server and stream to them over gRPC.

* :mod:`cosyedge.serve.server`: find, start, watch and stop ``tritonserver``
  (:class:`~cosyedge.serve.server.TritonServer`, :func:`~cosyedge.serve.server.serve`: ``cosyedge serve``).
* :mod:`cosyedge.serve.model`: the Python-backend model of a ``--triton-backend python`` repository (one
  :class:`~cosyedge.runtime.pool.StreamPool` tick per execution, state per correlation id).
* :mod:`cosyedge.serve.client`: a served model used like a local engine (:func:`~cosyedge.serve.client.connect`,
  :class:`~cosyedge.serve.client.TritonStreamSession`: ``cosyedge run --server``).

Nothing heavy is imported here: tritonclient only when a client connects, the server only as a subprocess.
"""
