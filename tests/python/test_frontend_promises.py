"""wholestep.torch keeps eager torch's promises, or refuses with a
wholestep.Error before anything changes: frozen and unused parameters,
calls from several threads, float64 losses, no_grad inside the forward, a
failed first step, Python state the trace read, rebinding, schedulers,
odd arguments, options, autocast and threads."""

import copy
import os
import random
import signal
import threading

import numpy
import pytest
import torch

import wholestep
import wholestep.torch as wst
from wholestep import _train_step  # where TrainStep looks up the importer
from wholestep import _capture
from wholestep import _C, _guards

nn = torch.nn
F = nn.functional


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def batch(seed=0, n=8, classes=4):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 8, generator=g), torch.randint(0, classes, (n,), generator=g)


def eager_step(model, opt, x, y, loss_fn=F.cross_entropy):
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


def run_both(make, make_opt, steps=4, loss_fn=F.cross_entropy, prepare=None, each=None):
    """`steps` steps eager and compiled from the same start: [(losses,
    model, opt)] for eager then compiled. `prepare(model)` runs before
    the optimizer is made, `each(model, opt, i)` before each step."""
    runs = []
    for compiled in (False, True):
        model = make()
        if prepare:
            prepare(model)
        opt = make_opt(model)
        step = wst.compile_train_step(model, opt, loss_fn) if compiled else None
        losses = []
        for i in range(steps):
            if each:
                each(model, opt, i)
            x, y = batch(i)
            losses.append(float(step(x, y)) if compiled else eager_step(model, opt, x, y,
                                                                       loss_fn))
        runs.append((losses, model, opt))
    return runs


def assert_same_state(eager, compiled, rtol=1e-4, atol=1e-6):
    (l0, m0, o0), (l1, m1, o1) = eager, compiled
    assert l1 == pytest.approx(l0, rel=1e-5)
    for k, v in m0.state_dict().items():
        torch.testing.assert_close(m1.state_dict()[k], v, rtol=rtol, atol=atol, msg=k)
    s0, s1 = o0.state_dict(), o1.state_dict()
    assert s1["param_groups"] == s0["param_groups"]
    assert sorted(s1["state"]) == sorted(s0["state"])  # no state for a skipped parameter
    for i, st in s0["state"].items():
        assert list(s1["state"][i]) == list(st)
        for k, v in st.items():
            torch.testing.assert_close(s1["state"][i][k], v, rtol=rtol, atol=atol)


# ------------------------------------------------------------- 1. frozen parameters

OPTIMIZERS = [
    lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=0.1),
    lambda m: torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1),
]


@pytest.mark.parametrize("make_opt", OPTIMIZERS, ids=["sgd_momentum_decay", "adamw"])
def test_a_frozen_parameter_is_not_updated_and_gets_no_state_as_in_eager(make_opt):
    def freeze(model):
        model[0].weight.requires_grad_(False)

    eager, compiled = run_both(mlp, make_opt, prepare=freeze)
    before = mlp()[0].weight
    assert torch.equal(compiled[1][0].weight, before)
    assert compiled[1][0].weight not in compiled[2].state
    assert_same_state(eager, compiled)


