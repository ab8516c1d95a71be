"""Pure logic of sandboxes on two Debian releases: release detection, config per release,
and the mount decisions that keep `down --purge` from deleting the host's /dev."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcjobs.errors import EXIT_BAD_INPUT, EXIT_SLURM, BadInputError, HostSetupError, SandboxError
from hpcjobs.sandbox import confgen
from hpcjobs.sandbox.cluster import choose_release
from hpcjobs.sandbox.release import (
    RELEASES,
    get_release,
    other_release,
    other_releases,
    release_of,
)
from hpcjobs.sandbox.root import (
    Mount,
    mirror_from_sources,
    missing_mounts,
    mount_plan,
    mounts_under,
    parse_mountinfo,
    remove_tree,
)

BOOKWORM = (
    'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nVERSION_ID="12"\n'
    "VERSION_CODENAME=bookworm\nID=debian\n"
)
TRIXIE_NO_CODENAME = 'ID=debian\nVERSION_ID="13"\n'
#: Debian unstable's own file (measured in a sid root, 2026-12): no VERSION_ID.
SID = (
    'PRETTY_NAME="Debian GNU/Linux forky/sid"\nNAME="Debian GNU/Linux"\n'
    "VERSION_CODENAME=forky\nID=debian\n"
)


def test_release_of_os_release() -> None:
    assert release_of(BOOKWORM) == RELEASES["bookworm"]
    assert release_of(TRIXIE_NO_CODENAME) == RELEASES["trixie"]
    assert release_of("ID=ubuntu\nVERSION_ID=24.04\n") is None
    assert release_of(SID) == RELEASES["sid"]


def test_other_release_is_the_other_way_round() -> None:
    assert other_release(RELEASES["bookworm"]).codename == "trixie"
    assert other_release(RELEASES["trixie"]).codename == "bookworm"
    assert RELEASES["trixie"].slurm_major == (24, 11)
    assert RELEASES["sid"].slurm_major == (26, 5)
    with pytest.raises(BadInputError):
        get_release("forky")


def test_a_full_run_covers_every_other_release_stable_first() -> None:
    assert [r.codename for r in other_releases(RELEASES["bookworm"])] == ["trixie", "sid"]
    assert [r.codename for r in other_releases(RELEASES["trixie"])] == ["bookworm", "sid"]


def test_cgroup_conf_only_for_new_slurm() -> None:
    assert confgen.cgroup_conf((22, 5)) is None
    assert confgen.cgroup_conf(None) is None
    text = confgen.cgroup_conf((24, 11))
    assert text is not None and "CgroupPlugin=disabled" in text


def test_choose_release(tmp_path: Path) -> None:
    host = RELEASES["bookworm"]
    assert choose_release(None, None, host) == host
    assert choose_release("trixie", None, host) == RELEASES["trixie"]
    # A state dir with a finished root keeps the release it was built for.
    marker = tmp_path / "root" / "etc" / "hpcjobs-sandbox-root.json"
    marker.parent.mkdir(parents=True)
    marker.write_text('{"release": "trixie", "packages": []}')
    assert choose_release(None, tmp_path, host) == RELEASES["trixie"]


MOUNTINFO = r"""22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
90 22 0:5 / /srv/sb/root/dev rw - devtmpfs udev rw
91 90 0:23 / /srv/sb/root/dev/pts rw - devpts devpts rw
92 22 0:21 / /srv/sb/root/proc rw - proc proc rw
93 22 254:0 /work/my\040repo /srv/sb/root/work/my\040repo rw - ext4 /dev/vda rw
94 22 0:21 / /srv/sb/rootless rw - proc proc rw
"""


def test_mounts_under_lists_deepest_first_and_only_below_the_root() -> None:
    points = parse_mountinfo(MOUNTINFO)
    assert "/srv/sb/root/work/my repo" in points
    under = mounts_under(points, Path("/srv/sb/root"))
    assert "/srv/sb/rootless" not in under
    assert under.index("/srv/sb/root/dev/pts") < under.index("/srv/sb/root/dev")
    assert set(under) == {
        "/srv/sb/root/dev",
        "/srv/sb/root/dev/pts",
        "/srv/sb/root/proc",
        "/srv/sb/root/work/my repo",
    }
    assert mounts_under(points, Path("/srv/sb")) != []
    assert mounts_under(points, Path("/elsewhere")) == []


def test_mount_plan_same_path_and_refusals() -> None:
    root = Path("/srv/sb/root")
    plan = mount_plan(root, [Path("/work/repo"), Path("/work/repo")])
    assert plan[:4] == [
        Mount("/proc", "/srv/sb/root/proc"),
        Mount("/dev", "/srv/sb/root/dev"),
        Mount("/dev/pts", "/srv/sb/root/dev/pts"),
        Mount("/sys", "/srv/sb/root/sys"),
    ]
    assert plan[4:] == [Mount("/work/repo", "/srv/sb/root/work/repo")]
    for bad in ("/", "/dev/shm", "/srv/sb", "/srv/sb/root/x", "relative"):
        with pytest.raises(SandboxError):
            mount_plan(root, [Path(bad)])


def test_missing_mounts_skips_what_is_mounted() -> None:
    plan = mount_plan(Path("/srv/sb/root"), [])
    left = missing_mounts(plan, parse_mountinfo(MOUNTINFO))
    assert [m.source for m in left] == ["/sys"]


def test_mirror_from_sources() -> None:
    deb822 = "Types: deb\nURIs: http://deb.debian.org/debian-security\n\nURIs: http://mirror.example/debian/\n"
    assert mirror_from_sources([deb822]) == "http://mirror.example/debian"
    assert mirror_from_sources(["deb [arch=amd64] https://m.example/debian bookworm main\n"]) == (
        "https://m.example/debian"
    )
    assert mirror_from_sources(["# nothing\n"]) == "http://deb.debian.org/debian"


def test_remove_tree_refuses_while_mounted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    victim = tmp_path / "sb"
    (victim / "root" / "dev").mkdir(parents=True)
    fake = f"90 22 0:5 / {victim}/root/dev rw - devtmpfs udev rw\n"
    real_read = Path.read_text

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        if str(self) == "/proc/self/mountinfo":
            return fake
        return real_read(self)

    monkeypatch.setattr(Path, "read_text", read_text)
    with pytest.raises(SandboxError, match="still mounted"):
        remove_tree(victim)
    assert victim.exists()
    fake = ""
    remove_tree(victim)
    assert not victim.exists()


def test_setup_errors_are_not_slurm_errors() -> None:
    assert HostSetupError.exit_code == EXIT_BAD_INPUT != EXIT_SLURM
