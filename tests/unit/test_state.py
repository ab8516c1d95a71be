"""The run's state: what the signal handler records, and what the next run inside the job
keeps of it."""

from __future__ import annotations

from hpcjobs.runtime.supervisor.state import BEGIN, FINISH, RUN, TERM, WARNING, RunState


def test_the_handler_records_and_the_main_thread_takes() -> None:
    state = RunState()
    state.record("USR2", "USR2")
    assert state.signal == WARNING and state.term_at == 0.0
    state.record("TERM", "USR2")
    assert state.signal == WARNING and state.term_at > 0  # the warning came first
    assert [name for name, _when in state.take_pending()] == ["USR2", "TERM"]
    assert state.take_pending() == []


def test_sigterm_is_the_warning_where_the_site_warns_with_it() -> None:
    state = RunState()
    state.record("TERM", "TERM")
    assert (state.signal, state.term_at) == (WARNING, 0.0)


def test_a_run_is_ending_once_signalled_or_past_its_run_phase() -> None:
    state = RunState()
    state.phase = RUN
    assert not state.ending
    state.mark_warning()
    assert state.ending and state.signal == WARNING
    state.record("TERM", "USR2")
    state.mark_warning()
    assert state.signal == WARNING  # a watch's warning does not hide the signal already seen
    fresh = RunState()
    fresh.phase = FINISH
    assert fresh.ending


def test_the_next_run_keeps_slurms_sigterm_only() -> None:
    warned = RunState()
    warned.record("USR2", "USR2")
    warned.signal_logged = warned.term_sent = True
    warned.new_run()
    assert (warned.signal, warned.term_sent, warned.signal_logged, warned.phase) == (
        "",
        False,
        False,
        BEGIN,
    )
    ended = RunState()
    ended.record("TERM", "USR2")
    ended.term_sent = True
    ended.new_run()
    assert ended.signal == TERM and ended.term_sent  # the next run ends at once
