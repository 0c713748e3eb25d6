"""Random numbers drawn inside a forward (_aten_random.py): each draw has
torch's distribution (moments, ranges, a Kolmogorov-Smirnov distance),
a step draws fresh numbers, wholestep.torch.manual_seed repeats them, they
get no gradient, and the models that draw them (a VAE, a diffusion model's
noise and time steps) train."""

import math

import pytest
import torch

import wholestep
import wholestep.torch as wst

nn = torch.nn
F = nn.functional

N = 40000


def _draws(fn, dtype=torch.float32):
    model = nn.Sequential(nn.Identity())
    model.forward = fn
    return wst.compile_forward(model)(torch.zeros(N, dtype=dtype))


def _ks(sample, cdf):
    """The Kolmogorov-Smirnov distance of a sample from a distribution."""
    x = sample.double().sort().values
    f = cdf(x)
    n = x.numel()
    above = (torch.arange(1, n + 1, dtype=torch.float64) / n - f).max()
    below = (f - torch.arange(0, n, dtype=torch.float64) / n).max()
    return max(float(above), float(below))


# 1.63 / sqrt(N): the distance a true sample exceeds one time in a hundred;
# twice that leaves a margin for the 24-bit uniforms of float32
KS_LIMIT = 2 * 1.63 / math.sqrt(N)


def _normal_cdf(x):
    return 0.5 * (1 + torch.erf(x / math.sqrt(2)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_normal_numbers_have_the_standard_normal_distribution(dtype):
    for fn in (torch.randn_like, lambda x: torch.randn(x.shape, dtype=x.dtype),
               lambda x: torch.empty_like(x).normal_(2.0, 3.0).sub(2.0).div(3.0),
               lambda x: torch.normal(x + 2.0, x + 3.0).sub(2.0).div(3.0)):
        z = _draws(fn, dtype)
        assert z.dtype == dtype and torch.isfinite(z).all()
        assert abs(float(z.mean())) < 5 / math.sqrt(N)
        assert abs(float(z.var()) - 1) < 5 * math.sqrt(2 / N)
        assert _ks(z, _normal_cdf) < KS_LIMIT


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_uniform_and_exponential_numbers_have_their_distributions(dtype):
    u = _draws(torch.rand_like, dtype)
    assert u.min() >= 0 and u.max() < 1
    assert _ks(u, lambda x: x) < KS_LIMIT
    v = _draws(lambda x: torch.empty_like(x).uniform_(-2.0, 3.0), dtype)
    assert v.min() >= -2 and v.max() < 3
    assert _ks(v, lambda x: (x + 2) / 5) < KS_LIMIT
    e = _draws(lambda x: torch.empty_like(x).exponential_(2.0), dtype)
    assert e.min() >= 0 and torch.isfinite(e).all()
    assert _ks(e, lambda x: 1 - torch.exp(-2 * x)) < KS_LIMIT


def test_integers_and_bernoulli_draws_cover_their_range_evenly():
    k = _draws(lambda x: torch.randint(-3, 4, x.shape))
    assert k.dtype == torch.int64
    counts = torch.bincount(k + 3, minlength=7)
    assert counts.numel() == 7 and (counts - N / 7).abs().max() < 5 * math.sqrt(N / 7)
    r = _draws(lambda x: torch.randint_like(x, 5, 15) + x.new_zeros(()).random_(1))
    assert r.dtype == torch.float32 and torch.equal(r, r.round())
    assert r.min() == 5 and r.max() == 14
    p = torch.linspace(0, 1, N)
    b = _draws(lambda x: torch.bernoulli(x + p))
    assert set(b.unique().tolist()) <= {0.0, 1.0} and b[0] == 0 and b[-1] == 1
    # the draws follow p: as many ones in each quarter as its mean p says
    for q in range(4):
        part = b[q * N // 4:(q + 1) * N // 4]
        assert abs(float(part.mean()) - (q + 0.5) / 4) < 0.02


class _VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc, self.dec = nn.Linear(12, 8), nn.Linear(4, 12)

    def forward(self, x):
        mu, log_var = self.enc(x).chunk(2, -1)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * log_var)
        kl = -0.5 * (1 + log_var - mu ** 2 - log_var.exp()).sum(-1)
        return self.dec(z), kl


def _vae_loss(out, x):
    recon, kl = out
    return F.mse_loss(recon, x, reduction="none").sum(-1).mean() + kl.mean()


def test_each_step_draws_fresh_numbers_and_manual_seed_repeats_them():
    torch.manual_seed(0)
    model = _VAE()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(16, 12)

    def losses(seed, steps=3):
        model.load_state_dict(state)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        step = wst.compile_train_step(model, opt, _vae_loss)
        wst.manual_seed(seed)
        return [float(step(x, x)) for _ in range(steps)]

    first = losses(5)
    assert len(set(first)) == 3  # fresh noise at every step (the state moves too)
    assert losses(5) == first  # the same bits from the same seed and state
    assert losses(6) != first
    fixed = losses(5, 1)
    torch.manual_seed(123)  # torch's generator does not reach the stream
    assert losses(5, 1) == fixed


def test_the_noise_gets_no_gradient_and_the_rest_is_exact():
    # d/d mu of sum(w * (mu + eps * std)) is w whatever eps is; std's is
    # sum(w * eps), whose size tells the noise was drawn
    class Noisy(nn.Module):
        def __init__(self):
            super().__init__()
            self.mu = nn.Parameter(torch.zeros(64, 32))
            self.std = nn.Parameter(torch.ones(64, 32))

        def forward(self, w):
            eps = torch.randn_like(self.mu)
            return (w * (self.mu + eps * self.std)).sum() + torch.normal(self.mu, self.std).sum()

    model = Noisy()
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.0),
                                  lambda loss, _: loss, mode="three_graph")
    w = torch.randn(64, 32)
    step(w, torch.zeros(1))
    grads = step.gradients()
    assert torch.equal(grads["mu"], w)
    eps = grads["std"] / w  # the noise the step drew
    assert abs(float(eps.mean())) < 0.1 and abs(float(eps.std()) - 1) < 0.1