class AuxHead(nn.Module):
    """A head the loss does not use: eager torch leaves its .grad None."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 16)
        self.head = nn.Linear(16, 4)
        self.aux = nn.Linear(16, 2)

    def forward(self, x):
        h = torch.relu(self.body(x))
        self.aux(h)  # computed, never part of the loss
        return self.head(h)


@pytest.mark.parametrize("make_opt", OPTIMIZERS, ids=["sgd_momentum_decay", "adamw"])
def test_a_parameter_the_loss_does_not_use_is_not_decayed_as_in_eager(make_opt):
    def make():
        torch.manual_seed(0)
        return AuxHead()

    eager, compiled = run_both(make, make_opt)
    assert torch.equal(compiled[1].aux.weight, make().aux.weight)
    assert_same_state(eager, compiled)


def test_unfreezing_a_parameter_recompiles_and_trains_it_as_in_eager():
    def toggle(model, opt, i):
        model[0].weight.requires_grad_(i >= 2)

    make_opt = OPTIMIZERS[0]
    eager, compiled = run_both(mlp, make_opt, steps=5, each=toggle)
    assert_same_state(eager, compiled)


# ------------------------------------------------------------- 2. threads

def test_calls_from_two_threads_run_one_at_a_time_and_all_count():
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    step = wst.compile_train_step(model, opt, F.cross_entropy)
    calls, losses, errors = 200, [], []

    def work(seed):
        try:
            for i in range(calls):
                losses.append(float(step(*batch(seed * calls + i))))
        except BaseException as e:  # reported below, not lost in the thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(losses) == 2 * calls and all(torch.isfinite(torch.tensor(losses)))
    for p in model.parameters():
        assert int(opt.state[p]["step"]) == 2 * calls


def test_a_forward_and_a_step_of_one_model_from_two_threads_do_not_overlap():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    step = wst.compile_train_step(model, opt, F.cross_entropy)
    predict = wst.compile_forward(model)
    x, y = batch()
    outputs, errors = [], []

    def train():
        try:
            for i in range(200):
                step(*batch(i))
        except BaseException as e:
            errors.append(e)

    def infer():
        try:
            for _ in range(200):
                outputs.append(predict(x))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=train), threading.Thread(target=infer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(outputs) == 200
    assert all(torch.isfinite(o).all() for o in outputs)
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(predict(x), model(x), rtol=1e-5, atol=1e-6)


class Waits(nn.Module):
    """Waits (a bounded time) for `wait` while it is traced, then sets `done`."""

    def __init__(self, wait, done):
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.wait, self.done = wait, done

    def forward(self, x):
        self.done.set()
        self.wait.wait(0.5)
        return self.fc(x)


def test_two_threads_tracing_at_once_leave_torch_fx_unpatched():
    # Interleaved, unserialized: A patches, B patches over A's patch, A
    # restores torch's, B restores A's patch.
    original = torch.fx.Graph.create_node
    a_tracing, b_tracing, a_done = threading.Event(), threading.Event(), threading.Event()
    models = {"a": Waits(b_tracing, a_tracing), "b": Waits(a_done, b_tracing)}
    errors = []

    def work(name):
        try:
            model = models[name]
            step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                          F.cross_entropy)
            step(*batch())
            if name == "a":
                a_done.set()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(name,)) for name in "ab"]
    threads[0].start()
    a_tracing.wait(5)
    threads[1].start()
    for t in threads:
        t.join()
    assert not errors
    assert torch.fx.Graph.create_node is original


# ------------------------------------------------------------- 3. float64

def test_a_float64_loss_is_returned_as_eager_computes_it():
    def loss_fn(out, y):
        return F.cross_entropy(out.double(), y)

    eager, compiled = run_both(mlp, OPTIMIZERS[0], loss_fn=loss_fn)
    assert_same_state(eager, compiled)


def test_a_nan_float64_loss_is_seen_by_on_nonfinite_error():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = wst.compile_train_step(model, opt, lambda o, y: F.mse_loss(o.double(), y))
    x, y = batch()
    target = torch.full((8, 4), float("nan"), dtype=torch.float64)
    with pytest.raises(wholestep.Error, match="the loss is nan"):
        step(x, target)


# ------------------------------------------------------------- 4. no_grad in forward

class NoGradScale(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        h = self.fc(x)
        with torch.no_grad():
            s = h.pow(2).mean() + 1
        return h / s


def test_no_grad_inside_forward_stops_the_gradient_as_eager():
    def make():
        torch.manual_seed(0)
        return nn.Sequential(NoGradScale())

    for make_opt in OPTIMIZERS:
        eager, compiled = run_both(make, make_opt)
        assert_same_state(eager, compiled)


def test_no_grad_on_values_without_parameters_and_a_no_grad_caller_train_as_eager():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 4)

        def forward(self, x):
            with torch.no_grad():
                s = x.pow(2).mean() + 1  # no parameter in it: nothing to stop
            return self.fc(x) / s

    def make():
        torch.manual_seed(0)
        return Scaled()

    eager, compiled = run_both(make, OPTIMIZERS[0])
    assert_same_state(eager, compiled)
    with torch.no_grad():  # the caller's mode is not the model's
        compiled_loss = float(wst.compile_train_step(
            compiled[1], compiled[2], F.cross_entropy)(*batch(9)))
    assert compiled_loss == pytest.approx(eager_step(eager[1], eager[2], *batch(9)), rel=1e-5)


class DetachScale(NoGradScale):
    def forward(self, x):
        h = self.fc(x)
        return h / (h.detach().pow(2).mean() + 1)


def test_a_detach_the_loss_reads_stops_the_gradient_as_eager():
    def make():
        torch.manual_seed(0)
        return DetachScale()

    eager, compiled = run_both(make, OPTIMIZERS[0])
    assert_same_state(eager, compiled)
    # Without the detach the update differs: the test tells them apart.
    class Undetached(NoGradScale):
        def forward(self, x):
            h = self.fc(x)
            return h / (h.pow(2).mean() + 1)

    torch.manual_seed(0)
    undetached = Undetached()
    eager_step(undetached, OPTIMIZERS[0](undetached), *batch(0))
    torch.manual_seed(0)
    detached = DetachScale()
    eager_step(detached, OPTIMIZERS[0](detached), *batch(0))
    assert not torch.allclose(undetached.fc.weight, detached.fc.weight)


class EmaMasked(nn.Module):
    """Values torch does not differentiate that no gradient would cross:
    a mask of a detached value, and a buffer updated under no_grad."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 16)
        self.out = nn.Linear(16, 4)
        self.register_buffer("ema", torch.zeros(16))

    def forward(self, x):
        h = self.fc(x)
        with torch.no_grad():
            self.ema.mul_(0.9).add_(h.mean(0) * 0.1)
        h = torch.where(h.detach() > 0, h, h * 0.1)
        return self.out(h)


