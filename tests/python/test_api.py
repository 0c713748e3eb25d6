"""wholestep.torch's API beyond matching eager: errors that name what was
wrong and where, hyperparameters read every step, parameter groups,
compile_forward, train/eval."""

import copy
import inspect

import pytest
import torch

import wholestep
import wholestep.torch as wst

nn = torch.nn
F = nn.functional


class Spectral(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 8)

    def forward(self, x):
        return torch.fft.fft(self.proj(x)).real  # the line the error must name


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), Spectral())
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.body(x))


def small(batch_norm=True):
    torch.manual_seed(0)
    if not batch_norm:
        return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))


def batch(seed=0, n=8):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 8, generator=g), torch.randint(0, 3, (n,), generator=g)


def test_an_unsupported_op_names_the_op_the_module_and_the_line_before_any_step():
    model = Net()
    before = copy.deepcopy(model.state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = wst.compile_train_step(model, opt, F.cross_entropy)
    with pytest.raises(wholestep.Error) as e:
        step(*batch())
    message = str(e.value)
    line = inspect.getsourcelines(Spectral.forward)[1] + 1
    assert "aten._fft_r2c" in message or "fft" in message
    assert "body.2" in message and "Spectral" in message
    assert f"{__file__}:{line}" in message
    # Nothing ran: the parameters and the optimizer are as they were.
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert not opt.state


def test_unsupported_optimizers_and_options_are_errors():
    model = small()
    with pytest.raises(wholestep.Error, match="RMSprop is not supported"):
        wst.compile_train_step(model, torch.optim.RMSprop(model.parameters()), F.cross_entropy)
    with pytest.raises(wholestep.Error, match="mode='fast'"):
        wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1),
                               F.cross_entropy, mode="fast")
    other = nn.Linear(2, 2)
    with pytest.raises(wholestep.Error, match="not a parameter of the model"):
        wst.compile_train_step(model, torch.optim.SGD(other.parameters(), lr=0.1),
                               F.cross_entropy)


def test_bad_tensors_are_errors_naming_them():
    model = small()
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                  F.cross_entropy)
    x, y = batch()
    with pytest.raises(wholestep.Error, match=r"argument 0 \[8, 8\] of dtype torch.float16"):
        step(x.half(), y)
    with pytest.raises(wholestep.Error, match=r"argument 0 \[8, 8\].*contiguous: False"):
        step(x.t().contiguous().t(), y)
    bad = nn.Linear(8, 3)
    bad.weight = nn.Parameter(torch.randn(3, 8).t().contiguous().t())
    step = wst.compile_train_step(bad, torch.optim.SGD(bad.parameters(), lr=0.1),
                                  F.cross_entropy)
    with pytest.raises(wholestep.Error, match=r"parameter 'weight' \[3, 8\] is not contiguous"):
        step(x, y)


def test_a_label_out_of_range_is_an_error_before_the_step():
    model = small()
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                  F.cross_entropy)
    x, y = batch()
    y[3] = 7
    with pytest.raises(wholestep.Error, match="label 7 at position 3, outside"):
        step(x, y)


def eager(model, opt, batches, scheduler=None):
    out = []
    for x, y in batches:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if scheduler:
            scheduler.step()
        out.append(loss.item())
    return out


def test_an_lr_scheduler_and_param_groups_work_without_recompiling():
    batches = [batch(i) for i in range(6)]
    results = []
    for compiled in (False, True):
        # No BatchNorm: the bias before one has a gradient of rounding noise
        # alone, which Adam turns into steps of lr either way.
        model = small(batch_norm=False)
        decay = [p for n, p in model.named_parameters() if n.endswith("weight")]
        no_decay = [p for n, p in model.named_parameters() if not n.endswith("weight")]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                                 {"params": no_decay, "weight_decay": 0.0, "lr": 3e-3}], lr=1e-2)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        if compiled:
            step = wst.compile_train_step(model, opt, F.cross_entropy)
            losses = []
            for x, y in batches:
                losses.append(float(step(x, y)))
                sched.step()
            assert step.traces() == 1
        else:
            losses = eager(model, opt, batches, sched)
        results.append((losses, model.state_dict(), opt.state_dict()))
    (l0, s0, o0), (l1, s1, o1) = results
    assert l1 == pytest.approx(l0, rel=1e-5)
    for k in s0:
        torch.testing.assert_close(s1[k], s0[k], rtol=1e-4, atol=1e-6, msg=k)
    assert o1["param_groups"] == o0["param_groups"]
    for i in o0["state"]:
        assert list(o1["state"][i]) == list(o0["state"][i])  # torch's names, in its order
        for k, v in o0["state"][i].items():
            torch.testing.assert_close(o1["state"][i][k], v, rtol=1e-4, atol=1e-6)


