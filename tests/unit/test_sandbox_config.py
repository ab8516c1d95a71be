"""The sandbox's generated Slurm files and settings (pure logic, no cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcjobs.errors import BadInputError
from hpcjobs.sandbox import confgen
from hpcjobs.sandbox.layout import Layout, Settings, default_state_dir


def test_default_ports_avoid_slurm_defaults() -> None:
    ports = Settings().all_ports().values()
    assert not set(ports) & {6817, 6818, 6819, 3306}
    assert len(set(ports)) == len(list(ports))


def test_slurm_conf_has_preemption_and_gpus(tmp_path: Path) -> None:
    text = confgen.slurm_conf(Settings(grace_time=20), Layout(tmp_path), "myhost")
    assert "SlurmctldHost=myhost(127.0.0.1)" in text
    assert "SlurmctldParameters=preempt_send_user_signal" in text
    assert "PreemptType=preempt/partition_prio" in text
    assert "JobRequeue=1" in text
    assert "SlurmdParameters=config_overrides" in text
    assert "PartitionName=batch Nodes=n[1-3] Default=YES" in text
    assert "PriorityTier=1 PreemptMode=REQUEUE GraceTime=20" in text
    assert "PartitionName=urgent" in text and "PriorityTier=10" in text
    for i in (1, 2, 3):
        assert f"NodeName=n{i} NodeAddr=127.0.0.1 Port={16810 + 10 + i}" in text
    assert text.count("Gres=gpu:h100:4") == 3
    assert "SchedulerParameters" not in text  # no job expansion unless asked for


def test_a_sandbox_may_permit_job_expansion(tmp_path: Path) -> None:
    text = confgen.slurm_conf(Settings(job_expansion=True), Layout(tmp_path), "myhost")
    assert "SchedulerParameters=permit_job_expansion" in text.splitlines()
    old = Settings.from_json('{"port_base": 16810, "nodes": 3}')  # saved before the setting
    assert old.job_expansion is False
    assert "6817" not in text


@pytest.mark.parametrize(
    ("major", "line", "absent"),
    [
        (None, "SlurmctldParameters=preempt_send_user_signal", "PreemptParameters"),
        ((22, 5), "SlurmctldParameters=preempt_send_user_signal", "PreemptParameters"),
        ((24, 11), "PreemptParameters=send_user_signal", "SlurmctldParameters"),
    ],
)
def test_preemption_signal_per_release(
    tmp_path: Path, major: tuple[int, int] | None, line: str, absent: str
) -> None:
    text = confgen.slurm_conf(Settings(), Layout(tmp_path), "myhost", major)
    assert f"\n{line}\n" in text
    assert absent not in text


def test_gres_conf_fake_gpus() -> None:
    assert "File=/dev/tty[0-3]" in confgen.gres_conf(Settings())
    assert "File=/dev/tty0\n" in confgen.gres_conf(Settings(gpus_per_node=1, cpus_per_node=2))


def test_a_thousand_gpus_fit_below_the_next_sandboxs_ports(tmp_path: Path) -> None:
    """128 nodes x 8 fake GPUs: one node line each, ports of their own, all below the next
    sandbox's base (the test sandboxes are 1,000 ports apart)."""
    settings = Settings(nodes=128, gpus_per_node=8)
    text = confgen.slurm_conf(settings, Layout(tmp_path), "myhost")
    assert text.count("Gres=gpu:h100:8") == 128
    assert "PartitionName=batch Nodes=n[1-128] Default=YES" in text
    assert "File=/dev/tty[0-7]" in confgen.gres_conf(settings)
    ports = list(settings.all_ports().values())
    assert len(set(ports)) == len(ports) == 131
    assert max(ports) < settings.port_base + 1000
    assert settings.nodes_text == "n[1-128]" and Settings().nodes_text == "n1, n2, n3"
    big = Settings(nodes=256, port_base=65000)
    assert max(big.all_ports().values()) <= 65535


def test_slurmdbd_conf_uses_own_ports(tmp_path: Path) -> None:
    text = confgen.slurmdbd_conf(Settings(port_base=20000), Layout(tmp_path), "pw")
    assert "DbdPort=20001" in text
    assert "StoragePort=20002" in text


