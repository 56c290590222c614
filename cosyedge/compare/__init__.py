"""compare/check stage: a candidate build vs its FP32 reference on real speech, with Polygraphy.

* :mod:`cosyedge.compare.models`: engine folders / ONNX files as Polygraphy runners, compatibility.
* :mod:`cosyedge.compare.utterances`: the fixed set of real utterances.
* :mod:`cosyedge.compare.core`: teacher-forced and free-running streamed comparison (:func:`compare`).
* :mod:`cosyedge.compare.bisect`: ``--mark-all`` layer bisection (:func:`bisect_layers`).
* :mod:`cosyedge.compare.check`: the CI accuracy gate against a baseline (:func:`run_check`).
* :mod:`cosyedge.compare.tolerances`: default tolerances per precision.

Polygraphy is imported only when a comparison runs.
"""

from cosyedge.compare.core import MODES, compare
from cosyedge.compare.models import CompareModel, check_compatible, load_compare_model
from cosyedge.compare.tolerances import DEFAULT_TOLERANCES, Tolerance, tolerance_for
from cosyedge.compare.utterances import Utterance, fixed_utterances, utterances_from

__all__ = ["DEFAULT_TOLERANCES", "MODES", "CompareModel", "Tolerance", "Utterance", "check_compatible", "compare",
           "fixed_utterances", "load_compare_model", "tolerance_for", "utterances_from"]
