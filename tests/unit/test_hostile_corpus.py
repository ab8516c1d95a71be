"""Hostile-input corpus: every entry point refuses bad values cleanly and passes nasty ones on
byte for byte (see tests/unit/hostile_cases.py for the cases and the contract).

Rendering happens in-process (click's CliRunner, the Python API); file cases that could hang
(a FIFO, /dev/zero, YAML bombs) and argv that is not UTF-8 run as real processes with a
timeout and a memory limit. Accepted scripts run under bash against the stand-ins in
tests/data/jobs/fakebin, with a PATH on which no real Slurm command can be found.
"""

from __future__ import annotations

import functools
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from hpcjobs.cli import cli
from hpcjobs.config.loader import load_site
from hpcjobs.errors import HpcJobsError
from hpcjobs.jobs.supervisorapp import write_supervisor
from tests.unit.hostile_cases import CANARY, Case, all_cases

ROOT = Path(__file__).resolve().parents[2]
FAKEBIN = ROOT / "tests" / "data" / "jobs" / "fakebin"
SANDBOX_SITE = ROOT / "site-configs" / "sandbox.yaml"
SLURM_COMMANDS = ("sbatch", "srun", "scontrol", "squeue", "scancel", "sacct", "salloc")

CASES = all_cases()
PROCESS_CASES = [c for c in CASES if c.process]

#: Seconds a real process may take before it counts as hanging.
PROCESS_TIMEOUT_S = 10
#: Address space of a real process (a read of /dev/zero must fail, not eat the machine).
PROCESS_MEMORY = 3 * 1024**3

REPORTER = """\
import json, os, sys
def enc(text):
    return text.encode("utf-8", "surrogateescape").hex()
out = os.path.join(sys.argv[1], "report-%s.json" % os.environ.get("RANK", "0"))
env = {k: enc(v) for k, v in os.environ.items() if k.startswith("NASTY_")}
env["HPCJOBS_CHECKPOINT_DIR"] = enc(os.environ.get("HPCJOBS_CHECKPOINT_DIR", ""))
with open(out, "w", encoding="utf-8") as f:
    json.dump({"argv": [enc(a) for a in sys.argv[2:]], "env": env}, f)
"""

#: Characters an error message must never echo raw (they would act on the user's terminal).
_RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")

#: Every script rendered by an accepted case, for the batched ``bash -n`` check at the end.
RENDERED: list[tuple[str, bytes]] = []


@functools.cache
def no_slurm_dir() -> Path:
    """Stand-ins for the Slurm commands fakebin lacks: they refuse to do anything."""
    folder = Path(tempfile.mkdtemp(prefix="hpcjobs-hostile-noslurm-"))
    for command in SLURM_COMMANDS:
        if not (FAKEBIN / command).exists():
            stub = folder / command
            stub.write_text(f"#!/bin/sh\necho '{command}: not in unit tests' >&2\nexit 127\n")
            stub.chmod(0o755)
    return folder


@functools.cache
def clean_path() -> str:
    """fakebin, then refusing stand-ins, first: no real Slurm command can be found."""
    return os.pathsep.join([str(FAKEBIN), str(no_slurm_dir()), os.environ.get("PATH", "")])


def enc(text: str) -> str:
    return text.encode("utf-8", "surrogateescape").hex()


@dataclass
class Outcome:
    """What one entry point did with a case."""

    exit_code: int
    output: str
    script: bytes | None = None
    error: str | None = None  # an unexpected exception, with its traceback
    timed_out: bool = False
    elapsed: float = 0.0
    in_validate: bool = False


