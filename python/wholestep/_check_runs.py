"""The runs wst.check compares (_check.py judges them): copies of a model
and its optimizer, one eager torch step or one compiled step on them, and
what the step leaves (snapshot); and whether float64 torch agrees with
itself on the model's gradients."""

import contextlib
import copy
import math

import torch

from . import _guards
from ._exact64 import (contiguous_gradients, exact_float64_gradients, float64_constants,
                       float64_operands)

_ORDER_SEED = 7


def _float_dtype(model):
    return next((t.dtype for t in list(model.parameters()) + list(model.buffers())
                 if t.is_floating_point()), torch.float32)


# ---------------------------------------------------------------- copies


def clone_optimizer(opt, model, new_model):
    """An optimizer of `opt`'s class over `new_model`'s parameters (those
    with the names `opt`'s parameters have in `model`), with `opt`'s
    groups, hyperparameters and state (copied, cast to the new parameters'
    dtype as torch's load_state_dict casts it)."""
    names = {id(p): n for n, p in model.named_parameters()}
    new_params = dict(new_model.named_parameters())
    groups = []
    for gi, g in enumerate(opt.param_groups):
        params = []
        for p in g["params"]:
            if id(p) not in names:
                raise ValueError(f"param group {gi}: a parameter {list(p.shape)} of the "
                                 f"optimizer is not a parameter of the model")
            params.append(new_params[names[id(p)]])
        groups.append(dict({k: v for k, v in g.items() if k != "params"}, params=params))
    try:
        new = type(opt)(groups, **opt.defaults)
    except TypeError:  # a constructor that does not take its defaults back
        new = type(opt)(groups)
    new.load_state_dict(opt.state_dict())  # deep-copies the state
    return new


def _copy_batch(batch, dtype=None, perm=None):
    out = []
    for t in batch:
        if perm is not None and t.dim() > 0:
            t = t[perm]
        t = t.clone()
        if dtype is not None and t.is_floating_point():
            t = t.to(dtype)
        out.append(t.contiguous())
    return out


@contextlib.contextmanager
def _own_random_state():
    with torch.random.fork_rng(devices=[]):
        yield


# ---------------------------------------------------------------- one step


def snapshot(model, opt, loss, copy=True):
    """{name: (kind, tensor)} of what a step leaves: parameters, buffers,
    optimizer state tensors (`<parameter>.<slot>`, kind `state.<slot>`) and
    the loss; copies, or (`copy` False, for a run's own model and optimizer,
    discarded after) the tensors themselves: a model of 600M parameters in
    float64 fits beside its gradients once, not twice."""
    keep = (lambda t: t.clone()) if copy else (lambda t: t)
    out = {"loss": ("loss", keep(torch.as_tensor(loss).detach()))}
    names = {}
    for n, p in model.named_parameters():
        names[id(p)] = n
        out[n] = ("parameter", keep(p.detach()))
    for n, b in model.named_buffers():
        out[n] = ("buffer", keep(b.detach()))
    for p, st in opt.state.items():
        for k, v in st.items():
            if torch.is_tensor(v) and id(p) in names:  # (SGD's momentum of a sparse gradient
                # is sparse in eager torch: compared as the dense tensor it stands for)
                v = v.detach().to_dense() if v.is_sparse else v.detach()
                out[f"{names[id(p)]}.{k}"] = (f"state.{k}", keep(v))
    return out


def eager_step(model, opt, loss_fn, batch, num_inputs, loop=None):
    """One eager torch step as compile_train_step's `loop` options
    (LOOP_OPTIONS) make it: `accumulate` backward passes on the batch,
    the gradients clipped by `clip_grad_norm`, the update; the last loss,
    computed before the update."""
    loop = loop or {}
    opt.zero_grad(set_to_none=True)
    for _ in range(loop.get("accumulate", 1)):
        loss = loss_fn(model(*batch[:num_inputs]), *batch[num_inputs:])
        loss.backward()
    if loop.get("clip_grad_norm") is not None:
        params = [p for g in opt.param_groups for p in g["params"]]
        torch.nn.utils.clip_grad_norm_(params, loop["clip_grad_norm"],
                                       error_if_nonfinite=loop.get("error_if_nonfinite", False))
    opt.step()
    return loss.detach()


