"""The stop flag reacts to the warning signal and to SIGTERM."""

from __future__ import annotations

import os
import signal

import pytest

from hpcjobs.runtime.stopflag import StopFlag, signal_from_env


@pytest.fixture(autouse=True)
def _restore_handlers() -> object:
    saved = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_signal_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    assert signal_from_env() == signal.SIGUSR2
    monkeypatch.setenv("HPCJOBS_SIGNAL", "SIGUSR1")
    assert signal_from_env() == signal.SIGUSR1
    monkeypatch.setenv("HPCJOBS_SIGNAL", "10")
    assert signal_from_env() == signal.Signals(10)
    monkeypatch.setenv("HPCJOBS_SIGNAL", "bogus")
    assert signal_from_env() == signal.SIGUSR2


@pytest.mark.parametrize("sig", [signal.SIGUSR2, signal.SIGTERM])
def test_signal_sets_flag(sig: signal.Signals) -> None:
    flag = StopFlag.install()
    assert not flag.should_stop()
    os.kill(os.getpid(), sig)
    assert flag.is_set()
    assert flag.should_stop()
    assert flag.signal_name == sig.name
    assert flag.received_at is not None


def test_manual_set() -> None:
    flag = StopFlag()
    flag.set()
    assert flag.should_stop()
