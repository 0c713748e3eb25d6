"""compile_train_step(..., accumulate=k): one update every k calls from the
sum of their gradients, as torch's accumulation loop

    for x, y in micro_batches: loss_fn(model(x), y).backward()
    clip_grad_norm_(...); opt.step(); opt.zero_grad()

Three cycles against that loop in float64 torch, within what float32
torch itself reaches (two batch orders measure that spread, as
test_clip_grad_norm.py does), with SGD momentum and Adam, with and without
clipping, a BatchNorm whose running statistics advance on every call; the
cycle's position in stats(); a cycle saved mid-way and resumed; k=1 as
before."""

import copy
import math

import pytest
import torch

import wholestep
import wholestep.torch as wst
from torch_models import as_float64, distance, float64_copy, permuted

F = torch.nn.functional
K = 3
MAX_NORM = 0.05


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.BatchNorm1d(32),
                               torch.nn.Tanh(), torch.nn.Linear(32, 5))


def batches(n=3 * K):
    gen = torch.Generator().manual_seed(2)
    return [(torch.randn(16, 12, generator=gen), torch.randint(0, 5, (16,), generator=gen))
            for _ in range(n)]


def loss_fn(out, y):
    return F.cross_entropy(out, y) / K  # the mean over the cycle, as torch recipes do


OPTIMIZERS = {
    "sgd": lambda m: torch.optim.SGD(m.parameters(), lr=0.5, momentum=0.9, weight_decay=1e-3),
    "adam": lambda m: torch.optim.Adam(m.parameters(), lr=0.02),
}


def eager_accumulated(m, opt, data, max_norm=None):
    """torch's accumulation loop over `data`, K micro-batches a cycle:
    (losses per call, norms per cycle)."""
    losses, norms = [], []
    params = list(m.parameters())
    for c in range(0, len(data), K):
        opt.zero_grad(set_to_none=True)
        for x, y in data[c:c + K]:
            loss = loss_fn(m(x), y)
            loss.backward()
            losses.append(loss.item())
        if max_norm is not None:
            norms.append(float(torch.nn.utils.clip_grad_norm_(params, max_norm)))
        opt.step()
    return losses, norms


