"""Trust a host on purpose: fetch its key, judge it, and record it in ``known_hosts``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hpcjobs.backoff import Backoff
from hpcjobs.errors import BadInputError
from hpcjobs.remote.hostkeys import (
    ChangedHostKeyError,
    Judgement,
    TrustSources,
    Verdict,
    append_known_host,
    fingerprint,
)
from hpcjobs.remote.hostspec import SITE_LOGIN_HOSTS, parse_host_spec
from hpcjobs.remote.sshconfig import Target, load_ssh_config, resolve_target


@dataclass(frozen=True)
class HostKeyProbe:
    """The key a host presented, and what the trusted keys say about it."""

    target: Target
    key_type: str
    blob: bytes
    judgement: Judgement

    @property
    def fingerprint(self) -> str:
        """``SHA256:...``, as ``ssh-keygen -l`` shows it."""
        return fingerprint(self.blob)

    @property
    def record_file(self) -> Path:
        """Where :func:`record_host_key` writes by default: the first ``UserKnownHostsFile``."""
        return self.target.known_hosts_files[0]

    def changed_error(self) -> ChangedHostKeyError:
        """The error that refuses this key (for a changed or revoked verdict)."""
        return ChangedHostKeyError(
            self.target.spec,
            self.target.key_name,
            self.key_type,
            self.fingerprint,
            self.judgement.entries,
            revoked=self.judgement.verdict is Verdict.REVOKED,
        )


def probe_host_key(
    host_spec: str,
    *,
    site_login_hosts: Sequence[str] | None = None,
    pinned_host_keys: Sequence[str] | None = None,
    known_hosts: Path | None = None,
    ssh_config: Sequence[Path] | None = None,
    retry: Backoff | None = None,
) -> HostKeyProbe:
    """Connect to ``host_spec`` far enough to see its host key (no login), and judge the key.

    Jump hosts on the way must already be trusted, and are logged in to.

    Raises:
        BadInputError: The host argument is malformed, or is ``@site``.
        TransportError: The host cannot be reached (exit 4).
    """
    if host_spec == SITE_LOGIN_HOSTS:
        raise BadInputError(
            "trust one login host at a time",
            hint="pass one of the site's login_hosts, for example 'hpcjobs ssh trust HOST'",
        )
    from hpcjobs.remote.connect import fetch_host_key

    spec = parse_host_spec(host_spec)
    trust = TrustSources(
        pinned=tuple(pinned_host_keys or ()), login_hosts=tuple(site_login_hosts or ())
    )
    config = load_ssh_config(list(ssh_config) if ssh_config is not None else None)
    target = resolve_target(spec, config, known_hosts=known_hosts)
    key_type, blob = fetch_host_key(target, trust, retry=retry)
    judgement = trust.store_for(target).judge(target.key_name, key_type, blob)
    return HostKeyProbe(target, key_type, blob, judgement)


def record_host_key(probe: HostKeyProbe, path: Path | None = None) -> tuple[Path, str | None]:
    """Record a probed key as trusted, unless it already is.

    Args:
        probe: From :func:`probe_host_key`.
        path: The ``known_hosts`` file (default :attr:`HostKeyProbe.record_file`); created
            0600 in a 0700 folder when missing.

    Returns:
        The file, and the line added (None when the key was already trusted).

    Raises:
        ChangedHostKeyError: A different key is on record for the host, or this key is
            revoked. A changed key is never recorded over the old one.
    """
    target = path or probe.record_file
    verdict = probe.judgement.verdict
    if verdict is Verdict.TRUSTED:
        return target, None
    if verdict is not Verdict.UNKNOWN:
        raise probe.changed_error()
    line = append_known_host(
        target,
        probe.target.key_name,
        probe.key_type,
        probe.blob,
        hashed=probe.target.hash_known_hosts,
    )
    return target, line
