"""One op's value and gradients through wholestep.torch against float64
torch, within float32 torch's own error: the check the reach tests share."""

import torch

import wholestep.torch as wst

nn = torch.nn


class Probe(nn.Module):
    """fn(*tensors) with the floating tensors as parameters: its loss is a
    weighted sum of the result, so each parameter's gradient is the
    result's weighted back-propagation."""

    def __init__(self, fn, tensors):
        super().__init__()
        self.fn = fn
        self.params = nn.ParameterList(nn.Parameter(t.clone()) for t in tensors
                                       if t.is_floating_point())
        self.indices = 0
        for t in tensors:
            if not t.is_floating_point():
                self.register_buffer(f"index{self.indices}", t.clone())
                self.indices += 1
        self.order = [t.is_floating_point() for t in tensors]

    def forward(self, weights):
        # by attribute: the trace binds its own tensors to the attributes
        floats = iter(self.params)
        others = iter(getattr(self, f"index{i}") for i in range(self.indices))
        out = self.fn(*[next(floats) if f else next(others) for f in self.order])
        return (out * weights).sum()


def close(got, f32, f64, ulps=8):
    """got as near float64 torch as float32 torch is, or within `ulps` ulps
    of its largest element."""
    ulp = f64.abs().max().clamp_min(1e-30) * 2.0 ** -23
    allowed = max(ulps * ulp.item(), 2 * (f32.double() - f64).abs().max().item())
    return (got.double() - f64).abs().max().item() <= allowed


def check(fn, *tensors, ulps=8):
    """fn's value and gradients through wholestep against float64 torch
    (the gradients within `ulps` ulps, or float32 torch's own error)."""
    torch.manual_seed(0)
    out_shape = fn(*tensors).shape
    weights = torch.randn(out_shape)
    refs = []
    for dtype in (torch.float32, torch.float64):
        probe = Probe(fn, [t.to(dtype) if t.is_floating_point() else t for t in tensors])
        loss = probe(weights.to(dtype))
        loss.backward()
        refs.append((loss.detach(), [p.grad for p in probe.params]))
    probe = Probe(fn, tensors)
    step = wst.compile_train_step(probe, torch.optim.SGD(probe.parameters(), lr=0.0),
                                  lambda loss, _: loss, mode="three_graph")
    loss = step(weights, torch.zeros(1))
    # The loss is a sum whose terms may cancel: its error is bounded by the
    # sum of their magnitudes, not by its own.
    magnitude = (fn(*[t.double() if t.is_floating_point() else t for t in tensors]).abs()
                 * weights.double().abs()).sum()
    assert abs(float(loss) - float(refs[1][0])) <= max(
        16 * 2.0 ** -23 * float(magnitude), 2 * abs(float(refs[0][0]) - float(refs[1][0]))), \
        (float(loss), float(refs[1][0]))
    grads = step.gradients()
    for i, (g32, g64) in enumerate(zip(refs[0][1], refs[1][1])):
        got = grads[f"params.{i}"]
        assert close(got, g32, g64, ulps), (i, (got.double() - g64).abs().max())


def randoms(seed):
    """r(*shape): random inputs from a generator of `seed`, the same in
    every run."""
    gen = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=gen)
    return r
