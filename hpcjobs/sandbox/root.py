"""A Debian root of another release, built once with debootstrap, for a sandbox under chroot.

A 22.05 Slurm client cannot talk to a 24.11 controller (nor the reverse), so a sandbox of the
release this machine does not run lives in its own Debian root: its daemons, and every client
that talks to them, run under ``chroot`` there.

Mounts are the dangerous part. A root with the host's ``/dev``, ``/proc`` or ``/sys``
bind-mounted must never be deleted while they are mounted: ``rm -rf`` would recurse into the
host's own ``/dev``. :meth:`DebianRoot.remove` unmounts first and refuses to delete anything
while ``/proc/self/mountinfo`` still lists a mount under the root.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hpcjobs.atomicfile import READABLE
from hpcjobs.errors import CommandError, HostSetupError, SandboxError
from hpcjobs.runner import LocalRunner, Result
from hpcjobs.sandbox.release import Release

Progress = Callable[[str], None]

#: Slurm and its accounting, the Python the tests run with, and what the live tests call.
ROOT_PACKAGES = (
    "slurmctld",
    "slurmd",
    "slurm-client",
    "slurmdbd",
    "munge",
    "mariadb-server",
    "python3",
    "python3-venv",
    "openssh-server",
    "openssh-client",
    "numactl",
    "shellcheck",
    "bash",
    "procps",
    "ca-certificates",
    "util-linux",
)

#: Written last into a finished root: its release and packages.
MARKER = Path("etc/hpcjobs-sandbox-root.json")
#: Host file systems every root needs while it runs, in mount order.
SYSTEM_MOUNTS = ("/proc", "/dev", "/dev/pts", "/sys")
#: Host files copied in at every start: name resolution for the controller's host name.
COPIED_FILES = ("/etc/hosts", "/etc/resolv.conf")
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
APT_ENV = {"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C.UTF-8"}


@dataclass(frozen=True)
class Mount:
    """One bind mount: host ``source`` shown at ``target`` inside the root."""

    source: str
    target: str


def _quiet(_: str) -> None:
    pass


# ---- pure decisions ---------------------------------------------------------------------------


def unescape_mount_point(field: str) -> str:
    """Mount points in mountinfo escape space, tab, newline and backslash as ``\\ooo``."""
    out, i = [], 0
    while i < len(field):
        chunk = field[i : i + 4]
        if field[i] == "\\" and len(chunk) == 4 and chunk[1:].isdigit():
            out.append(chr(int(chunk[1:], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[str]:
    """The mount points listed in a ``/proc/self/mountinfo`` text, in mount order."""
    points = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 5:
            points.append(unescape_mount_point(fields[4]))
    return points


def mounts_under(points: Iterable[str], root: Path | str) -> list[str]:
    """The mount points at or below ``root``, deepest (and latest) first: the unmount order."""
    base = os.path.normpath(str(root))
    inside = [p for p in points if p == base or p.startswith(base.rstrip("/") + "/")]
    ordered = list(dict.fromkeys(reversed(inside)))
    return sorted(ordered, key=lambda p: p.count("/"), reverse=True)


def mount_plan(root: Path, same_path: Sequence[Path]) -> list[Mount]:
    """What to bind-mount into ``root``: the system file systems, then each of ``same_path``
    at its own absolute path inside the root (so paths mean the same inside and outside)."""
    plan = [Mount(src, _inside(root, src)) for src in SYSTEM_MOUNTS]
    seen = {m.source for m in plan}
    for path in same_path:
        src = os.path.normpath(str(path))
        if not os.path.isabs(src):
            raise SandboxError(f"a path to bind into the root must be absolute: {src}")
        if src == "/" or any(src == s or src.startswith(s + "/") for s in SYSTEM_MOUNTS):
            raise SandboxError(f"refusing to bind {src} into the root")
        root_s = os.path.normpath(str(root))
        if src == root_s or src.startswith(root_s + "/") or root_s.startswith(src + "/"):
            raise SandboxError(f"refusing to bind {src}: it contains or lies inside the root")
        if src not in seen:
            seen.add(src)
            plan.append(Mount(src, _inside(root, src)))
    return plan


def missing_mounts(plan: Sequence[Mount], mounted: Iterable[str]) -> list[Mount]:
    """The part of ``plan`` not mounted yet."""
    present = set(mounted)
    return [m for m in plan if m.target not in present]


def mirror_from_sources(texts: Iterable[str]) -> str:
    """The Debian mirror this machine's apt sources name (not the security archive)."""
    for text in texts:
        for raw in text.splitlines():
            line = raw.split("#", 1)[0].strip()
            uris: list[str] = []
            if line.startswith("URIs:"):
                uris = line.removeprefix("URIs:").split()
            elif line.startswith("deb "):
                words = [w for w in line.split()[1:] if not w.startswith("[")]
                uris = words[:1]
            for uri in uris:
                if uri.startswith(("http://", "https://")) and "security" not in uri:
                    return uri.rstrip("/")
    return DEFAULT_MIRROR


