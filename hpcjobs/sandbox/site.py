"""The site config of a running sandbox: the built-in ``sandbox`` site (``site-configs/``),
sized to the cluster ``up`` started (its nodes, GPUs and CPUs per node), written next to its
``slurm.conf``. ``hpcjobs sandbox env`` points ``HPCJOBS_SITE`` at it, so ``submit`` and
``render`` check a job against the cluster it goes to (docs/sandbox.md)."""

from __future__ import annotations

from typing import Any

import yaml

from hpcjobs.config import SANDBOX_SITE
from hpcjobs.config.yamlfile import read_yaml_file
from hpcjobs.errors import ConfigError
from hpcjobs.resources import site_configs_dir

from .layout import Settings

#: The topology of a sandbox node in the built-in site.
TOPOLOGY = "sandbox-node"


def sized_site(settings: Settings) -> dict[str, Any]:
    """The built-in sandbox site with the partitions, the node topology and the description
    of a sandbox of ``settings``'s size."""
    path = site_configs_dir() / f"{SANDBOX_SITE}.yaml"
    doc = read_yaml_file(path)
    if not doc.ok or not isinstance(doc.data, dict):
        raise ConfigError(f"the built-in sandbox site {path} cannot be read")
    site: dict[str, Any] = doc.data
    nodes, gpus, cpus = settings.nodes, settings.gpus_per_node, settings.cpus_per_node
    site["description"] = (
        f"Local {nodes}-node sandbox, {gpus} fake GPU(s) per node (written by 'hpcjobs sandbox up')"
    )
    for part in site["partitions"]:
        part.update(nodes=nodes, max_nodes=nodes, gpus_per_node=gpus, cpus_per_node=cpus)
    topology = site["topologies"][TOPOLOGY]
    # Two NUMA domains, as the built-in site has: the first half of the GPUs (and one NIC)
    # on the first, the rest on the second.
    halves = [list(range(0, (gpus + 1) // 2)), list(range((gpus + 1) // 2, gpus))]
    for domain, own in zip(topology["numa"], halves, strict=True):
        domain["gpus"] = own
    nics = list(zip(topology["nics"], halves, strict=True))
    for nic, own in nics:
        nic["gpus"] = own
    topology["nics"] = [nic for nic, own in nics if own]
    topology["gpu"]["nvlink_domain"] = gpus
    return site


def site_text(settings: Settings) -> str:
    """:func:`sized_site` as YAML, with a header that says where it comes from."""
    head = (
        f"# The site of the sandbox in {settings.nodes} node(s) x {settings.gpus_per_node} "
        "GPU(s), written by 'hpcjobs sandbox up'\n# from the built-in 'sandbox' site; "
        "'hpcjobs sandbox env' points HPCJOBS_SITE here.\n"
    )
    return head + yaml.safe_dump(sized_site(settings), sort_keys=False)