def test_detached_masks_and_a_buffer_updated_under_no_grad_train_as_eager():
    def make():
        torch.manual_seed(0)
        return EmaMasked()

    eager, compiled = run_both(make, OPTIMIZERS[0])
    assert compiled[1].ema.abs().sum() > 0
    assert_same_state(eager, compiled)


# ------------------------------------------------------------- 5. a failed first step

def test_a_nan_first_step_keeps_the_update_and_the_state_together():
    x, y = batch()
    x[0, 0] = float("nan")
    runs = []
    for compiled in (False, True):
        model = mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        if compiled:
            step = wst.compile_train_step(model, opt, F.cross_entropy, on_nonfinite="error")
            with pytest.raises(wholestep.Error, match="the loss is nan"):
                step(x, y)
            assert step.traces() == 1
        else:
            eager_step(model, opt, x, y)
        runs.append(([], model, opt))
    eager, compiled = runs
    assert all(torch.isnan(p).any() for p in compiled[1].parameters())  # the update was applied
    for p in compiled[1].parameters():
        assert "momentum_buffer" in compiled[2].state[p]  # and its state kept
    # Eager's NaNs exactly where ours are, and the next step runs on both.
    for a, b in zip(eager[1].parameters(), compiled[1].parameters()):
        assert torch.equal(torch.isnan(a), torch.isnan(b))
    assert sorted(eager[2].state_dict()["state"]) == sorted(compiled[2].state_dict()["state"])


def test_a_first_step_that_fails_before_running_changes_nothing(monkeypatch):
    model = mlp()
    before = copy.deepcopy(model.state_dict())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    step = wst.compile_train_step(model, opt, F.cross_entropy)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # as a Ctrl-C inside the compile would be

    monkeypatch.setattr(_train_step, "Importer", interrupted)
    with pytest.raises(KeyboardInterrupt):
        step(*batch())
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])
    assert not opt.state
    monkeypatch.undo()
    step(*batch())  # and the next call compiles and trains
    assert all(int(opt.state[p]["step"]) == 1 for p in model.parameters())