@dataclass
class Paths:
    folder: Path
    canary: Path
    reporter: Path
    out: Path

    def fill(self, value: Any) -> Any:
        """``value`` with the placeholders replaced by this case's paths."""
        if isinstance(value, str):
            return (
                value.replace(CANARY, str(self.canary))
                .replace("@PY@", sys.executable)
                .replace("@REPORTER@", str(self.reporter))
                .replace("@OUT@", str(self.out))
            )
        if isinstance(value, bytes):
            return self.fill(os.fsdecode(value)).encode("utf-8", "surrogateescape")
        if isinstance(value, dict):
            return {self.fill(k): self.fill(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self.fill(v) for v in value)
        return value


def make_paths(folder: Path) -> Paths:
    folder.mkdir(parents=True, exist_ok=True)
    reporter = folder / "reporter.py"
    reporter.write_text(REPORTER, encoding="utf-8")
    out = folder / "out"
    out.mkdir(exist_ok=True)
    return Paths(folder, folder / "canary", reporter, out)


# ---- inputs ------------------------------------------------------------------------------


def sandbox_data() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(SANDBOX_SITE.read_text(encoding="utf-8"))
    return data


def patched_site(patch: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    data = sandbox_data()
    for dotted, value in patch:
        *parents, last = dotted.split(".")
        node: Any = data
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return data


def write_job_file(case: Case, paths: Paths) -> None:
    target = paths.folder / "job.yaml"
    if case.job_bytes is not None:
        target.write_bytes(paths.fill(case.job_bytes))
    elif case.job_data is not None:
        text = yaml.safe_dump(paths.fill(case.job_data), width=10**7)
        target.write_text(text, encoding="utf-8")


def write_site_file(case: Case, paths: Paths) -> Path:
    target = paths.folder / "site.yaml"
    if case.site_bytes is not None:
        text = yaml.safe_dump(sandbox_data(), width=10**7, allow_unicode=True)
        raw = text.encode().replace(
            b"account: sandbox", b"account: sand" + case.site_bytes + b"box"
        )
        target.write_bytes(raw)
    else:
        data = patched_site(paths.fill(case.site_patch or ()))
        target.write_text(yaml.safe_dump(data, width=10**7), encoding="utf-8")
    return target


def site_argv(case: Case, site_file: Path) -> list[str]:
    if case.extra.get("command") == "validate":
        return ["site", "validate", str(site_file)]
    output = [] if "output_dir" in case.target else ["--output-dir", "run"]
    return [
        "--site",
        str(site_file),
        "render",
        "--launcher",
        "none",
        *output,
        "--",
        *paths_program(),
    ]


def paths_program() -> list[str]:
    return ["@PY@", "@REPORTER@", "@OUT@"]


# ---- running the entry points in-process -------------------------------------------------


def invoke_cli(argv: list[str], env: dict[str, str]) -> Outcome:
    started = time.monotonic()
    result = CliRunner().invoke(cli, argv, env=env)
    error = None
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        assert result.exc_info is not None
        error = "".join(traceback.format_exception(*result.exc_info))
    try:
        stdout = result.stdout_bytes
    except ValueError:
        stdout = result.output_bytes
    return Outcome(
        result.exit_code,
        result.output,
        script=stdout if result.exit_code == 0 else None,
        error=error,
        elapsed=time.monotonic() - started,
    )


def run_api(case: Case, paths: Paths, site: Any) -> Outcome:
    from hpcjobs.script.jobspec import parse_spec
    from hpcjobs.script.render import render_job

    try:
        spec = parse_spec(paths.fill(case.api_data or {}))
        rendered = render_job(spec, site)
    except HpcJobsError as exc:
        return Outcome(exc.exit_code, f"Error: {exc.message}\n")
    except Exception:
        return Outcome(1, "", error=traceback.format_exc())
    return Outcome(0, "", script=rendered.script.encode("utf-8", "surrogateescape"))


def run_executor(case: Case, paths: Paths, site: Any) -> Outcome:
    from hpcjobs.submitit.executor import make_executor

    try:
        executor = make_executor(
            site,
            folder=paths.folder / "ex",
            python=sys.executable,
            **paths.fill(case.executor_params),
        )
        script = executor.render().script
    except HpcJobsError as exc:
        return Outcome(exc.exit_code, f"Error: {exc.message}\n")
    except Exception:
        return Outcome(1, "", error=traceback.format_exc())
    return Outcome(0, "", script=script.encode("utf-8", "surrogateescape"))


class FakeClient:
    """Just enough of SlurmClient for submit_rendered: a small MaxArraySize, fake job ids."""

    def __init__(self) -> None:
        self.calls: list[tuple[Path, list[str]]] = []

    def version(self) -> str:
        return "23.02.0"

    def max_array_size(self) -> int:
        return 1000

    def submit(
        self, script: Path, sbatch_args: Any, *, token: str, comment: str | None = None
    ) -> str:
        self.calls.append((script, list(sbatch_args)))
        return str(7000 + len(self.calls))


def run_chunks(case: Case, paths: Paths, site: Any) -> tuple[Outcome, list[Path]]:
    from hpcjobs.jobs.submission import submit_rendered
    from hpcjobs.script.jobspec import parse_spec
    from hpcjobs.script.render import render_job

    try:
        rendered = render_job(parse_spec(paths.fill(case.api_data or {})), site)
        client = FakeClient()
        submit_rendered(rendered, client=client, index_dir=paths.folder / "index")  # type: ignore[arg-type]
    except HpcJobsError as exc:
        return Outcome(exc.exit_code, f"Error: {exc.message}\n"), []
    except Exception:
        return Outcome(1, "", error=traceback.format_exc()), []
    return Outcome(0, "", script=rendered.script.encode()), [c[0] for c in client.calls]


# ---- real processes ----------------------------------------------------------------------


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (PROCESS_MEMORY, PROCESS_MEMORY))


def base_env(folder: Path) -> dict[str, str]:
    return {
        "PATH": clean_path(),
        "HOME": str(folder / "home"),
        "XDG_CONFIG_HOME": str(folder / "cfg"),
        "XDG_CACHE_HOME": str(folder / "cache"),
        "XDG_STATE_HOME": str(folder / "state"),
        "LANG": "C.UTF-8",
    }


def prepare_special(case: Case, paths: Paths) -> str:
    """Create the special file of ``case``; return the path to give hpcjobs."""
    target = paths.folder / "hostile.yaml"
    special = case.special
    if special == "fifo":
        os.mkfifo(target)
    elif special == "devzero":
        return "/dev/zero"
    elif special == "directory":
        target.mkdir()
    elif special == "big":
        line = "# " + "x" * 1000 + "\n"
        target.write_text("name: big\n" + line * 4500 + "command: [x]\n", encoding="utf-8")
    elif special == "deep":
        target.write_text("x-deep: " + "[" * 3000 + "]" * 3000 + "\n", encoding="utf-8")
    elif special in ("alias-bomb", "alias-bomb-x"):
        rows = ['x-a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
        for i in range(1, 10):
            rows.append(f"x-a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]")
        body = "\n".join(rows) + "\n"
        if case.entry == "site-file":
            body = SANDBOX_SITE.read_text(encoding="utf-8") + body
        else:
            body = "command: [x]\n" + body
        target.write_text(body, encoding="utf-8")
    return str(target)


def process_argv(case: Case, paths: Paths) -> tuple[list[str | bytes], dict[str, str]]:
    env = base_env(paths.folder)
    env.update(dict(case.env))
    head: list[str | bytes] = [sys.executable, "-m", "hpcjobs"]
    if case.argv_bytes is not None:
        tail = [paths.fill(a) for a in case.argv_bytes]
        if b"--" not in tail:
            tail += [b"--", *(paths.fill(p).encode() for p in paths_program())]
        return [*head, "--site", "sandbox", "render", "--launcher", "none", *tail], env
    if case.special is not None:
        target = prepare_special(case, paths)
        if case.entry == "job-file":
            return [*head, "--site", "sandbox", "render", "-f", target], env
        if case.extra.get("command") == "validate":
            return [*head, "site", "validate", target], env
        return [*head, "--site", target, "render", "--", "x"], env
    if case.site_patch is not None:
        site_file = write_site_file(case, paths)
        return [*head, *paths.fill(site_argv(case, site_file))], env
    program = [paths.fill(p) for p in paths_program()]
    return [*head, "--site", "sandbox", "render", "--launcher", "none", "--", *program], env


def run_process(case: Case, paths: Paths) -> Outcome:
    argv, env = process_argv(case, paths)
    env["PYTHONPATH"] = str(ROOT)
    started = time.monotonic()
    try:
        proc = subprocess.run(
            argv,
            cwd=paths.folder,
            env=env,
            capture_output=True,
            timeout=PROCESS_TIMEOUT_S,
            preexec_fn=_limit_memory,
        )
    except subprocess.TimeoutExpired as exc:
        return Outcome(
            -9,
            os.fsdecode(exc.stderr or b"")[-2000:],
            timed_out=True,
            elapsed=time.monotonic() - started,
        )
    output = (proc.stdout + proc.stderr).decode("utf-8", "surrogateescape")
    return Outcome(
        proc.returncode,
        output,
        script=proc.stdout if proc.returncode == 0 else None,
        error=output if "Traceback" in output else None,
        elapsed=time.monotonic() - started,
        in_validate=case.extra.get("command") == "validate",
    )


@pytest.fixture(scope="module")
def process_outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Outcome, Paths]]:
    """All real-process cases, run concurrently (most of them wait, or hang until killed)."""
    base = tmp_path_factory.mktemp("hostile-processes")
    jobs = {case.id: (case, make_paths(base / f"p{i}")) for i, case in enumerate(PROCESS_CASES)}
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = {
            cid: pool.submit(run_process, case, paths) for cid, (case, paths) in jobs.items()
        }
        return {cid: (future.result(), jobs[cid][1]) for cid, future in futures.items()}


