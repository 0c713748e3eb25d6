"""Torch functions whose C++ decomposition fake tensors cannot trace in
this torch, rewritten in Python with the same maths while a model is
traced (`traceable()`, entered by _capture.trace).

cross_entropy with label_smoothing: torch's C++ composite zeroes the
ignored positions' smoothing term with masked_fill_, which makes a real
0-d tensor inside fake mode ("non-Fake Tensor inputs"); here it is a
torch.where, and the rest is torch's formula term for term.

Recurrent layers (nn.LSTM, nn.GRU, nn.RNN) keep a list of their weights,
filled when they are made: the trace binds its own tensors to the weights'
attributes, so while it runs the list is read from them; and oneDNN's
fused recurrent op is off, so the layers decompose into products and
gates the importer translates.

repeat_interleave with a number of repeats: torch makes a tensor of
repeats and takes the tensor overload, whose output shape fake tensors
cannot know (mvit_v1_b's positional encoding); here it is an expand and a
flatten, the same elements in the same order.

torch.arange with a float bound and no dtype: this torch's fake tensors
give it int64 where eager gives the default float dtype (torch.arange(3.0)
is float32); while tracing the dtype is passed as eager would choose it.

F.one_hot: torch reads the smallest and largest class from the data to
check them; here they are wholestep::check ops (below), so a class out of
range fails the step with torch's message. Without num_classes the number
of columns is a value of the data, refused.

BatchNorm with momentum=None (a cumulative moving average): torch reads
the count of batches as a Python number to make the factor, 1 / count;
here the factor is a tensor of the count, the layer's own batch norm runs
with momentum 1 (its running statistics become the batch's, averaged over
the ranks in data-parallel training) and the running statistics are then
the old ones weighted 1 - factor plus the batch's weighted factor, as
torch's kernel weighs them.

F.ctc_loss with lengths as lists: torch makes tensors of them inside its
C++ call, which fake mode cannot trace; here they are made first, as
tensors the trace records as constants, and torch takes its tensor
overload with the same arguments.

F.gaussian_nll_loss (nn.GaussianNLLLoss): torch tests the variance for a
negative entry in Python, a value fake tensors do not hold; here the test
is wholestep::check, an op of the trace the importer makes the IR's check
(the step fails with torch's message when an entry is negative), and the
clamp torch makes in place under no_grad is the clamped value with the
variance's gradient passing straight through, as in torch.

torch.quantile, torch.nanquantile and torch.cdist: _traceable_math.py.
torch.distributions' argument validation: _traceable_distributions.py.
Packed sequences through recurrent layers: _traceable_packed.py.

What a trace cannot follow and would follow wrongly without a word (a
custom torch.autograd.Function's backward, tensor hooks, assigning .data,
Python's random numbers, torch.manual_seed) is refused:
_traceable_guards.py.

A real tensor the traced code reads that is not one of the model's
parameters or buffers (class weights kept in a plain attribute or a
closure): this torch's fake mode refuses it; the trace has recorded it as a
constant (as a tensor made inside the forward), so fake mode is given its
fake copy. A tensor that requires gradients is refused instead: it would be
a constant, never trained.
"""

import contextlib
import math

import torch
from torch._subclasses import fake_tensor
from torch.utils._pytree import tree_map

from . import (_C, _traceable_distributions, _traceable_guards, _traceable_math,
               _traceable_packed)
from ._ir import TABLE, TRACED

_MEAN, _SUM = 1, 2  # torch's reduction enum: 0 none, 1 mean, 2 sum

# wholestep::check(x, ok, message): x, once every element of the bool ok is
# true; else an error with message. In a trace, the IR's op check.
_LIBRARY = torch.library.Library("wholestep", "DEF")
_LIBRARY.define("check(Tensor x, Tensor ok, str message) -> Tensor")


def _check_eager(x, ok, message):
    if not bool(ok.all()):
        raise ValueError(message)
    return x.clone()


