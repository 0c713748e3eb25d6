"""Float64 models through wholestep.torch: the step computes in float64
throughout (no float32 rounding on the way), returns the loss and the
clipped norm in float64, and wst.check(dtype=torch.float64) judges it within
float64 torch's own spread."""

import copy

import pytest
import torch

import wholestep.torch as wst

nn = torch.nn
F = nn.functional


def cnn():
    # No bias before a normalization: its gradient is zero up to rounding,
    # which Adam's first steps blow up to full steps of noise.
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8),
                         nn.GELU(), nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, groups=2, bias=False),
                         nn.LayerNorm([2, 2]), nn.SiLU(), nn.Flatten(), nn.Linear(32, 5))


def batches(steps, dtype):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(6, 3, 8, 8, generator=g, dtype=dtype),
             torch.randint(0, 5, (6,), generator=g)) for _ in range(steps)]


OPTIMIZERS = {
    "sgd_nesterov_decay": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True,
                                                     weight_decay=1e-3),
    "adamw_amsgrad": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, amsgrad=True),
}


@pytest.mark.parametrize("make_opt", OPTIMIZERS.values(), ids=OPTIMIZERS.keys())
def test_a_float64_model_trains_as_float64_eager_within_float64_rounding(make_opt):
    model = cnn().double()
    eager = copy.deepcopy(model)
    opt, eager_opt = make_opt(model.parameters()), make_opt(eager.parameters())
    step = wst.compile_train_step(model, opt, F.cross_entropy, clip_grad_norm=0.5)
    for x, y in batches(5, torch.float64):
        eager_opt.zero_grad(set_to_none=True)
        want = F.cross_entropy(eager(x), y)
        want.backward()
        want_norm = torch.nn.utils.clip_grad_norm_(eager.parameters(), 0.5)
        eager_opt.step()
        got = step(x, y)
        assert got.dtype == torch.float64
        # float32 anywhere on the way would be ~1e-8 off
        assert got.item() == pytest.approx(want.item(), rel=1e-13)
        assert step.stats()["grad_norm"] == pytest.approx(want_norm.item(), rel=1e-13)
    for (name, a), b in zip(model.state_dict().items(), eager.state_dict().values()):
        assert a.dtype == b.dtype, name
        torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-13, msg=name)
    for a, b in zip(opt.state.values(), eager_opt.state.values()):
        for k in b:
            torch.testing.assert_close(a[k], b[k], rtol=1e-11, atol=1e-13, msg=k)


def test_the_float64_loss_of_a_float32_model_is_returned_in_float64():
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                  lambda out, y: F.cross_entropy(out.double(), y))
    x, y = torch.randn(5, 4), torch.randint(0, 3, (5,))
    want = F.cross_entropy(model(x).double(), y)
    got = step(x, y)
    assert got.dtype == torch.float64
    assert got.item() == pytest.approx(want.item(), rel=1e-7)


def test_check_in_float64_passes_a_conv_net_within_float64_spread():
    model = cnn()
    x, y = batches(1, torch.float32)[0]
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    result = wst.check(model, opt, F.cross_entropy, x, y, dtype=torch.float64,
                       modes=("single_graph", "three_graph"), perturbed=1, verbose=False)
    assert result.passed, result.report()
    assert "one float64 step" in result.report()
    # float64's limit: a float32 rounding anywhere would be beyond it
    worst = max(d for m in result.modes.values() for _, d, _ in m.tensors)
    assert worst < 1e-9
    assert model[0].weight.dtype == torch.float32  # the caller's model untouched


def test_check_in_float64_sees_a_float32_rounding_of_one_constant():
    # torch 1.13's float64 Hardsigmoid backward multiplies by 1.0f / 6.0f
    # (rounded to float32, 5e-9 from 1/6): wholestep's exact 1/6 lands
    # 3e-8 from it, inside float32's spread and far outside float64's.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Hardsigmoid(), nn.Linear(8, 3))
    x, y = torch.randn(16, 4) * 2, torch.randint(0, 3, (16,))
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    in32 = wst.check(model, opt, F.cross_entropy, x, y, modes=("single_graph",),
                     verbose=False)
    in64 = wst.check(model, opt, F.cross_entropy, x, y, modes=("single_graph",),
                     dtype=torch.float64, verbose=False)
    assert in32.passed, in32.report()
    assert not in64.passed
    name, distance, _ = in64["single_graph"].failures()[0]
    assert name.startswith("0.") and 1e-9 < distance < 1e-6, in64.report()
