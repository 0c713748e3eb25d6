"""Float64 models through wholestep.torch: the step computes in float64
throughout (no float32 rounding on the way), returns the loss and the
clipped norm in float64, and wst.check(dtype=torch.float64) judges it within
float64 torch's own spread."""

import copy
import math

import pytest
import torch

import wholestep.torch as wst
from wholestep import _check, _exact64

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


def hard_and_celu():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Hardsigmoid(), nn.Linear(8, 8), nn.CELU(0.7),
                         nn.Linear(8, 3))


def test_check_in_float64_judges_hardsigmoid_and_celu_by_their_exact_gradients():
    # torch 1.13's float64 Hardsigmoid backward multiplies by 1.0f / 6.0f and
    # CELU's takes 1 / alpha rounded to float32 (3e-8 and 8e-8 off): the
    # check's float64 eager steps take the exact gradients (_exact64.py),
    # which wholestep computes, so its step is within float64's spread.
    x = (torch.rand(4000, dtype=torch.float64) * 8 - 4).requires_grad_()
    torch_hardsigmoid, torch_celu = F.hardsigmoid, F.celu
    with _exact64.exact_float64_gradients():
        hard, = torch.autograd.grad(F.hardsigmoid(x).sum(), x)
        celu, = torch.autograd.grad(nn.CELU(0.7)(x).sum(), x)
        inplace = x.detach().clone()
        F.hardsigmoid(inplace, inplace=True)
    x = x.detach()
    one = torch.ones_like(x)
    assert torch.equal(hard, torch.where((x > -3) & (x < 3), one / 6, 0 * one))
    assert torch.equal(celu, torch.where(x > 0, one, torch.exp(x / 0.7)))
    assert torch.equal(inplace, F.hardsigmoid(x))  # torch's own forward
    assert F.hardsigmoid is torch_hardsigmoid and F.celu is torch_celu  # restored

    model = hard_and_celu()
    x, y = torch.randn(16, 4) * 2, torch.randint(0, 3, (16,))
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    result = wst.check(model, opt, F.cross_entropy, x, y, modes=("single_graph",),
                       dtype=torch.float64, perturbed=1, verbose=False)
    assert result.passed, result.report()
    worst = max(d for m in result.modes.values() for _, d, _ in m.tensors)
    assert worst < 1e-13, result.report()


def test_check_in_float64_fails_a_step_with_one_tensor_rounded_to_float32():
    # The check's teeth: the same step with one parameter rounded to float32
    # (what a float32 constant or accumulator on the way leaves) fails,
    # naming that tensor, where the step itself passes.
    model = hard_and_celu()
    x, y = torch.randn(16, 4) * 2, torch.randint(0, 3, (16,))
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    batch = [x, y]
    ref = _check.Reference(model, opt, F.cross_entropy, batch, 1, 4, 1, torch.float64)
    snap, _ = _check.compiled_run(model, opt, F.cross_entropy, batch, 1, "single_graph", {},
                                  torch.float64)
    mode = _check.ModeCheck("single_graph", "single_graph", {})
    assert ref.judge(mode, snap).passed
    kind, weight = snap["2.weight"]
    snap["2.weight"] = (kind, weight.float().double())
    mode = ref.judge(_check.ModeCheck("single_graph", "single_graph", {}), snap)
    assert not mode.passed
    assert [n for n, _, _ in mode.failures()] == ["2.weight"]


