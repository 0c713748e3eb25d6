"""Bags of embeddings, sliding windows as columns, bilinear products,
medians and k-th values, and BatchNorm's cumulative average: each through
wholestep.torch against float64 torch (within float32 torch's own error),
and the inputs eager torch refuses failing the step and changing nothing."""

import copy
import math

import pytest
import torch

import wholestep
import wholestep.torch as wst
from float64_probe import check, close, randoms

nn = torch.nn
F = nn.functional

r = randoms(1)  # the same inputs in every run
X = r(2, 3, 7, 9)
IDS = torch.tensor([4, 0, 2, 2, 7, 1, 5, 0, 3])
# a NaN in the first row (the median there), none in the second
WITH_NAN = torch.tensor([[1.0, math.nan, -2.0, 3.0, math.nan], [0.5, 0.25, 4.0, -1.0, 2.0]])
# many equal elements: the median of all of them is a tie of seven
TIED = torch.tensor([[0.0, 1.0, 0.0, 2.0, 0.0], [-1.0, 0.0, 3.0, 0.0, 0.0],
                     [0.0, 5.0, -2.0, 0.0, 4.0]])

CASES = {
    "embedding_bag_sum_offsets_empty_bag": (
        lambda w: F.embedding_bag(IDS, w, torch.tensor([0, 3, 3, 8]), mode="sum"), r(8, 3)),
    "embedding_bag_mean_padding": (
        lambda w: F.embedding_bag(IDS, w, torch.tensor([0, 2, 5]), mode="mean", padding_idx=2),
        r(8, 4)),
    "embedding_bag_weighted": (
        lambda w, p: F.embedding_bag(IDS, w, torch.tensor([0, 4, 6]), mode="sum",
                                     per_sample_weights=p), r(8, 3), r(9)),
    "embedding_bag_last_offset": (
        lambda w: F.embedding_bag(IDS, w, torch.tensor([0, 3, 9]), mode="mean",
                                  include_last_offset=True), r(8, 3)),
    "embedding_bag_2d_mean": (lambda w: F.embedding_bag(IDS.view(3, 3), w, mode="mean"),
                              r(8, 5)),
    "embedding_bag_2d_padding_sum": (
        lambda w: F.embedding_bag(IDS.view(3, 3), w, mode="sum", padding_idx=0), r(8, 5)),
    "embedding_bag_max_offsets_empty_bag": (  # index 2 twice in one bag: a tie of one row
        lambda w: F.embedding_bag(IDS, w, torch.tensor([0, 3, 3, 8]), mode="max"), r(8, 3)),
    "embedding_bag_max_padding": (  # a bag of padding alone, an empty one: 0
        lambda w: F.embedding_bag(torch.tensor([2, 2, 3, 1, 2, 5, 4]), w,
                                  torch.tensor([0, 2, 2, 5]), mode="max", padding_idx=2),
        r(8, 4)),
    "embedding_bag_max_last_offset": (
        lambda w: F.embedding_bag(IDS, w, torch.tensor([0, 3, 9]), mode="max",
                                  include_last_offset=True), r(8, 3)),
    "embedding_bag_2d_max": (lambda w: F.embedding_bag(IDS.view(3, 3), w, mode="max"),
                             r(8, 5)),
    "unfold": (lambda x: F.unfold(x, (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
               X),
    "unfold_unbatched": (lambda x: F.unfold(x[0], 3, stride=2), X),
    "fold": (lambda c: F.fold(c, (7, 9), (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
             r(2, 18, 4 * 7)),
    "fold_of_unfold": (lambda x: F.fold(F.unfold(x, 3, padding=1), (7, 9), 3, padding=1), X),
    "bilinear": (lambda x, y, w, b: F.bilinear(x, y, w, b), r(5, 3), r(5, 4), r(6, 3, 4), r(6)),
    "bilinear_batched_no_bias": (lambda x, y, w: F.bilinear(x, y, w), r(2, 5, 3), r(2, 5, 4),
                                 r(6, 3, 4)),
    "median_all": (lambda x: x.median() * x, r(4, 5)),
    "median_all_of_a_tie": (lambda x: x.median().reshape(1) * 3, TIED),
    "median_dim": (lambda x: x.median(1).values.sum() * 2 + x.median(0, keepdim=True)[0].sum()
                   + x * x.median(-1, keepdim=True).indices, r(3, 6, 4)),
    "median_dim_nan": (lambda x: x * torch.median(WITH_NAN, 1).indices.unsqueeze(1)
                       + torch.nan_to_num(torch.median(WITH_NAN + x, 1).values, 7.0)
                       .unsqueeze(1), r(2, 5)),
    "kthvalue": (lambda x: x.kthvalue(2, 1).values.sum() * 2
                 + x.kthvalue(3, 0, keepdim=True)[0].sum()
                 + x * x.kthvalue(1, -1, keepdim=True).indices, r(3, 6, 4)),
}


@pytest.mark.parametrize("name", CASES)
def test_op_matches_float64_torch(name):
    fn, *tensors = CASES[name]
    check(fn, *tensors)


class Bags(nn.Module):
    def __init__(self, **options):
        super().__init__()
        torch.manual_seed(0)
        self.bag = nn.EmbeddingBag(8, 3, **{"mode": "sum", **options})

    def forward(self, ids, offsets):
        return self.bag(ids, offsets)


@pytest.mark.parametrize("offsets, message", [
    ([1, 4], r"offsets\[0\] has to be 0, .* \(first at position \[0\] of \[1\]\)"),
    ([0, 6, 3], r"offsets must not decrease.* \(first at position \[1\] of \[2\]\)"),
    ([0, 10], r"offsets can not be greater than the input's length 9 \(first at position \[1\]")])
def test_offsets_eager_refuses_fail_the_step_and_change_nothing(offsets, message):
    """A first offset above 0, decreasing offsets, one past the end: each
    its own message."""
    model = Bags()
    offsets = torch.tensor(offsets)
    with pytest.raises(RuntimeError):
        model(IDS, offsets)
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                  lambda y, t: (y * t).sum(), num_inputs=2)
    before = model.bag.weight.detach().clone()
    target = torch.ones(len(offsets), 3)
    with pytest.raises(wholestep.Error, match=message):
        step(IDS, offsets, target)
    assert torch.equal(model.bag.weight, before)
    good = torch.tensor([0, 4])
    step(IDS, good, torch.ones(2, 3))  # the step still runs
    assert not torch.equal(model.bag.weight, before)


@pytest.mark.parametrize("mode", ["mean", "max"])
def test_indices_past_the_last_offset_are_left_out_as_in_torch(mode):
    """include_last_offset=True with a last offset below the end: the tail
    is in no bag (the same bags without it, in float64: this torch's own
    kernel corrupts its heap on this input in float64)."""
    model = Bags(mode=mode, include_last_offset=True)
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.0),
                                  lambda y, t: (y * t).sum(), num_inputs=2,
                                  mode="three_graph")
    weights = r(2, 3)
    loss = step(IDS, torch.tensor([0, 3, 6]), weights)
    results = []
    for dtype in (torch.float32, torch.float64):
        table = model.bag.weight.detach().to(dtype).requires_grad_()
        expected = (F.embedding_bag(IDS[:6], table, torch.tensor([0, 3]), mode=mode)
                    * weights.to(dtype)).sum()
        expected.backward()
        results.append((expected.detach().reshape(1), table.grad))
    assert close(loss.reshape(1), results[0][0], results[1][0])
    assert close(step.gradients()["bag.weight"], results[0][1], results[1][1])


@pytest.mark.parametrize("options, named", [({"scale_grad_by_freq": True}, "scale_grad_by_freq")])
def test_embedding_bag_options_not_translated_are_refused_naming_them(options, named):
    model = nn.EmbeddingBag(8, 3, **options)
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                  lambda y, t: (y * t).sum())
    with pytest.raises(wholestep.Error, match=named):
        step(IDS.view(3, 3), torch.ones(3, 3))


def _bn_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4, momentum=None), nn.ReLU(),
                         nn.Flatten(), nn.Linear(4 * 6 * 6, 3), nn.BatchNorm1d(3, momentum=None))


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


def test_batch_norm_cumulative_average_matches_float64_eager():
    """momentum=None: the running statistics are the mean of every batch's,
    1 / num_batches_tracked the weight of the newest."""
    model = _statistics_match_float64_eager(_bn_net, 4, (5, 3, 8, 8), 3)
    assert int(model[1].num_batches_tracked) == 4 and model[1].running_var.ne(1).all()


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


@pytest.mark.parametrize("momentum", [0.3, None])
def test_a_batch_norm_called_twice_updates_its_first_update(momentum):
    _statistics_match_float64_eager(lambda: TwiceNormed(momentum), 2, (4, 3, 6, 6), 4)