# ---- the contract ------------------------------------------------------------------------


def _names_pattern(names: tuple[str, ...]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    return re.compile(rf"(?<![A-Za-z0-9_-])(?:{alternatives})(?![A-Za-z0-9_])")


def describe(case: Case, outcome: Outcome) -> str:
    if outcome.exit_code == 0 and outcome.script is not None and outcome.error is None:
        return f"[{case.id}] exit 0: rendered a script"
    text = outcome.error or outcome.output
    return f"[{case.id}] exit {outcome.exit_code}: {text[-1500:]!r}"


def assert_rejected(case: Case, outcome: Outcome) -> None:
    about = describe(case, outcome)
    assert not outcome.timed_out, f"did not finish within {PROCESS_TIMEOUT_S} s {about}"
    assert outcome.error is None, f"unexpected exception {about}"
    assert "Traceback" not in outcome.output, about
    assert outcome.exit_code == 2, f"expected exit 2 {about}"
    if not outcome.in_validate:
        errors = [line for line in outcome.output.split("\n") if line.startswith("Error:")]
        assert len(errors) == 1, f"expected one 'Error:' line {about}"
    assert _names_pattern(case.names).search(outcome.output), f"names none of {case.names} {about}"
    raw = _RAW_CONTROL.search(outcome.output)
    assert raw is None, f"echoes a raw control character {raw.group()!r} {about}"


def write_the_supervisor(script: bytes, paths: Paths) -> None:
    """The job's supervisor where ``script`` runs it from, as 'hpcjobs submit' writes it (the
    script's own assignment, read by bash, says where)."""
    lines = [ln for ln in script.split(b"\n") if ln.startswith(b"hpcjobs_supervisor=")]
    if len(lines) != 1:
        return
    where = subprocess.run(
        ["bash", "-c", lines[0] + b'\nprintf %s "$hpcjobs_supervisor"'],
        cwd=paths.folder,
        env={"PATH": clean_path()},
        capture_output=True,
        timeout=30,
        check=True,
    ).stdout
    write_supervisor(paths.folder / os.fsdecode(where))


def run_script(
    script: bytes, paths: Paths, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    write_the_supervisor(script, paths)
    path = paths.folder / "job.sh"
    path.write_bytes(script)
    env = {
        "PATH": clean_path(),
        "HOME": str(paths.folder),
        "SLURM_JOB_ID": "4242",
        "LANG": "C.UTF-8",
        **(extra_env or {}),
    }
    return subprocess.run(
        ["bash", str(path)], cwd=paths.folder, env=env, capture_output=True, timeout=60
    )


def assert_accepted(case: Case, outcome: Outcome, paths: Paths) -> None:
    about = describe(case, outcome)
    assert outcome.error is None, f"unexpected exception {about}"
    assert outcome.exit_code == 0 and outcome.script is not None, f"expected it to render {about}"
    RENDERED.append((case.id, outcome.script))
    if case.entry == "executor":
        check_executor_env(case, outcome.script, paths)
        return
    result = run_script(outcome.script, paths)
    stderr = result.stderr.decode("utf-8", "replace")[-1500:]
    assert result.returncode == 0, f"[{case.id}] script failed ({result.returncode}): {stderr}"
    assert not paths.canary.exists(), f"[{case.id}] the script ran an injected command"
    reports = [json.loads(p.read_text()) for p in sorted(paths.out.glob("report-*"))]
    assert len(reports) == 1, f"[{case.id}] the program ran {len(reports)} times: {stderr}"
    (report,) = reports
    value = paths.fill(case.value)
    if case.reaches == "arg":
        assert report["argv"] == [enc(value)], f"[{case.id}] argument changed"
    elif case.reaches == "env":
        assert report["env"].get("NASTY_VALUE") == enc(value), f"[{case.id}] variable changed"
    elif case.reaches == "checkpoint":
        expected = os.path.normpath(paths.folder / value)
        assert report["env"]["HPCJOBS_CHECKPOINT_DIR"] == enc(expected), f"[{case.id}] path changed"


def check_executor_env(case: Case, script: bytes, paths: Paths) -> None:
    """The executor's script exports NASTY_VALUE exactly (its tasks need pickles to run)."""
    lines = [line for line in script.split(b"\n") if line.startswith(b"export NASTY_VALUE=")]
    assert len(lines) == 1, f"[{case.id}] no single export line"
    snippet = paths.folder / "export.sh"
    snippet.write_bytes(lines[0] + b'\nprintf %s "$NASTY_VALUE"\n')
    result = subprocess.run(
        ["bash", str(snippet)], capture_output=True, timeout=30, env={"PATH": clean_path()}
    )
    assert result.stdout == paths.fill(case.executor_params or {})["env"]["NASTY_VALUE"].encode()
    assert not paths.canary.exists()


def assert_contract(case: Case, outcome: Outcome, paths: Paths) -> None:
    if case.expect == "reject" or (case.expect == "either" and outcome.exit_code != 0):
        assert_rejected(case, outcome)
    else:
        assert_accepted(case, outcome, paths)
    if case.value_class == "format-spec" and outcome.exit_code == 0 and outcome.script:
        assert b"<class" not in outcome.script and len(outcome.script) < 1_000_000, case.id
    assert not paths.canary.exists(), f"[{case.id}] an injected command ran"


# ---- the tests ---------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def corpus_summary(request: pytest.FixtureRequest) -> Iterator[None]:
    started = time.monotonic()
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        entries = Counter(c.entry for c in CASES)
        with capture.global_and_fixture_disabled():
            reporter.write_line(
                f"\nhostile corpus: {len(CASES)} cases in {time.monotonic() - started:.1f} s; "
                + ", ".join(f"{k} {v}" for k, v in sorted(entries.items()))
            )


@pytest.fixture
def site(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setenv("PATH", clean_path())
    monkeypatch.chdir(tmp_path)
    return sandbox_site()


@functools.cache
def sandbox_site() -> Any:
    """The sandbox site without user or HPCJOBS_* layers (loaded once: it is frozen)."""
    return load_site("sandbox", environ={}, user_file=Path("/nonexistent/hpcjobs.yaml"))


def test_corpus_is_big_and_covers_every_entry_point() -> None:
    assert len(CASES) >= 500
    assert len({c.id for c in CASES}) == len(CASES)
    assert {c.entry for c in CASES} >= {
        "cli-render",
        "cli-submit",
        "job-file",
        "site-file",
        "env",
        "api",
        "executor",
        "process",
    }


@pytest.mark.parametrize("case", [c for c in CASES if not c.process], ids=lambda c: c.id)
def test_in_process(case: Case, site: Any, tmp_path: Path) -> None:
    paths = make_paths(tmp_path)
    if case.env and case.entry.startswith("api"):
        site = load_site("sandbox", environ=dict(case.env))
    if case.entry == "api":
        outcome = run_api(case, paths, site)
    elif case.entry == "executor":
        outcome = run_executor(case, paths, site)
    elif case.entry == "api-chunks":
        outcome, chunks = run_chunks(case, paths, site)
        if outcome.exit_code == 0:
            check_chunks(case, outcome, chunks, paths)
            return
        assert_rejected(case, outcome)
        return
    else:
        env = dict(case.env)
        if case.entry == "site-file":
            site_file = write_site_file(case, paths)
            argv = paths.fill(site_argv(case, site_file))
        else:
            write_job_file(case, paths)
            argv = paths.fill(list(case.argv))
        outcome = invoke_cli(argv, paths.fill(env))
        outcome.in_validate = case.extra.get("command") == "validate"
    assert_contract(case, outcome, paths)


def check_chunks(case: Case, outcome: Outcome, chunks: list[Path], paths: Paths) -> None:
    """Every chunk script of a split array parses and never runs the injected command."""
    assert len(chunks) > 1, f"[{case.id}] the array was not split"
    for chunk in chunks:
        script = chunk.read_bytes()
        RENDERED.append((f"{case.id}:{chunk.name}", script))
        result = run_script(
            script, paths, {"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_JOB_ID": "4242"}
        )
        stderr = result.stderr.decode("utf-8", "replace")[-800:]
        assert not paths.canary.exists(), f"[{case.id}] {chunk.name} ran the injected command"
        assert result.returncode == 0, f"[{case.id}] {chunk.name} failed: {stderr}"


@pytest.mark.parametrize("case", PROCESS_CASES, ids=lambda c: c.id)
def test_real_process(case: Case, process_outcomes: dict[str, tuple[Outcome, Paths]]) -> None:
    outcome, paths = process_outcomes[case.id]
    assert_contract(case, outcome, paths)


def test_rendered_scripts_pass_bash_n(tmp_path: Path) -> None:
    """``bash -n`` over every script the corpus rendered, in one bash per 200 scripts."""
    assert RENDERED, "no case rendered a script"
    files = []
    for i, (_cid, script) in enumerate(RENDERED):
        path = tmp_path / f"s{i}.sh"
        path.write_bytes(script)
        files.append(path)
    failed: list[str] = []
    check = 'for f; do bash -n "$f" 2>/dev/null || echo "$f"; done'
    for start in range(0, len(files), 200):
        batch = [str(p) for p in files[start : start + 200]]
        result = subprocess.run(
            ["bash", "-c", check, "bash", *batch], capture_output=True, text=True, timeout=120
        )
        failed += result.stdout.split()
    by_path = {str(p): cid for p, (cid, _) in zip(files, RENDERED, strict=True)}
    assert not failed, f"scripts that fail bash -n: {[by_path[f] for f in failed]}"


def test_no_real_slurm_on_the_path() -> None:
    for command in SLURM_COMMANDS:
        found = Path(str(shutil.which(command, path=clean_path())))
        assert found.parent in (FAKEBIN, no_slurm_dir()), command
