"""The predicted model-state memory against a real PyTorch model trained one step on the CPU."""

from __future__ import annotations

import pytest

from hpcjobs.plan.memory import model_state_bytes

torch = pytest.importorskip("torch")


def _storage_bytes(tensors: list[object]) -> int:
    seen: set[int] = set()
    total = 0
    for tensor in tensors:
        assert isinstance(tensor, torch.Tensor)
        storage = tensor.untyped_storage()
        if storage.data_ptr() in seen:
            continue
        seen.add(storage.data_ptr())
        total += storage.nbytes()
    return total


def test_fp32_adam_model_states_match_within_10_percent() -> None:
    torch.manual_seed(0)
    model = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=512),
        num_layers=4,
        enable_nested_tensor=False,
    )
    params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(16, 8, 128)
    model(x).square().mean().backward()
    optimizer.step()

    weights = _storage_bytes([p for p in model.parameters()])
    grads = _storage_bytes([p.grad for p in model.parameters() if p.grad is not None])
    states = _storage_bytes(
        [v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v)]
    )
    measured = weights + grads + states
    predicted = sum(model_state_bytes(params, "fp32", 0, 1))
    print(f"\n{params} parameters: predicted {predicted:.0f} B, measured {measured} B")
    assert weights == 4 * params and grads == 4 * params
    assert abs(predicted - measured) / measured < 0.10
