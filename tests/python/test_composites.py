"""One decomposition library: every composite op of wholestep's C++ library
(src/nn/composites.cpp), traced from torch through the importer, records
the same graph as the composite called directly, and the activations match
float64 torch, gradients at their kinks included."""

import math
import os

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import wholestep.torch as wst
from wholestep import _C
from wholestep._import import Importer
from wholestep._ir import ir_dtype

nn = torch.nn
F = nn.functional


def t(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(len(shape)))


X = t(4, 6, 5, 5)
V = t(3, 7)
W6 = t(6)

# log-probabilities [T, N, C], padded targets [N, S], input and target lengths
CTC = [F.log_softmax(t(6, 2, 4), 2), torch.tensor([[1, 1, 3], [3, 0, 0]]), torch.tensor([6, 5]),
       torch.tensor([3, 1])]

# composite: [(torch function, example arguments, operands of the composite
# by argument index (None: absent), its attributes)]
CASES = {
    "relu": [(F.relu, [V], [0], {})],
    "leaky_relu": [(lambda x: F.leaky_relu(x, 0.2), [V], [0], {"negative_slope": 0.2}),
                   (F.leaky_relu, [V], [0], {})],
    "elu": [(F.elu, [V], [0], {}),
            (lambda x: F.elu(x, 0.5), [V], [0], {"alpha": 0.5}),
            (F.selu, [V], [0], {"alpha": 1.6732632423543772, "scale": 1.0507009873554805}),
            (lambda x: F.celu(x, 2.0), [V], [0], {"alpha": 2.0, "input_scale": 0.5})],
    "hardtanh": [(F.hardtanh, [V], [0], {}),
                 (F.relu6, [V], [0], {"min_value": 0.0, "max_value": 6.0})],
    "clamp": [(lambda x: x.clamp(-0.5, 0.25), [V], [0], {"min": -0.5, "max": 0.25}),
              (lambda x: x.clamp(min=0.1), [V], [0], {"min": 0.1}),
              (lambda x: x.clamp(max=0.1), [V], [0], {"max": 0.1})],
    "hardsigmoid": [(F.hardsigmoid, [V], [0], {})],
    "hardswish": [(F.hardswish, [V], [0], {})],
    "softplus": [(F.softplus, [V], [0], {}),
                 (lambda x: F.softplus(x, 2.0, 5.0), [V], [0], {"beta": 2.0, "threshold": 5.0})],
    "mish": [(F.mish, [V], [0], {})],
    "silu": [(F.silu, [V], [0], {})],
    "log_sigmoid": [(F.logsigmoid, [V], [0], {})],
    "gelu": [(F.gelu, [V], [0], {}),
             (lambda x: F.gelu(x, approximate="tanh"), [V], [0], {"approximate": "tanh"})],
    "prelu": [(F.prelu, [X, W6], [0, 1], {}), (F.prelu, [V, t(1)], [0, 1], {})],
    "softmax": [(lambda x: F.softmax(x, -1), [V], [0], {"axis": 1}),
                (lambda x: F.softmax(x, 0), [V], [0], {"axis": 0})],
    "log_softmax": [(lambda x: F.log_softmax(x, 1), [V], [0], {"axis": 1})],
    "mean": [(lambda x: x.mean((1, 2)), [X], [0], {"axes": [1, 2]}),
             (lambda x: x.mean(-1, keepdim=True), [X], [0], {"axes": [3], "keepdim": 1})],
    "layer_norm": [(lambda x, w, b: F.layer_norm(x, (5,), w, b), [X, t(5), t(5)], [0, 1, 2], {}),
                   (lambda x: F.layer_norm(x, (5, 5), eps=1e-3), [X], [0, None, None],
                    {"normalized_dims": 2, "eps": 1e-3})],
    "group_norm": [(lambda x, w, b: F.group_norm(x, 3, w, b), [X, W6, t(6, 1).flatten()],
                    [0, 1, 2], {"groups": 3}),
                   (lambda x: F.group_norm(x, 2, eps=1e-3), [X], [0, None, None],
                    {"groups": 2, "eps": 1e-3})],
    "batch_norm": [
        (lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), [X, W6, W6 * 2],
         [0, 1, 2, None, None], {"training": 1}),
        (lambda x, m, v: F.batch_norm(x, m, v, training=False, eps=1e-3),
         [X, W6, W6.abs() + 0.5], [0, None, None, 1, 2], {"training": 0, "eps": 1e-3}),
        (lambda x: F.batch_norm(x, None, None, training=True), [X.flatten(2)],
         [0, None, None, None, None], {"training": 1})],
    "pad": [(lambda x: F.pad(x, (1, 2, -1, 3), value=0.5), [X], [0],
             {"pads": [1, 2, -1, 3], "value": 0.5}),
            (lambda x: F.pad(x, (2, 1, 3, 0), mode="reflect"), [X], [0],
             {"pads": [2, 1, 3, 0], "mode": "reflect"}),
            (lambda x: F.pad(x, (2, 1), mode="replicate"), [V.unsqueeze(0)], [0],
             {"pads": [2, 1], "mode": "replicate"})],
    "interpolate": [
        (lambda x: F.interpolate(x, scale_factor=2.0, mode="nearest"), [X], [0],
         {"sizes": [10, 10], "scales": [2.0, 2.0]}),
        (lambda x: F.interpolate(x, size=(7, 3), mode="bilinear", align_corners=True), [X], [0],
         {"sizes": [7, 3], "mode": "linear", "align_corners": 1}),
        (lambda x: F.interpolate(x, scale_factor=1.5, mode="bicubic"), [X], [0],
         {"sizes": [7, 7], "mode": "cubic", "scales": [1.5, 1.5]})],
    "take": [(lambda x: x.flip(1), [X], [0], {"dim": 1, "index": [5, 4, 3, 2, 1, 0]}),
             (lambda x: x[:, :, 1::2], [X], [0], {"dim": 2, "index": [1, 3]})],
    "var": [(lambda x: x.var((1, 3)), [X], [0], {"axes": [1, 3]}),
            (lambda x: x.var(-1, correction=0, keepdim=True), [V], [0],
             {"axes": [1], "correction": 0.0, "keepdim": 1})],
    "dropout": [(lambda x: F.dropout(x, 0.0), [V], [0], {"p": 0.0})],
    "max_pool2d": [(lambda x: F.max_pool2d(x, 2), [X], [0], {"kernel": [2, 2]}),
                   (lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True), [X], [0],
                    {"kernel": [3, 3], "stride": [2, 2], "padding": [1, 1], "ceil_mode": 1})],
    "max_pool2d_with_indices": [
        (lambda x: F.max_pool2d(x, 3, 2, 1, 2, return_indices=True), [X], [0],
         {"kernel": [3, 3], "stride": [2, 2], "padding": [1, 1], "dilation": [2, 2]})],
    "avg_pool2d": [(lambda x: F.avg_pool2d(x, 2), [X], [0], {"kernel": [2, 2]}),
                   (lambda x: F.avg_pool2d(x, 2, ceil_mode=True, count_include_pad=False), [X],
                    [0], {"kernel": [2, 2], "ceil_mode": 1, "count_include_pad": 0}),
                   (lambda x: F.avg_pool2d(x, 3, 1, 1, divisor_override=4), [X], [0],
                    {"kernel": [3, 3], "stride": [1, 1], "padding": [1, 1],
                     "divisor_override": 4})],
    "nll_loss": [(lambda x, y: F.nll_loss(x, y), [V, torch.tensor([0, 6, 2])], [0, 1, None], {}),
                 (lambda x, y, w: F.nll_loss(x, y, w, ignore_index=1, reduction="sum"),
                  [X, torch.zeros(4, 5, 5, dtype=torch.long), W6], [0, 1, 2],
                  {"ignore_index": 1, "reduction": 2})],
    "ctc_loss": [(lambda lp, y, il, tl: F.ctc_loss(lp, y, il, tl, reduction="none"), CTC,
                  [0, 1, 2, 3], {"reduction": 0}),
                 (lambda lp, y, il, tl: F.ctc_loss(lp, y, il, tl, blank=2), CTC, [0, 1, 2, 3],
                  {"blank": 2})],
}


