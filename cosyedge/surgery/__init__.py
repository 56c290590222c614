"""Stage 2: graph surgery with onnx-graphsurgeon (streamify: causal pads -> explicit state I/O).

``io`` is the only module that converts between ONNX files and gs graphs; ``ops`` registers graph
functions (``graph.expose_state``); ``streamify`` is the pass and its stage.
"""

from cosyedge.surgery.streamify import StatefulOnnxFromOnnx, streamify, streamify_graph

__all__ = ["StatefulOnnxFromOnnx", "streamify", "streamify_graph"]
