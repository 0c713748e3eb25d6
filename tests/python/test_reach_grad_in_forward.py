"""Gradients taken inside a forward (torch.autograd.grad with
create_graph=True) and differentiated again by the step: a critic's
gradient penalty through every activation torch's backward ops cover
(_aten_backward.py), and a physics-informed loss's second derivatives;
against float64 torch."""

import pytest
import torch

import wholestep
import wholestep.torch as wst

nn = torch.nn
F = nn.functional

ACTIVATIONS = {
    "tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": F.relu,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.2), "elu": F.elu, "selu": F.selu,
    "celu": lambda x: F.celu(x, 0.7), "softplus": lambda x: F.softplus(x, 2.0, 1.0),
    "silu": F.silu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "hardtanh": lambda x: F.hardtanh(x, -0.5, 0.5), "exp": lambda x: (x * 0.3).exp(),
    "softmax": lambda x: F.softmax(x, -1) * 4, "log_softmax": lambda x: F.log_softmax(x, -1),
    "mish": F.mish,
}


class Critic(nn.Module):
    """WGAN-GP's critic: its score and the penalty on its gradient with
    respect to its input."""

    def __init__(self, act):
        super().__init__()
        self.a, self.b = nn.Linear(4, 6), nn.Linear(6, 1)
        self.act = act

    def forward(self, x):
        x = x.requires_grad_(True)
        score = self.b(self.act(self.a(x)))
        (g,) = torch.autograd.grad(score.sum(), x, create_graph=True)
        return torch.cat([score, (g.norm(2, dim=1, keepdim=True) - 1) ** 2], 1)


@pytest.mark.parametrize("act", ACTIVATIONS)
def test_a_gradient_penalty_trains_as_float64_torch(act):
    torch.manual_seed(0)
    model = Critic(ACTIVATIONS[act]).double()
    result = wst.check(model, torch.optim.SGD(model.parameters(), lr=0.1), F.mse_loss,
                       torch.randn(5, 4, dtype=torch.float64),
                       torch.randn(5, 2, dtype=torch.float64), dtype=torch.float64,
                       modes=["single_graph", "three_graph"])
    assert result.passed, result.report()


class Heat(nn.Module):
    """A physics-informed network u(t, x) and the residual of the heat
    equation u_t - 0.1 u_xx at its points."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(),
                                 nn.Linear(16, 1))

    def forward(self, tx):
        tx = tx.requires_grad_(True)
        u = self.net(tx)
        (du,) = torch.autograd.grad(u.sum(), tx, create_graph=True)
        (ddu,) = torch.autograd.grad(du[:, 1].sum(), tx, create_graph=True)
        return du[:, :1] - 0.1 * ddu[:, 1:]


def test_a_physics_informed_residual_trains_as_float64_torch():
    torch.manual_seed(0)
    model = Heat().double()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    result = wst.check(model, opt, F.mse_loss, torch.rand(16, 2, dtype=torch.float64),
                       torch.zeros(16, 1, dtype=torch.float64), dtype=torch.float64,
                       modes=["single_graph", "three_graph"])
    assert result.passed, result.report()


def test_a_penalty_through_a_layer_norm_trains_as_float64_torch():
    # (WGAN-GP's critics use LayerNorm where BatchNorm would mix the samples)
    class Normed(Critic):
        def __init__(self):
            super().__init__(None)
            self.norm = nn.LayerNorm(6)
            self.act = self.normed  # (a bound method: copies of the model bind their own)

        def normed(self, h):
            return torch.tanh(self.norm(h))

    torch.manual_seed(0)
    model = Normed().double()
    result = wst.check(model, torch.optim.SGD(model.parameters(), lr=0.1), F.mse_loss,
                       torch.randn(5, 4, dtype=torch.float64),
                       torch.randn(5, 2, dtype=torch.float64), dtype=torch.float64,
                       modes=["single_graph", "three_graph"])
    assert result.passed, result.report()


def test_a_penalty_through_a_layer_without_a_translated_backward_is_refused():
    class Batched(Critic):
        def __init__(self):
            super().__init__(torch.tanh)
            self.norm = nn.BatchNorm1d(6)
            self.act = lambda h: self.norm(h)

    model = Batched()
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1), F.mse_loss)
    with pytest.raises(wholestep.Error, match="native_batch_norm"):
        step(torch.randn(5, 4), torch.randn(5, 2))


class ConvCritic(nn.Module):
    """An image critic's gradient penalty through strided, dilated and
    grouped convolutions (1-, 2- or 3-d)."""

    def __init__(self, dims):
        super().__init__()
        conv = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[dims]
        self.net = nn.Sequential(conv(2, 4, 3, stride=2, padding=1), nn.LeakyReLU(0.2),
                                 conv(4, 4, 3, padding=2, dilation=2, groups=2),
                                 nn.LeakyReLU(0.2), nn.Flatten())

    def forward(self, x):
        x = x.requires_grad_(True)
        score = self.net(x).mean(1, keepdim=True)
        (g,) = torch.autograd.grad(score.sum(), x, create_graph=True)
        return torch.cat([score, (g.flatten(1).norm(2, dim=1, keepdim=True) - 1) ** 2], 1)


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_a_convolutional_critics_gradient_penalty_trains_as_float64_torch(dims):
    torch.manual_seed(0)
    model = ConvCritic(dims).double()
    result = wst.check(model, torch.optim.SGD(model.parameters(), lr=0.1), F.mse_loss,
                       torch.randn(3, 2, *(6,) * dims, dtype=torch.float64),
                       torch.randn(3, 2, dtype=torch.float64), dtype=torch.float64,
                       modes=["single_graph", "three_graph"])
    assert result.passed, result.report()