def imported(fn, examples):
    """The IR text of `fn` traced by make_fx and imported, its arguments data
    inputs and its result a user output."""
    gm = make_fx(lambda *args: fn(*args), tracing_mode="fake")(*examples)
    g = _C.Graph()
    out = Importer(gm, g, [("data", ir_dtype(e.dtype), list(e.shape)) for e in examples]).run()
    for i, v in enumerate(out if isinstance(out, tuple) else (out,)):
        g.output("user", v, f"out{i}")
    return g.text()


def direct(name, examples, operands, attrs):
    g = _C.Graph()
    values = [g.data(ir_dtype(e.dtype), list(e.shape)) for e in examples]
    args = [None if i is None else values[i] for i in operands]
    results = g.composite(name, args, attrs)
    for i in range(results_of(name)):
        g.output("user", results[i], f"out{i}")
    return g.text()


def results_of(name):
    """How many of the composite's results its cases compare: all of
    max_pool2d_with_indices's, the first of the others (a running
    statistic is an update, not a result of the function)."""
    return 2 if name == "max_pool2d_with_indices" else 1


def test_every_composite_has_a_case():
    assert sorted(c["name"] for c in _C.composites()) == sorted(CASES)


@pytest.mark.parametrize("name,case", [(n, i) for n, cases in CASES.items()
                                       for i in range(len(cases))])
def test_importer_records_the_composites_graph(name, case):
    fn, examples, operands, attrs = CASES[name][case]
    assert imported(fn, examples) == direct(name, examples, operands, attrs)