class _Check(torch.autograd.Function):
    """The check's gradient is x's."""

    @staticmethod
    def forward(ctx, x, ok, message):
        below = torch._C._AutoDispatchBelowAutograd()  # the kernels, not this again
        try:
            return torch.ops.wholestep.check(x, ok, message)
        finally:
            del below

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None


_LIBRARY.impl("check", _check_eager, "CPU")
_LIBRARY.impl("check", lambda x, ok, message: torch.empty_like(x), "Meta")
_LIBRARY.impl("check", _Check.apply, "Autograd")
TABLE["wholestep.check.default"] = lambda b, node, x, ok, message: b.op("check", [x, ok],
                                                                         message=message)

# wholestep::straight_through(value, via): value, its gradient sent whole to
# via (of value's shape), none to value: a rewrite's value computed as torch
# computes it, its gradient by torch's backward formula. In a trace, the
# IR's op straight_through.
_LIBRARY.define("straight_through(Tensor value, Tensor via) -> Tensor")


class _StraightThrough(torch.autograd.Function):
    @staticmethod
    def forward(ctx, value, via):
        below = torch._C._AutoDispatchBelowAutograd()
        try:
            return torch.ops.wholestep.straight_through(value, via)
        finally:
            del below

    @staticmethod
    def backward(ctx, grad):
        return None, grad


_LIBRARY.impl("straight_through", lambda value, via: value.clone(), "CPU")
_LIBRARY.impl("straight_through", lambda value, via: torch.empty_like(value), "Meta")
_LIBRARY.impl("straight_through", _StraightThrough.apply, "Autograd")
TABLE["wholestep.straight_through.default"] = \
    lambda b, node, value, via: b.op("straight_through", [value, via])


def _cross_entropy_loss(original):
    def cross_entropy_loss(input, target, weight=None, reduction=_MEAN, ignore_index=-100,
                           label_smoothing=0.0):
        if label_smoothing <= 0.0 or target.is_floating_point():
            return original(input, target, weight, reduction, ignore_index, label_smoothing)
        class_dim = 0 if input.dim() == 1 else 1
        classes = input.shape[class_dim]
        logp = torch.log_softmax(input, class_dim)
        nll = torch._C._nn.nll_loss_nd(logp, target, weight, reduction, ignore_index)
        ignored = target == ignore_index
        if weight is not None:
            shape = [1] * logp.dim()
            shape[class_dim] = classes
            smooth = -(logp * weight.view(shape)).sum(class_dim)
        else:
            smooth = -logp.sum(class_dim)
        smooth = torch.where(ignored, torch.zeros_like(smooth), smooth)
        if reduction == _MEAN:
            if weight is not None:
                kept = torch.where(ignored, torch.zeros_like(target), target)
                picked = weight.gather(0, kept.flatten()).view_as(target)
                smooth = smooth.sum() / torch.where(ignored, torch.zeros_like(picked), picked).sum()
            else:
                smooth = smooth.sum() / (~ignored).sum()
        elif reduction == _SUM:
            smooth = smooth.sum()
        return (1 - label_smoothing) * nll + smooth * (label_smoothing / classes)
    return cross_entropy_loss


def _repeat_interleave(original):
    def repeat_interleave(input, repeats=None, dim=None, **kwargs):
        if not isinstance(repeats, int) or isinstance(repeats, bool) or kwargs:
            args = (input,) if repeats is None else (input, repeats)
            return original(*args, **({} if dim is None else {"dim": dim}), **kwargs)
        x = input.flatten() if dim is None else input
        d = 0 if dim is None else dim % x.dim()
        shape = list(x.shape)
        return x.unsqueeze(d + 1).expand(*shape[:d + 1], repeats, *shape[d + 1:]).flatten(d, d + 1)
    return repeat_interleave


def _arange(original):
    def arange(*args, **kwargs):
        bounds = [a for a in args if not isinstance(a, torch.Tensor)]
        if kwargs.get("dtype") is None and any(isinstance(a, float) for a in bounds):
            kwargs["dtype"] = torch.get_default_dtype()
        return original(*args, **kwargs)
    return arange


