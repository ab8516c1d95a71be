"""The infrastructure signatures: output lines that show a crash was the node's, not the program's.

The job's supervisor searches the output of the first task that failed
(:meth:`.supervise.Supervisor.crash`) with ``grep -E``, so every pattern is a POSIX extended
regular expression. Each
text comes from the project that prints it, at the source named next to it; the wording that
changed between releases is covered by one pattern. Sites add their own under ``faults.signatures``
in the site config (docs/site-config.md). A line that matches none of them, such as a Python
traceback of an ordinary error, leaves the crash an ``application`` one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class Signature(NamedTuple):
    name: str
    pattern: str
    source: str


#: The signatures every job carries, before the site's own.
DEFAULT_SIGNATURES: tuple[Signature, ...] = (
    # NCCL, src/transport/net_ib: a completion with an error ("with error N" up to 2.18,
    # "status=" after).
    Signature(
        "nccl-ib-completion",
        r"NET/IB(/GIN)? ?: Got completion from peer [^ ]+ with (error [0-9]+|status=)",
        "NVIDIA/nccl src/transport/net_ib",
    ),
    Signature(
        "nccl-ib-async-event",
        r"NET/IB ?: ([^ ]+:[0-9]+ )?(Got (non-fatal )?async event|async fatal event)",
        "NVIDIA/nccl src/transport/net_ib",
    ),
    Signature(
        "nccl-ib-fatal",
        r"NET/IB: (Fatal error[.] Detected [0-9]+ failed devices|The error is fatal|Device [0-9]+ "
        r"marked as failed)|communicator encountered a fatal error \(detected in",
        "NVIDIA/nccl src/transport/net_ib",
    ),
    # NCCL result strings (ncclGetErrorString, src/init.cc), also inside torch's DistBackendError.
    Signature(
        "nccl-system-error",
        r"unhandled system error|ncclSystemError: ",
        "NVIDIA/nccl src/init.cc",
    ),
    Signature(
        "nccl-remote-error",
        r"remote process exited or there was a network error|ncclRemoteError: ",
        "NVIDIA/nccl src/init.cc",
    ),
    Signature(
        "nccl-socket-closed",
        r"NCCL WARN .*Connection closed by remote peer",
        "NVIDIA/nccl src/misc/socket.cc",
    ),
    # PyTorch, torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp: the watchdog.
    Signature(
        "torch-collective-timeout",
        r"Watchdog caught collective operation timeout"
        r"|Some NCCL operations have failed or timed out",
        "pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp",
    ),
    Signature(
        "torch-watchdog-hang",
        r"ProcessGroupNCCL's watchdog got stuck for [0-9]+ seconds|Heartbeat monitor timed out",
        "pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp",
    ),
    # CUDA runtime and driver error strings (as c10/cuda/CUDAException.cpp prints them).
    Signature(
        "cuda-ecc",
        r"uncorrectable ECC error encountered|cudaErrorECCUncorrectable"
        r"|CUDA_ERROR_ECC_UNCORRECTABLE",
        "CUDA runtime cudaGetErrorString (error 214)",
    ),
    Signature(
        "cuda-nvlink",
        r"uncorrectable NVLink error detected|cudaErrorNvlinkUncorrectable",
        "CUDA runtime cudaGetErrorString (error 220)",
    ),
    Signature(
        "cuda-device-unavailable",
        r"CUDA-capable device\(s\) is/are busy or unavailable",
        "CUDA runtime cudaGetErrorString (error 46)",
    ),
    # The NVIDIA driver's kernel messages and nvidia-smi.
    Signature(
        "gpu-lost",
        r"fallen off the bus|GPU is lost",
        "NVIDIA driver Xid 79, nvidia-smi",
    ),
    Signature(
        "nvidia-xid",
        r"NVRM: Xid \((PCI:)?[0-9a-fA-F:.]+\): (48|62|63|64|74|79|92|94|95|119|120|140|143|"
        r"144|145|146|147|148|149|150|154),",
        "NVIDIA Xid catalog (hardware and firmware Xids)",
    ),
    # Slurm's own words when a node fails under a step (slurmstepd, src/slurmd/slurmstepd/req.c).
    Signature(
        "slurm-node-failure",
        r"DUE TO NODE FAILURE|UNCORRECTABLE MEMORY ERROR AT",
        "SchedMD/slurm src/slurmd/slurmstepd/req.c",
    ),
)


def all_patterns(extra: Sequence[str] = ()) -> list[str]:
    """The defaults' patterns, then ``extra`` (the site's)."""
    return [sig.pattern for sig in DEFAULT_SIGNATURES] + list(extra)
