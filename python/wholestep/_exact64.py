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

Its log_softmax backward, g - p sum(g), takes 1 - p from p: at a
saturated softmax (p within 1e-12 of 1: a confident classifier) the
gradient keeps 4 digits, the same in every batch order.

``exact_float64_gradients()`` is a context in which ``F.hardsigmoid``,
``F.celu`` (what ``nn.Hardsigmoid`` and ``nn.CELU`` call),
``F.log_softmax`` and ``F.cross_entropy`` (class targets, no label
smoothing: nll_loss of log_softmax, as torch defines it) compute torch's
own forward and the exact float64 gradient. wst.check runs its float64
eager steps in it; nothing else does.

A float64 run of a float32 program also meets the program's own float32
constants: class weights in a closure of the loss function
(``F.cross_entropy(logits, y, weight=w)``), or in a plain attribute of a
module. Torch refuses to mix them with float64 values in most ops
("expected scalar type Double but found Float"), so without help neither
the float64 truth nor a float64 step of such a program can be run.
``float64_constants(model)`` turns a float64 copy's plain tensor
attributes to float64, and ``float64_operands(loss_fn)`` is the loss
function reading every float32 tensor it hands to a torch function as
float64 (the same numbers, exactly), the in-place ones excepted. Both sides
of a float64 comparison run the same converted program.
"""

import contextlib

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map


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
    x > 0, else g exp(x / alpha) (torch's rule at 0: the second), computed
    from x in the backward so that a gradient taken with create_graph (a
    gradient penalty) is differentiated again through it."""

    @staticmethod
    def forward(ctx, x, alpha):
        ctx.save_for_backward(x)
        ctx.alpha = alpha
        return torch.celu(x, alpha)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.where(x > 0, torch.ones_like(x), torch.exp(x / ctx.alpha)), None


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


def _exclusive_sums(t):
    """Along the last dim, each element's sum of the others, without the
    cancellation of total - t: the sum before it plus the sum after it."""
    zero = torch.zeros_like(t[..., :1])
    before = torch.cat([zero, t.cumsum(-1)[..., :-1]], -1)
    after = torch.cat([t.flip(-1).cumsum(-1).flip(-1)[..., 1:], zero], -1)
    return before + after


class _LogSoftmax(torch.autograd.Function):
    """log_softmax, its gradient g_i - p_i sum(g) as g_i (1 - p_i) -
    p_i sum_{j != i} g_j, 1 - p_i the sum of the other probabilities
    (torch takes 1 - p_i from p_i: at a saturated softmax, p_i within
    1e-12 of 1, the gradient keeps 4 digits)."""

    @staticmethod
    def forward(ctx, x, dim):
        y = torch.log_softmax(x, dim)
        ctx.save_for_backward(y)
        ctx.dim = dim
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        p, g = y.exp().movedim(ctx.dim, -1), g.movedim(ctx.dim, -1)
        d = g * _exclusive_sums(p) - p * _exclusive_sums(g)
        return d.movedim(-1, ctx.dim), None


def _log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    if input.dtype != torch.float64 or dtype not in (None, torch.float64) or dim is None:
        return _TORCH["log_softmax"](input, dim, _stacklevel, dtype)
    return _LogSoftmax.apply(input, dim % max(input.dim(), 1))


def _cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                   reduce=None, reduction="mean", label_smoothing=0.0):
    """torch's own: nll_loss of log_softmax over dim 1 for class targets
    (label smoothing and probability targets: torch's, as they are)."""
    if input.dtype != torch.float64 or target.is_floating_point() or label_smoothing \
            or size_average is not None or reduce is not None or input.dim() < 1:
        return _TORCH["cross_entropy"](input, target, weight, size_average, ignore_index,
                                       reduce, reduction, label_smoothing)
    logp = _LogSoftmax.apply(input, 1 if input.dim() > 1 else 0)
    return F.nll_loss(logp, target, weight, ignore_index=ignore_index, reduction=reduction)


_TORCH = {"hardsigmoid": F.hardsigmoid, "celu": F.celu, "log_softmax": F.log_softmax,
          "cross_entropy": F.cross_entropy}
_EXACT = {"hardsigmoid": _hardsigmoid, "celu": _celu, "log_softmax": _log_softmax,
          "cross_entropy": _cross_entropy}


@contextlib.contextmanager
def exact_float64_gradients():
    """F.hardsigmoid, F.celu, F.log_softmax and F.cross_entropy with exact
    float64 gradients inside."""
    saved = {name: getattr(F, name) for name in _EXACT}
    try:
        for name, fn in _EXACT.items():
            setattr(F, name, fn)
        yield
    finally:
        for name, fn in saved.items():
            setattr(F, name, fn)


def _writes(func, kwargs):
    """Whether a torch function writes into an operand (an in-place
    method, an item assignment, out=) or is an attribute read: its float32
    operands stay what they are."""
    name = getattr(func, "__name__", "")
    if "out" in kwargs:
        return True
    if name.startswith("__") and name.endswith("__"):
        return name in ("__get__", "__set__", "__setitem__", "__delitem__") or (
            name.startswith("__i") and name[3:-2] in _IN_PLACE_DUNDERS)
    return name.endswith("_")


_IN_PLACE_DUNDERS = {"add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul",
                     "and", "or", "xor", "lshift", "rshift"}


def _as_float64(a):
    return a.to(torch.float64) if isinstance(a, torch.Tensor) and a.dtype == torch.float32 \
        else a


class _Float64Operands(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not _writes(func, kwargs):
            args, kwargs = tree_map(_as_float64, (args, kwargs))
        return func(*args, **kwargs)


def float64_operands(loss_fn):
    """`loss_fn` reading each float32 tensor it passes to a torch function
    as float64 (its float32 constants: class weights, pos_weight)."""
    def loss(*args, **kwargs):
        with _Float64Operands():
            return loss_fn(*args, **kwargs)
    return loss


def float64_constants(model):
    """Turns the float32 tensors `model`'s modules hold in plain
    attributes (neither parameters nor buffers) to float64, in place: for
    a float64 copy of a model."""
    for module in model.modules():
        for name, value in list(vars(module).items()):
            if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
                setattr(module, name, value.to(torch.float64))


@contextlib.contextmanager
def contiguous_gradients(model):
    """Every leaf module's output gradient made contiguous before the
    module's backward reads it. Torch 1.13's BatchNorm backward reads the
    gradient a transpose and an expand leave (a tokens-then-mean head over
    a batch of one) in the wrong layout: with this, its gradients are right,
    and a truth that changes under it is torch's bug."""
    def contiguous(mod, inp, out):
        if torch.is_tensor(out) and out.requires_grad:
            out.register_hook(lambda g: g.contiguous())  # the output itself unchanged

    hooks = [m.register_forward_hook(contiguous) for m in model.modules()
             if not list(m.children())]
    try:
        yield
    finally:
        for h in hooks:
            h.remove()
