"""In-place writes through views, as torch's views see them: through
reshapes and permutations of a tensor (an in-place Dropout after a
flatten), and seen by every other view of the tensor made before the write
(overlapping slices, a view of a view), each against float64 eager torch
within float64's rounding (wst.check's dtype)."""

import copy

import pytest
import torch

import wholestep.torch as wst

nn = torch.nn
F = nn.functional


class WritesThroughWholeViews(nn.Module):
    """In-place ops on reshapes and permutations of a tensor, which later
    reads of the tensor see; a slice of it reshaped too."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 12)
        self.register_buffer("count", torch.zeros(2, 3))

    def forward(self, x):
        h = self.fc(x)                       # [N, 12]
        h.view(-1, 3, 4).mul_(1.5)           # through a view
        h.t().add_(0.25)                     # through a transpose
        h[:, 4:].unsqueeze(0).mul_(-2.0)     # a slice, then a reshape of it
        g = h.reshape(-1, 2, 6)
        g.permute(2, 0, 1).tanh_()           # through a permutation of a reshape
        with torch.no_grad():
            self.count.view(6).add_(1.0)     # a buffer through a view
        return torch.cat([h, g.flatten(1)], 1).sum(1, keepdim=True) * h


class ViewsSeeWritesThroughOtherViews(nn.Module):
    """Views made before a write to their tensor, read after it: torch's
    views see every write to the elements they share."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 12)

    def forward(self, x):
        h = self.fc(x)
        a, b = h[:, :6], h[:, 3:9]           # overlapping siblings
        a.mul_(2.0)                          # b sees columns 3..5 doubled
        b.add_(1.0)                          # a (the mul_'s result) sees it too
        rows = h.view(-1, 3, 4)[:, 1]        # a view of a view
        h.sub_(0.5)                          # the whole tensor, not through a view
        t = h.t()
        t.mul_(0.5)                          # twice through one view: the second
        t.add_(-1.0)                         # write's operand is the first's result
        h[:, 2:5].mul_(3.0).add_(0.125)      # chained on a slice
        return torch.cat([a, b, rows, h], 1)


@pytest.mark.parametrize("module", [WritesThroughWholeViews, ViewsSeeWritesThroughOtherViews])
def test_writes_in_place_through_views_match_float64_eager(module):
    torch.manual_seed(0)
    model = module()
    x = torch.randn(5, 6)
    y = torch.randn_like(copy.deepcopy(model)(x)).detach()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    result = wst.check(model, opt, F.mse_loss, x, y, dtype=torch.float64,
                       modes=("single_graph", "interpret"), verbose=False)
    assert result.passed, result.report()
    if module is WritesThroughWholeViews:
        assert torch.equal(result["single_graph"].snapshot["count"][1],
                           torch.ones(2, 3, dtype=torch.float64))


def test_an_in_place_dropout_after_a_flatten_trains():
    # torchvision's EfficientNet head: Dropout(p, inplace=True) on a flatten
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Dropout(0.5, inplace=True), nn.Linear(4, 3))
    x, y = torch.randn(8, 3, 6, 6), torch.randint(0, 3, (8,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = wst.compile_train_step(model, opt, F.cross_entropy)
    before = model[4].weight.detach().clone()
    assert torch.isfinite(step(x, y))
    assert not torch.equal(model[4].weight, before)
    model.eval()  # no dropout: the step is eager's
    eager = copy.deepcopy(model)
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.1)
    step(x, y)
    eager_opt.zero_grad()
    F.cross_entropy(eager(x), y).backward()
    eager_opt.step()
    for a, b in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
