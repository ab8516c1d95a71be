"""Unit tests run with a ``$HOME`` of their own.

``hpcjobs render`` writes the job's supervisor into the job's output folder, by default under
``~/hpcjobs/runs/``: a test (or a command it runs in a subprocess) that renders without
``--output-dir`` writes it into a temporary folder, never into the home of whoever runs the
tests. The folder is beside the test's ``tmp_path``, not in it, for tests that list that.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _own_home(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("home")))