def _inside(root: Path, path: str) -> str:
    return os.path.normpath(os.path.join(str(root), path.lstrip("/")))


# ---- the root ---------------------------------------------------------------------------------


class DebianRoot:
    """A Debian root of one release at ``path``."""

    def __init__(self, path: Path, release: Release) -> None:
        self.path = path
        self.release = release
        self._local = LocalRunner()

    @property
    def marker(self) -> Path:
        return self.path / MARKER

    def recorded(self) -> dict[str, object] | None:
        try:
            data = json.loads(self.marker.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    @property
    def ready(self) -> bool:
        data = self.recorded()
        return (
            data is not None
            and data.get("release") == self.release.codename
            and set(ROOT_PACKAGES) <= set(_strings(data.get("packages")))
        )

    def argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the root."""
        return ["chroot", str(self.path), *argv]

    def has_program(self, path: str) -> bool:
        return os.access(_inside(self.path, path), os.X_OK)

    # ---- building ---------------------------------------------------------------------------

    def ensure_built(self, progress: Progress = _quiet) -> None:
        """Build the root once: debootstrap, then the packages. Cached: a finished root is
        only topped up when the package list grew."""
        if self.ready:
            return
        if os.geteuid() != 0:
            raise HostSetupError(
                f"building the Debian {self.release.debian} root needs root",
                hint="run 'hpcjobs sandbox up' with sudo",
            )
        if self.recorded() is None and self.path.exists():
            progress(f"removing the unfinished root {self.path}")
            self.remove()
        if not self.path.exists():
            self._debootstrap(progress)
        self._install_packages(progress)

    def _debootstrap(self, progress: Progress) -> None:
        debootstrap = shutil.which("debootstrap") or _sbin("debootstrap")
        if debootstrap is None:
            progress("installing debootstrap with apt-get (one time)")
            self._setup(["apt-get", "update", "-q"], "apt-get update", 600)
            self._setup(
                ["apt-get", "install", "-y", "-q", "--no-install-recommends", "debootstrap"],
                "installing debootstrap",
                900,
            )
            debootstrap = shutil.which("debootstrap") or _sbin("debootstrap") or "debootstrap"
        mirror = mirror_from_sources(_apt_source_texts())
        partial = self.path.with_name(self.path.name + ".partial")
        if partial.exists():
            DebianRoot(partial, self.release).remove()
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        progress(f"building a Debian {self.release.debian} root with debootstrap from {mirror}")
        self._setup(
            [debootstrap, "--variant=minbase", self.release.codename, str(partial), mirror],
            "debootstrap",
            1800,
        )
        os.chmod(partial, 0o755)
        partial.rename(self.path)

    def _install_packages(self, progress: Progress) -> None:
        policy = self.path / "usr/sbin/policy-rc.d"
        # Packages must not start their services (munge, MariaDB, ssh) inside the root.
        policy.write_text("#!/bin/sh\nexit 101\n")
        os.chmod(policy, 0o755)
        self.copy_host_files()
        self.mount([])
        try:
            progress(f"installing Slurm {self.release.slurm} into the root with apt-get")
            # Debian unstable's Release file may be reported as expired: its date is not checked.
            update = ["apt-get", "-o", "Acquire::Check-Valid-Until=false", "update", "-q"]
            self._setup(self.argv(update), "apt-get update", 600)
            self._setup(
                self.argv(
                    ["apt-get", "install", "-y", "-q", "--no-install-recommends", *ROOT_PACKAGES]
                ),
                "apt-get install",
                1800,
            )
            self._setup(self.argv(["apt-get", "clean"]), "apt-get clean", 120)
        finally:
            self.unmount()
        # pip inside the root reaches PyPI through the host network: trust what the host trusts.
        if os.path.isfile(CA_BUNDLE):
            shutil.copyfile(CA_BUNDLE, _inside(self.path, CA_BUNDLE))
        data = {"release": self.release.codename, "packages": sorted(ROOT_PACKAGES)}
        self.marker.write_text(json.dumps(data, indent=2) + "\n")
        os.chmod(self.marker, READABLE)

    def _setup(self, argv: list[str], what: str, timeout: float) -> Result:
        """A setup command; its failure is a host setup error, not a Slurm error."""
        try:
            result = self._local.run(argv, timeout=timeout, check=False, env=APT_ENV)
        except CommandError as exc:
            raise HostSetupError(f"{what} failed: {exc.message}") from exc
        if not result.ok:
            detail = _tail(result.stderr) or _tail(result.stdout) or "(no output)"
            raise HostSetupError(f"{what} failed with exit code {result.returncode}: {detail}")
        return result

    def copy_host_files(self) -> None:
        for name in COPIED_FILES:
            if os.path.isfile(name):
                target = Path(_inside(self.path, name))
                with contextlib.suppress(FileNotFoundError):
                    target.unlink()  # resolv.conf may be a dangling symlink
                shutil.copyfile(name, target)
                os.chmod(target, READABLE)

    def add_user(self, name: str, uid: int, gid: int) -> None:
        """Give the root the host's user ``name`` (and its group), with the same ids: its
        slurmd runs that user's jobs (idempotent)."""
        for table, entry in (
            ("passwd", f"{name}:x:{uid}:{gid}::/nonexistent:/usr/sbin/nologin\n"),
            ("group", f"{name}:x:{gid}:\n"),
        ):
            path = Path(_inside(self.path, f"/etc/{table}"))
            text = path.read_text(encoding="utf-8")
            if not any(line.split(":", 1)[0] == name for line in text.splitlines()):
                with path.open("a", encoding="utf-8") as handle:
                    handle.write(("" if text.endswith("\n") or not text else "\n") + entry)

    # ---- mounts -----------------------------------------------------------------------------

    def mounted(self) -> list[str]:
        """What is mounted at or below the root now, deepest first."""
        return mounts_under(parse_mountinfo(Path("/proc/self/mountinfo").read_text()), self.path)

    def mount(self, same_path: Sequence[Path]) -> None:
        """Bind the system file systems and ``same_path`` into the root (idempotent)."""
        for item in missing_mounts(mount_plan(self.path, same_path), self.mounted()):
            target = Path(item.target)
            target.mkdir(parents=True, exist_ok=True)
            self._mount_cmd(["mount", "--bind", item.source, item.target])
            # Nothing mounted or unmounted in the root may propagate back to the host.
            self._mount_cmd(["mount", "--make-rslave", item.target])

    def unmount(self) -> None:
        """Unmount everything below the root (``umount -R``), and check that nothing is left."""
        for point in self.mounted():
            if point not in self.mounted():
                continue  # went with a recursive unmount above it
            result = self._local.run(["umount", "-R", point], check=False, timeout=60)
            if not result.ok:
                # Busy (a process still has it open): detach it from the tree at least.
                self._local.run(["umount", "-R", "-l", point], check=False, timeout=60)
        left = self.mounted()
        if left:
            raise SandboxError(
                f"could not unmount {', '.join(left)}",
                hint="stop what uses them, then run 'hpcjobs sandbox down' again",
            )

    def remove(self) -> None:
        """Unmount, verify that nothing is mounted below, and only then delete the root."""
        self.unmount()
        remove_tree(self.path)

    def _mount_cmd(self, argv: list[str]) -> None:
        result = self._local.run(argv, check=False, timeout=60)
        if not result.ok:
            raise SandboxError(
                f"{' '.join(argv)} failed: {_tail(result.stderr) or result.returncode}"
            )


def remove_tree(path: Path) -> None:
    """``rm -rf path``, refused while anything is mounted at or below it."""
    points = mounts_under(parse_mountinfo(Path("/proc/self/mountinfo").read_text()), path)
    if points:
        raise SandboxError(
            f"refusing to delete {path}: {', '.join(points)} still mounted",
            hint="run 'hpcjobs sandbox down' first",
        )
    if path.exists():
        shutil.rmtree(path)


def _apt_source_texts() -> list[str]:
    texts = []
    folder = Path("/etc/apt/sources.list.d")
    names = [Path("/etc/apt/sources.list")]
    if folder.is_dir():
        names += sorted(p for p in folder.iterdir() if p.suffix in (".list", ".sources"))
    for name in names:
        with contextlib.suppress(OSError):
            texts.append(name.read_text())
    return texts


def _sbin(program: str) -> str | None:
    for folder in ("/usr/sbin", "/sbin"):
        candidate = os.path.join(folder, program)
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def _strings(value: object) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _tail(text: str, count: int = 3) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-count:])
