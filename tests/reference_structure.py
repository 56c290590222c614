"""The bundled reference model's structure, for tests that must follow the model when it is retrained.

Everything here is derived from the hyper-parameters stored in the JSON header of the bundled
``reference.safetensors`` (``EnhancerConfig``: dilations, channels, kernel size, window, hop) and the
architecture described in ``cosyedge/train/reference/model.py`` -- never from the export, streamify or
precision code under test. ``tests/test_reference_quality.py::test_bundled_structure`` checks that the
bundled streaming ONNX really has exactly these convs and states, so a model whose ONNX and weights
disagree fails there (and the tests using this module then compare against the weights' config).

Per gated block ``i`` (dilation ``d``): one causal conv ``/blocks.i/conv/conv/Conv`` (C -> 2C, kernel k,
state (N, C, (k-1)*d) frames) and one 1x1 ``/blocks.i/proj/Conv`` (C -> C). Around them: the analysis conv
(1 -> 2F, state (N, 1, win - hop) samples), the 1x1 ``/inp/Conv`` (F -> C) and ``/out/Conv`` (C -> F), and the
synthesis conv (2F -> 1, state (N, 2F, 1) frames). With a deep filter (``df_order`` K > 0 on ``df_bins``
bins B): the fixed grouped tap buffer ``/df_taps/conv/Conv`` (2B -> 2BK, kernel K, state (N, 2B, K-1)
frames; graph position right after the analysis conv, whose output it reads) and the 1x1 coefficient head
``/df_out/Conv`` (C -> 2BK, after ``/out/Conv``). With long-window features (``lw_window`` W > 0 on
``lw_bins`` bins): the fixed analysis ``/lw_analysis/conv/Conv`` (1 -> 2 lw_bins, state (N, 1, W - hop)
samples, right after the analysis conv) and the 1x1 ``/lw_inp/Conv`` (lw_bins -> C, after ``/inp/Conv``).
With the pitch comb (``pitch_comb``): the fixed framing (``CausalFraming``) of two convs, the polyphase
``/pc_frames/poly/Conv`` (1 -> hop, kernel = stride = hop, no state; first in the graph) and the grouped
``/pc_frames/taps/Conv`` (hop -> 2 win, hop groups, kernel 2 win / hop, state (N, hop, 2 win / hop - 1) frames,
right after the long-window analysis), the 1x1 ``/pc_inp/Conv`` (F -> C, after
``/lw_inp/Conv``) and the 1x1 mix head ``/pc_out/Conv`` (C -> F, after ``/out/Conv``); its autocorrelation and
comb analysis are MatMuls with the constant as the first operand (not quantizable weighted ops).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

from safetensors import safe_open

from cosyedge.models import REFERENCE_WEIGHTS

ANALYSIS_CONV = "/analysis/conv/Conv"
SYNTHESIS_CONV = "/synthesis/conv/conv/Conv"
BOUNDARY_CONVS = (ANALYSIS_CONV, SYNTHESIS_CONV)
"""The first and last conv (1 and 2F channels, fixed STFT bases): kept in float by INT8 and FP16."""
DF_TAPS_CONV = "/df_taps/conv/Conv"
DF_OUT_CONV = "/df_out/Conv"
LW_ANALYSIS_CONV = "/lw_analysis/conv/Conv"
LW_INP_CONV = "/lw_inp/Conv"
PC_POLY_CONV = "/pc_frames/poly/Conv"
PC_FRAMES_CONV = "/pc_frames/taps/Conv"
PC_FRAMES_CONVS = (PC_POLY_CONV, PC_FRAMES_CONV)
"""The pitch comb's fixed framing convs: the polyphase split (reads the audio input) and the grouped tap conv
(owns the framing state)."""
PC_INP_CONV = "/pc_inp/Conv"
PC_OUT_CONV = "/pc_out/Conv"
DECLARED_FLOAT = ("/inp/Conv",)
"""Convs the bundled streaming ONNX keeps in float for INT8 (metadata ``cosyedge.int8_keep_float``)."""
COPY_CONVS = (PC_FRAMES_CONV, DF_TAPS_CONV)
"""Fixed convs with one-hot weights (they copy samples or frames): INT8 keeps them in float."""


@dataclasses.dataclass(frozen=True)
class ReferenceStructure:
    """Expected graph structure of the reference model with the given hyper-parameters."""

    dilations: tuple[int, ...]
    channels: int
    kernel_size: int
    hop_samples: int
    win_samples: int
    df_order: int = 0
    df_bins: int = 0
    lw_window: int = 0
    lw_bins: int = 0
    pitch_comb: bool = False

    @property
    def n_blocks(self) -> int:
        """int: gated blocks (one per dilation)."""
        return len(self.dilations)

    @property
    def n_bins(self) -> int:
        """int: F = win / 2 + 1 STFT bins."""
        return self.win_samples // 2 + 1

    @property
    def n_states(self) -> int:
        """int: streaming states: analysis + one per block + synthesis (+ the long window, + the comb's framing,
        + the deep-filter taps)."""
        return self.n_blocks + 2 + (self.df_order > 1) + (self.lw_window > 0) + self.pitch_comb

    @property
    def state_inputs(self) -> list[str]:
        """list[str]: ``state_in.00`` ... in contract order."""
        return [f"state_in.{i:02d}" for i in range(self.n_states)]

    @property
    def state_outputs(self) -> list[str]:
        """list[str]: ``state_out.00`` ... in contract order."""
        return [f"state_out.{i:02d}" for i in range(self.n_states)]

    @property
    def state_shapes(self) -> list[list]:
        """list[list]: contract shape of each state: ["N", channels, frames or samples]."""
        return ([["N", 1, self.win_samples - self.hop_samples]]
                + ([["N", 1, self.lw_window - self.hop_samples]] if self.lw_window else [])
                + ([["N", self.hop_samples, 2 * self.win_samples // self.hop_samples - 1]] if self.pitch_comb else [])
                + ([["N", 2 * self.df_bins, self.df_order - 1]] if self.df_order > 1 else [])
                + [["N", self.channels, (self.kernel_size - 1) * d] for d in self.dilations]
                + [["N", 2 * self.n_bins, 1]])

    @property
    def state_nodes(self) -> list[str]:
        """list[str]: the conv that owns each state, in contract order."""
        return [ANALYSIS_CONV, *self._lw(LW_ANALYSIS_CONV), *self._pc(PC_FRAMES_CONV), *self._df_state_owner,
                *[f"/blocks.{i}/conv/conv/Conv" for i in range(self.n_blocks)], SYNTHESIS_CONV]

    def _lw(self, node: str) -> list[str]:
        """``[node]`` when the model has long-window features, else ``[]``."""
        return [node] if self.lw_window else []

    def _pc(self, node: str) -> list[str]:
        """``[node]`` when the model has the pitch comb, else ``[]``."""
        return [node] if self.pitch_comb else []

    @property
    def _df_state_owner(self) -> list[str]:
        """The deep-filter tap conv as a state owner: only with K > 1 (K = 1 has no past frames)."""
        return [DF_TAPS_CONV] if self.df_order > 1 else []

    def block_convs(self, sep: str = "onnx") -> list[str]:
        """list[str]: the two convs of every block, as ONNX node names (``sep="onnx"``) or torch module
        names (``sep="torch"``: ``blocks.i.conv.conv``, ``blocks.i.proj``)."""
        if sep == "torch":
            return [f"blocks.{i}.{k}" for i in range(self.n_blocks) for k in ("conv.conv", "proj")]
        return [f"/blocks.{i}/{k}" for i in range(self.n_blocks) for k in ("conv/conv/Conv", "proj/Conv")]

    @property
    def conv_nodes(self) -> list[str]:
        """list[str]: every Conv node of the ONNX graph, in graph order."""
        return [*self._pc(PC_POLY_CONV), ANALYSIS_CONV, *self._lw(LW_ANALYSIS_CONV), *self._pc(PC_FRAMES_CONV),
                *([DF_TAPS_CONV] if self.df_order else []), "/inp/Conv", *self._lw(LW_INP_CONV),
                *self._pc(PC_INP_CONV), *self.block_convs(), "/out/Conv", *([DF_OUT_CONV] if self.df_order else []),
                *self._pc(PC_OUT_CONV), SYNTHESIS_CONV]

    @property
    def n_matmuls(self) -> int:
        """int: MatMul nodes: with the pitch comb its autocorrelation and comb analysis (the constant is the first
        operand, so neither is quantized nor pruned: the sparsity report lists them as not prunable)."""
        return 2 if self.pitch_comb else 0

    def block_state(self, i: int) -> int:
        """int: contract index of gated block ``i``'s state (``state_in.<index>``): after the analysis state
        and the long-window / deep-filter states the model has."""
        return self.state_nodes.index(f"/blocks.{i}/conv/conv/Conv")

    @property
    def float_convs(self) -> list[str]:
        """list[str]: the convs INT8 keeps in float, in graph order: every conv but :attr:`int8_convs`."""
        return [n for n in self.conv_nodes if n not in self.int8_convs]

    @property
    def int8_convs(self) -> list[str]:
        """list[str]: convs INT8 quantizes by default: all but the two boundary convs and the feature
        projection the bundled ONNX declares float-only (:data:`DECLARED_FLOAT`); with long-window features
        also ``/lw_analysis`` and with the pitch comb ``/pc_frames/poly`` (they read the audio input, like the
        analysis conv, and have 1 input channel), and the copies :data:`COPY_CONVS` (the comb's framing taps, the
        deep filter's tap buffer)."""
        return [n for n in self.conv_nodes if n not in BOUNDARY_CONVS + DECLARED_FLOAT + COPY_CONVS
                and n not in (LW_ANALYSIS_CONV, PC_POLY_CONV)]

    @property
    def sparse_eligible(self) -> list[str]:
        """list[str]: convs whose input channels are a multiple of 4 (2:4 sparsity): the block convs and
        ``/out/Conv`` (and ``/df_out/Conv``) when C % 4 == 0 (``/inp/Conv`` has F = 161 inputs, analysis 1,
        synthesis 2F = 322, the grouped deep-filter taps 1 per group; ``/lw_inp/Conv`` when lw_bins % 4 == 0,
        ``/lw_analysis`` has 1 input; with the pitch comb ``/pc_out/Conv``, C inputs, but not ``/pc_inp/Conv``, F
        inputs, or the framing convs: 1 input channel per group)."""
        assert self.channels % 4 == 0 and self.n_bins % 4 and (2 * self.n_bins) % 4, "update this helper"
        return [*(self._lw(LW_INP_CONV) if self.lw_bins % 4 == 0 else []), *self.block_convs(), "/out/Conv",
                *([DF_OUT_CONV] if self.df_order else []), *self._pc(PC_OUT_CONV)]

    @property
    def sparse_eligible_modules(self) -> list[str]:
        """list[str]: :attr:`sparse_eligible` as torch module names (``/blocks.0/conv/conv/Conv`` ->
        ``blocks.0.conv.conv``, ``/lw_inp/Conv`` -> ``lw_inp``)."""
        return [n.removeprefix("/").removesuffix("/Conv").replace("/", ".") for n in self.sparse_eligible]

    @classmethod
    def from_config(cls, cfg: dict) -> ReferenceStructure:
        """Structure of a model whose ``EnhancerConfig`` fields are ``cfg`` (a dict, e.g. the safetensors header
        JSON or ``dataclasses.asdict(config)``); optional fields missing from older configs default to off."""
        return cls(dilations=tuple(cfg["dilations"]), channels=cfg["channels"], kernel_size=cfg["kernel_size"],
                   hop_samples=cfg["hop_samples"], win_samples=cfg["win_samples"],
                   df_order=cfg.get("df_order", 0), df_bins=cfg.get("df_bins", 0),
                   lw_window=cfg.get("lw_window", 0), lw_bins=cfg.get("lw_bins", 0),
                   pitch_comb=cfg.get("pitch_comb", False))

    def assert_matches(self, contract, stream_onnx: str | Path) -> None:
        """Assert that a streamified torchscript export (its ``StreamContract`` and ONNX file) has exactly
        this structure's states (owner conv and shape, in contract order) and Conv nodes (in graph order)."""
        import onnx

        assert [(s.node, s.shape) for s in contract.states] == list(zip(self.state_nodes, self.state_shapes))
        graph = onnx.load(str(stream_onnx)).graph
        assert [n.name for n in graph.node if n.op_type == "Conv"] == self.conv_nodes


@functools.lru_cache(maxsize=4)
def reference_structure(weights: str | Path = REFERENCE_WEIGHTS) -> ReferenceStructure:
    """Structure of the reference model from the config JSON in the safetensors header (no torch)."""
    with safe_open(str(weights), framework="np") as f:
        return ReferenceStructure.from_config(json.loads(f.metadata()["config"]))
