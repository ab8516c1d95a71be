"""Read a compute node's topology: sysfs/``lscpu``, ``nvidia-smi topo -m``, ``ibv_devinfo``.

:data:`PROBE_SCRIPT` runs on the node (through ``srun``) and prints each tool's output under a
``@@section`` marker; tools that are missing print nothing. The parsers below are pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from hpcjobs.config.cpulist import format_cpulist, parse_cpulist
from hpcjobs.textlines import split_lines

#: Fixed script run on the probed node; it takes no input, so nothing can be injected into it.
PROBE_SCRIPT = r"""
echo @@numa
for n in /sys/devices/system/node/node[0-9]*; do
  [ -r "$n/cpulist" ] && echo "${n##*/node} $(cat "$n/cpulist")"
done
echo @@lscpu
command -v lscpu >/dev/null 2>&1 && lscpu -p=CPU,NODE
echo @@nvidia-topo
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi topo -m
echo @@ibv
command -v ibv_devinfo >/dev/null 2>&1 && ibv_devinfo
echo @@ib-numa
for d in /sys/class/infiniband/*; do
  [ -e "$d/device/numa_node" ] && echo "${d##*/} $(cat "$d/device/numa_node")"
done
echo @@route
command -v ip >/dev/null 2>&1 && ip -o route show default
echo @@end
"""

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass(frozen=True)
class IbPort:
    """One port of an RDMA device as ``ibv_devinfo`` reports it."""

    device: str
    port: int
    state: str
    link_layer: str

    @property
    def active(self) -> bool:
        return "ACTIVE" in self.state.upper()

    @property
    def kind(self) -> str:
        """``ib`` for InfiniBand, ``roce`` for RDMA over Ethernet."""
        return "roce" if self.link_layer.lower() == "ethernet" else "ib"


@dataclass
class GpuTopology:
    """What ``nvidia-smi topo -m`` says: each GPU's NUMA node and the NICs next to it."""

    gpu_numa: dict[int, int | None] = field(default_factory=dict)
    gpu_nics: dict[int, list[str]] = field(default_factory=dict)
    nic_names: dict[str, str] = field(default_factory=dict)


@dataclass
class ProbedNode:
    """Everything learned from one compute node."""

    numa: dict[int, list[int]] = field(default_factory=dict)
    gpus: GpuTopology = field(default_factory=GpuTopology)
    ib_ports: list[IbPort] = field(default_factory=list)
    ib_numa: dict[str, int] = field(default_factory=dict)
    default_interface: str | None = None


def split_sections(text: str) -> dict[str, str]:
    """Split the probe output at its ``@@name`` markers."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in split_lines(text):
        if line.startswith("@@"):
            current = sections.setdefault(line[2:].strip(), [])
            continue
        if current is not None:
            current.append(line)
    return {name: "\n".join(lines) for name, lines in sections.items()}


def parse_probe_output(text: str) -> ProbedNode:
    """Parse the whole output of :data:`PROBE_SCRIPT`."""
    sections = split_sections(text)
    numa = parse_sysfs_numa(sections.get("numa", ""))
    if not numa:
        numa = parse_lscpu(sections.get("lscpu", ""))
    return ProbedNode(
        numa=numa,
        gpus=parse_nvidia_topo(sections.get("nvidia-topo", "")),
        ib_ports=parse_ibv_devinfo(sections.get("ibv", "")),
        ib_numa=parse_ib_numa(sections.get("ib-numa", "")),
        default_interface=parse_default_route(sections.get("route", "")),
    )


def parse_sysfs_numa(text: str) -> dict[int, list[int]]:
    """Parse ``<node> <cpulist>`` lines (from ``/sys/devices/system/node``)."""
    result: dict[int, list[int]] = {}
    for line in split_lines(text):
        parts = line.split(None, 1)
        if len(parts) != 2 or not parts[0].isdigit():
            continue
        try:
            cpus = parse_cpulist(parts[1])
        except ValueError:
            continue
        result[int(parts[0])] = cpus
    return result


def parse_lscpu(text: str) -> dict[int, list[int]]:
    """Parse ``lscpu -p=CPU,NODE`` into CPUs per NUMA node (a missing node counts as 0)."""
    result: dict[int, list[int]] = {}
    for line in split_lines(text):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.strip().split(",")
        if not parts[0].isdigit():
            continue
        node = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        result.setdefault(node, []).append(int(parts[0]))
    return {node: sorted(cpus) for node, cpus in sorted(result.items())}


def parse_nvidia_topo(text: str) -> GpuTopology:
    """Parse ``nvidia-smi topo -m``: GPU NUMA affinity, GPU-to-NIC proximity, NIC legend.

    A NIC counts as a GPU's rail NIC when the matrix says ``PIX`` or ``PXB`` (same PCIe switch).
    """
    topo = GpuTopology()
    lines = [_ANSI.sub("", line).rstrip() for line in split_lines(text)]
    header: list[str] | None = None
    for line in lines:
        match = re.match(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$", line)
        if match:
            topo.nic_names[match.group(1)] = match.group(2)
    for line in lines:
        cells = _cells(line)
        if header is None:
            if "GPU0" in cells and "Affinity" in line:
                header = cells[cells.index("GPU0") :]
            continue
        if not cells or not re.fullmatch(r"GPU\d+", cells[0]):
            continue
        gpu = int(cells[0][3:])
        row = dict(zip(header, cells[1:], strict=False))
        numa = row.get("NUMA Affinity", "")
        topo.gpu_numa[gpu] = int(numa) if numa.isdigit() else None
        near = [
            col for col, value in row.items() if col.startswith("NIC") and value in ("PIX", "PXB")
        ]
        topo.gpu_nics[gpu] = [topo.nic_names.get(col, col) for col in near]
    return topo


def _cells(line: str) -> list[str]:
    """Split a matrix line into cells (tab-separated, or by runs of spaces in old output)."""
    if "\t" in line:
        return [cell.strip() for cell in line.split("\t")]
    return re.split(r"\s{2,}", line.strip())


def parse_ibv_devinfo(text: str) -> list[IbPort]:
    """Parse ``ibv_devinfo`` into one entry per device port."""
    ports: list[IbPort] = []
    device: str | None = None
    port: int | None = None
    info: dict[str, str] = {}

    def flush() -> None:
        if device is not None and port is not None:
            ports.append(IbPort(device, port, info.get("state", ""), info.get("link_layer", "")))

    for raw in split_lines(text):
        line = raw.strip()
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "hca_id":
            flush()
            device, port, info = value, None, {}
        elif key == "port" and value.isdigit():
            flush()
            port, info = int(value), {}
        elif key in ("state", "link_layer") and port is not None:
            info[key] = value
    flush()
    return ports


def parse_ib_numa(text: str) -> dict[str, int]:
    """Parse ``<device> <numa_node>`` lines; ``-1`` (no affinity) is left out."""
    result: dict[str, int] = {}
    for line in split_lines(text):
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            result[parts[0]] = int(parts[1])
    return result


def parse_default_route(text: str) -> str | None:
    """The interface of the default route in ``ip -o route show default`` output."""
    for line in split_lines(text):
        match = re.search(r"\bdev\s+(\S+)", line)
        if match:
            return match.group(1)
    return None


def numa_cpulists(node: ProbedNode) -> dict[int, str]:
    """The probed NUMA domains as cpulist strings."""
    return {domain: format_cpulist(cpus) for domain, cpus in sorted(node.numa.items()) if cpus}