def _roundings(t, gen, roundings):
    """Float64 u of t's shape, uniform within `roundings` roundings of t's
    dtype (|u| <= 2^-24 each for float32, 2^-53 for float64)."""
    unit = roundings * (2.0 ** -53 if t.dtype == torch.float64 else 2.0 ** -24)
    return (torch.rand(t.shape, generator=gen, dtype=torch.float64) * 2 - 1) * unit


def _perturb(t, gen, roundings=1):
    """`t` times (1 + u), u within `roundings` roundings (_roundings)."""
    if not t.is_floating_point() or not t.numel():
        return t
    u = _roundings(t, gen, roundings)
    if t.dtype == torch.float64:  # t + t u, one rounding from t
        return t + t * u
    return (t.double() * (1 + u)).to(t.dtype)


def perturb_state(model, gen):
    """Moves every parameter and buffer of `model` by one rounding, in
    place (_perturb)."""
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            t.copy_(_perturb(t, gen))


# How far perturbed_activations moves each layer's outputs, in roundings: a
# layer's sound evaluations differ by a few (a sum of n terms by up to n),
# and a single rounding of 2^-53 leaves most values as they were.
ACTIVATION_ROUNDINGS = 4


def _perturbed_outputs(output, gen):
    if torch.is_tensor(output):
        return _perturb(output, gen, ACTIVATION_ROUNDINGS)
    if isinstance(output, tuple):
        return tuple(_perturbed_outputs(o, gen) for o in output)
    return output


@contextlib.contextmanager
def _leaf_forward_hooks(model, hook):
    """`hook` a forward hook of every leaf module of `model` while the
    block runs."""
    hooks = [m.register_forward_hook(hook)
             for m in model.modules() if not any(True for _ in m.children())]
    try:
        yield
    finally:
        for h in hooks:
            h.remove()


@contextlib.contextmanager
def perturbed_activations(model, gen):
    """Every leaf module's floating-point outputs multiplied by 1 + u, |u|
    within ACTIVATION_ROUNDINGS roundings (_perturb), while the block runs:
    what a sound evaluation of the same layers may leave, elementwise,
    where batch orders and perturbed parameters do not reach (a BatchNorm
    over a channel of equal values leaves a noise whose sign one summation
    order fixes, and a max beside padding zeros then picks by it)."""
    with _leaf_forward_hooks(model, lambda _m, _i, out: _perturbed_outputs(out, gen)):
        yield


def _moved_by_its_largest(g, gen):
    """`g` plus u times its largest magnitude, u within
    ACTIVATION_ROUNDINGS roundings (_roundings), elementwise."""
    if not g.is_floating_point() or not g.numel():
        return g
    u = _roundings(g, gen, ACTIVATION_ROUNDINGS)
    return (g.double() + u * g.abs().max().double()).to(g.dtype)


@contextlib.contextmanager
def perturbed_gradients(model, gen):
    """The gradient of every leaf module's floating-point outputs moved, as
    the backward reaches it, by a few roundings of its largest element
    (_moved_by_its_largest), while the block runs: a sound backward sums a
    layer's gradients in another order, whose rounding is relative to the
    largest term, not to each result. Where the terms cancel, only this
    shows how far another order lands: x less its median along the tokens,
    then normalized, leaves the median's token exactly 0, its gradient
    1/eps times the others', which the median's backward subtracts again;
    float64 torch's value keeps 1e-4 of rounding there that batch orders,
    perturbed inputs and perturbed outputs (which leave an exact 0 as it
    is) all keep alike."""
    def hook(_m, _i, out):
        for t in out if isinstance(out, tuple) else (out,):
            if torch.is_tensor(t) and t.requires_grad:
                t.register_hook(lambda g: _moved_by_its_largest(g, gen))

    with _leaf_forward_hooks(model, hook):
        yield


def _as(model, opt, dtype):
    """Copies of `model` and `opt`, the model's floating-point tensors in
    `dtype` (None: as they are)."""
    for module in model.modules():  # torch cannot deepcopy the attribute a forward left
        _guards.refresh_reparametrized(module)
    m = copy.deepcopy(model)
    if dtype is not None:
        m = m.to(dtype)
    if _float_dtype(m) == torch.float64:
        float64_constants(m)  # the copy's float32 constants (_exact64.py)
    return m, clone_optimizer(opt, model, m)