def test_ctrl_c_while_tracing_is_raised_after_the_whole_first_step(monkeypatch):
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = wst.compile_train_step(model, opt, F.cross_entropy)
    reference = mlp()
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    eager_step(reference, ref_opt, *batch())
    trace = _capture.trace

    def trace_then_ctrl_c(*args, **kwargs):
        gm = trace(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)  # delivered while the step is being made
        return gm

    monkeypatch.setattr(_capture, "trace", trace_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        step(*batch())
    # The KeyboardInterrupt came after the step: its update, state and count are whole.
    for a, b in zip(reference.parameters(), model.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
        assert "momentum_buffer" in opt.state[b]
    monkeypatch.undo()
    eager_step(reference, ref_opt, *batch(1))
    step(*batch(1))
    for a, b in zip(reference.parameters(), model.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------- 6. Python state the trace read

class Scaled(nn.Module):
    """Reads plain Python attributes in its forward: a number, and numbers
    in nested tuples."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 16)
        self.bn = nn.BatchNorm1d(16)
        self.out = nn.Linear(16, 4)
        self.scale = 1.0
        self.bounds = (-10.0, (10.0,))

    def forward(self, x):
        y = self.out(torch.relu(self.bn(self.fc(x)))) * self.scale
        return y.clamp(self.bounds[0], self.bounds[1][0])


def test_changed_module_attributes_retrace_and_match_eager():
    def make():
        torch.manual_seed(0)
        return Scaled()

    def change(model, opt, i):
        if i == 2:
            model.scale = 0.5
            model.bn.momentum, model.bn.eps = 0.5, 1e-2
        if i == 3:
            model.bounds = (-0.1, (0.1,))

    eager, compiled = run_both(make, OPTIMIZERS[0], steps=4, each=change)
    assert_same_state(eager, compiled)


class Gated(nn.Module):
    """Nested modules and a plain attribute, for the walk's fast path."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(),
                                  nn.Sequential(nn.Linear(16, 4)))
        self.scale = 1.0

    def forward(self, x):
        return self.body(x) * self.scale


class HalvedGated(Gated):
    def forward(self, x):
        return super().forward(x) * 0.5


def _replace_dict(model):
    model.__dict__ = dict(model.__dict__, scale=0.5)


def _set_class(model):
    model.__class__ = HalvedGated


MODULE_CHANGES = {
    "attribute": lambda m: setattr(m, "scale", 0.5),
    "nested_attribute": lambda m: setattr(m.body[1], "eps", 0.1),
    "nested_train_flag": lambda m: m.body[1].eval(),
    "child": lambda m: m.body.__setitem__(2, nn.Tanh()),
    "buffer": lambda m: setattr(m.body[1], "running_var", torch.full((16,), 2.0)),
    "class": _set_class,
    "whole_dict": _replace_dict,
}


class _WithoutDictTags:
    """The extension module as on a Python whose dicts keep no version
    tags."""

    @staticmethod
    def module_dicts(modules, names):
        return None

    @staticmethod
    def dict_version(d):
        return None

    def __getattr__(self, name):
        return getattr(_C, name)


@pytest.mark.parametrize("tags", [True, False], ids=["dict_tags", "no_dict_tags"])
@pytest.mark.parametrize("change", MODULE_CHANGES.values(), ids=MODULE_CHANGES.keys())
def test_a_module_change_after_calls_that_skipped_the_walk_is_seen_as_eager_sees_it(
        change, tags, monkeypatch):
    """The walk over the modules before each call is skipped while none
    of the dicts it reads changed (ModelViews); a change anywhere it looks
    is seen at the next call, which trains as eager does. Where dicts keep
    no version tags (a Python other than 3.11) every call walks."""
    if not tags:
        monkeypatch.setattr(_guards, "_C", _WithoutDictTags())
    call, walked = [], []
    model_view = _guards.model_view
    monkeypatch.setattr(_guards, "model_view", lambda *a, **k: walked.append(call[-1]) or
                        model_view(*a, **k))

    def make():
        torch.manual_seed(0)
        return Gated()

    def each(model, opt, i):
        call.append(i)
        if i == 3:
            change(model)

    eager, compiled = run_both(make, OPTIMIZERS[0], steps=5, each=each)
    assert_same_state(eager, compiled)
    # The first call walks, and the next (tracing sets module attributes
    # back as they were, which the dicts' state shows as a change); the
    # third skips the walk where dicts keep version tags (CPython 3.11),
    # else walks as every call does; the changed fourth walks.
    skips = tags and _C.module_dicts([], ()) is not None
    if skips:
        assert walked[:3] == [0, 1, 3]
    else:
        assert walked == [0, 1, 2, 3, 4]


def _load_changed_state(opt):
    saved = copy.deepcopy(opt.state_dict())  # its state dicts are the optimizer's
    for st in saved["state"].values():
        st["momentum_buffer"] = st["momentum_buffer"] * 0.5
    opt.load_state_dict(saved)


def _replace_state_dict(opt):
    p = opt.param_groups[0]["params"][0]
    opt.state[p] = {"momentum_buffer": torch.full_like(p, 0.5)}


OPTIMIZER_STATE_CHANGES = {
    "slot": lambda opt: opt.state[opt.param_groups[0]["params"][1]].__setitem__(
        "momentum_buffer", torch.full_like(opt.param_groups[0]["params"][1], -0.25)),
    "slot_in_place": lambda opt: opt.state[opt.param_groups[0]["params"][2]][
        "momentum_buffer"].mul_(3.0),
    "parameter_state": _replace_state_dict,
    "deleted": lambda opt: opt.state.pop(opt.param_groups[0]["params"][3]),
    "load_state_dict": _load_changed_state,
}


@pytest.mark.parametrize("tags", [True, False], ids=["dict_tags", "no_dict_tags"])
@pytest.mark.parametrize("change", OPTIMIZER_STATE_CHANGES.values(),
                         ids=OPTIMIZER_STATE_CHANGES.keys())
def test_optimizer_state_changed_after_calls_is_what_the_next_step_reads_as_eager(
        change, tags, monkeypatch):
    """The state tensors a call binds are found again from the state dicts
    the last call found while opt.state is unchanged (its version tag);
    any change of the optimizer's state between calls, of a slot, of a
    parameter's whole state, or all of it, is what the next step reads,
    as eager's optimizer.step() would."""
    from wholestep import _optim
    if not tags:
        monkeypatch.setattr(_optim, "_C", _WithoutDictTags())

    def each(model, opt, i):
        if i == 3:
            change(opt)

    eager, compiled = run_both(mlp, lambda m: torch.optim.SGD(m.parameters(), lr=0.1,
                                                             momentum=0.9), steps=5, each=each)
    assert_same_state(eager, compiled)


def test_a_compiled_forward_sees_each_module_change_after_calls_that_skipped_the_walk():
    torch.manual_seed(0)
    model = Gated().eval()
    forward = wst.compile_forward(model)
    x, _ = batch()
    for name in ("attribute", "buffer", "child", "class"):
        for _ in range(3):
            with torch.no_grad():
                torch.testing.assert_close(forward(x), model(x), rtol=1e-5, atol=1e-6,
                                           msg=name)
        MODULE_CHANGES[name](model)


def test_a_weight_normed_model_is_walked_at_every_call():
    """Weight norm's attribute is set from its parameters by the walk, so
    no walk is skipped (and the attribute is eager's after every step)."""
    walks = []
    model_view = _guards.model_view

    def counted(*a, **k):
        walks.append(1)
        return model_view(*a, **k)

    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.utils.weight_norm(nn.Linear(8, 16)), nn.ReLU(),
                             nn.Linear(16, 4))

    _guards.model_view = counted
    try:
        eager, compiled = run_both(make, OPTIMIZERS[0], steps=3)
    finally:
        _guards.model_view = model_view
    assert_same_state(eager, compiled)
    torch.testing.assert_close(compiled[1][0].weight, eager[1][0].weight, rtol=1e-5, atol=1e-6)
    assert len(walks) == 3


def test_a_dropout_probability_change_retraces():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.0), nn.Linear(16, 4))
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                  F.cross_entropy)
    step(*batch())
    step(*batch(1))
    assert step.traces() == 1
    model[1].p = 0.5
    step(*batch(2))
    assert step.traces() == 2


