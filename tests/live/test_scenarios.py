"""The shared scenarios of tests/scenarios.py against the live sandbox (the unit side runs them
against Slurm output recorded from it)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hpcjobs.runner import LocalRunner
from hpcjobs.slurm.client import SlurmClient
from tests.scenarios import SCENARIOS


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_scenario_on_the_live_sandbox(
    scenario: Callable[[SlurmClient], None], slurm_env: dict[str, str]
) -> None:
    scenario(SlurmClient(LocalRunner(env=slurm_env)))
