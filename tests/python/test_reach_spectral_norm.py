"""nn.utils.spectral_norm through wholestep.torch: its pre-hook (a power
iteration on the buffers u and v in a training forward, written in place
with F.normalize(..., out=u), then the weight divided by its estimated
largest singular value) is traced into the step and runs at every call as
eager's forward runs it; in eval mode the forward reads u and v as they
are. Ten training steps against eager torch are test_match_eager.py's
(the sn_discriminator model). An op's out= argument is a write into that
tensor, whatever the op."""

import copy

import pytest
import torch

import wholestep.torch as wst
from torch_models import SNDiscriminator

nn = torch.nn
F = nn.functional


def _model():
    torch.manual_seed(0)
    return SNDiscriminator()


@pytest.mark.parametrize("dtype", [None, torch.float64], ids=["float32", "float64"])
def test_spectral_norm_trains_as_float64_torch(dtype):
    model = _model()
    x, y = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    result = wst.check(model, opt, F.cross_entropy, x, y, dtype=dtype, verbose=False)
    assert result.passed, result.report()


def test_the_power_iteration_runs_at_every_step_and_the_attribute_is_a_plain_tensor():
    model = _model()
    eager = copy.deepcopy(model)
    x, y = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.0),
                                  F.cross_entropy)
    for _ in range(3):
        step(x, y)
        eager(x)  # a learning rate of 0: only the hooks' buffers move
    for (name, ours), (_, theirs) in zip(model.named_buffers(), eager.named_buffers()):
        assert torch.allclose(ours, theirs, rtol=1e-5, atol=1e-6), name
    conv = model.body[0]
    assert not torch.equal(conv.weight_u, _model().body[0].weight_u)
    # the attribute the pre-hook sets, a plain tensor (no trace's tensor
    # left there): after a step, weight_orig over u . (W v) from the
    # parameters and the u and v the step left (what the next forward
    # starts from)
    step.optimizer.param_groups[0]["lr"] = 0.1
    step(x, y)
    w = conv.weight_orig.detach()
    sigma = torch.dot(conv.weight_u, torch.mv(w.reshape(16, -1), conv.weight_v))
    assert type(conv.weight) is torch.Tensor
    assert torch.allclose(conv.weight, w / sigma, rtol=1e-6)


def test_an_eval_forward_reads_u_and_v_and_changes_nothing():
    model = _model().eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(4, 3, 16, 16)
    with torch.no_grad():  # the truth: float64 eager from the same u and v
        want = copy.deepcopy(model).double()(x.double())
    got = wst.compile_forward(model)(x)
    # Within float32's rounding of the output's scale (ours 6.6e-7 of it,
    # float32 torch 5.8e-7; elementwise, float32 torch's own outputs near
    # zero move by more than 1e-5 of themselves with its thread count). A
    # power iteration run in eval would move sigma, and every output, by
    # far more.
    assert (got.double() - want).abs().max() <= 1e-5 * want.abs().max()
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k


class _Tracker(nn.Module):
    """Keeps half the batch's mean feature in a buffer through out= (under
    no_grad: torch refuses out= where a gradient is taken)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(5, 3)
        self.register_buffer("mean", torch.zeros(5))

    def forward(self, x):
        with torch.no_grad():
            torch.mul(x.mean(0), 0.5, out=self.mean)
        return self.lin(x) * 2 + self.mean.sum()


def test_an_out_argument_is_a_write_into_that_tensor():
    torch.manual_seed(1)
    model = _Tracker()
    x, y = torch.randn(6, 5), torch.randn(6, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    result = wst.check(model, opt, F.mse_loss, x, y, verbose=False)
    assert result.passed, result.report()
    step = wst.compile_train_step(model, opt, F.mse_loss)
    step(x, y)
    assert torch.allclose(model.mean, x.mean(0) * 0.5)