@pytest.mark.parametrize("kind", ["forward_hook", "forward_pre_hook"])
def test_a_module_hook_is_refused_naming_the_module(kind):
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = wst.compile_train_step(model, opt, F.cross_entropy)
    step(*batch())
    hook = (lambda m, i, o: None) if kind == "forward_hook" else (lambda m, i: None)
    handle = getattr(model[2], f"register_{kind}")(hook)
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(wholestep.Error, match=rf"module 2 \(torch.nn.modules.linear.Linear\) "
                                              rf"has a {kind.replace('_', ' ')}"):
        step(*batch(1))
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])
    handle.remove()
    step(*batch(1))
    assert step.traces() == 1


# ------------------------------------------------------------- 7. rebinding

def test_rebinding_every_step_is_counted_warned_and_keeps_one_compiled_step(monkeypatch):
    """An EMA-style swap of p.data before each step, as eager torch does it."""
    traced = []
    trace = _capture.trace
    monkeypatch.setattr(_capture, "trace", lambda *a, **k: traced.append(1) or trace(*a, **k))

    def swap(model, opt, i):
        for p in model.parameters():
            p.data = p.data.clone() * 0.99

    runs = []
    for compiled in (False, True):
        model = mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        step = wst.compile_train_step(model, opt, F.cross_entropy, recompile_warning=3)
        losses = []
        for i in range(6):
            swap(model, opt, i)
            if not compiled:
                losses.append(eager_step(model, opt, *batch(i)))
            elif i < 3:
                losses.append(float(step(*batch(i))))
            else:
                with pytest.warns(RuntimeWarning, match="a bound tensor was replaced"):
                    losses.append(float(step(*batch(i))))
        runs.append((losses, model, opt))
    assert_same_state(*runs)
    assert step.traces() == 6
    assert len(step._steps) == 1  # the replaced compiled steps are freed
    assert len(traced) == 1  # the same trace, bound to the new tensors


def test_max_cached_bounds_the_compiled_steps_and_traces_counts_all():
    model = mlp()
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                  F.cross_entropy, max_cached=2)
    for n in (2, 3, 4, 2):
        step(*batch(n=n))
    assert step.traces() == 4 and len(step._steps) == 2


# ------------------------------------------------------------- 8. the rest

def test_one_cycle_lr_cycling_sgd_momentum_matches_eager_without_recompiling():
    runs = []
    for compiled in (False, True):
        model = mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.2, total_steps=6)
        step = wst.compile_train_step(model, opt, F.cross_entropy) if compiled else None
        losses = []
        for i in range(5):
            x, y = batch(i)
            losses.append(float(step(x, y)) if compiled else eager_step(model, opt, x, y))
            sched.step()
        runs.append((losses, model, opt))
    assert opt.param_groups[0]["momentum"] != 0.9  # it cycled
    assert step.traces() == 1
    assert_same_state(*runs)


