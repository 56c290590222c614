"""The CI sample of the model generator (``tests/surgery/model_generator.py``; the full sweep of
>= 1000 seeds is ``scripts/benchmarks/generalize_streamify.py``, its report ``docs/bench/streamify_generalize.json``).

Seeds 0 ... 59, each a small transformer/conv model drawn from independent choices (positions, masks, layout, heads,
norms, conv front/back ends, batch, exporter) or a control that must be refused. The verdict comes from the
construction: nothing streamify accepts may differ from the full graph (an own ONNX Runtime chunk loop, states zeros at
start, 1-3 hops per chunk, batch 1 and 2 where the batch allows); every control is refused naming its blocker; bounded
models are accepted and exact at least at :data:`BOUNDED_EXACT_MIN`. Slow: the 60 models took 305 s in the sweep on
the shared 2-core machine (522 s for this file while the sweep ran beside it); most of it is torch's dynamo exporter.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from tests.surgery import model_generator as G  # noqa: E402

SEEDS = range(60)
BOUNDED_EXACT_MIN = 0.95
"""Least fraction of the sample's bounded models that must be accepted and exact (the goal the generator was written
for). When it was written, main accepted 11 of the 50 bounded models of seeds 0-59 (0.22); with fixed batches freed,
library RoPE, bands that look ahead and rel_shift streaming, all 50."""
KNOWN_WRONG_REASON: dict[int, str] = {}
"""Controls of the sample that main refuses for another reason than their blocker (seed: why), pinned so a fix shows:
when the set of wrong-reason seeds shrinks, drop the entry."""

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("generated")
    return {s: G.classify(s, tmp) for s in SEEDS}


def _cases(results, cat):
    return {s: f"{r.category}: {G.describe(r.choices)} | {r.message[:300]}" for s, r in results.items()
            if r.category == cat}


def test_sample_has_every_kind():
    """The sample draws bounded models and each control kind, every exporter and batch form."""
    drawn = [G.draw(s) for s in SEEDS]
    for key, want in [("kind", {"bounded", *G.CONTROLS}), ("exporter", {"torchscript", "dynamo", "dynamo23"}),
                      ("batch", {"symbolic", "fixed1", "fixed2"})]:
        assert {c[key] for c in drawn} == want, key


def test_no_silent_wrong(results):
    """Nothing accepted streams wrongly: no bounded model accepted but not exact, no control accepted."""
    assert not _cases(results, "silent-wrong")


def test_accepted_models_are_exact(results):
    """Every accepted model was checked by the chunk loop at 2-3 chunk sizes and equals the full graph within 1e-4 of
    its peak."""
    accepted = [r for r in results.values() if r.category == "accepted-exact"]
    for r in accepted:
        assert len(r.errors) >= 2 and max(r.errors.values()) <= G.REL_TOL, (r.seed, r.errors)


def test_controls_refused_for_their_blocker(results):
    """Every control is refused, and the message names its blocker (:data:`G.BLOCKER_PHRASES`), except the pinned
    :data:`KNOWN_WRONG_REASON` (which must still be wrong: a fix shows here)."""
    wrong = _cases(results, "refused-wrong-reason")
    assert set(wrong) == set(KNOWN_WRONG_REASON), wrong
    controls = [r for r in results.values() if r.choices["kind"] != "bounded" and r.category != "export-failed"]
    assert controls and all(r.category in ("refused-correctly", "refused-wrong-reason") for r in controls)


def test_bounded_models_accepted(results):
    """The fraction of bounded models accepted and exact is at least :data:`BOUNDED_EXACT_MIN` (not vacuous: the
    sample has bounded models that exported)."""
    bounded = [r for r in results.values() if r.choices["kind"] == "bounded" and r.category != "export-failed"]
    assert len(bounded) >= 30
    exact = sum(r.category == "accepted-exact" for r in bounded) / len(bounded)
    print(f"bounded accepted-exact {exact:.3f}; refused:", _cases(results, "refused-but-bounded"))
    assert exact >= BOUNDED_EXACT_MIN, _cases(results, "refused-but-bounded")


def test_exports_rarely_fail(results):
    """torch's exporters handle the choices drawn: at most 5 % of the sample fails to export."""
    failed = _cases(results, "export-failed")
    assert len(failed) <= 0.05 * len(SEEDS), failed
