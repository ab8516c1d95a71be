"""The stop flag reacts to the warning signal and to SIGTERM."""

from __future__ import annotations

import os
import signal
import sys
import threading

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


def _set_with_signal_at_line(n: int) -> tuple[bool, bool]:
    """Run ``flag.set("peer")`` with the warning signal's handler run at its ``n``-th line event.

    Python runs a signal handler between two lines of whatever the main thread is doing; a
    trace function stands in for the signal, at each line ``set`` runs, down to the standard
    library's. Returns (whether that line was reached, whether ``set`` returned).
    """
    flag = StopFlag()
    seen = [0]
    fired = [False]

    def tracer(frame: object, event: str, _arg: object) -> object:
        if event == "line" and not fired[0]:
            seen[0] += 1
            if seen[0] == n:
                fired[0] = True
                flag._handle(signal.SIGUSR2, None)
        return tracer

    def target() -> None:
        previous = sys.gettrace()
        sys.settrace(tracer)
        try:
            flag.set("peer")
        finally:
            sys.settrace(previous)

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(timeout=5)
    returned = not worker.is_alive()
    if returned:
        assert flag.is_set()
    return fired[0], returned


def test_the_warning_signal_at_any_line_of_set_does_not_hang() -> None:
    """A rank told by its peers to stop (``should_stop`` sets the flag by hand) may get its own
    warning signal in the same instant: the handler must not wait for anything ``set`` holds."""
    for n in range(1, 200):
        reached, returned = _set_with_signal_at_line(n)
        if not reached:
            break
        assert returned, f"the signal's handler, run at line event {n} of set(), never returned"
    else:  # pragma: no cover - set() is a handful of lines
        pytest.fail("set() ran more lines than expected")
    assert n > 2, "the trace saw no lines of set(): nothing was tested"