TRACED.append(("`F.one_hot` (rewritten while tracing)", ["arange.default", "eq.Tensor",
                                                        "check (wholestep)"],
               "`num_classes` given; a class out of range fails the step with torch's message"))


def _one_hot(tensor, num_classes=-1):
    if num_classes < 0:
        raise _C.Error("F.one_hot without num_classes: the number of columns would be the "
                       "largest class in the data, a value wholestep does not read while "
                       "tracing; pass num_classes")
    if tensor.dtype != torch.int64:
        raise _C.Error(f"F.one_hot of a {tensor.dtype} tensor: one_hot is only applicable to "
                       f"index tensors (int64), as in torch")
    tensor = torch.ops.wholestep.check(tensor, tensor >= 0, "Class values must be non-negative.")
    tensor = torch.ops.wholestep.check(tensor, tensor < num_classes,
                                       "Class values must be smaller than num_classes.")
    return (tensor.unsqueeze(-1) == torch.arange(num_classes)).to(torch.int64)


TRACED.append(("`F.ctc_loss` with lengths as lists (rewritten while tracing)",
               ["_ctc_loss.Tensor", "lift_fresh_copy.default"],
               "lengths given as lists are constants of the step, read when it is traced; "
               "lengths that change from batch to batch are step arguments (tensors)"))


def _ctc_loss(original):
    def ctc_loss(log_probs, targets, input_lengths, target_lengths, *args, **kwargs):
        def tensor(lengths):
            if isinstance(lengths, torch.Tensor):
                return lengths
            return torch.tensor(list(lengths), dtype=torch.int64)
        return original(log_probs, targets, tensor(input_lengths), tensor(target_lengths),
                        *args, **kwargs)
    return ctc_loss


TRACED.append(("`nn.BatchNorm*d(momentum=None)` (rewritten while tracing)",
               ["native_batch_norm.default", "copy_.default"],
               "the cumulative average's factor 1 / num_batches_tracked"))


def _batch_norm_forward(original):
    def forward(self, input):
        if self.momentum is not None or not (self.training and self.track_running_stats) \
                or self.num_batches_tracked is None:
            return original(self, input)
        self._check_input_dim(input)
        self.num_batches_tracked.add_(1)
        factor = 1.0 / self.num_batches_tracked.to(self.running_mean.dtype)
        old_mean, old_var = self.running_mean.clone(), self.running_var.clone()
        out = torch.nn.functional.batch_norm(input, self.running_mean, self.running_var,
                                             self.weight, self.bias, True, 1.0, self.eps)
        with torch.no_grad():
            self.running_mean.copy_(self.running_mean * factor + old_mean * (1 - factor))
            self.running_var.copy_(self.running_var * factor + old_var * (1 - factor))
        return out
    return forward


BATCH_NORM_FORWARD = torch.nn.modules.batchnorm._BatchNorm.forward


def _fake_dispatch(original):
    def dispatch(self, func, types, args=(), kwargs=None):
        def fake(t):
            if not isinstance(t, torch.Tensor) or isinstance(t, fake_tensor.FakeTensor):
                return t
            if t.requires_grad:
                raise _C.Error(f"a tensor that requires gradients ({list(t.shape)}) reaches "
                               f"{func} without being one of the model's parameters (a "
                               f"parameter kept aside in a list or a closure): wholestep would "
                               f"make it a constant that is never trained; read it through "
                               f"its module's attribute")
            return self.from_tensor(t)

        if func not in self.lift_fns:
            args, kwargs = tree_map(fake, args), tree_map(fake, kwargs or {})
        if func in _CTC_LOSSES:
            return _ctc_loss_shapes(lambda shape, dtype: original(
                self, torch.ops.aten.empty.memory_format, types, (shape,),
                {"dtype": dtype, "device": args[0].device}), *args)
        return original(self, func, types, args, kwargs)
    return dispatch


# torch's ctc_loss has no meta kernel: fake mode would run the CPU one on
# made-up lengths (and fail, or worse). Its outputs' shapes: the losses
# [N]; log_alpha [N, T, 2 S + 1], S the longest target (at most the
# targets' columns, or all of a 1-d targets), which only torch's own
# backward reads.
_CTC_LOSSES = (torch.ops.aten._ctc_loss.Tensor, torch.ops.aten._ctc_loss.default)


