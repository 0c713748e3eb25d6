"""The torch differential tester (torch_fuzz.py): every saved regression
spec replays clean (those of open bugs are strict expected failures), and
random modules for a time budget (WS_TORCH_FUZZ_SECONDS, default 60; seed
WS_TORCH_FUZZ_SEED, default the time, printed) find no failure."""

import json
import os
import time

import pytest

import torch_fuzz
from wholestep import _check


def _regression_params():
    out = []
    for path in torch_fuzz.load_regressions():
        record = json.loads(path.read_text())
        marks = []
        if record.get("xfail"):
            marks.append(pytest.mark.xfail(strict=True, reason=record["xfail"]))
        out.append(pytest.param(path, id=path.stem, marks=marks))
    return out


@pytest.mark.parametrize("path", _regression_params())
def test_regression_spec(path):
    record = json.loads(path.read_text())
    failures = torch_fuzz.replay(record)
    assert not failures, "\n".join(f.describe() for f in failures)


def test_the_generator_makes_valid_models_of_every_kind():
    kinds, ops, losses, bags, dense, cells, loops = (set() for _ in range(7))
    for seed in range(400):
        spec = torch_fuzz.generate(seed)
        kinds.add(spec["input"]["kind"])
        losses.add(spec["loss"])
        loops.update(spec.get("loop", {}))
        bags.add(spec["input"].get("mode"))
        stack = list(spec["layers"])
        while stack:
            layer = stack.pop()
            ops.add(layer["op"])
            if "cell" in layer:
                cells.add(layer["cell"])
            if "wn" in layer:
                ops.add("weight_norm")
            stack += layer.get("body", [])
            for b in layer.get("branches", []):
                stack += b
        model = torch_fuzz.build(spec)[0]  # raises if the spec does not fit
        if spec.get("dense"):
            dense.add("img" if isinstance(model[-1], torch_fuzz.nn.Conv2d) else "seq")
    assert kinds == {"img", "seq", "tokens", "vec", "bags"}
    assert losses == set(torch_fuzz.fuzz_losses.KINDS) | {"ctc"}
    assert dense == {"img", "seq"}
    assert loops == {"clip_grad_norm", "accumulate"}
    assert bags == {None, "sum", "mean", "max"}
    assert {"conv", "bn", "ln", "act", "maxpool", "avgpool", "adaptive", "res", "cat", "se",
            "tokens", "flatten", "linear", "tokmix", "attn", "mha", "reduce", "softmax",
            "patches", "centered", "bilinear", "views", "index_writes", "rnn", "conv1d", "pool1d",
            "weight_norm", "unpool"} <= ops
    assert cells == set(torch_fuzz.seq_layers.CELLS)


def test_shrinking_keeps_the_failure_and_makes_the_spec_smaller():
    # A fake failure that persists while the spec holds a LayerNorm.
    real = torch_fuzz.run_case

    def fake(s, only=None, determinism=True, orders=4):
        has_ln = '"ln"' in json.dumps(s["layers"])
        assert only is None  # a mode's failure is judged with every config run
        config = ("single_graph", {})
        return [torch_fuzz.Failure(s, config, "mismatch", "x", "fake")] if has_ln else []

    spec = {"seed": 1, "input": {"kind": "vec", "f": 9}, "batch": 8, "classes": 5,
            "loss": "cross_entropy",
            "layers": [{"op": "linear", "out": 7, "bias": True}, {"op": "act", "fn": "tanh"},
                       {"op": "res", "body": [{"op": "ln"}, {"op": "linear", "out": 7,
                                                              "bias": True}]}],
            "optimizer": {"kind": "sgd", "lr": 0.1, "momentum": 0.9, "nesterov": True,
                          "wd": 1e-4}}
    torch_fuzz.run_case = fake
    try:
        failure = torch_fuzz.Failure(spec, ("single_graph", {}), "mismatch", "x", "fake")
        small = torch_fuzz.shrink(failure, budget=20, log=lambda s: None)
    finally:
        torch_fuzz.run_case = real
    assert small.spec["layers"] == [{"op": "ln"}]
    assert small.spec["batch"] == 1 and small.spec["input"]["f"] == 1
    assert small.spec["optimizer"]["momentum"] == 0.0


def test_random_modules_for_a_time_budget(capsys):
    seconds = float(os.environ.get("WS_TORCH_FUZZ_SECONDS", "60"))
    seed = int(os.environ.get("WS_TORCH_FUZZ_SEED", str(int(time.time()) % 1000000)))
    lines = []

    def log(s):
        lines.append(s)
        print(s, flush=True)

    with capsys.disabled():
        print(f"\ntorch fuzz: seed {seed}, {seconds:g} s "
              f"(WS_TORCH_FUZZ_SEED={seed} repeats it)", flush=True)
    y = torch_fuzz.fuzz(seconds, seed, shrink_budget=min(30.0, seconds), log=log, save=False)
    with capsys.disabled():
        print(f"torch fuzz: {y.tried} modules from seed {seed}, {len(y.found)} failures, "
              f"{len(y.small)} small (rounding-level) mismatches", flush=True)
    assert y.tried > 0
    assert not y.found, f"seed {seed}:\n" + "\n".join(
        f"{f.describe()}\n  shrunk: {json.dumps(s.spec)}" for f, s, _ in y.found)