def test_sgd_options_match_torch():
    for options in ({"momentum": 0.9, "dampening": 0.5}, {"momentum": 0.9, "maximize": True},
                    {}, {"momentum": 0.8, "nesterov": True, "weight_decay": 1e-3}):
        assert_matches_eager(torch.optim.SGD, dict(options, lr=0.05))


def assert_matches_eager(cls, options):
    """Four steps of small() with cls(**options), compiled and eager."""
    batches = [batch(i) for i in range(4)]
    runs = []
    for compiled in (False, True):
        model = small()
        opt = cls(model.parameters(), **options)
        if compiled:
            step = wst.compile_train_step(model, opt, F.cross_entropy)
            runs.append([float(step(x, y)) for x, y in batches])
        else:
            runs.append(eager(model, opt, batches))
    assert runs[1] == pytest.approx(runs[0], rel=1e-5), options


def test_adam_amsgrad_and_maximize_match_torch():
    assert_matches_eager(torch.optim.Adam, {"lr": 1e-2, "amsgrad": True, "weight_decay": 1e-2})
    assert_matches_eager(torch.optim.AdamW, {"lr": 1e-2, "maximize": True})


def test_compile_forward_is_eval_mode_over_the_same_storage():
    model = small()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = wst.compile_train_step(model, opt, F.cross_entropy)
    predict = wst.compile_forward(model)
    x, y = batch()
    step(x, y)
    assert model.training
    out = predict(x)
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-6)
    model.train()
    step(x, y)  # the forward sees the update: same storage
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(predict(x), model(x), rtol=1e-5, atol=1e-6)


def test_switching_to_eval_retraces_with_the_running_statistics():
    model = small()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = wst.compile_train_step(model, opt, F.cross_entropy)
    x, y = batch()
    step(x, y)
    tracked = model[1].num_batches_tracked.item()
    model.eval()
    step(x, y)
    assert model[1].num_batches_tracked.item() == tracked  # eval: no statistics update
    assert step.traces() == 2


def test_tracing_failures_name_the_module_and_a_sync_batch_norms_average_is_refused():
    model = nn.Sequential(nn.Linear(8, 16), nn.SyncBatchNorm(16, momentum=None),
                          nn.Linear(16, 3))
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                  F.cross_entropy)
    with pytest.raises(wholestep.Error, match=r"SyncBatchNorm with momentum=None.*in module 1 "
                                              r"\(torch.nn"):
        step(*batch())
    model = small()
    step = wst.compile_train_step(  # a branch on a value: torch's tracer cannot follow it
        model, torch.optim.SGD(model.parameters(), lr=0.1),
        lambda out, y: F.cross_entropy(out, y) if out.sum() > 0 else out.sum())
    with pytest.raises(wholestep.Error, match=f"tracing the model failed.*{__file__}"):
        step(*batch())


