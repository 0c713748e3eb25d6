"""The torch tensors a compiled step or forward is bound to: each
parameter, buffer and optimizer state tensor is borrowed where torch keeps
it (no copy), and checked before each call to be still there."""

import operator

import torch

from . import _C
from ._ir import ir_dtype

Error = _C.Error

# What a parameter, buffer or optimizer state tensor may be: a float64
# model's step computes in float64 throughout (its products and
# convolutions on the reference kernels).
_PERSISTENT_DTYPES = ("f32", "f64", "i64", "bool")
_TORCH_DTYPES = {"f32": torch.float32, "f64": torch.float64, "i64": torch.int64,
                 "bool": torch.bool}


def _bound(name, t, what):
    """The _C.Tensor over torch tensor `t`'s storage, or an Error naming it."""
    _check_bindable(name, t, what)
    return _C.borrow(t.data_ptr(), ir_dtype(t.dtype), list(t.shape), t)


def _check_bindable(name, t, what):
    if not isinstance(t, torch.Tensor):
        raise Error(f"{what} '{name}' is a {type(t).__name__}, not a torch.Tensor")
    problems = []
    if t.device.type != "cpu":
        problems.append(f"on {t.device}")
    if ir_dtype(t.dtype) not in _PERSISTENT_DTYPES:
        problems.append(f"of dtype {t.dtype}")
    if not t.is_contiguous():
        problems.append("not contiguous")
    if t.requires_grad and t.grad_fn is not None:
        problems.append("the result of a differentiable computation")
    if problems:
        raise Error(f"{what} '{name}' {list(t.shape)} is {', '.join(problems)}: wholestep binds "
                    f"float32, float64, int64 or bool contiguous CPU tensors")


def _data_args(args, who):
    out = []
    for i, t in enumerate(args):
        if not isinstance(t, torch.Tensor):
            raise Error(f"{who}: argument {i} is a {type(t).__name__}, not a torch.Tensor")
        dtype = ir_dtype(t.dtype)
        if t.device.type != "cpu" or dtype is None or not t.is_contiguous():
            raise Error(f"{who}: argument {i} {list(t.shape)} of dtype {t.dtype} on {t.device} "
                        f"(contiguous: {t.is_contiguous()}); wholestep takes contiguous CPU "
                        f"tensors of float32, float64, int64 or bool")
        if t.numel() == 0:
            raise Error(f"{who}: argument {i} {list(t.shape)} is empty (a batch of 0 "
                        f"examples?): wholestep compiles steps over non-empty tensors; skip "
                        f"empty batches")
        out.append((t.data_ptr(), dtype, list(t.shape)))
    return out


def _model_inputs(params, buffers, trained, types, binding):
    """What the placeholders of a traced model are, in their order (the
    importer's `inputs`): the parameters (role param if their name is in
    `trained`, else buffer), the buffers, then data arguments of `types`.
    Records the bound tensors in `binding`."""
    binding.clear()
    inputs = []
    for name, t in params.items():
        role = "param" if name in trained else "buffer"
        inputs.append(("persistent", role, name, _bound(name, t.detach(), "parameter")))
        binding.add(t)
    for name, t in buffers.items():
        inputs.append(("persistent", "buffer", name, _bound(name, t, "buffer")))
        binding.add(t)
    for dtype, shape in types:
        inputs.append(("data", dtype, list(shape)))
    return inputs


def _examples(types):
    return [torch.empty(shape, dtype=_TORCH_DTYPES[dtype]) for dtype, shape in types]


class _Binding:
    """The torch tensors a compiled step is bound to, to check before each
    step that they are still where they were (load_state_dict on the
    optimizer, or `p.data = ...`, replaces them)."""

    def __init__(self):
        self.tensors = []
        self.ptrs = []

    def clear(self):
        self.tensors.clear()
        self.ptrs.clear()

    def add(self, t):
        self.tensors.append(t)
        self.ptrs.append(t.data_ptr())

    def valid(self, current):
        """Whether `current` are the bound tensors, each where it was (the
        loops in C: this runs before every call)."""
        return (len(current) == len(self.tensors) and all(map(operator.is_, current, self.tensors))
                and [t.data_ptr() for t in current] == self.ptrs)