class ScaledByConstants(nn.Module):
    """A convolution whose output a float32 tensor kept in a plain
    attribute scales and mixes (neither a parameter nor a buffer)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(2)
        self.conv = nn.Conv2d(3, 4, 1)
        self.mix = torch.rand(4, 4) + 0.5

    def forward(self, x):
        return torch.einsum("nchw,cd->ndhw", self.conv(x), self.mix)


@pytest.mark.parametrize("dtype", [None, torch.float64], ids=["float32", "float64"])
def test_check_runs_float32_constants_of_the_model_and_the_loss_in_float64(dtype):
    # Class weights in the loss function's closure and a mixing matrix in a
    # plain attribute are float32 tensors torch will not mix with float64
    # ("expected scalar type Double but found Float"): the float64 truth,
    # and a float64 step, read them as float64, the same numbers.
    weight = torch.tensor([0.5, 1.0, 2.0, 1.5])

    def loss_fn(logits, labels):
        return F.cross_entropy(logits, labels, weight=weight, ignore_index=2,
                               label_smoothing=0.1)

    model = ScaledByConstants()
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(2, 3, 4, 5, generator=g), torch.randint(0, 4, (2, 4, 5), generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    before = copy.deepcopy(model.state_dict())
    result = wst.check(model, opt, loss_fn, x, y, modes=("single_graph", "three_graph"),
                       dtype=dtype, perturbed=1, verbose=False)
    assert result.passed, result.report()
    assert weight.dtype == model.mix.dtype == torch.float32  # the user's left as they were
    assert all(torch.equal(t, before[k]) for k, t in model.state_dict().items())


def test_float64_operands_reads_float32_operands_as_float64_and_leaves_writes():
    weight = torch.tensor([0.25, 3.0])
    logits = torch.randn(3, 2, dtype=torch.float64)
    counts = torch.zeros(2)
    loss = _exact64.float64_operands(
        lambda z: F.cross_entropy(z, torch.tensor([0, 1, 1]), weight=weight) + counts.add_(1).sum())
    out = loss(logits)
    assert out.dtype == torch.float64
    assert torch.equal(out, F.cross_entropy(logits, torch.tensor([0, 1, 1]),
                                            weight=weight.double()) + 2)
    assert counts.dtype == torch.float32 and torch.equal(counts, torch.ones(2))  # written


def test_check_in_float64_takes_the_exact_gradient_at_a_saturated_softmax():
    # torch's float64 log_softmax backward takes 1 - p from p within 1e-13
    # of 1 (3 digits left); the check's truth sums the other probabilities
    # instead. Exactly: d loss / d x = (-s, s), s = 1 / (1 + e^30).
    x = torch.tensor([[0.0, -30.0], [-31.0, 0.0]], dtype=torch.float64)
    y = torch.tensor([0, 1])
    s = [1 / (1 + math.exp(30)), 1 / (1 + math.exp(31))]
    exact = torch.tensor([[-s[0], s[0]], [s[1], -s[1]]], dtype=torch.float64) / 2

    def gradient(fn):
        t = x.clone().requires_grad_()
        return torch.autograd.grad(fn(t), t)[0]

    def relative(g):
        return ((g - exact) / exact).abs().max().item()

    smoothed = gradient(lambda t: F.cross_entropy(t, y, label_smoothing=0.1))
    assert relative(gradient(lambda t: F.cross_entropy(t, y))) > 1e-6  # torch's own
    with _exact64.exact_float64_gradients():
        assert relative(gradient(lambda t: F.cross_entropy(t, y))) < 1e-14
        assert relative(gradient(lambda t: F.nll_loss(F.log_softmax(t, 1), y))) < 1e-14
        # along dim 0 of the transpose
        assert relative(gradient(lambda t: F.nll_loss(F.log_softmax(t.t(), 0).t(), y))) < 1e-14
        # label smoothing: torch's own, unchanged
        assert torch.equal(gradient(lambda t: F.cross_entropy(t, y, label_smoothing=0.1)),
                           smoothed)


def test_a_layer_norm_bias_gradient_summed_over_thousands_of_tokens_is_near_the_exact_value():
    # LayerNorm, Linear, ReLU, Linear over 3136 tokens of 32 channels, the
    # mean of the output as the loss: the bias's gradient is a sum over
    # every token. Against that sum computed in long double (80-bit; the
    # ReLU's mask is exact away from zero), wholestep's float64 step is
    # within a few roundings of the largest element (3.7e-16); float64
    # torch's own sums are further (1.2e-15 on 2 threads, 2.4e-15 on one),
    # which its spread over batch orders does not show.
    import numpy as np
    torch.manual_seed(0)
    dim = 32
    norm, fc1, fc2 = nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
    model = nn.Sequential(norm, fc1, nn.ReLU(), fc2).double()
    x = torch.randn(2, 1568, dim, dtype=torch.float64)
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=1.0),
                                  lambda out, t: out.mean())
    w1 = fc1.weight.detach().numpy().astype(np.longdouble)
    b1 = fc1.bias.detach().numpy().astype(np.longdouble)
    w2 = fc2.weight.detach().numpy().astype(np.longdouble)
    xs = x.numpy().astype(np.longdouble).reshape(-1, dim)
    mean = xs.mean(axis=1, keepdims=True)
    y = (xs - mean) / np.sqrt(((xs - mean) ** 2).mean(axis=1, keepdims=True) + 1e-5)
    h = y @ w1.T + b1
    assert np.abs(h).min() > 1e-9  # no ReLU input within rounding of its edge
    v = w2.T @ np.full(dim, np.longdouble(1) / xs.size)
    exact = (((h > 0) * v) @ w1).sum(axis=0)
    step(x, torch.zeros(1))
    got = -norm.bias.detach().numpy()  # lr 1 from a zero bias: minus the gradient
    err = float(np.abs(got - exact).max() / np.abs(exact).max())
    assert err < 6e-16, err


def resnet_block():
    """A residual block with BatchNorm over maps large enough that its
    convolutions run oneDNN's primitives (the ones a layout can move)."""
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, 16, 3, padding=1, bias=False)
            self.conv1 = nn.Conv2d(16, 16, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(16)
            self.conv2 = nn.Conv2d(16, 24, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(24)
            self.down = nn.Conv2d(16, 24, 1, bias=False)
            self.head = nn.Linear(24, 5)

        def forward(self, x):
            x = F.relu(self.stem(x))
            y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
            y = F.relu(y + self.down(x))
            return self.head(F.adaptive_avg_pool2d(F.max_pool2d(y, 2), 1).flatten(1))

    return Block()


@pytest.mark.parametrize("layouts", ["channels_last", "blocked"])
def test_images_stored_channels_last_or_in_blocks_train_within_float32_spread(layouts):
    model = resnet_block()
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 5, (4,), generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    result = wst.check(model, opt, F.cross_entropy, x, y, dtype=torch.float64,
                       modes=("single_graph", "three_graph"), perturbed=1, verbose=False,
                       layouts=layouts)
    assert result.passed, result.report()
    step = wst.compile_train_step(model, opt, F.cross_entropy, layouts=layouts)
    step(x, y)
    text = step.graphs_text()
    layout = '"nhwc"' if layouts == "channels_last" else '"nChw8c"'
    assert f"layout={layout}" in text, "no convolution was stored " + layouts
