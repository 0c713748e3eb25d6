"""torch.distributions in a traced forward: densities, entropies and
divergences against float64 torch, and their argument validation as a
check of the step (_traceable_distributions.py): a parameter or value
outside its constraint fails the step with torch's message and changes
nothing."""

import pytest
import torch

import wholestep
import wholestep.torch as wst

nn = torch.nn
F = nn.functional
D = torch.distributions


def _split(o):
    """A location and a positive scale from a head's output."""
    a, b = o.chunk(2, -1)
    return a, F.softplus(b) + 0.1


# o: a Linear's output [4, 6]
CASES = {
    "normal": lambda o: D.Normal(*_split(o)).log_prob(torch.zeros(3)).sum(-1)
    + D.Normal(*_split(o)).entropy().sum(-1)
    + D.kl_divergence(D.Normal(*_split(o)), D.Normal(0.0, 1.0)).sum(-1),
    "laplace_lognormal": lambda o: D.Laplace(*_split(o)).log_prob(torch.full((3,), 0.5)).sum(-1)
    + D.LogNormal(*_split(o)).log_prob(torch.full((3,), 1.5)).sum(-1),
    "gamma_beta": lambda o: D.Gamma(_split(o)[1], _split(o)[1] + 1).log_prob(
        torch.full((3,), 0.7)).sum(-1) + D.Beta(_split(o)[1], _split(o)[1] + 0.5).log_prob(
        torch.full((3,), 0.3)).sum(-1),
    "dirichlet": lambda o: D.Dirichlet(_split(o)[1]).log_prob(torch.tensor([0.2, 0.3, 0.5])),
    "categorical_bernoulli": lambda o: D.Categorical(logits=o).log_prob(
        torch.tensor([1, 0, 2, 5])) + D.Categorical(logits=o).entropy()
    + D.Bernoulli(logits=o).log_prob((torch.arange(6) % 2).float()).sum(-1),
    "poisson_binomial": lambda o: D.Poisson(_split(o)[1]).log_prob(
        torch.tensor([0.0, 2.0, 5.0])).sum(-1)
    + D.Binomial(10, logits=o).log_prob(torch.full((6,), 3.0)).sum(-1),
    "student_t_von_mises": lambda o: D.StudentT(_split(o)[1] + 1, *_split(o)).log_prob(
        torch.full((3,), 0.2)).sum(-1) + D.VonMises(*_split(o)).log_prob(
        torch.full((3,), 0.4)).sum(-1),
    "independent_mixture": lambda o: D.Independent(D.Normal(*_split(o)), 1).log_prob(
        torch.zeros(3)) + D.MixtureSameFamily(D.Categorical(logits=o[:, :3]),
                                              D.Normal(o[:, 3:], 1.0)).log_prob(torch.zeros(4)),
    "exponential_relaxed": lambda o: D.Exponential(_split(o)[1]).log_prob(
        torch.full((3,), 0.4)).sum(-1) + D.RelaxedOneHotCategorical(
        torch.tensor(0.5), logits=o).log_prob(torch.full((6,), 1 / 6)),
}


class _Head(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.linear = nn.Linear(5, 6)
        self.fn = fn

    def forward(self, x):
        return self.fn(self.linear(x))


def _weighted(out, weights):
    return (out * weights).sum()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", CASES)
def test_distribution_matches_float64_torch(name, dtype):
    torch.manual_seed(0)
    model = _Head(CASES[name]).to(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, w = torch.randn(4, 5, dtype=dtype), torch.randn(4, dtype=dtype)
    result = wst.check(model, opt, _weighted, x, w, dtype=dtype,
                       modes=["single_graph", "three_graph"])
    assert result.passed, result.report()


def _fails_as_eager(model, x, message):
    """Eager torch raises ValueError with `message`; the step fails with it
    and leaves the parameters as they were."""
    with pytest.raises(ValueError, match=message):
        model(x)
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                  _weighted)
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(wholestep.Error, match=message):
        step(x, torch.ones(4))
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))


def test_a_parameter_outside_its_constraint_fails_the_step_with_torchs_message():
    torch.manual_seed(0)
    model = _Head(lambda o: D.Normal(o[:, :3], o[:, 3:]).log_prob(torch.zeros(3)).sum(-1))
    with torch.no_grad():
        model.linear.bias[3:] = 5.0
    x = torch.randn(4, 5) * 0.1
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.0),
                                  _weighted)
    step(x, torch.ones(4))  # every scale positive: it trains
    with torch.no_grad():
        model.linear.bias[4] = -5.0
    _fails_as_eager(model, x, r"Expected parameter scale \(Tensor of shape \(4, 3\)\) of "
                              r"distribution Normal\(loc: torch.Size\(\[4, 3\]\), scale: "
                              r"torch.Size\(\[4, 3\]\)\) to satisfy the constraint "
                              r"GreaterThan\(lower_bound=0.0\), but found invalid values")


def test_a_value_outside_the_support_fails_the_step_with_torchs_message():
    torch.manual_seed(0)
    value = torch.full((3,), 0.5)
    model = _Head(lambda o: D.Gamma(_split(o)[1], 1.0).log_prob(value).sum(-1))
    x = torch.randn(4, 5)
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                  _weighted)
    step(x, torch.ones(4))
    value[1] = -0.5  # the trace read the tensor: a constant of the step, so trace anew
    model = _Head(lambda o: D.Gamma(_split(o)[1], 1.0).log_prob(value).sum(-1))
    _fails_as_eager(model, x, r"Expected value argument \(Tensor of shape \(3,\)\) to be within "
                              r"the support \(GreaterThanEq\(lower_bound=0.0\)\) of the "
                              r"distribution Gamma")


def test_validation_turned_off_is_not_checked():
    # log_prob of an exponential outside its support is a finite number when
    # nothing validates it; eager and the step agree on it
    fn = lambda o: D.Exponential(_split(o)[1], validate_args=False).log_prob(  # noqa: E731
        torch.full((3,), -1.0)).sum(-1)
    torch.manual_seed(0)
    model = _Head(fn)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    result = wst.check(model, opt, _weighted, torch.randn(4, 5), torch.randn(4),
                       modes=["single_graph"])
    assert result.passed, result.report()
    previous = D.Distribution._validate_args
    D.Distribution.set_default_validate_args(False)
    try:
        model = _Head(lambda o: D.Exponential(_split(o)[1]).log_prob(
            torch.full((3,), -1.0)).sum(-1))
        step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                      _weighted)
        step(torch.randn(4, 5), torch.ones(4))
    finally:
        D.Distribution.set_default_validate_args(previous)
