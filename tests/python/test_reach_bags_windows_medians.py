"""Bags of embeddings, sliding windows as columns, bilinear products,
medians and k-th values, and BatchNorm's cumulative average: each through
wholestep.torch against float64 torch (within float32 torch's own error),
and the inputs eager torch refuses failing the step and changing nothing."""

import copy

import pytest
import torch

import wholestep.torch as wst
from float64_probe import close

nn = torch.nn
F = nn.functional

def _statistics_match_float64_eager(make, steps, shape, classes):
    """The running statistics after `steps` steps (of a rate 0: the weights
    stay, so the statistics are the data's) against the eager model's in
    float64, within float32's error."""
    model, eager32 = make(), make()
    eager64 = copy.deepcopy(eager32).double()
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.0),
                                  F.cross_entropy)
    gen = torch.Generator().manual_seed(2)
    for _ in range(steps):
        x, y = torch.randn(shape, generator=gen), torch.randint(0, classes, (shape[0],),
                                                                generator=gen)
        step(x, y)
        for m in (eager32, eager64):
            with torch.no_grad():
                m(x.double() if m is eager64 else x)
    states = [m.state_dict() for m in (model, eager32, eager64)]
    for name, got in states[0].items():
        if got.is_floating_point():
            assert close(got, states[1][name], states[2][name]), name
        else:
            assert torch.equal(got, states[2][name]), name
    return model


class TwiceNormed(nn.Module):
    """One BatchNorm applied twice in a forward: its second update starts
    from its first (eager reads the buffers the first call wrote)."""

    def __init__(self, momentum):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3)
        self.norm = nn.BatchNorm2d(4, momentum=momentum)

    def forward(self, x):
        y = self.norm(self.conv(x))
        return self.norm(y * 2 + 1).mean((2, 3))


@pytest.mark.parametrize("momentum", [0.3])
def test_a_batch_norm_called_twice_updates_its_first_update(momentum):
    _statistics_match_float64_eager(lambda: TwiceNormed(momentum), 2, (4, 3, 6, 6), 4)
