"""The Debian releases a sandbox can run, and which one this machine is."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hpcjobs.errors import BadInputError


@dataclass(frozen=True)
class Release:
    """One Debian release and the Slurm and Python it ships."""

    codename: str
    debian: str
    slurm: str
    python: str

    @property
    def slurm_major(self) -> tuple[int, int]:
        major, minor = self.slurm.split(".")[:2]
        return int(major), int(minor)

    @property
    def label(self) -> str:
        return f"Debian {self.debian} ({self.codename}), Slurm {self.slurm}"


RELEASES: dict[str, Release] = {
    "bookworm": Release("bookworm", "12", "22.05", "3.11"),
    "trixie": Release("trixie", "13", "24.11", "3.13"),
    # Debian unstable: the newest Slurm a site installs next (measured 26.05.5, Python 3.14).
    "sid": Release("sid", "unstable", "26.05", "3.14"),
}

OS_RELEASE = Path("/etc/os-release")


def parse_os_release(text: str) -> dict[str, str]:
    """The ``KEY=value`` pairs of an os-release file, quotes removed."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key and not key.startswith("#"):
            fields[key] = value.strip().strip("\"'")
    return fields


def release_of(os_release_text: str) -> Release | None:
    """The known release an os-release text describes, or None."""
    fields = parse_os_release(os_release_text)
    codename = fields.get("VERSION_CODENAME", "")
    if codename in RELEASES:
        return RELEASES[codename]
    for release in RELEASES.values():
        if fields.get("ID") == "debian" and fields.get("VERSION_ID") == release.debian:
            return release
    # Unstable names the next stable release (VERSION_CODENAME=forky), without a VERSION_ID;
    # testing looks the same and is taken for unstable (both carry the newest Slurm).
    if fields.get("ID") == "debian" and fields.get("PRETTY_NAME", "").endswith("/sid"):
        return RELEASES["sid"]
    return None


def host_release(os_release: Path = OS_RELEASE) -> Release | None:
    """This machine's release, or None when it is not a Debian release the sandbox knows."""
    try:
        return release_of(os_release.read_text())
    except OSError:
        return None


def get_release(codename: str) -> Release:
    try:
        return RELEASES[codename]
    except KeyError:
        known = ", ".join(RELEASES)
        raise BadInputError(f"unknown Debian release {codename!r} (known: {known})") from None


def other_release(release: Release) -> Release:
    """The stable release that is not ``release`` (bookworm and trixie are tested against each
    other; unstable is tested from both, see :func:`other_releases`)."""
    return next(r for r in RELEASES.values() if r != release and r.debian.isdigit())


def other_releases(release: Release) -> list[Release]:
    """Every release but ``release``, the stable one first: the ones a full test run also
    runs the live suite against, each in a Debian root."""
    others = [r for r in RELEASES.values() if r != release]
    return sorted(others, key=lambda r: not r.debian.isdigit())
