"""Packed sequences through recurrent layers (_traceable_packed.py):
pack_padded_sequence, nn.LSTM / nn.GRU / nn.RNN, pad_packed_sequence
against float64 torch, sorted or not, with and without an initial state;
the lengths' checks fail the step with torch's messages."""

import copy

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pack_sequence, pad_packed_sequence

import wholestep
import wholestep.torch as wst

nn = torch.nn
F = nn.functional


class BiLSTMClassifier(nn.Module):
    """The text classifier of many tutorials: embeddings, a two-layer
    bidirectional LSTM over the packed batch, the last states and a mean
    over each sequence's own steps."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(20, 8, padding_idx=0)
        self.rnn = nn.LSTM(8, 6, num_layers=2, bidirectional=True, batch_first=True)
        self.head = nn.Linear(12 + 12, 3)

    def forward(self, tokens, lengths):
        packed = pack_padded_sequence(self.embed(tokens), lengths, batch_first=True,
                                      enforce_sorted=False)
        out, (h, c) = self.rnn(packed)
        padded, lengths = pad_packed_sequence(out, batch_first=True)
        mean = padded.sum(1) / lengths[:, None].to(padded.dtype)
        return self.head(torch.cat([mean, h[-2:].transpose(0, 1).flatten(1)], 1))


class SortedGRU(nn.Module):
    """A GRU and a ReLU RNN over sorted lengths, from a learned first state,
    padded back to a fixed length."""

    def __init__(self, mode):
        super().__init__()
        self.h0 = nn.Parameter(torch.randn(2, 1, 5) * 0.3)
        self.rnn = (nn.GRU(4, 5, num_layers=2) if mode == "gru"
                    else nn.RNN(4, 5, num_layers=2, nonlinearity="relu", bias=False))
        self.head = nn.Linear(5, 3)

    def forward(self, x, lengths):
        packed = pack_padded_sequence(x, lengths)
        out, h = self.rnn(packed, self.h0.expand(2, x.shape[1], 5).contiguous())
        padded, _ = pad_packed_sequence(out, total_length=x.shape[0] + 2, padding_value=-1.0)
        return self.head(padded.mean(0) + h[-1])


LENGTHS = torch.tensor([3, 7, 1, 7, 5, 2])
SORTED = torch.tensor([7, 7, 5, 3, 2, 1])


def _tokens(lengths, steps):
    t = torch.randint(1, 20, (lengths.numel(), steps))
    return t * (torch.arange(steps)[None, :] < lengths[:, None])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_bidirectional_lstm_over_unsorted_packed_sequences_matches_float64_torch(dtype):
    torch.manual_seed(0)
    model = BiLSTMClassifier().to(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    result = wst.check(model, opt, F.cross_entropy, _tokens(LENGTHS, 7), LENGTHS,
                       torch.tensor([0, 2, 1, 1, 0, 2]), num_inputs=2, dtype=dtype,
                       modes=["single_graph", "three_graph"])
    assert result.passed, result.report()


def _gradients_against_float64(model, dtype, tolerance, *batch):
    """The step's gradients (three_graph) against float64 eager torch's, each
    within `tolerance` of its tensor's largest element. (wst.check reorders
    the batch, which unsorts sorted lengths: torch refuses that.)"""
    exact = copy.deepcopy(model).double()
    F.cross_entropy(exact(*[t.double() if t.is_floating_point() else t
                            for t in batch[:-1]]), batch[-1]).backward()
    model = model.to(dtype)
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.0),
                                  F.cross_entropy, mode="three_graph", num_inputs=2)
    step(*[t.to(dtype) if t.is_floating_point() else t for t in batch])
    got = step.gradients()
    for name, p in exact.named_parameters():
        scale = p.grad.abs().max().item()
        assert (got[name].double() - p.grad).abs().max().item() <= tolerance * scale, name


@pytest.mark.parametrize("mode", ["gru", "rnn"])
def test_a_gru_and_an_rnn_over_sorted_packed_sequences_match_float64_torch(mode):
    torch.manual_seed(1)
    model = SortedGRU(mode)
    batch = (torch.randn(7, 6, 4), SORTED, torch.tensor([0, 2, 1, 1, 0, 2]))
    _gradients_against_float64(model, torch.float64, 1e-13, *batch)
    _gradients_against_float64(model, torch.float32, 1e-5, *batch)


def test_pack_sequence_of_a_list_matches_float64_torch():
    class Listed(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn, self.head = nn.LSTM(4, 5), nn.Linear(5, 2)

        def forward(self, x):
            seqs = [x[:5, 0], x[:3, 1], x[:, 2]]  # pack_sequence sorts them itself
            out, (h, _) = self.rnn(pack_sequence(seqs, enforce_sorted=False))
            return self.head(h[-1] + pad_packed_sequence(out)[0].sum(0))

    torch.manual_seed(2)
    model = Listed()
    x, y = torch.randn(6, 3, 4), torch.tensor([1, 0, 1])
    exact = copy.deepcopy(model).double()
    F.cross_entropy(exact(x.double()), y).backward()
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.0),
                                  F.cross_entropy, mode="three_graph")
    step(x, y)
    for name, p in exact.named_parameters():
        got = step.gradients()[name].double()
        assert (got - p.grad).abs().max() <= 1e-5 * p.grad.abs().max(), name


def _step(model):
    return wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                  F.cross_entropy, num_inputs=2)


@pytest.mark.parametrize("lengths, message", [
    (torch.tensor([7, 5, 7, 3, 2, 1]), r"`lengths` array must be sorted in decreasing order"),
    (torch.tensor([7, 7, 5, 3, 2, 0]), r"Length of all samples has to be greater than 0"),
    (torch.tensor([6, 6, 5, 3, 2, 1]), r"the longest sequence does not fill the padded batch's "
                                       r"7 steps"),
])
def test_lengths_torch_refuses_fail_the_step_and_change_nothing(lengths, message):
    torch.manual_seed(1)
    model = SortedGRU("gru")
    step = _step(model)
    x, y = torch.randn(7, 6, 4), torch.tensor([0, 2, 1, 1, 0, 2])
    step(x, SORTED, y)
    before = [p.detach().clone() for p in model.parameters()]
    if "fill" not in message:  # eager raises too; a shorter longest sequence it packs
        with pytest.raises(RuntimeError, match=message):
            model(x, lengths)
    with pytest.raises(wholestep.Error, match=message):
        step(x, lengths, y)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))