def losses_of_three_steps(make_model, loss_fn, inputs, target, compiled):
    """The losses of three SGD steps, compiled or eager, from seed 0."""
    torch.manual_seed(0)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if compiled:
        step = wst.compile_train_step(model, opt, loss_fn)
        return [float(step(inputs.clone(), target)) for _ in range(3)], model
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = loss_fn(model(inputs.clone()), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


def assert_three_steps_match_torch(make_model, loss_fn, inputs, target):
    eager, _ = losses_of_three_steps(make_model, loss_fn, inputs, target, False)
    compiled, model = losses_of_three_steps(make_model, loss_fn, inputs, target, True)
    assert compiled == pytest.approx(eager, rel=1e-5)
    return model


def test_mse_loss_and_an_inplace_op_on_the_input_match_torch():
    assert_three_steps_match_torch(lambda: nn.Sequential(nn.ReLU(inplace=True), nn.Linear(8, 3)),
                                   F.mse_loss, torch.randn(8, 8), torch.randn(8, 3))


class Positions(nn.Module):
    """Token and position embeddings, the positions from torch.arange."""

    def __init__(self):
        super().__init__()
        self.tokens = nn.Embedding(20, 8)
        self.positions = nn.Embedding(6, 8)
        self.head = nn.Linear(8, 20)

    def forward(self, t):
        return self.head(self.tokens(t) + self.positions(torch.arange(t.shape[1])))


def token_loss(out, y):
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def test_positions_from_arange_match_torch():
    t = torch.randint(0, 20, (2, 6), generator=torch.Generator().manual_seed(0))
    assert_three_steps_match_torch(Positions, token_loss, t, t)


class TiedHead(Positions):
    """The output layer shares the token embedding's weight (one Parameter
    under two names)."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(8, 20, bias=False)
        self.head.weight = self.tokens.weight


def test_a_tied_weight_is_one_parameter_updated_once_as_in_torch():
    t = torch.randint(0, 20, (2, 6), generator=torch.Generator().manual_seed(1))
    model = assert_three_steps_match_torch(TiedHead, token_loss, t, t)
    assert model.head.weight is model.tokens.weight


def test_floor_times_the_compiled_steps_contractions_and_trains_nothing():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Flatten(), nn.Linear(8 * 6 * 6, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = wst.compile_train_step(model, opt, F.cross_entropy)
    x, y = torch.randn(4, 3, 6, 6), torch.randint(0, 3, (4,))
    with pytest.raises(wholestep.Error, match="floor: no step is compiled for this batch"):
        step.floor(x, y)
    step(x, y)
    state = copy.deepcopy(model.state_dict())
    momentum = [opt.state[p]["momentum_buffer"].clone() for p in model.parameters()]
    floor = step.floor(x, y, rounds=2)
    for k, v in model.state_dict().items():
        assert torch.equal(v, state[k]), k
    for p, m in zip(model.parameters(), momentum):
        assert torch.equal(opt.state[p]["momentum_buffer"], m)
    ops = sorted(what.split(" ")[0] for what, _, _, _, _ in floor["parts"])
    # The convolution's three directions (its input gradient is not needed:
    # x is data) and the Linear's three products.
    assert ops == ["conv2d", "conv2d_weight_grad", "matmul", "matmul", "matmul"], ops
    assert floor["ms"] == pytest.approx(sum(p[3] for p in floor["parts"]))
    assert all(p[3] > 0 and p[2] == 1 for p in floor["parts"]), floor["parts"]
    with pytest.raises(wholestep.Error, match="floor: no step is compiled"):
        step.floor(torch.randn(5, 3, 6, 6), torch.randint(0, 3, (5,)))


@pytest.mark.parametrize("layouts", ["channels_last", "nchw"])
def test_profile_times_kernels_and_counts_layout_conversions(layouts):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                          nn.Conv2d(16, 16, 3, padding=1), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    step = wst.compile_train_step(model, opt, F.cross_entropy, layouts=layouts)
    x, y = torch.randn(4, 3, 12, 12), torch.randint(0, 4, (4,))
    p = step.profile(x, y, steps=2)
    assert p["steps"] == 2 and p["step_ms"] > 0
    assert any(name.startswith("dnnl_conv") for name, _, _, _ in p["kernels"])
    r = p["reorders"]
    assert set(r) == {"weights", "other", "transposes"}
    # Both convolutions' weights, into oneDNN's blocks, in each direction.
    assert r["weights"] >= 2
    if layouts == "channels_last":
        assert r["other"] == 0  # images read and written where they lie
        assert r["transposes"] >= 1  # the three-channel input image, to NHWC
    else:
        assert r["other"] >= 2  # images to oneDNN's blocks and back
        assert r["transposes"] == 0
