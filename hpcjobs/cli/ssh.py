"""``hpcjobs ssh``: check the connection to a login node, and trust its host key on purpose."""

from __future__ import annotations

from pathlib import Path

import click

from hpcjobs.backoff import NO_RETRY
from hpcjobs.cli.options import HOST_METAVAR, make_runner, site_ssh_settings
from hpcjobs.errors import EXIT_TRANSPORT, SlurmError
from hpcjobs.remote.hostkeys import Verdict
from hpcjobs.remote.runner import SshRunner
from hpcjobs.remote.trust import probe_host_key, record_host_key
from hpcjobs.slurm.client import SlurmClient


def _site(ctx: click.Context) -> Path | None:
    obj = ctx.find_root().obj
    site = obj.get("site") if isinstance(obj, dict) else None
    return site if isinstance(site, Path) else None


@click.group("ssh", context_settings={"help_option_names": ["-h", "--help"]})
def ssh() -> None:
    """Check and trust SSH connections to a cluster's login nodes.

    hpcjobs connects only to hosts whose key it can verify: keys in ~/.ssh/known_hosts,
    /etc/ssh/ssh_known_hosts, or pinned by your admins in the site config (host_keys).

    \b
    Typical first use from a laptop:
      hpcjobs ssh trust alice@login1.cluster.example
      hpcjobs ssh check alice@login1.cluster.example
      hpcjobs --site mycluster submit --host alice@login1.cluster.example ...
    """


@ssh.command("trust")
@click.argument("host", metavar=HOST_METAVAR)
@click.option(
    "-y",
    "--yes",
    is_flag=True,
    help="Record the key without asking. Use it only when the fingerprint was checked another way.",
)
@click.option(
    "--known-hosts",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The file to record the key in. Default: UserKnownHostsFile from ~/.ssh/config, "
    "else ~/.ssh/known_hosts.",
)
@click.pass_context
def trust(ctx: click.Context, host: str, yes: bool, known_hosts: Path | None) -> None:
    """Show HOST's key fingerprint and record the key as trusted.

    The host is contacted without logging in, its key and SHA256 fingerprint are shown, and
    after you confirm, the key is added to your known_hosts file (created 0600). Compare the
    fingerprint with the one your admins publish before you confirm.

    A host whose recorded key differs from the one it presents is refused (exit 4): remove the
    old entry yourself, with ssh-keygen -R, only once your admins confirm the key changed.
    """
    login_hosts, host_keys = site_ssh_settings(_site(ctx))
    probe = probe_host_key(
        host,
        site_login_hosts=login_hosts,
        pinned_host_keys=host_keys,
        known_hosts=known_hosts,
    )
    click.echo(f"{probe.target.label} presents this host key:")
    click.echo(f"  {probe.key_type} {probe.fingerprint}")
    verdict = probe.judgement.verdict
    if verdict is Verdict.TRUSTED:
        click.echo(f"It is already trusted ({probe.judgement.entries[0].source}).")
        return
    if verdict is not Verdict.UNKNOWN:
        raise probe.changed_error()
    destination = known_hosts or probe.record_file
    if not yes:
        click.echo(
            "Compare it with the fingerprint your admins publish (on the host: "
            "ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub)."
        )
        if not click.confirm(f"Trust this key and record it in {destination}?", default=False):
            click.echo("Not recorded.", err=True)
            ctx.exit(EXIT_TRANSPORT)
    path, _ = record_host_key(probe, destination)
    click.echo(f"Recorded in {path}. Next: hpcjobs ssh check {host}")


@ssh.command("check")
@click.argument("host", metavar=HOST_METAVAR)
@click.pass_context
def check(ctx: click.Context, host: str) -> None:
    """Connect to HOST, log in, and run 'sinfo --version' there.

    Exit 0 when Slurm answers, 4 when the SSH connection or login fails, 3 when Slurm's
    commands are missing or fail on the host.
    """
    runner = make_runner(host, _site(ctx))
    assert isinstance(runner, SshRunner)
    connection = runner.connect()
    click.echo(f"Connected to {connection.target.label}")
    click.echo(f"Host key: {connection.key_type} {connection.key_fingerprint}")
    try:
        version = SlurmClient(runner, policy=NO_RETRY).reach(timeout=60)
    except SlurmError as exc:
        exc.hint = "the SSH connection works, but Slurm's commands fail on that host"
        raise
    click.echo(f"Slurm: {version or '(no output)'}")