def test_a_swalr_scheduler_made_before_the_step_is_accepted():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.optim.swa_utils.SWALR(opt, swa_lr=0.05)
    step = wst.compile_train_step(model, opt, F.cross_entropy)
    assert torch.isfinite(step(*batch()))


def test_an_empty_batch_is_an_error_naming_the_argument():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = wst.compile_train_step(model, opt, F.cross_entropy)
    with pytest.raises(wholestep.Error, match=r"argument 0 \[0, 8\] is empty"):
        step(torch.zeros(0, 8), torch.zeros(0, dtype=torch.int64))
    assert not opt.state


def test_float64_targets_and_an_unbatched_input_train_as_eager():
    def make():
        torch.manual_seed(0)
        return nn.Linear(8, 4)

    def make_opt(model):
        return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def promoted(out, y):
        return (out - y).pow(2).mean()  # float64, as torch promotes it

    g = torch.Generator().manual_seed(0)
    for x, y, loss_fn in (
            (torch.randn(8, 8, generator=g), torch.randn(8, 4, generator=g).double(), promoted),
            (torch.randn(8, generator=g), torch.randn(4, generator=g), F.mse_loss)):
        runs = []
        for compiled in (False, True):
            model = make()
            opt = make_opt(model)
            step = wst.compile_train_step(model, opt, loss_fn) if compiled else None
            losses = [float(step(x, y)) if compiled else eager_step(model, opt, x, y, loss_fn)
                      for _ in range(3)]
            runs.append((losses, model, opt))
        assert_same_state(*runs)


def test_mse_loss_of_a_float64_target_is_refused_as_eager_fails_on_it():
    model = nn.Linear(8, 4)
    x, y = torch.randn(8, 8), torch.randn(8, 4).double()
    with pytest.raises(RuntimeError, match="Found dtype Double but expected Float"):
        F.mse_loss(model(x), y).backward()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = wst.compile_train_step(model, opt, F.mse_loss)
    with pytest.raises(wholestep.Error, match=r"mse_loss of f32\[8, 4\] and f64\[8, 4\].*"
                                              r"\.float\(\)"):
        step(x, y)
    assert not opt.state


def test_a_submodule_replaced_after_the_optimizer_is_an_error_naming_the_parameter():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = wst.compile_train_step(model, opt, F.cross_entropy)
    step(*batch())
    model[2] = nn.Linear(16, 4)
    with pytest.raises(wholestep.Error, match=r"parameter 2 \('2.weight' \[4, 16\]\) is no "
                                              r"longer a parameter of the model"):
        step(*batch())


@pytest.mark.parametrize("options,message", [
    ({"fuse": "no"}, r"option fuse='no' \(str\); it must be a bool"),
    ({"max_cached": 2.5}, r"option max_cached=2.5 \(float\); it must be an int"),
    ({"on_nonfinite": "warn"}, r"option on_nonfinite='warn'.*'error', 'skip' or 'ignore'"),
    ({"fusion": True}, r"unknown option 'fusion'; the options are accumulate, adapt_threads"),
], ids=["fuse", "max_cached", "on_nonfinite", "unknown"])
def test_wrong_options_are_errors_naming_the_option_and_its_type(options, message):
    model = mlp()
    with pytest.raises(wholestep.Error, match=message):
        wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1),
                               F.cross_entropy, **options)


def test_autocast_is_refused_at_compile_and_at_a_call():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with torch.autocast("cpu"):
        with pytest.raises(wholestep.Error, match="mixed precision"):
            wst.compile_train_step(model, opt, F.cross_entropy)
    step = wst.compile_train_step(model, opt, F.cross_entropy)
    step(*batch())
    before = copy.deepcopy(model.state_dict())
    with torch.autocast("cpu"), pytest.raises(wholestep.Error, match="inside torch.autocast"):
        step(*batch(1))
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])


def test_the_pool_follows_torch_set_num_threads_and_stats_name_the_steps_team():
    saved = torch.get_num_threads(), wholestep._C.num_threads()
    try:
        model = mlp()
        step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                      F.cross_entropy, adapt_threads=False)
        predict = wst.compile_forward(model)
        wst.set_num_threads(2)
        torch.set_num_threads(1)
        step(*batch())
        assert wholestep._C.num_threads() == 1
        assert step.stats()["threads"] == 1
        assert torch.get_num_threads() == 1  # the step's team does not leak into torch's
        torch.set_num_threads(2)
        step(*batch())
        assert step.stats()["threads"] == 2
        predict(batch()[0])
        assert wholestep._C.num_threads() == 2
    finally:
        torch.set_num_threads(saved[0])
        wst.set_num_threads(saved[1])


