"""Datasheet figures of common accelerators, for plans on GPUs a site does not have (yet).

Renting means asking about GPUs the cluster lacks: ``plan --gpu A100`` plans on this catalogue's
figures instead of a partition's ``gpu`` facts. Each figure names where it comes from. Peak rates
are *dense* (vendors often print the rate with 2:4 sparsity, twice as high); memory is the
datasheet capacity; the scale-up domain is the GPUs of the vendor's standard 8-GPU board that
share one NVLink / Infinity Fabric / HCCS fabric; the inter-node bandwidth is one GPU's share of
the reference server's scale-out NICs, per direction, the figure that varies most between
clusters (measure yours, and put it in the site config).
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcjobs.errors import BadInputError


@dataclass(frozen=True)
class CatalogueGpu:
    """One accelerator as its vendor describes it, with the source of each figure."""

    key: str
    model: str
    bf16_tflops: float
    memory_bytes: int
    gpus_per_node: int
    nvlink_domain: int
    nvlink_gbyte_s: float | None
    internode_gbit_s: float
    sources: dict[str, str]


_BASEPOD = (
    "NVIDIA DGX BasePOD reference architecture, core components (docs.nvidia.com/dgx-basepod/"
    "reference-architecture-infrastructure-foundation-enterprise-ai/latest/core-components.html)"
)
_HGX_H100 = "NVIDIA technical blog, 'Introducing NVIDIA HGX H100' (developer.nvidia.com/blog)"
_REF_400 = (
    "NVIDIA HGX AI factory reference design 2-8-9-400: 400 Gb/s per GPU for HGX H100, H200 and "
    "B200 (docs.nvidia.com/reference-architectures/hgx-ai-factory-h100-h200-b200)"
)

CATALOGUE: dict[str, CatalogueGpu] = {
    gpu.key: gpu
    for gpu in (
        CatalogueGpu(
            key="H100",
            model="NVIDIA H100 SXM5 80GB",
            bf16_tflops=989.0,
            memory_bytes=80 * 10**9,
            gpus_per_node=8,
            nvlink_domain=8,
            nvlink_gbyte_s=450.0,
            internode_gbit_s=400.0,
            sources={
                "bf16_tflops": "NVIDIA H100 datasheet: BF16 1,979 TFLOPS with sparsity, 989.4 "
                "dense (NVIDIA developer forum, 'Theoretical TFLOPS for FP16, BF16 and TF32')",
                "memory_bytes": _BASEPOD + ": 640 GB for 8 H100, HBM3",
                "nvlink": _HGX_H100 + ": 8 GPUs, 4 NVSwitch, NVLink 900 GB/s both directions",
                "internode_gbit_s": _BASEPOD + ": 8 ConnectX-7 at 400 Gb/s; " + _REF_400,
            },
        ),
        CatalogueGpu(
            key="H200",
            model="NVIDIA H200 SXM 141GB",
            bf16_tflops=989.0,
            memory_bytes=141 * 10**9,
            gpus_per_node=8,
            nvlink_domain=8,
            nvlink_gbyte_s=450.0,
            internode_gbit_s=400.0,
            sources={
                "bf16_tflops": "the H100's GH100 die and clocks: BF16 989 dense (S. Bekman, ML "
                "Engineering, 'When to upgrade GPUs'); pages quoting 1,979 'dense' quote the "
                "sparse rate",
                "memory_bytes": "NVIDIA's MLPerf Inference v4.1 system H200-SXM-141GBx8: 141 GB "
                "HBM3e; " + _BASEPOD + ": 1,128 GB for 8",
                "nvlink": "NVIDIA MLPerf v4.1 system file: 18x 4th-generation NVLink, 900 GB/s "
                "both directions; " + _BASEPOD + ": 4 NVSwitch per DGX H200",
                "internode_gbit_s": _REF_400,
            },
        ),
        CatalogueGpu(
            key="B200",
            model="NVIDIA B200 (HGX B200)",
            bf16_tflops=2250.0,
            memory_bytes=180 * 10**9,
            gpus_per_node=8,
            nvlink_domain=8,
            nvlink_gbyte_s=900.0,
            internode_gbit_s=400.0,
            sources={
                "bf16_tflops": "NVIDIA HGX B200 table (as reproduced by fibermall.com and G. "
                "Lockwood's processor notes): FP16/BF16 36 PFLOPS with sparsity for 8 GPUs, "
                "2.25 PFLOPS dense each at 1,000 W (GB200, 1,200 W, is 2.5)",
                "memory_bytes": "NVIDIA DGX B200 user guide: 1,440 GB for 8 GPUs (B200-SXM-180GB)",
                "nvlink": "NVIDIA DGX B200 user guide: 2 NVLink 5 switches, 14.4 TB/s aggregate, "
                "1.8 TB/s per GPU both directions",
                "internode_gbit_s": "NVIDIA DGX B200 user guide: 8 ConnectX-7, up to 400 Gb/s",
            },
        ),
        CatalogueGpu(
            key="A100",
            model="NVIDIA A100 SXM4 80GB",
            bf16_tflops=312.0,
            memory_bytes=80 * 10**9,
            gpus_per_node=8,
            nvlink_domain=8,
            nvlink_gbyte_s=300.0,
            internode_gbit_s=200.0,
            sources={
                "bf16_tflops": "NVIDIA Hopper architecture blog, table 3 (via NVIDIA developer "
                "forum): A100 BF16 312 dense / 624 sparse",
                "memory_bytes": "NVIDIA A100 datasheet, 80 GB HBM2e (as cited by G. Lockwood's "
                "processor notes)",
                "nvlink": "NVIDIA NVLink page: 12 third-generation links, 600 GB/s both "
                "directions; HGX A100 has 8 GPUs on 6 NVSwitch",
                "internode_gbit_s": "DGX A100: 8 Mellanox 200 Gb/s HDR adapters, one per GPU "
                "(NVIDIA's launch coverage; secondary source)",
            },
        ),
        CatalogueGpu(
            key="L40S",
            model="NVIDIA L40S 48GB (PCIe)",
            bf16_tflops=362.05,
            memory_bytes=48 * 10**9,
            gpus_per_node=8,
            nvlink_domain=1,
            nvlink_gbyte_s=None,
            internode_gbit_s=200.0,
            sources={
                "bf16_tflops": "NVIDIA L40S datasheet table (as reproduced by resellers): BF16 "
                "362.05 dense, 733 with sparsity; secondary source, medium confidence",
                "memory_bytes": "NVIDIA L40S datasheet: 48 GB GDDR6 with ECC",
                "nvlink": "no NVLink: PCIe Gen4 x16, 64 GB/s both directions (the planner uses "
                "the network rate between GPUs of a node)",
                "internode_gbit_s": "no L40S figure from NVIDIA; its PCIe reference design "
                "2-8-5-200 (8 ports at 200 Gb/s per 8 GPUs, docs.nvidia.com/"
                "reference-architectures/enterprise-rag-deployment-guide): low confidence",
            },
        ),
        CatalogueGpu(
            key="MI300X",
            model="AMD Instinct MI300X 192GB",
            bf16_tflops=1307.4,
            memory_bytes=192 * 10**9,
            gpus_per_node=8,
            nvlink_domain=8,
            nvlink_gbyte_s=448.0,
            internode_gbit_s=400.0,
            sources={
                "bf16_tflops": "AMD ROCm docs, MI300 microarchitecture, 'Peak-performance "
                "capabilities of the MI300X': matrix BF16 1,307.4 TFLOPS",
                "memory_bytes": "AMD's MLPerf Inference v4.1 system 8xMI300X: 192 GB HBM3",
                "nvlink": "AMD ROCm docs: 7 Infinity Fabric links, a fully connected 8-GPU "
                "system; 128 GB/s per link both directions (secondary): 448 GB/s per direction "
                "in all, but one GPU pair has one link, about 64 GB/s",
                "internode_gbit_s": "AMD ROCm docs (vLLM distributed): 8 ConnectX-7 per node, "
                "1:1 with GPUs; Azure ND MI300X v5: 8x 400 Gb/s NDR",
            },
        ),
        CatalogueGpu(
            key="910B",
            model="Huawei Ascend 910B",
            bf16_tflops=280.0,
            memory_bytes=64 * 10**9,
            gpus_per_node=8,
            nvlink_domain=8,
            nvlink_gbyte_s=None,
            internode_gbit_s=200.0,
            sources={
                "bf16_tflops": "no Huawei datasheet found: FP16 280 TFLOPS (Gitee AI cluster "
                "docs, ai.gitee.com/docs/compute/clusters_gpu/ascend_gpu); other secondary "
                "sources say 256 to 320 by 910B variant: low confidence",
                "memory_bytes": "Gitee AI cluster docs: 64 GB HBM2e (secondary)",
                "nvlink": "Huawei MindX docs: 8 processors connected by HCCS; no bandwidth "
                "published (the planner uses the network rate between NPUs of a node)",
                "internode_gbit_s": "not published by Huawei (RoCE, speed unstated); 200 Gb/s "
                "per NPU assumed here, as commonly quoted for the Atlas 800T A2: unverified",
            },
        ),
    )
}

#: Names accepted besides the keys.
_ALIASES = {"ASCEND910B": "910B", "ASCEND-910B": "910B", "MI300": "MI300X"}


def catalogue_gpu(name: str) -> CatalogueGpu:
    """The catalogue entry for ``name`` (``H100``, ``h100``, ``MI300X``, ``910B``, ...).

    Raises:
        BadInputError: The catalogue has no such GPU.
    """
    key = name.strip().upper().replace(" ", "")
    key = _ALIASES.get(key, key)
    if key not in CATALOGUE:
        raise BadInputError(
            f"no GPU {name!r} in the built-in catalogue",
            hint=f"known: {', '.join(CATALOGUE)} ('hpcjobs plan --list-gpus' shows them)",
        )
    return CATALOGUE[key]


__all__ = ["CATALOGUE", "CatalogueGpu", "catalogue_gpu"]
