"""Run a stream ONNX with PyTorch ops: the compute stand-in of ``scripts/gpu_check.py`` where TensorRT is absent.

:class:`TorchGraph` evaluates the graph node by node with ``torch`` functions on any device (CPU or CUDA), so a
GPU machine with PyTorch but without TensorRT still runs the *same* stream graph as ONNX Runtime and
TensorRT would, with its states kept on the device. Closed world: every node's op must be in :data:`OPS`, else
the graph is refused naming the ops (no silent fallback). The op set covers the bundled reference model's
stream graph; it is not a general ONNX runtime.

Source: ONNX operator specifications (onnx.ai/onnx/operators: Conv, Slice, Gather, GatherElements, ArgMax,
Unsqueeze, Flatten, ... at opset 13-18).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from cosyedge.errors import UsageError
from cosyedge.passes.edit import node_attrs

OPS = ("Add", "ArgMax", "Concat", "Conv", "Flatten", "Gather", "GatherElements", "Log", "MatMul", "Mul", "Relu",
       "Sigmoid", "Slice", "Sub", "Tanh", "Transpose", "Unsqueeze")
"""tuple[str, ...]: ops :class:`TorchGraph` runs."""


class TorchGraph:
    """An ONNX graph as a sequence of PyTorch calls on ``device``.

    Args:
        model (str | Path | onnx.ModelProto): Stream ONNX (opset 13+, every op in :data:`OPS`).
        device (str): torch device, e.g. ``"cpu"`` or ``"cuda"``.
    Raises:
        UsageError: the graph holds ops outside :data:`OPS` (all named) or an attribute form not supported.
    """

    def __init__(self, model: Any, device: str = "cpu"):
        import onnx
        import torch

        if isinstance(model, (str, Path)):
            model = onnx.load(str(model))
        self.torch, self.device = torch, torch.device(device)
        g = model.graph
        unknown = sorted({n.op_type for n in g.node} - set(OPS))
        if unknown:
            raise UsageError(f"the PyTorch stand-in cannot run op(s) {', '.join(unknown)} (it knows {', '.join(OPS)})")
        self.consts = {t.name: torch.from_numpy(np.array(onnx.numpy_helper.to_array(t))).to(self.device)
                       for t in g.initializer}
        self.nodes = [(n.op_type, list(n.input), list(n.output), node_attrs(n)) for n in g.node]
        for op, ins, outs, at in self.nodes:  # Constant-free graphs only: constants are initializers here
            if op == "Conv" and at.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
                raise UsageError("the PyTorch stand-in needs explicit Conv pads (auto_pad NOTSET)")
        self.inputs = [i.name for i in g.input if i.name not in self.consts]
        self.outputs = [o.name for o in g.output]

    def run(self, feeds: dict) -> dict:
        """Evaluate the graph.

        Args:
            feeds (dict[str, torch.Tensor]): every graph input, on :attr:`device`, with the ONNX dtype.
        Returns:
            dict[str, torch.Tensor]: every graph output by name, on the device.
        """
        torch = self.torch
        F = torch.nn.functional
        v = dict(self.consts)
        v.update(feeds)
        for op, ins, outs, at in self.nodes:
            x = [v[n] if n else None for n in ins]
            if op in ("Add", "Sub", "Mul"):
                y = x[0] + x[1] if op == "Add" else (x[0] - x[1] if op == "Sub" else x[0] * x[1])
            elif op == "MatMul":
                y = torch.matmul(x[0], x[1])
            elif op in ("Tanh", "Sigmoid", "Log", "Relu"):
                y = {"Tanh": torch.tanh, "Sigmoid": torch.sigmoid, "Log": torch.log, "Relu": torch.relu}[op](x[0])
            elif op == "Concat":
                y = torch.cat(x, dim=int(at["axis"]))
            elif op == "Transpose":
                y = x[0].permute(*[int(p) for p in at["perm"]])
            elif op == "Flatten":
                axis = int(at.get("axis", 1)) % max(x[0].dim(), 1)
                y = x[0].reshape(int(np.prod(x[0].shape[:axis])), -1)
            elif op == "Unsqueeze":
                y = x[0]
                for a in sorted(int(a) % (x[0].dim() + len(x[1])) for a in x[1].tolist()):
                    y = y.unsqueeze(a)
            elif op == "Gather":
                axis = int(at.get("axis", 0)) % x[0].dim()
                idx = x[1].long()
                idx = torch.where(idx < 0, idx + x[0].shape[axis], idx)
                y = torch.index_select(x[0], axis, idx.reshape(-1)).reshape(
                    *x[0].shape[:axis], *idx.shape, *x[0].shape[axis + 1:])
            elif op == "GatherElements":
                axis = int(at.get("axis", 0)) % x[0].dim()
                idx = x[1].long()
                y = torch.gather(x[0], axis, torch.where(idx < 0, idx + x[0].shape[axis], idx))
            elif op == "ArgMax":
                axis, keep = int(at.get("axis", 0)), bool(at.get("keepdims", 1))
                if int(at.get("select_last_index", 0)):
                    y = x[0].shape[axis] - 1 - torch.argmax(torch.flip(x[0], [axis]), dim=axis, keepdim=keep)
                else:
                    y = torch.argmax(x[0], dim=axis, keepdim=keep)
            elif op == "Slice":
                y = self._slice(*x)
            elif op == "Conv":
                y = self._conv(x[0], x[1], x[2] if len(x) > 2 else None, at)
            else:  # pragma: no cover - refused in __init__
                raise UsageError(f"op {op}")
            v[outs[0]] = y
        return {n: v[n] for n in self.outputs}

    def _slice(self, data, starts, ends, axes=None, steps=None):
        starts, ends = starts.tolist(), ends.tolist()
        axes = list(range(len(starts))) if axes is None else axes.tolist()
        steps = [1] * len(starts) if steps is None else steps.tolist()
        index = [slice(None)] * data.dim()
        for s, e, a, st in zip(starts, ends, axes, steps):
            if st <= 0:
                raise UsageError("the PyTorch stand-in runs Slice with positive steps only")
            n = data.shape[a]
            s = max(0, min(n, s + n if s < 0 else s))
            e = max(0, min(n, e + n if e < 0 else e))
            index[a] = slice(s, e, st)
        return data[tuple(index)]

    def _conv(self, x, w, b, at):
        F = self.torch.nn.functional
        nd = w.dim() - 2
        strides = [int(s) for s in at.get("strides", [1] * nd)]
        dil = [int(d) for d in at.get("dilations", [1] * nd)]
        pads = [int(p) for p in at.get("pads", [0] * (2 * nd))]
        group = int(at.get("group", 1))
        if any(pads):  # ONNX pads: begin_1..begin_n, end_1..end_n; F.pad wants the last axis first
            spec = []
            for i in reversed(range(nd)):
                spec += [pads[i], pads[i + nd]]
            x = F.pad(x, spec)
        fn = F.conv1d if nd == 1 else F.conv2d
        return fn(x, w, b, stride=strides, dilation=dil, groups=group)
