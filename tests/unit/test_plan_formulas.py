"""The planner's formulas against the published examples of the papers they come from.

Each expected value is derived by hand from the paper's formula and compared with the figure
the paper prints; the comment names paper, table or section, and value.
"""

from __future__ import annotations

import pytest

from hpcjobs.plan.memory import Layout, layer_activation_bytes, model_state_bytes
from hpcjobs.plan.model import ModelShape, ModelSpec, assumed_shape
from hpcjobs.plan.timing import Hardware, end_to_end_seconds, step_time

DAY = 86400

# Narayanan et al. 2021 (Megatron-LM, SC '21), Table 1: GPT models, vocabulary 51,200 and
# sequence length 2048.
GPT3 = ModelShape(layers=96, hidden=12288, heads=96, vocab=51200, seq_len=2048)
GPT_1T = ModelShape(layers=128, hidden=25600, heads=160, vocab=51200, seq_len=2048)


def test_parameter_counts_match_table_1() -> None:
    # Table 1: "174.6" billion parameters for 96 layers, h=12288, 96 heads.
    assert GPT3.params / 1e9 == pytest.approx(174.6, abs=0.05)
    # Table 1: "1008.0" billion parameters for 128 layers, h=25600, 160 heads.
    assert GPT_1T.params / 1e9 == pytest.approx(1008.0, abs=0.1)


def test_end_to_end_time_of_gpt3_is_34_days() -> None:
    # Section 5.1, eq. (4): GPT-3 (P = 175e9) on T = 300e9 tokens with n = 1024 A100 GPUs at
    # X = 140 teraFLOP/s per GPU: 8*T*P/(n*X) = 2.93e6 s, "about 34 days".
    seconds = end_to_end_seconds(300e9, 175e9, 1024, 140e12)
    assert seconds == pytest.approx(8 * 300e9 * 175e9 / (1024 * 140e12))
    assert seconds / DAY == pytest.approx(34, abs=0.5)


def test_end_to_end_time_of_the_1t_model_is_about_84_days() -> None:
    # Section 5.1: the 1T model on 450e9 tokens, 3072 GPUs at 163 teraFLOP/s per GPU (Table 1's
    # achieved rate): "84 days". 8*450e9*1e12/(3072*163e12) = 83.2 days.
    seconds = end_to_end_seconds(450e9, 1e12, 3072, 163e12)
    assert seconds / DAY == pytest.approx(84, abs=1.5)


def test_flops_per_iteration_with_full_recomputation() -> None:
    # Eq. (3): F = 96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)); B = 3072 for the 1T row.
    b, s, n, h, v = 3072, 2048, 128, 25600, 51200
    expected = 96 * b * s * n * h**2 * (1 + s / (6 * h) + v / (16 * n * h))
    assert GPT_1T.flops(b, "full") == pytest.approx(expected, rel=1e-12)
    # F ~= 8 * P * tokens: the factor behind eq. (4) (within 2 % at this size).
    assert GPT_1T.flops(b, "full") == pytest.approx(8 * GPT_1T.params * b * s, rel=0.02)
    # Without recomputation three passes instead of four: ~ 6 * P * tokens.
    assert GPT_1T.flops(b, "none") == pytest.approx(6 * GPT_1T.params * b * s, rel=0.02)
    assert GPT_1T.flops(b, "none") < GPT_1T.flops(b, "selective") < GPT_1T.flops(b, "full")


def test_table_1_rate_reproduces_through_the_step_time_model() -> None:
    # 1T row: 3072 GPUs, batch 3072, 163 teraFLOP/s per GPU. With tp=8, pp=64 and no bubble or
    # all-reduce cost, the step time is F/(n*X), so F/(step*n) gives 163e12 back.
    hw = Hardware("A100", 312e12, 80_000_000_000, 8, 8, 25e9)
    model = ModelSpec(GPT_1T.params, GPT_1T)
    layout = Layout(tp=8, pp=64, dp=6, micro_batch=1, zero=0, recompute="full", sp=False)
    step = step_time(model, layout, hw, global_batch=3072, precision="bf16", efficiency=163 / 312)
    rate = model.flops(3072, "full") / (step.compute_s * 3072)
    assert rate == pytest.approx(163e12, rel=1e-9)
    # The 1F1B bubble (p - 1)/m with m = 3072/(6*1) = 512 micro-batches.
    assert step.bubble_s == pytest.approx(step.compute_s * 63 / 512)


def test_zero_paper_model_states_of_7_5b_on_64_gpus() -> None:
    # Rajbhandari et al. 2020, Figure 1: Psi = 7.5B, K = 12, Nd = 64:
    # baseline 120 GB, P_os 31.4 GB, P_os+g 16.6 GB, P_os+g+p 1.88 GB.
    expected = {0: 120.0, 1: 31.4, 2: 16.6, 3: 1.88}
    for stage, gigabytes in expected.items():
        total = sum(model_state_bytes(7.5e9, "bf16", stage, 64)) / 1e9
        assert total == pytest.approx(gigabytes, abs=0.05), stage


def test_korthikanti_activation_memory_per_layer() -> None:
    # Korthikanti et al. 2022, Table 2, for GPT-3 175B (s=2048, h=12288, a=96) and b=1:
    # 5*a*s/h = 5*96*2048/12288 = 80, so no parallelism: s*b*h*(34 + 80) = 114*s*b*h.
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    sbh = s * b * h
    assert layer_activation_bytes(s, b, h, a) == pytest.approx(114 * sbh)
    # Tensor parallelism only: s*b*h*(10 + 24/t + 5as/(ht)) = sbh*(10 + 3 + 10).
    assert layer_activation_bytes(s, b, h, a, tp=t) == pytest.approx(23 * sbh)
    # Tensor + sequence parallelism: s*b*h/t*(34 + 5as/h) = sbh*114/8.
    assert layer_activation_bytes(s, b, h, a, tp=t, sp=True) == pytest.approx(114 / 8 * sbh)
    # Selective recomputation: s*b*h*(10 + 24/t) and, with sequence parallelism, s*b*h*34/t.
    assert layer_activation_bytes(s, b, h, a, tp=t, recompute="selective") == pytest.approx(
        13 * sbh
    )
    assert layer_activation_bytes(
        s, b, h, a, tp=t, sp=True, recompute="selective"
    ) == pytest.approx(34 / 8 * sbh)
    # Full recomputation: only the layer's input, 2*s*b*h.
    assert layer_activation_bytes(s, b, h, a, tp=t, recompute="full") == pytest.approx(2 * sbh)
    # Derived from the two rows above (not a figure printed in the paper): selective
    # recomputation keeps 34/114 of the tensor + sequence parallel activations.
    ratio = layer_activation_bytes(
        s, b, h, a, tp=t, sp=True, recompute="selective"
    ) / layer_activation_bytes(s, b, h, a, tp=t, sp=True)
    assert ratio == pytest.approx(34 / 114)


def test_model_states_in_fp32_are_16_bytes_per_parameter() -> None:
    assert sum(model_state_bytes(1e6, "fp32", 0, 1)) == 16e6


def test_assumed_shape_is_close_to_the_count() -> None:
    for params in (1e9, 7e9, 70e9, 175e9):
        shape = assumed_shape(int(params), 2048)
        assert shape.hidden % shape.heads == 0
        assert shape.params == pytest.approx(params, rel=0.2)
    assert assumed_shape(175_000_000_000, 2048).hidden == 12288  # GPT-3's own shape
