"""BatchNorm over few values per channel: one SGD step against float64
eager torch, in every mode.

The rule: float64 eager torch's step is the truth; a tensor's float32
spread is the largest distance from it among float32 eager torch's runs
(four batch orders); a mode passes a tensor when its distance is at most
2 * spread + 1e-6. Distances are max|a - b| / scale, the scale max|b|
floored at 1e-3 of the largest max|b| among the tensors of its kind
(parameters, buffers, loss): a tensor that is zero in float64, such as the
running mean of a convolution over a BatchNorm's zero-mean output, is
rounding noise in float32.

With ReLU the rule as it stands judges luck. A ReLU input within rounding
of zero falls on the side of the kink the last bits say; with 16 values per
channel (2x2 maps, batch 4) that element is one of 16 terms of a BatchNorm
bias's gradient, so a decision taken the other way moves the gradient by
1e-2 to 1e-1 of the largest, and the loss not at all. Every float32
computation takes such decisions: wholestep's forward is as far from
float64 as torch's at every layer, and a BatchNorm normalized in float64
takes other decisions, not fewer (it fails regnet_x_400mf at 32x32,
mobilenet_v2 and inception_v3, which the float32 composite passes). Torch's
CPU kernels give the same bits in every batch order on these models
(BatchNorm's sums in double, convolutions image by image), so batch orders
never sample these decisions. Hence: without a kink (SiLU for ReLU) the rule as it stands;
with ReLU the rule against the float64 step taking the same decisions
(check_up_to_kinks). Both catch BatchNorm's output off by 1e-6.
"""


import copy

import pytest
import torch
import torchvision

import wholestep.torch as wst

nn = torch.nn
F = nn.functional

MODES = ("interpret", "three_graph", "single_graph")
LR = 0.01


def sgd_step(model, x, y):
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    model.train()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss.detach()


def snapshot(model, loss):
    """(kind, tensor) of every float parameter and buffer, and the loss."""
    out = {n: ("param", p.detach().double().clone()) for n, p in model.named_parameters()}
    out.update({n: ("buffer", b.detach().double().clone()) for n, b in model.named_buffers()
                if b.is_floating_point()})
    out["loss"] = ("loss", torch.as_tensor(loss).double().reshape(1))
    return out


def scales(truth):
    """Each tensor's max|b|, floored at 1e-3 of the largest of its kind."""
    top = {}
    for kind, t in truth.values():
        top[kind] = max(top.get(kind, 0.0), t.abs().max().item())
    return [max(t.abs().max().item(), 1e-3 * top[kind]) or 1.0 for kind, t in truth.values()]


def distances(snap, truth):
    return {name: (snap[name][1] - t).abs().max().item() / scale
            for (name, (_, t)), scale in zip(truth.items(), scales(truth))}


def orders(n):
    """Identity, reversed and two random orders of n rows."""
    gen = torch.Generator().manual_seed(7)
    return [torch.arange(n), torch.arange(n).flip(0)] + \
        [torch.randperm(n, generator=gen) for _ in range(2)]


def perturbed(x, seed):
    """x with each element times 1 + u, |u| <= 2^-24: moved by one rounding."""
    gen = torch.Generator().manual_seed(seed)
    u = (torch.rand(x.shape, generator=gen, dtype=torch.float64) * 2 - 1) * 2.0 ** -24
    return (x.double() * (1 + u)).float()


class Reference:
    """The float64 step (`truth`) and float32 eager torch's spread over
    four batch orders."""

    def __init__(self, model, x, y):
        m64 = copy.deepcopy(model).double()
        self.truth = snapshot(m64, sgd_step(m64, x.double(), y))
        self.spread = dict.fromkeys(self.truth, 0.0)
        for p in orders(x.shape[0]):
            m = copy.deepcopy(model)
            d = distances(snapshot(m, sgd_step(m, x[p], y[p])), self.truth)
            self.spread = {k: max(self.spread[k], d[k]) for k in d}

    def failures(self, snap):
        d = distances(snap, self.truth)
        return {k: (d[k], self.spread[k]) for k in d if d[k] > 2 * self.spread[k] + 1e-6}


def wholestep_step(model, x, y, mode):
    m = copy.deepcopy(model)
    opt = torch.optim.SGD(m.parameters(), lr=LR)
    loss = wst.compile_train_step(m, opt, F.cross_entropy, mode=mode)(x, y)
    return snapshot(m, loss)


def worst(fails):
    k = max(fails, key=lambda k: fails[k][0] / (2 * fails[k][1] + 1e-6))
    return f"{len(fails)} tensors beyond 2 x spread + 1e-6, worst {k}: {fails[k]}"


class MaskReLU(nn.Module):
    """ReLU that records its input and takes given decisions at given
    elements: `force` {flat index: passes}."""

    def __init__(self):
        super().__init__()
        self.force, self.seen = {}, None

    def forward(self, z):
        self.seen = z.detach()
        mask = (z > 0).to(z.dtype)
        if self.force:
            flat = mask.view(-1)
            for i, passes in self.force.items():
                flat[i] = float(passes)
        return z * mask