def test_a_diffusion_models_noise_and_time_steps_train():
    class Denoiser(nn.Module):
        def __init__(self, steps=50):
            super().__init__()
            betas = torch.linspace(1e-4, 0.05, steps)
            self.register_buffer("abar", torch.cumprod(1 - betas, 0))
            self.time = nn.Embedding(steps, 16)
            self.net = nn.Sequential(nn.Linear(16, 64), nn.SiLU(), nn.Linear(64, 16))

        def forward(self, x0):
            t = torch.randint(0, self.abar.numel(), (x0.shape[0],))
            noise = torch.randn_like(x0)
            a = self.abar[t][:, None]
            xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
            return self.net(xt + self.time(t)), noise

    def train(compiled):
        torch.manual_seed(0)
        model = Denoiser()
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        x0 = torch.randn(64, 16) * 0.5
        if compiled:
            step = wst.compile_train_step(model, opt, lambda out, _: F.mse_loss(*out))
            wst.manual_seed(0)
            losses = [float(step(x0, torch.zeros(1))) for _ in range(200)]
        else:
            losses = []
            for _ in range(200):
                opt.zero_grad()
                loss = F.mse_loss(*model(x0))
                loss.backward()
                opt.step()
                losses.append(float(loss))
        return sum(losses[:20]) / 20, sum(losses[-20:]) / 20

    (first, last), (eager_first, eager_last) = train(True), train(False)
    assert abs(first - eager_first) < 0.1 * eager_first  # the same noise's scale
    assert last < 0.85 * first  # it learns: as far as eager torch does, with other noise
    assert abs(last - eager_last) < 0.1 * eager_last, (first, last, eager_first, eager_last)


def test_draws_torch_cannot_trace_or_wholestep_does_not_make_are_refused_by_name():
    for fn, message in [
            (lambda x: x[:, torch.randperm(x.shape[1])], "aten.randperm.default"),
            (lambda x: x + torch.multinomial(x.softmax(-1), 1).float(), "torch.multinomial"),
            (lambda x: x + torch.randn(x.shape, generator=torch.Generator()), "Generator")]:
        model = nn.Sequential(nn.Linear(4, 4))
        model.forward = lambda x, fn=fn, lin=model[0]: fn(lin(x))
        step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                      F.mse_loss)
        with pytest.raises(wholestep.Error, match=message):
            step(torch.randn(3, 4), torch.randn(3, 4))


def test_a_compiled_forward_draws_fresh_numbers_each_call_and_repeats_them_by_seed():
    # a GAN generator's samples at inference
    model = nn.Sequential(nn.Identity())
    model.forward = lambda x: x + torch.randn_like(x)
    forward = wst.compile_forward(model)
    x = torch.zeros(64)
    first, second = forward(x), forward(x)
    assert not torch.equal(first, second)
    wst.manual_seed(1)
    again = forward(x)
    wst.manual_seed(1)
    assert torch.equal(forward(x), again)