class _Reversal(torch.autograd.Function):
    """A domain-adversarial network's gradient reversal: the identity
    forward, the negated gradient backward."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return -g


class _Square(torch.autograd.Function):
    wholestep_differentiate_forward = True

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


class _Through(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2)
        self.fn = fn

    def forward(self, x):
        return self.b(self.fn(self.a(x)))


def test_a_custom_autograd_function_is_refused_naming_it():
    # its backward would never be called: the reversed gradient would be
    # the plain one, without a word
    model = _Through(_Reversal.apply)
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1), F.mse_loss)
    with pytest.raises(wholestep.Error, match=r"a custom torch.autograd.Function, "
                                              r"test_frontend_promises._Reversal, is not "
                                              r"supported: .*never calls its backward.*"
                                              r"test_frontend_promises.py:\d+"):
        step(torch.randn(3, 4), torch.randn(3, 2))


def test_a_function_whose_backward_is_its_derivative_says_so_and_trains():
    torch.manual_seed(0)
    model = _Through(_Square.apply).double()
    result = wst.check(model, torch.optim.SGD(model.parameters(), lr=0.1), F.mse_loss,
                       torch.randn(3, 4, dtype=torch.float64),
                       torch.randn(3, 2, dtype=torch.float64), dtype=torch.float64,
                       modes=["single_graph", "three_graph"])
    assert result.passed, result.report()


class _Checkpointed(nn.Module):
    """Blocks recomputed in the backward (activation checkpointing), with
    their parameters inside: torch.utils.checkpoint both ways, and
    checkpoint_sequential."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(6, 6), nn.Tanh()) for _ in range(3))
        self.seq = nn.Sequential(nn.Linear(6, 6), nn.GELU(), nn.Linear(6, 6), nn.Sigmoid())
        self.head = nn.Linear(6, 2)

    def forward(self, x):
        x = torch.utils.checkpoint.checkpoint(self.blocks[0], x)
        x = torch.utils.checkpoint.checkpoint(self.blocks[1], x, use_reentrant=False)
        x = self.blocks[2](x)
        x = torch.utils.checkpoint.checkpoint_sequential(self.seq, 2, x)
        return self.head(x)


def test_checkpointed_blocks_train_as_float64_torch():
    torch.manual_seed(0)
    model = _Checkpointed().double()
    result = wst.check(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                       F.mse_loss, torch.randn(5, 6, dtype=torch.float64),
                       torch.randn(5, 2, dtype=torch.float64), dtype=torch.float64,
                       modes=["single_graph", "three_graph"])
    assert result.passed, result.report()


def _halved_gradient(x):
    x.register_hook(lambda g: g * 0.5)
    return x


def test_a_tensor_hook_in_a_forward_is_refused_naming_it():
    # it would never run on the step's gradients: the plain gradient, silently
    model = _Through(_halved_gradient)
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1), F.mse_loss)
    with pytest.raises(wholestep.Error, match=r"Tensor.register_hook in a forward is not "
                                              r"supported.*test_frontend_promises.py:\d+"):
        step(torch.randn(3, 4), torch.randn(3, 2))


class _PythonRandomDepth(nn.Module):
    """Stochastic depth decided by Python's random numbers: a trace would
    take one branch for every step."""

    def __init__(self, draw):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
        self.draw = draw

    def forward(self, x):
        if self.training and self.draw() < 0.5:
            return self.b(x)
        return self.b(self.a(x))


@pytest.mark.parametrize("draw, name", [(lambda: random.random(), "random.random"),
                                        (lambda: float(numpy.random.rand()),
                                         "numpy.random.rand")])
def test_python_and_numpy_random_numbers_in_a_forward_are_refused_naming_them(draw, name):
    model = _PythonRandomDepth(draw)
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1), F.mse_loss)
    with pytest.raises(wholestep.Error, match=rf"{name} in a forward draws once, when the model "
                                              rf"is traced"):
        step(torch.randn(3, 4), torch.randn(3, 4))
    assert random.random() < 1 and numpy.random.rand() < 1  # both as they were after it


def _sparse_embedding_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Embedding(10, 4, sparse=True), nn.Flatten(), nn.Linear(12, 2))