def masked(model):
    """A copy of `model` with MaskReLUs for its ReLUs (same tensor names)."""
    model = copy.deepcopy(model)
    relus = []

    def swap(module):
        for name, child in module.named_children():
            if isinstance(child, nn.ReLU):
                relus.append(MaskReLU())
                setattr(module, name, relus[-1])
            else:
                swap(child)
    swap(model)
    return model, relus


def decided_step(model, x, y, dtype, force=()):
    """One eager step of a masked copy in `dtype` with the decisions
    `force` [(relu, flat index, passes)]: (snapshot, pre-activations)."""
    m, relus = masked(model)
    m = m.to(dtype)
    for r, i, passes in force:
        relus[r].force[i] = passes
    snap = snapshot(m, sgd_step(m, x.to(dtype), y))
    return snap, [r.seen.double() for r in relus]


def check_up_to_kinks(model, x, y, moved=2):
    """The rule with the truth taking float32's decisions at ReLU's kink.
    The ReLU inputs within twice float32 torch's forward error of zero are
    ambiguous; each one's effect on the step is the float64 step with it
    taken the other way, and effects add (a flip moves values by |z|,
    nothing). Each float32 torch run (four batch orders, `moved` inputs
    moved by one rounding) is measured against the float64 step with its
    own decisions: the spread. A mode is judged against the float64 step
    with the decisions (up to three taken the other way, chosen greedily by
    their effects, then run) that bring it closest. Returns the ambiguous
    elements [(relu, flat index, side in float64)] and per mode (the
    decisions taken the other way, the failures)."""
    truth, z64 = decided_step(model, x, y, torch.float64)
    runs = []
    for p in orders(x.shape[0]):
        snap, z32 = decided_step(model, x[p], y[p], torch.float32)
        back = torch.argsort(p)
        runs.append((snap, [z[back] for z in z32]))
    for i in range(moved):
        runs.append(decided_step(model, perturbed(x, 100 + i), y, torch.float32))
    # The ambiguous elements: within twice float32's error of the kink.
    ambiguous = []
    for r, z in enumerate(z64):
        err = max((zs[r] - z).abs().max().item() for _, zs in runs)
        for i in torch.nonzero((z.abs() <= 2 * err).view(-1)).view(-1).tolist():
            ambiguous.append((r, i, bool(z.view(-1)[i] > 0)))
    assert len(ambiguous) <= 16, f"{len(ambiguous)} ReLU inputs within rounding of zero"

    def truth_with(flipped):
        return decided_step(model, x, y, torch.float64,
                            [(r, i, not side) for r, i, side in flipped])[0]

    effects = []
    for a in ambiguous:
        t = truth_with([a])
        effects.append({k: t[k][1] - truth[k][1] for k in truth})

    def shifted(combo):
        return {k: (kind, t + sum(effects[c][k] for c in combo)) for k, (kind, t) in truth.items()}

    spread = dict.fromkeys(truth, 0.0)
    for snap, zs in runs:
        own = [c for c, (r, i, side) in enumerate(ambiguous)
               if bool(zs[r].view(-1)[i] > 0) != side]
        d = distances(snap, shifted(own))
        spread = {k: max(spread[k], d[k]) for k in d}

    # The search runs on one flat vector: |a - b| times each element's
    # weight 1 / (scale * (2 * spread + 1e-6)), its maximum the worst ratio.
    names = list(truth)
    scale = {k: s for k, s in zip(names, scales(truth))}
    weight = torch.cat([torch.full((truth[k][1].numel(),),
                                   1 / (scale[k] * (2 * spread[k] + 1e-6))) for k in names])
    flat = lambda tensors: torch.cat([tensors[k].reshape(-1) for k in names])
    base = flat({k: t for k, (_, t) in truth.items()})
    shifts = [flat(e) for e in effects]

    verdicts = {}
    for mode in MODES:
        snap = wholestep_step(model, x, y, mode)
        gap = flat({k: t for k, (_, t) in snap.items()}) - base
        # Greedily, up to three decisions taken the other way.
        best, choice, rest = (gap.abs() * weight).max().item(), (), gap
        for _ in range(min(3, len(ambiguous))):
            ratio, c = min((((rest - shifts[c]).abs() * weight).max().item(), c)
                           for c in range(len(ambiguous)) if c not in choice)
            if ratio >= best:
                break
            best, choice, rest = ratio, choice + (c,), rest - shifts[c]
        ref = truth_with([ambiguous[c] for c in choice]) if choice else truth
        fails = {k: (d, spread[k]) for k, d in distances(snap, ref).items()
                 if d > 2 * spread[k] + 1e-6}
        verdicts[mode] = ([ambiguous[c] for c in choice], fails)
    return ambiguous, verdicts


