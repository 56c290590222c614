"""Stage 2: graph surgery with onnx-graphsurgeon (streamify: causal pads -> explicit state I/O).

``io`` is the only module that converts between ONNX files and gs graphs; ``ops`` registers graph
functions; ``facts`` measures the time axis of every tensor, ``rules`` holds one streaming rule per op kind,
``walker`` applies them, ``proof`` checks stream == full, ``merge`` joins several files; ``streamify`` is the
stage.
"""

from cosyedge.surgery.streamify import StatefulOnnxFromOnnx, streamify, streamify_graph

__all__ = ["StatefulOnnxFromOnnx", "streamify", "streamify_graph"]