@pytest.mark.parametrize("fn", [lambda x: F.max_pool1d(x, 2),
                                lambda x: F.max_pool1d(x, 3, 2, 1, ceil_mode=True),
                                lambda x: F.max_pool2d(x[:, None], 2)],
                         ids=["max_pool1d", "max_pool1d_ceil", "max_pool2d"])
def test_a_pooling_whose_indices_only_dead_code_reads_is_the_plain_max_pool(fn):
    # make_fx traces max_pool1d as max_pool2d_with_indices and squeezes both
    # results, the indices' squeeze read by nothing: the scan over the
    # windows' taps (gathers) is only for indices the step reads
    text = imported(fn, [t(2, 3, 9)])
    assert "max_pool2d " in text and "gather" not in text, text


def test_a_composites_errors_name_it():
    g = _C.Graph()
    x = g.data("f32", [2, 3])
    with pytest.raises(_C.Error, match="no attribute 'slope'.*negative_slope"):
        g.composite("leaky_relu", [x], {"slope": 0.1})
    with pytest.raises(_C.Error, match="no composite op 'swish'"):
        g.composite("swish", [x], {})
    with pytest.raises(_C.Error, match="group_norm: 4 groups must divide"):
        g.composite("group_norm", [x, None, None], {"groups": 4})


# Activations at their kinks, thresholds and far tails, against float64
# torch: the value and the gradient of each element.
POINTS = [-100.0, -25.0, -20.0, -3.0, -2.5, -1.0, -1e-4, -1e-7, 0.0, 1e-7, 1e-4, 0.5, 1.0,
          2.5, 3.0, 6.0, 19.9, 20.0, 20.1, 25.0, 90.0]

ACTIVATIONS = [nn.ReLU(), nn.LeakyReLU(0.1), nn.ELU(), nn.ELU(0.3), nn.SELU(), nn.CELU(1.5),
               nn.Hardtanh(), nn.ReLU6(), nn.Hardsigmoid(), nn.Hardswish(), nn.Softplus(),
               nn.Softplus(2.0, 10.0), nn.Mish(), nn.SiLU(), nn.LogSigmoid(), nn.GELU(), nn.GELU("tanh")]


class Probe(nn.Module):
    """act(p) · c summed: p's gradient is c · act'(p), element by element."""

    def __init__(self, act):
        super().__init__()
        self.p = nn.Parameter(torch.tensor(POINTS))
        self.act = act

    def forward(self, c):
        return self.act(self.p * 1.0) * c


def _within_torchs_error(got, f32, f64):
    """Each element of `got` as close to float64 torch as float32 torch is
    (twice its distance), or within 4 float32 units in the last place."""
    ulp = torch.maximum(f64.abs(), torch.full_like(f64, 1e-30)) * 2.0 ** -23
    allowed = torch.maximum(4 * ulp, 2 * (f32.double() - f64).abs())
    return ((got.double() - f64).abs() <= allowed).all().item()


@pytest.mark.parametrize("act", ACTIVATIONS, ids=repr)
def test_activation_matches_float64_torch_at_its_kinks(act):
    c = torch.linspace(0.5, 1.5, len(POINTS))
    refs = []
    for dtype in (torch.float32, torch.float64):
        ref = Probe(act).to(dtype)
        out = ref(c.to(dtype))
        out.sum().backward()
        refs.append((out.detach(), ref.p.grad))
    model = Probe(act)
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.0),
                                  lambda y, _: y.sum(), mode="three_graph")
    step(c, torch.zeros(1))
    grad = step.gradients()["p"]
    value = wst.compile_forward(model)(c)
    assert _within_torchs_error(value, refs[0][0], refs[1][0]), (value, refs[1][0])
    assert _within_torchs_error(grad, refs[0][1], refs[1][1]), (grad, refs[1][1])
    assert torch.isfinite(grad).all()


def test_mask_fill_with_a_causal_buffer_matches_eager():
    class Masked(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.register_buffer("tril", torch.tril(torch.ones(4, 4)))

        def forward(self, x):
            s = self.lin(x)
            s = s.masked_fill(self.tril == 0, float("-inf"))
            return F.softmax(s, -1)

    torch.manual_seed(0)
    model = Masked()
    x = torch.randn(2, 4, 4)
    expected = model(x)
    got = wst.compile_forward(model)(x)
    assert torch.allclose(got, expected, atol=1e-6)
    assert math.isfinite(float(got.sum()))


def test_the_support_table_in_the_docs_is_the_importers(tmp_path):
    """docs/pytorch.md shows the table the importer registers (regenerate:
    python3 -m wholestep._support docs/pytorch.md)."""
    from wholestep import _support
    page = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "pytorch.md")
    copy = tmp_path / "pytorch.md"
    copy.write_text(open(page).read())
    assert not _support.rewrite(str(copy)), \
        "docs/pytorch.md is stale: python3 -m wholestep._support docs/pytorch.md"