def test_a_step_that_changes_its_bits_is_reported(monkeypatch):
    real = torch_fuzz._check.compiled_run
    runs = []

    def flaky(*args, **kwargs):
        snap, step = real(*args, **kwargs)
        runs.append(1)
        if len(runs) == 2:  # the second single_graph run differs in one bit's worth
            name = next(k for k, (kind, _) in snap.items() if kind == "parameter")
            kind, t = snap[name]
            snap[name] = (kind, t.nextafter(t + 1))
        return snap, step

    monkeypatch.setattr(torch_fuzz._check, "compiled_run", flaky)
    failures = torch_fuzz.run_case(torch_fuzz.generate(3), only=torch_fuzz.DETERMINISM)
    assert [f.category for f in failures] == ["nondeterministic"]


def test_a_dropped_step_frees_its_trace():
    import gc

    import torch
    import torch.fx

    import wholestep.torch as wst

    def alive():
        gc.collect()
        return sum(isinstance(o, torch.fx.GraphModule) for o in gc.get_objects())

    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    before = alive()
    for _ in range(3):
        step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.0),
                                      torch.nn.functional.cross_entropy)
        step(torch.randn(2, 4), torch.tensor([0, 1]))
        del step
    assert alive() == before


def test_a_gradient_zero_in_exact_arithmetic_is_noise_under_adam_only():
    # A convolution's bias before a BatchNorm: its exact gradient is 0, its
    # float32 one rounding noise that Adam's first step follows at the full
    # learning rate; the float64 step with SGD judges it instead.
    spec = {"seed": 5, "input": {"kind": "img", "c": 3, "h": 4, "w": 4}, "batch": 4,
            "classes": 3, "loss": "cross_entropy",
            "layers": [{"op": "conv", "out": 2, "k": 3, "s": 1, "p": 1, "dil": 1, "g": 1,
                        "bias": True},
                       {"op": "bn"}],
            "optimizer": {"kind": "adam", "lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-08,
                          "wd": 0.0, "amsgrad": False},
            "warm": False, "train": True}
    model, opt, loss_fn, batch = torch_fuzz.build(spec)
    assert torch_fuzz._noise_gradients(spec, model, opt, loss_fn, batch) == {"0.bias"}
    sgd = torch_fuzz._sgd_for_float64(spec)
    assert torch_fuzz._noise_gradients(sgd, *torch_fuzz.build(sgd)) == set()


def test_a_spec_where_torch_disagrees_with_itself_is_skipped():
    # torch 1.13's BatchNorm backward reads the gradient a tokens-then-mean
    # head leaves over a batch of one in the wrong layout: its float64
    # gradients change when that gradient is made contiguous, so it judges
    # nothing (wholestep's are right: the channels' bias gradients differ),
    # and wst.check refuses it (test_check.py)
    spec = {"seed": 49129, "input": {"kind": "img", "c": 2, "h": 1, "w": 2}, "batch": 1,
            "classes": 2, "loss": "cross_entropy", "reduction": "mean",
            "layers": [{"op": "bn"}, {"op": "tokens"}],
            "optimizer": {"kind": "adam", "lr": 0.001, "betas": [0.9, 0.999], "eps": 1e-08,
                          "wd": 0.0, "amsgrad": False},
            "warm": False, "train": True, "no_alias": "three_graph"}
    assert not _check.torch_agrees_with_itself(*torch_fuzz.build(spec))
    assert torch_fuzz.run_case(spec) is None
    assert _check.torch_agrees_with_itself(*torch_fuzz.build(dict(spec, batch=2)))


def test_a_gradient_float64_torch_decides_by_rounding_is_told_apart():
    # A BatchNorm over a channel of equal values (0 exactly, rounding noise
    # in practice) beside a padding's zeros, then a max pool: the noise's
    # sign routes the bias's gradient, and float64 torch's own moves far
    # when its layers' outputs move by a few roundings. Every other tensor
    # of the case, and every tensor of the same case without the padding
    # (no ties with zeros), moves by rounding only.
    path = torch_fuzz.REGRESSIONS / "pool_indices_unpool_after_padding_seed55624.json"
    spec = torch_fuzz._sgd_for_float64(json.loads(path.read_text())["spec"])

    def spread(spec):
        case = torch_fuzz.build(spec)
        ref = _check.Reference(*case, 1, 1, 0, torch_fuzz.torch.float64)
        return torch_fuzz._rounding_spread(case, ref, None)

    tied = spread(spec)
    assert tied["3.bias.momentum_buffer"] >= torch_fuzz.DECIDED_F64
    assert tied["3.bias"] >= torch_fuzz.DECIDED_F64 * 1e-3  # lr times the buffer's move
    rest = [d for n, d in tied.items() if not n.startswith("3.bias")]
    assert rest and max(rest) < 1e-11
    apart = spread(dict(spec, layers=[lay for lay in spec["layers"] if lay["op"] != "pad"]))
    assert max(apart.values()) < 1e-11