@pytest.mark.parametrize(
    "kwargs",
    [
        {"port_base": 80},
        {"nodes": 0},
        {"nodes": 257},
        {"gpus_per_node": 9},
        {"gpus_per_node": 0},
        {"cpus_per_node": 3},
        {"grace_time": -1},
    ],
)
def test_bad_settings(kwargs: dict[str, int]) -> None:
    with pytest.raises(BadInputError):
        Settings(**kwargs)


def test_settings_round_trip() -> None:
    s = Settings(port_base=20000, nodes=2)
    assert Settings.from_json(s.to_json()) == s


def test_state_dir_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HPCJOBS_SANDBOX_DIR", str(tmp_path / "box"))
    assert default_state_dir() == (tmp_path / "box").resolve()
    monkeypatch.delenv("HPCJOBS_SANDBOX_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_state_dir() == (tmp_path / "state" / "hpcjobs" / "sandbox").resolve()


def test_runtime_dir_is_short_and_distinct(tmp_path: Path) -> None:
    a, b = Layout(tmp_path / "a"), Layout(tmp_path / "b")
    assert a.run != b.run
    assert len(str(a.mysql_socket)) < 100  # unix socket paths are limited to 108 bytes


def test_missing_packages_explained_to_non_root(monkeypatch: pytest.MonkeyPatch) -> None:
    from hpcjobs.errors import SandboxError
    from hpcjobs.sandbox import packages

    monkeypatch.setattr(packages, "which", lambda name: None if name == "slurmdbd" else "/x")
    monkeypatch.setattr(packages.os, "geteuid", lambda: 1000)
    with pytest.raises(SandboxError) as info:
        packages.ensure_installed()
    assert "slurmdbd" in info.value.message
    assert info.value.hint == (
        "install them with: sudo apt-get install -y --no-install-recommends slurmdbd"
    )


def test_missing_packages_installed_as_root(monkeypatch: pytest.MonkeyPatch) -> None:
    from collections.abc import Mapping, Sequence

    from hpcjobs.runner import Result
    from hpcjobs.sandbox import packages

    installed: set[str] = set()
    calls: list[list[str]] = []

    class AptRunner:
        def run(
            self,
            argv: Sequence[str],
            *,
            stdin: str | None = None,
            timeout: float | None = None,
            check: bool = True,
            env: Mapping[str, str] | None = None,
        ) -> Result:
            calls.append(list(argv))
            if argv[1] == "install":
                installed.update(argv[4:])
            return Result(tuple(argv), 0, "", "")

    monkeypatch.setattr(
        packages, "which", lambda name: "/x" if name != "munged" or "munge" in installed else None
    )
    monkeypatch.setattr(packages.os, "geteuid", lambda: 0)
    packages.ensure_installed(runner=AptRunner())
    assert calls == [
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "--no-install-recommends", "munge"],
    ]


@pytest.mark.parametrize(
    ("nodes", "proctrack", "slurmd_timeout", "message_timeout"),
    [
        (3, "proctrack/linuxproc", 10, 10),
        (confgen.MANY_NODES, "proctrack/linuxproc", 10, 10),
        (confgen.MANY_NODES + 1, "proctrack/pgid", 120, 60),
        (131, "proctrack/pgid", 120, 60),
    ],
)
def test_a_sandbox_of_many_nodes_on_one_host_is_given_time(
    tmp_path: Path, nodes: int, proctrack: str, slurmd_timeout: int, message_timeout: int
) -> None:
    """A hundred slurmd on one host answer late while a thousand ranks start, and a /proc
    scan per slurmstepd costs seconds: a big sandbox tracks process groups and waits longer."""
    text = confgen.slurm_conf(Settings(nodes=nodes), Layout(tmp_path), "myhost")
    assert f"\nProctrackType={proctrack}\n" in text
    assert f"\nSlurmdTimeout={slurmd_timeout}\n" in text
    assert f"\nMessageTimeout={message_timeout}\n" in text
