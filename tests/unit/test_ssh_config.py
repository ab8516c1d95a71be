"""Resolving a host through ~/.ssh/config: HostName, User, Port, keys, jumps, known_hosts."""

from __future__ import annotations

import getpass
from pathlib import Path

import pytest

from hpcjobs.errors import BadInputError, TransportError
from hpcjobs.remote.hostspec import parse_host_spec
from hpcjobs.remote.sshconfig import Target, load_ssh_config, resolve_target


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir(mode=0o700)
    return tmp_path


def _resolve(config_text: str, spec: str, home: Path, **kwargs: object) -> Target:
    path = home / ".ssh" / "config"
    path.write_text(config_text)
    return resolve_target(parse_host_spec(spec), load_ssh_config([path]), **kwargs)  # type: ignore[arg-type]


def test_no_config_gives_plain_defaults(home: Path) -> None:
    target = resolve_target(parse_host_spec("login1"), load_ssh_config([home / "none"]))
    assert (target.hostname, target.port, target.user) == ("login1", 22, getpass.getuser())
    assert target.known_hosts_files == (home / ".ssh" / "known_hosts",)
    assert target.key_name == "login1"
    assert target.jumps == () and target.proxy_command is None


def test_host_block_applies(home: Path) -> None:
    key = home / ".ssh" / "cluster_ed25519"
    key.write_text("not really a key")
    config = (
        "Host cluster\n"
        "    HostName login1.cluster.example\n"
        "    User alice\n"
        "    Port 2222\n"
        "    IdentityFile ~/.ssh/cluster_ed25519\n"
        "    IdentityFile ~/.ssh/missing_key\n"
        "    IdentitiesOnly yes\n"
        "    ConnectTimeout 7\n"
        "    ForwardAgent yes\n"
        "    StrictHostKeyChecking no\n"
    )
    target = _resolve(config, "cluster", home)
    assert target.hostname == "login1.cluster.example"
    assert (target.user, target.port) == ("alice", 2222)
    assert target.identity_files == (key,)  # missing files are skipped, like ssh does
    assert target.identities_only
    assert target.connect_timeout == 7.0
    assert target.key_name == "[login1.cluster.example]:2222"
    assert target.label == "cluster (alice@login1.cluster.example:2222)"
    assert target.spec == "cluster"


def test_command_line_wins_over_config(home: Path) -> None:
    config = "Host cluster\n    User alice\n    Port 2222\n"
    target = _resolve(config, "bob@cluster:22", home)
    assert (target.user, target.port) == ("bob", 22)


def test_known_hosts_options(home: Path) -> None:
    config = (
        "Host a\n    UserKnownHostsFile ~/kh1 /etc/kh2\n    HashKnownHosts yes\n"
        "Host b\n    HostKeyAlias cluster-login\n    Port 2200\n"
    )
    a = _resolve(config, "a", home)
    assert a.known_hosts_files == (home / "kh1", Path("/etc/kh2"))
    assert a.hash_known_hosts
    assert _resolve(config, "b", home).key_name == "cluster-login"
    override = _resolve(config, "a", home, known_hosts=home / "only")
    assert override.known_hosts_files == (home / "only",)


def test_proxy_jump_chain(home: Path) -> None:
    config = (
        "Host inner\n    HostName 10.1.0.5\n    ProxyJump carol@gw2:2022,gw1\n"
        "Host gw2\n    HostName gateway2.example\n    ProxyJump outer\n"
        "Host gw1\n    User dave\n"
        "Host outer\n    HostName outer.example\n    Port 443\n"
    )
    target = _resolve(config, "inner", home)
    hops = [(h.alias, h.hostname, h.port) for h in target.jumps]
    assert hops == [
        ("outer", "outer.example", 443),
        ("gw2", "gateway2.example", 2022),
        ("gw1", "gw1", 22),
    ]
    assert target.jumps[1].user == "carol" and target.jumps[2].user == "dave"
    assert all(h.jumps == () for h in target.jumps)


def test_proxy_jump_none_and_proxy_command(home: Path) -> None:
    config = (
        "Host direct\n    ProxyJump none\n"
        "Host viacmd\n    ProxyCommand nc -X connect -x proxy:3128 %h %p\n"
        "Host nocmd\n    ProxyCommand none\n"
    )
    assert _resolve(config, "direct", home).jumps == ()
    assert _resolve(config, "viacmd", home).proxy_command == "nc -X connect -x proxy:3128 viacmd 22"
    assert _resolve(config, "nocmd", home).proxy_command is None


def test_proxy_jump_loop_is_refused(home: Path) -> None:
    config = "Host a\n    ProxyJump b\nHost b\n    ProxyJump a\n"
    with pytest.raises(TransportError, match="ProxyJump"):
        _resolve(config, "a", home)


def test_bad_values_in_config(home: Path) -> None:
    with pytest.raises(BadInputError, match="Port"):
        _resolve("Host a\n    Port many\n", "a", home)
    with pytest.raises(BadInputError, match="ProxyJump"):
        _resolve("Host a\n    ProxyJump bad host\n", "a", home)


def test_include_is_expanded(home: Path) -> None:
    folder = home / ".ssh" / "config.d"
    folder.mkdir()
    (folder / "10-cluster.conf").write_text("Host cluster\n    HostName login9.example\n")
    (folder / "20-more.conf").write_text("Host other\n    User erin\n")
    target = _resolve("Include config.d/*.conf\nHost *\n    User frank\n", "cluster", home)
    assert (target.hostname, target.user) == ("login9.example", "frank")
    assert _resolve("Include config.d/*.conf\n", "other", home).user == "erin"


def test_unparsable_config_is_a_transport_error(home: Path) -> None:
    path = home / ".ssh" / "config"
    path.write_text("Host a\n    =broken\n")
    with pytest.raises(TransportError, match=str(path)):
        load_ssh_config([path])