@pytest.mark.parametrize("mode", ["single_graph", "three_graph", "interpret"])
@pytest.mark.parametrize("opt_name", OPTIMIZERS)
@pytest.mark.parametrize("clip", [None, MAX_NORM])
def test_three_cycles_match_torch_accumulation_in_float64(clip, opt_name, mode):
    data = batches()
    make_opt = OPTIMIZERS[opt_name]
    ref = float64_copy(model())
    losses64, norms64 = eager_accumulated(ref, make_opt(ref), as_float64(data), clip)
    if clip is not None:
        assert min(norms64) > 2 * clip, f"clipping is active on every cycle: {norms64}"
    # float32 torch's own spread from float64, over two batch orders.
    loss_spread, spread = [0.0] * len(data), 0.0
    for perm in (torch.arange(16), torch.arange(16).flip(0)):
        m = model()
        losses, _ = eager_accumulated(m, make_opt(m), permuted(data, perm), clip)
        loss_spread = [max(s, abs(a - b) / abs(b))
                       for s, a, b in zip(loss_spread, losses, losses64)]
        spread = max(spread, distance(ref.state_dict(), m.state_dict()))

    m = model()
    opt = make_opt(m)
    step = wst.compile_train_step(m, opt, loss_fn, mode=mode, clip_grad_norm=clip, accumulate=K)
    for i, (x, y) in enumerate(data):
        loss = float(step(x, y))
        err = abs(loss - losses64[i]) / abs(losses64[i])
        assert err <= max(1e-4, 2 * loss_spread[i]), \
            f"call {i + 1}: loss {loss}, float64 {losses64[i]} (relative {err:.3g})"
        stats = step.stats()
        last = i % K == K - 1
        assert stats["updated"] == last and stats["accumulated"] == (i + 1) % K
        assert step.accumulated == (i + 1) % K
        if clip is not None and last:
            norm, want = stats["grad_norm"], norms64[i // K]
            assert abs(norm - want) <= 1e-4 * want, f"cycle {i // K + 1}: norm {norm}, {want}"
        else:
            assert stats["grad_norm"] is None
    d = distance(ref.state_dict(), m.state_dict())
    assert d <= 2 * spread + 1e-5, f"parameters {d:.3g} from float64, float32 torch {spread:.3g}"
    if opt_name == "adam":
        steps = {float(s["step"]) for s in opt.state.values()}
        assert steps == {len(data) // K}, steps


def test_summing_calls_change_no_parameter_or_state():
    data = batches(K)
    m = model()
    opt = OPTIMIZERS["adam"](m)
    step = wst.compile_train_step(m, opt, loss_fn, accumulate=K)
    step(*data[0])  # compiles: the optimizer's state exists from here
    params = copy.deepcopy({k: v for k, v in m.state_dict().items() if "running" not in k})
    state = copy.deepcopy(opt.state_dict())
    step(*data[1])
    assert distance(params, m.state_dict()) == 0
    assert distance(state["state"][0], opt.state_dict()["state"][0]) == 0
    sums = step.state_dict()["grads"]
    assert set(sums) == {n for n, _ in m.named_parameters()}
    assert all(float(s.abs().max()) > 0 for s in sums.values())
    step(*data[2])
    assert distance(params, m.state_dict()) > 1e-4
    assert all(float(s.abs().max()) == 0 for s in step.state_dict()["grads"].values())


def test_a_cycle_saved_mid_way_resumes_with_the_same_bits():
    data = batches(2 * K)
    a = model()
    opt_a = OPTIMIZERS["sgd"](a)
    step_a = wst.compile_train_step(a, opt_a, loss_fn, accumulate=K)
    for x, y in data[:K + 1]:
        step_a(x, y)
    saved = copy.deepcopy((a.state_dict(), opt_a.state_dict(), step_a.state_dict()))
    assert saved[2]["accumulated"] == 1
    for x, y in data[K + 1:]:
        step_a(x, y)

    b = model()
    opt_b = OPTIMIZERS["sgd"](b)
    step_b = wst.compile_train_step(b, opt_b, loss_fn, accumulate=K)
    b.load_state_dict(saved[0])
    opt_b.load_state_dict(saved[1])
    step_b.load_state_dict(saved[2])
    assert step_b.accumulated == 1
    for x, y in data[K + 1:]:
        step_b(x, y)
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(p, q), name

    other = wst.compile_train_step(b, opt_b, loss_fn, accumulate=K + 1)
    with pytest.raises(wholestep.Error, match=rf"accumulate={K}, this one has accumulate={K + 1}"):
        other.load_state_dict(saved[2])
    wrong = copy.deepcopy(saved[2])
    wrong["grads"]["0.weight"] = torch.zeros(3)
    with pytest.raises(wholestep.Error, match=r"gradient sum of '0.weight'"):
        step_b.load_state_dict(wrong)
    wrong = dict(saved[2], accumulated=K)
    with pytest.raises(wholestep.Error, match=rf"{K} calls summed, but a cycle of accumulate={K}"):
        step_b.load_state_dict(wrong)


def test_accumulate_1_is_the_plain_step():
    data = batches(4)
    a, b = model(), model()
    plain = wst.compile_train_step(a, OPTIMIZERS["adam"](a), loss_fn)
    one = wst.compile_train_step(b, OPTIMIZERS["adam"](b), loss_fn, accumulate=1)
    for x, y in data:
        assert float(plain(x, y)) == float(one(x, y))
        assert one.stats()["updated"] and one.stats()["accumulated"] == 0
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(p, q), name
    assert plain.stats()["kernels"] == one.stats()["kernels"]


def test_a_nonfinite_loss_mid_cycle_says_its_gradients_were_summed():
    (x, y), (x2, y2) = batches(2)
    m = model()
    step = wst.compile_train_step(m, OPTIMIZERS["sgd"](m), loss_fn, accumulate=K)
    step(x, y)
    x2 = x2.clone()
    x2[0, 0] = math.nan
    with pytest.raises(wholestep.Error, match=rf"the loss is nan; its gradients have been added "
                                              rf"to those summed for the next update \(call 2 of "
                                              rf"accumulate={K}\)"):
        step(x2, y2)
    assert step.accumulated == 2


def test_accumulate_is_checked():
    m = model()
    with pytest.raises(wholestep.Error, match=r"accumulate=0"):
        wst.compile_train_step(m, OPTIMIZERS["sgd"](m), loss_fn, accumulate=0)


def test_error_if_nonfinite_drops_the_cycle_and_updates_nothing():
    (x, y), (x2, y2), (x3, y3) = batches(3)
    m = model()
    opt = OPTIMIZERS["adam"](m)
    step = wst.compile_train_step(m, opt, loss_fn, clip_grad_norm=MAX_NORM,
                                  error_if_nonfinite=True, accumulate=2)
    step(x, y)
    params = copy.deepcopy({k: v for k, v in m.state_dict().items() if "running" not in k})
    x2 = x2.clone()
    x2[0, 0] = math.nan
    with pytest.raises(wholestep.Error, match=r"the update was not applied.*the gradients summed "
                                              r"over the cycle \(accumulate=2\) are dropped"):
        step(x2, y2)
    assert distance(params, m.state_dict()) == 0
    assert step.accumulated == 0
    assert all(float(s.abs().max()) == 0 for s in step.state_dict()["grads"].values())
    step(x3, y3)  # a new cycle
    assert step.accumulated == 1
