"""Scenarios written once and run twice: by a unit test against Slurm output recorded from the
sandbox (``tests/data/slurm/22.05/cluster``, through :class:`tests.fakes.RecordedRunner`), and by
``tests/live/test_scenarios.py`` against the live sandbox, on both Slurm releases. Each takes a
:class:`SlurmClient`, so the fake and the real cluster answer the very same calls; when the
recording and the cluster drift apart, one of the two runs says so."""

from __future__ import annotations

from hpcjobs.config.discover import discover_site, read_cluster
from hpcjobs.config.validate import validate_data
from hpcjobs.config.yamlfile import parse_yaml_text
from hpcjobs.slurm.client import SlurmClient


def draft_problems(text: str) -> tuple[dict[str, object], list[str], list[str]]:
    """A drafted site config, its validation errors and its warnings."""
    doc = parse_yaml_text(text, source="draft")
    assert doc.ok, doc.problems
    config, findings = validate_data(doc.data)
    errors = [f"{f.path}: {f.message}" for f in findings if f.severity == "error"]
    warnings = [f"{f.path}: {f.message}" for f in findings if f.severity == "warning"]
    assert (config is None) == bool(errors)
    return doc.data, errors, warnings


def sandbox_facts_are_read(client: SlurmClient) -> None:
    """The cluster facts hpcjobs reads from the sandbox's Slurm: preemption sends the warning
    signal, partitions preempt by priority, and the array limit and version are known."""
    facts = read_cluster(client).facts
    assert facts.send_user_signal is True
    assert facts.preempt_type == "preempt/partition_prio"
    assert facts.version is not None and facts.version[:5] in ("22.05", "24.11", "26.05")
    assert facts.max_array_size in (1001, 10001)


def sandbox_draft_validates(client: SlurmClient) -> None:
    """``site discover`` on the sandbox: a draft that validates as is, with its two partitions,
    its fake GPUs and its preemption settings."""
    draft = discover_site(client, now="2025-01-01")
    data, errors, warnings = draft_problems(draft.text)
    assert errors == []
    assert data["name"] == "sandbox"
    assert data["defaults"] == {"partition": "batch"}
    parts = {p["name"]: p for p in data["partitions"]}  # type: ignore[attr-defined]
    assert list(parts) == ["batch", "urgent"]
    batch = parts["batch"]
    assert (batch["gpu_type"], batch["gpus_per_node"], batch["cpus_per_node"]) == ("h100", 4, 8)
    assert (batch["sockets_per_node"], batch["memory_mb"], batch["nodes"]) == (2, 4000, 3)
    assert batch["max_nodes"] == 3 and batch["max_time"] == "UNLIMITED"
    assert batch["preemptible"] is True and parts["urgent"]["preemptible"] is False
    assert parts["urgent"]["priority_tier"] == 10
    assert data["slurm"]["preempt_send_user_signal"] is True  # type: ignore[index]
    assert "# topology: gpu-node" in draft.text
    assert all("no topology" in w for w in warnings)


#: Every shared scenario, run by both sides.
SCENARIOS = [sandbox_facts_are_read, sandbox_draft_validates]
