"""The connectionist temporal classification loss (F.ctc_loss, nn.CTCLoss)
through wholestep.torch against float64 torch, within float32 torch's own
error: targets padded and concatenated, every reduction, another blank,
lengths as tensors and as lists, samples with no alignment (inf, or 0 with
zero_infinity), and torch's gradient where log_probs are not
log-probabilities; lengths and targets out of range fail the step and change
nothing (eager torch refuses most; a negative length or a class out of
range it reads past its tensors)."""

import math

import pytest
import torch

import wholestep
import wholestep.torch as wst
from float64_probe import check, randoms

nn = torch.nn
F = nn.functional

r = randoms(3)
T, N, C = 9, 4, 6
LOGITS = r(T, N, C)
# padded [N, 4]: repeats (a blank must part them), one target, an empty one
PADDED = torch.tensor([[1, 1, 2, 5], [3, 0, 0, 0], [0, 0, 0, 0], [2, 4, 2, 4]])
TARGET_LENGTHS = torch.tensor([4, 1, 0, 4])
INPUT_LENGTHS = torch.tensor([9, 5, 3, 8])
CONCATENATED = torch.cat([PADDED[i, :n] for i, n in enumerate(TARGET_LENGTHS.tolist())])
# sample 0 needs 5 frames for [1, 1, 2, 5] (4 targets and the blank between
# the repeats) and has 4
SHORT = torch.tensor([4, 5, 3, 8])


def ctc(targets=PADDED, input_lengths=INPUT_LENGTHS, target_lengths=TARGET_LENGTHS,
        normalize=True, **kwargs):
    def fn(x):
        lp = F.log_softmax(x, 2) if normalize else x
        return F.ctc_loss(lp, targets, input_lengths, target_lengths, **kwargs)
    return fn


CASES = {
    "padded_mean": (ctc(), LOGITS),
    "padded_sum": (ctc(reduction="sum"), LOGITS),
    "padded_none": (ctc(reduction="none"), LOGITS),
    "concatenated": (ctc(CONCATENATED), LOGITS),
    "blank_last": (ctc(torch.where(PADDED == 5, 0, PADDED), blank=C - 1), LOGITS),
    "lengths_as_lists": (ctc(input_lengths=INPUT_LENGTHS.tolist(),
                             target_lengths=tuple(TARGET_LENGTHS.tolist())), LOGITS),
    "zero_infinity": (ctc(input_lengths=SHORT, zero_infinity=True, reduction="none"), LOGITS),
    "not_log_probabilities": (ctc(normalize=False), LOGITS),
    "module": (lambda x: nn.CTCLoss(blank=0, reduction="sum")(x.log_softmax(-1), PADDED,
                                                               INPUT_LENGTHS, TARGET_LENGTHS),
               LOGITS),
}


@pytest.mark.parametrize("name", CASES)
def test_ctc_loss_matches_float64_torch(name):
    fn, *tensors = CASES[name]
    check(fn, *tensors)


def test_a_sample_with_no_alignment_costs_inf_and_nan_gradients_as_in_torch():
    fn = ctc(input_lengths=SHORT, reduction="none")
    x64 = LOGITS.double().requires_grad_()
    expected = fn(x64)
    assert math.isinf(expected[0]) and torch.isfinite(expected[1:]).all()
    expected.sum().backward()

    class Loss(nn.Module):
        def __init__(self):
            super().__init__()
            self.x = nn.Parameter(LOGITS.clone())

        def forward(self, weights):
            return (fn(self.x) * weights).sum()

    model = Loss()
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.0),
                                  lambda loss, _: loss, mode="three_graph",
                                  on_nonfinite="ignore")
    assert math.isinf(float(step(torch.ones(N), torch.zeros(1))))
    got = step.gradients()["x"]
    # NaN in the frames of the sample with none, 0 past them, as torch's
    assert torch.isnan(x64.grad[:4, 0]).all() and (x64.grad[4:, 0] == 0).all()
    assert torch.allclose(got.double(), x64.grad, atol=1e-6, equal_nan=True)


class Frames(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(5, C)

    def forward(self, x):
        return self.lin(x).log_softmax(2)


# Eager torch raises for the first two; for a negative length or a
# class out of range it reads outside its tensors and returns whatever it
# found there.
@pytest.mark.parametrize("input_lengths,target_lengths,targets,says,torch_raises", [
    ([9, 10, 3, 8], TARGET_LENGTHS, PADDED, r"input_lengths\[1\] is 10, outside \[0, 9\]", True),
    (INPUT_LENGTHS, [4, 1, 0, 5], PADDED, r"target_lengths\[3\] is 5, outside \[0, 4\]", True),
    (INPUT_LENGTHS, [4, 1, 0, -1], PADDED, r"target_lengths\[3\] is -1", False),
    ([9, 5, -1, 8], TARGET_LENGTHS, PADDED, r"input_lengths\[2\] is -1", False),
    (INPUT_LENGTHS, TARGET_LENGTHS, torch.where(PADDED == 5, C, PADDED),
     r"target 3 of sample 0 is class 6, outside \[0, 6\)", False),
])
def test_lengths_and_targets_out_of_range_fail_the_step_and_change_nothing(
        input_lengths, target_lengths, targets, says, torch_raises):
    input_lengths, target_lengths = torch.as_tensor(input_lengths), torch.as_tensor(target_lengths)
    x = r(T, N, 5)
    torch.manual_seed(0)
    model = Frames()
    if torch_raises:
        with pytest.raises(RuntimeError):
            F.ctc_loss(model(x), targets, input_lengths, target_lengths).backward()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    step = wst.compile_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                  lambda lp, y, il, tl: F.ctc_loss(lp, y, il, tl))
    with pytest.raises(wholestep.Error, match=says):
        step(x, targets, input_lengths, target_lengths)
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    # a good batch after it trains as eager torch does
    eager = Frames()
    eager.load_state_dict(before)
    opt = torch.optim.SGD(eager.parameters(), lr=0.1)
    loss = F.ctc_loss(eager(x), PADDED, INPUT_LENGTHS, TARGET_LENGTHS)
    loss.backward()
    opt.step()
    assert float(step(x, PADDED, INPUT_LENGTHS, TARGET_LENGTHS)) == pytest.approx(float(loss),
                                                                                  rel=1e-5)
    for k, v in eager.state_dict().items():
        assert torch.allclose(model.state_dict()[k], v, atol=1e-6), k