def test_a_sparse_embedding_trains_with_sgd_as_eager_and_adam_refuses_it_as_torch_does():
    x, y = torch.randint(0, 10, (5, 3)), torch.randn(5, 2)
    model = _sparse_embedding_model().double()
    eager = copy.deepcopy(model)
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1,
                                                         momentum=0.9), F.mse_loss)
    for _ in range(3):
        eager_opt.zero_grad()
        F.mse_loss(eager(x), y.double()).backward()
        eager_opt.step()
        step(x, y.double())
    for a, b in zip(model.parameters(), eager.parameters()):
        assert (a - b).abs().max() <= 1e-13 * b.abs().max()
    model = _sparse_embedding_model()  # the check reads torch's sparse gradients as dense
    result = wst.check(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                       F.mse_loss, x, y, modes=["single_graph"])
    assert result.passed, result.report()
    for opt_cls, message in [(torch.optim.Adam, "Adam does not support sparse gradients, please "
                                                "consider SparseAdam instead"),
                             (torch.optim.AdamW, "AdamW does not support sparse gradients")]:
        model = _sparse_embedding_model()
        eager = copy.deepcopy(model)
        eager_opt = opt_cls(eager.parameters(), lr=0.1)
        F.mse_loss(eager(x), y).backward()
        with pytest.raises(RuntimeError, match=message):
            eager_opt.step()
        before = [p.detach().clone() for p in model.parameters()]
        step = wst.compile_train_step(model, opt_cls(model.parameters(), lr=0.1), F.mse_loss)
        with pytest.raises(wholestep.Error, match=message + r".*module 0"):
            step(x, y)
        assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))


def test_a_custom_function_defined_inside_the_forward_is_refused_too():
    def forward(x):
        class Clip(torch.autograd.Function):  # a straight-through clip
            @staticmethod
            def forward(ctx, v):
                return v.clamp(-0.1, 0.1)

            @staticmethod
            def backward(ctx, g):
                return g

        return Clip.apply(x)

    model = _Through(forward)
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1), F.mse_loss)
    with pytest.raises(wholestep.Error, match=r"a custom torch.autograd.Function, .*Clip, is not "
                                              r"supported"):
        step(torch.randn(3, 4), torch.randn(3, 2))


def test_another_thread_draws_python_random_numbers_and_runs_autograd_while_a_model_is_traced():
    # a data-loading thread's augmentations, an eager model's training in
    # another thread: not the forward's
    drawn, started, release = [], threading.Event(), threading.Event()

    def loader():
        started.set()
        release.wait(10)
        drawn.append(random.random())
        x = torch.ones(3, requires_grad=True)
        y = _Reversal.apply(x * 2)
        y.register_hook(lambda g: g * 3)
        y.sum().backward()
        drawn.append(x.grad.tolist())

    class Waits(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 4)

        def forward(self, x):
            release.set()
            thread.join(10)  # the loader draws while the trace runs
            return self.a(x)

    thread = threading.Thread(target=loader)
    thread.start()
    started.wait(10)
    model = Waits()
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1), F.mse_loss)
    step(torch.randn(3, 4), torch.randn(3, 4))
    assert len(drawn) == 2 and 0 <= drawn[0] < 1
    assert drawn[1] == [-6.0, -6.0, -6.0]  # the hook's 3, the reversal's -1, the product's 2


def test_assigning_data_in_a_forward_is_refused_naming_it():
    # the trace records no op for it: the step trained another weight
    # than the forward read (0.7 off float64 torch), without a word
    class Halves(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 2)

        def forward(self, x):
            self.lin.weight.data = self.lin.weight.data * 0.5
            return self.lin(x)

    model = Halves()
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1), F.mse_loss)
    with pytest.raises(wholestep.Error, match=r"assigning a tensor's .data in a forward is not "
                                              r"supported.*test_frontend_promises.py:\d+"):
        step(torch.randn(3, 4), torch.randn(3, 2))
    x = torch.ones(2)
    x.data = torch.zeros(2)  # outside a trace, as torch does
    assert torch.equal(x, torch.zeros(2))


def test_seeding_torch_in_a_forward_is_refused_naming_it():
    # eager torch would draw the same dropout mask at every step after it
    class Seeded(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 2)

        def forward(self, x):
            torch.manual_seed(0)
            return F.dropout(self.lin(x), 0.5)

    model = Seeded()
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1), F.mse_loss)
    with pytest.raises(wholestep.Error, match=r"torch.manual_seed in a forward is not "
                                              r"supported.*wholestep.torch.manual_seed"):
        step(torch.randn(3, 4), torch.randn(3, 2))
    torch.manual_seed(0)  # outside a trace, as torch does
    first = torch.rand(2)
    torch.manual_seed(0)
    assert torch.equal(torch.rand(2), first)