def _ctc_loss_shapes(empty, log_probs, targets, *args):
    frames, batch = log_probs.shape[0], log_probs.shape[1]
    longest = targets.shape[1] if targets.dim() == 2 else targets.numel()
    return (empty([batch], log_probs.dtype),
            empty([batch, frames, 2 * longest + 1], log_probs.dtype))


TRACED.append(("`F.gaussian_nll_loss`, `nn.GaussianNLLLoss` (rewritten while tracing)",
               ["log.default", "div.Tensor", "clamp.default", "check (wholestep)"],
               "a negative variance fails the step, as torch raises"))


def _gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    if var.size() != input.size():
        if input.size()[:-1] == var.size():
            var = torch.unsqueeze(var, -1)
        elif input.size()[:-1] != var.size()[:-1] or var.size(-1) != 1:
            raise ValueError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not valid")
    var = torch.ops.wholestep.check(var, ~(var < 0), "var has negative entry/entries")
    var = var + (var.clamp(min=eps) - var).detach()  # var itself where var >= eps
    loss = 0.5 * (torch.log(var) + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    if reduction == "mean":
        return loss.mean()
    return loss.sum() if reduction == "sum" else loss


def _flat_weights(self):
    return [getattr(self, name) if hasattr(self, name) else None
            for name in self._flat_weights_names]


def _keep_flat_weights(self, value):
    pass  # the module's own list stays as it was, for its eager calls


@contextlib.contextmanager
def traceable():
    cross_entropy = torch._C._nn.cross_entropy_loss
    dispatch = fake_tensor.FakeTensorMode.__torch_dispatch__
    rnn = torch.nn.RNNBase
    batch_norm = torch.nn.modules.batchnorm._BatchNorm
    repeat, tensor_repeat = torch.repeat_interleave, torch.Tensor.repeat_interleave
    arange, one_hot, nn_one_hot = torch.arange, torch.nn.functional.one_hot, torch._C._nn.one_hot
    ctc = torch.ctc_loss
    gaussian_nll = torch.nn.functional.gaussian_nll_loss
    rewritten = _traceable_math.enter()
    validations = _traceable_distributions.enter()
    packing = _traceable_packed.enter()
    guards = _traceable_guards.enter()
    torch.nn.functional.gaussian_nll_loss = _gaussian_nll_loss
    torch._C._nn.cross_entropy_loss = _cross_entropy_loss(cross_entropy)
    torch.repeat_interleave = _repeat_interleave(repeat)
    torch.Tensor.repeat_interleave = _repeat_interleave(tensor_repeat)
    torch.arange = _arange(arange)
    torch.ctc_loss = _ctc_loss(ctc)
    torch.nn.functional.one_hot = torch._C._nn.one_hot = _one_hot
    fake_tensor.FakeTensorMode.__torch_dispatch__ = _fake_dispatch(dispatch)
    rnn._flat_weights = property(_flat_weights, _keep_flat_weights)
    batch_norm.forward = _batch_norm_forward(BATCH_NORM_FORWARD)
    try:
        with torch.backends.mkldnn.flags(enabled=False):
            yield
    finally:
        torch._C._nn.cross_entropy_loss = cross_entropy
        torch.repeat_interleave, torch.Tensor.repeat_interleave = repeat, tensor_repeat
        torch.arange = arange
        torch.ctc_loss = ctc
        torch.nn.functional.gaussian_nll_loss = gaussian_nll
        _traceable_guards.leave(guards)
        _traceable_math.leave(rewritten)
        _traceable_distributions.leave(validations)
        _traceable_packed.leave(packing)
        torch.nn.functional.one_hot, torch._C._nn.one_hot = one_hot, nn_one_hot
        fake_tensor.FakeTensorMode.__torch_dispatch__ = dispatch
        del rnn._flat_weights
        batch_norm.forward = BATCH_NORM_FORWARD
