"""backend="auto" decides from measured facts: the pinned crossover table must support the policy."""

import pytest

from trifit import Engine
from trifit.engine import AUTO_POLICY, MEASURED_CROSSOVER


def test_policy_follows_the_measured_crossover():
    for kind, rows in MEASURED_CROSSOVER.items():
        gpu_wins = all(gpu_ms < ref_ms for _, _, gpu_ms, ref_ms in rows)
        assert AUTO_POLICY[kind] == ("gpu" if gpu_wins else "reference"), kind
    assert set(AUTO_POLICY) >= {"DiscreteGPU", "IntegratedGPU", "CPU"}


@pytest.mark.gpu
def test_auto_applies_the_policy_to_this_adapter(gpu_ctx):
    eng = Engine("auto")
    assert eng.backend == AUTO_POLICY.get(gpu_ctx.info["type"], "gpu")