def _eager_run(model, opt, loss_fn, batch, num_inputs, dtype=None, perm=None, perturb=None,
               loop=None, activations=None, gradients=None):
    """One eager step on copies; `perturb`: a generator moving the state and
    batch by one rounding first; `activations`: one moving every leaf
    module's outputs (perturbed_activations); `gradients`: one moving the
    gradients of those outputs (perturbed_gradients)."""
    m, o = _as(model, opt, dtype)
    batch = _copy_batch(batch, dtype, perm)
    if perturb is not None:
        perturb_state(m, perturb)
        batch = [_perturb(t, perturb) for t in batch]
    # float64 torch's own roundings to float32 made exact (_exact64.py)
    exact = _float_dtype(m) == torch.float64
    with exact_float64_gradients() if exact else contextlib.nullcontext(), \
            perturbed_activations(m, activations) if activations is not None \
            else contextlib.nullcontext(), \
            perturbed_gradients(m, gradients) if gradients is not None \
            else contextlib.nullcontext():
        loss = eager_step(m, o, float64_operands(loss_fn) if exact else loss_fn, batch,
                          num_inputs, loop)
    return snapshot(m, o, loss, copy=False)


def float64_gradients(model, opt, loss_fn, batch, num_inputs, contiguous):
    """Each parameter's float64 gradient as (its largest magnitude, its
    projection on a fixed random tensor): two numbers, not a copy."""
    m, _ = _as(model, opt, torch.float64)
    b = _copy_batch(batch, torch.float64)
    with _own_random_state(), exact_float64_gradients(), \
            contiguous_gradients(m) if contiguous else contextlib.nullcontext():
        float64_operands(loss_fn)(m(*b[:num_inputs]), *b[num_inputs:]).backward()
    gen = torch.Generator().manual_seed(_ORDER_SEED + 2)
    out = []
    for p in m.parameters():
        g = None if p.grad is None else (p.grad.to_dense() if p.grad.is_sparse else p.grad)
        r = torch.randn(p.shape, generator=gen, dtype=torch.float64)
        out.append(None if g is None else (g.abs().max().item() if g.numel() else 0.0,
                                           (g * r).sum().item()))
    return out


def torch_agrees_with_itself(model, opt, loss_fn, batch, num_inputs=1):
    """Whether float64 torch's gradients stay the same when every layer's
    output gradient is made contiguous first (_exact64.contiguous_gradients):
    each gradient's projection on a fixed random tensor, to 1e-9 of its
    size or 1e-12 of the largest gradient. Where they differ, torch has no
    truth to give."""
    plain = float64_gradients(model, opt, loss_fn, batch, num_inputs, False)
    contiguous = float64_gradients(model, opt, loss_fn, batch, num_inputs, True)
    top = max((g[0] for g in plain if g is not None), default=0.0)
    return all((a is None) == (b is None) and (
        a is None or math.isnan(a[1]) and math.isnan(b[1])
        or abs(a[1] - b[1]) <= 1e-9 * a[0] * math.sqrt(n) + 1e-12 * top * math.sqrt(n))
        for a, b, n in zip(plain, contiguous, (p.numel() for p in model.parameters())))


def config(entry):
    """(label, mode, options) of a `modes` entry: a mode name, or a pair
    (mode name, {step option: value})."""
    if isinstance(entry, str):
        mode, options = entry, {}
    else:
        mode, options = entry
        options = dict(options)
    label = mode
    if options.get("aliasing") is False:
        label += " (no alias)"
    if options.get("fuse") is False and mode != "interpret":
        label += " (unfused)"
    for k in sorted(set(options) - {"aliasing", "fuse"}):
        label += f" ({k}={options[k]})"
    return label, mode, options


def compiled_run(model, opt, loss_fn, batch, num_inputs, mode, options, dtype=None):
    """One step of `mode` on copies (their floating-point tensors in
    `dtype`, None: as they are); the snapshot and the compiled step. The
    snapshot holds the copies' own tensors: another call of the step
    changes it."""
    from .torch import compile_train_step
    m, o = _as(model, opt, dtype)
    if _float_dtype(m) == torch.float64:  # as the float64 eager steps run it
        loss_fn = float64_operands(loss_fn)
    step = compile_train_step(m, o, loss_fn, mode=mode, num_inputs=num_inputs, **options)
    for _ in range(options.get("accumulate", 1)):  # the update comes with the last call
        loss = step(*_copy_batch(batch, dtype))
    return snapshot(m, o, loss, copy=False), step
