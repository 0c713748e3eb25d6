"""Float64 eager torch made exact where it rounds to float32 on the way.

wst.check's truth is a float64 eager step, and a float64 check judges
wholestep within float64 torch's spread (about 1e-16 relative). Two of
torch's float64 gradients are float32-accurate only (found by comparing
every activation's float64 gradient with its formula; the others agree
to a rounding): Hardsigmoid's backward multiplies by ``1.0f / 6.0f``
(3e-8 off), and CELU's takes ``1 / alpha`` rounded to float32 (8e-8 off at
alpha 0.7). A float64 truth that is 1e-8 off makes every model with a
Hardsigmoid (mobilenet_v3, lraspp) fail a float64 check that wholestep's
exact gradient passes, and would pass a step rounded the same way.

``exact_float64_gradients()`` is a context in which ``F.hardsigmoid`` and
``F.celu`` (what ``nn.Hardsigmoid`` and ``nn.CELU`` call) compute torch's
own forward and the exact float64 gradient. wst.check runs its float64
eager steps in it; nothing else does.
"""

import contextlib

import torch
import torch.nn.functional as F


class _Hardsigmoid(torch.autograd.Function):
    """relu6(x + 3) / 6, its gradient g / 6 where -3 < x < 3 (torch's rule
    at the edges and for NaN: 0)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward((x > -3) & (x < 3))
        return torch._C._nn.hardsigmoid(x)

    @staticmethod
    def backward(ctx, g):
        (inside,) = ctx.saved_tensors
        return torch.where(inside, g / 6, torch.zeros_like(g))


class _Celu(torch.autograd.Function):
    """max(0, x) + min(0, alpha (exp(x / alpha) - 1)), its gradient g where
    x > 0, else g exp(x / alpha) (torch's rule at 0: the second)."""

    @staticmethod
    def forward(ctx, x, alpha):
        ctx.save_for_backward(torch.where(x > 0, torch.ones_like(x), torch.exp(x / alpha)))
        return torch.celu(x, alpha)

    @staticmethod
    def backward(ctx, g):
        (slope,) = ctx.saved_tensors
        return g * slope, None


def _hardsigmoid(input, inplace=False):
    if input.dtype != torch.float64:
        return _TORCH["hardsigmoid"](input, inplace)
    y = _Hardsigmoid.apply(input)
    return input.copy_(y) if inplace else y


def _celu(input, alpha=1.0, inplace=False):
    if input.dtype != torch.float64:
        return _TORCH["celu"](input, alpha, inplace)
    y = _Celu.apply(input, float(alpha))
    return input.copy_(y) if inplace else y


_TORCH = {"hardsigmoid": F.hardsigmoid, "celu": F.celu}
_EXACT = {"hardsigmoid": _hardsigmoid, "celu": _celu}


@contextlib.contextmanager
def exact_float64_gradients():
    """F.hardsigmoid and F.celu with exact float64 gradients inside."""
    saved = {name: getattr(F, name) for name in _EXACT}
    try:
        for name, fn in _EXACT.items():
            setattr(F, name, fn)
        yield
    finally:
        for name, fn in saved.items():
            setattr(F, name, fn)