# ---------------------------------------------------------------- one block


class Block(nn.Module):
    """Conv + BatchNorm + ReLU at 2x2 maps (batch 4: 16 values per
    channel), then a linear classifier."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.act = nn.ReLU()
        self.fc = nn.Linear(16 * 4, 10)

    def forward(self, x):
        return self.fc(self.act(self.bn(self.conv(x))).flatten(1))


def block_batch(seed=1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(4, 8, 2, 2, generator=gen), torch.randint(0, 10, (4,), generator=gen)


def block_model():
    torch.manual_seed(0)
    model = Block()
    with torch.no_grad():
        model.bn.bias.uniform_(-0.5, 0.5)
        model.bn.weight.uniform_(0.5, 1.5)
    return model


@pytest.mark.parametrize("mode", MODES)
def test_block_passes_the_rule(mode):
    model = block_model()
    x, y = block_batch()
    ref = Reference(model, x, y)
    fails = ref.failures(wholestep_step(model, x, y, mode))
    assert not fails, worst(fails)


def block_at_kink(ulps):
    """The block with BatchNorm's bias of channel 2 set so that one
    pre-activation (image 0, position (1, 1)) is within rounding of zero,
    and one input value moved by `ulps` float32 steps: the float64
    pre-activation moves by about 1e-8 per step."""
    model = block_model()
    x, y = block_batch()
    c, element = 2, (0, 2, 1, 1)
    with torch.no_grad():
        m64 = copy.deepcopy(model).double().train()
        z = m64.bn(m64.conv(x.double()))
        model.bn.bias[c] = -(z[element] - m64.bn.bias[c]).item()
        v = x[1, 3, 0, 0]
        for _ in range(abs(ulps)):
            v = torch.nextafter(v, torch.tensor(float("inf") if ulps > 0 else float("-inf")))
        x[1, 3, 0, 0] = v
        m64 = copy.deepcopy(model).double().train()
        z = m64.bn(m64.conv(x.double()))[element].item()
    return model, x, y, element, z


@pytest.mark.parametrize("ulps", [0, 3, 6])
def test_block_at_a_kink_takes_one_side(ulps):
    """At a kink, float32 computations differ by the side they take, and
    each side is one float64 step: every mode is within the rule of the
    float64 step that takes its side. (At 0 and 3 ulps float64 and torch's
    float32 pass the element and wholestep's float32 rounds it below zero:
    against float64 as it rounds, the convolution's weight is 4e3 x the
    rule's limit; at 6 ulps float64 and wholestep stop it and torch passes
    it.)"""
    model, x, y, element, z = block_at_kink(ulps)
    assert abs(z) < 1e-7
    ambiguous, verdicts = check_up_to_kinks(model, x, y)
    flat = torch.tensor(element) @ torch.tensor([16 * 4, 4, 2, 1])
    assert (0, flat.item(), z > 0) in ambiguous
    for mode, (flipped, fails) in verdicts.items():
        assert not fails, f"{mode} (decisions taken the other way {flipped}): {worst(fails)}"


# ---------------------------------------------------------------- a network


def shufflenet(act=None):
    torch.manual_seed(0)
    model = torchvision.models.shufflenet_v2_x0_5(num_classes=10)
    if act is not None:
        def swap(module):
            for name, child in module.named_children():
                if isinstance(child, nn.ReLU):
                    setattr(module, name, act())
                else:
                    swap(child)
        swap(model)
    return model


def images(n, size, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(n, 3, size, size, generator=gen),
            torch.randint(0, 10, (n,), generator=gen))


def test_shufflenet_relu_up_to_kink_decisions():
    """ShuffleNet v2 x0.5 at 64x64, batch 8 (4x4 maps in stage 3, 2x2 in
    stage 4) with ReLU. Against float64 as it rounds, every mode is 1.1e3 x
    the rule's limit: wholestep's float32 takes a ReLU input of stage3.3
    (2e-7 of its layer's largest; float32's error there 2e-6) below zero,
    which moves stage3.3.branch2.1.bias by 2.4e-2 and leaves the loss. Against the float64 step taking the same
    decisions, every mode is within the rule."""
    model = shufflenet()
    x, y = images(8, 64)
    ambiguous, verdicts = check_up_to_kinks(model, x, y)
    for mode, (flipped, fails) in verdicts.items():
        assert not fails, f"{mode} (decisions taken the other way {flipped}): {worst(fails)}"


def test_shufflenet_without_kinks_passes_batch_orders():
    """The same network with SiLU for ReLU: no kinks, and batch orders
    alone bound every mode."""
    model = shufflenet(nn.SiLU)
    x, y = images(8, 64)
    ref = Reference(model, x, y)
    for mode in MODES:
        fails = ref.failures(wholestep_step(model, x, y, mode))
        assert not fails, f"{mode}: {worst(fails)}"
