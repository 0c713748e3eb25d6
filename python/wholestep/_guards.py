"""What a compiled step checks around each call: its options, state
of the Python program a trace read (module attributes, hooks, autocast),
the user's torch thread count, and Ctrl-C held back while a call changes
the model's and the optimizer's state."""

import _signal  # signal's functions without its enum wrapping: this runs every call
import contextlib
import math
import signal
import threading
import weakref

import torch
from torch.nn.utils.spectral_norm import SpectralNorm
from torch.nn.utils.weight_norm import WeightNorm

from . import _C

Error = _C.Error


def step_options(options, who):
    """Every step option, those of `options` set: the extension module
    checks each against the one table of them (step_options.def), naming an
    unknown option, a value of the wrong type or out of range."""
    try:
        return _C.step_options(options)
    except Error as e:
        raise Error(f"{who}: {e}") from None


def check_clipping(clip_grad_norm, error_if_nonfinite, who):
    """clip_grad_norm: None (off) or a finite number >= 0, as
    torch.nn.utils.clip_grad_norm_'s max_norm; error_if_nonfinite: a bool,
    with clipping."""
    if clip_grad_norm is not None and (isinstance(clip_grad_norm, bool)
                                       or not isinstance(clip_grad_norm, (int, float))
                                       or not math.isfinite(clip_grad_norm)
                                       or clip_grad_norm < 0):
        raise Error(f"{who}: clip_grad_norm={clip_grad_norm!r}; it must be None (no clipping) "
                    f"or a finite number >= 0, the largest total norm the gradients keep")
    if not isinstance(error_if_nonfinite, bool):
        raise Error(f"{who}: error_if_nonfinite={error_if_nonfinite!r}; it must be a bool")
    if error_if_nonfinite and clip_grad_norm is None:
        raise Error(f"{who}: error_if_nonfinite=True checks the norm clip_grad_norm computes; "
                    f"give clip_grad_norm too")


def check_autocast(who):
    """Mixed precision would change which ops run in which dtype: the
    compiled step computes in its tensors' own dtypes."""
    if torch.is_autocast_enabled() or torch.is_autocast_cpu_enabled():
        raise Error(f"{who}: called inside torch.autocast: wholestep does not support mixed "
                    f"precision (the step computes in its tensors' own dtypes, float32 or "
                    f"float64); call it outside autocast")


def check_sparse_gradients(model, opt):
    """An Embedding or EmbeddingBag with sparse=True gives its weight a
    sparse gradient, which torch's Adam and AdamW refuse at their step; the
    compiled step refuses it too, with their message (SGD takes it: the
    update is the same as from the dense gradient)."""
    if not isinstance(opt, (torch.optim.Adam, torch.optim.AdamW)):
        return
    held = {id(p) for g in opt.param_groups for p in g["params"]}
    for path, m in model.named_modules():
        if isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag)) and m.sparse \
                and m.weight.requires_grad and id(m.weight) in held:
            name = type(opt).__name__
            hint = ", please consider SparseAdam instead" if name == "Adam" else ""
            raise Error(f"{name} does not support sparse gradients{hint}: the "
                        f"{type(m).__name__} with sparse=True in module {path or '(the model)'} "
                        f"gives its weight one")


# A module's own attributes torch keeps (hook tables, parameter dicts,
# flags): not the model's settings. `training` is one of them, but a trace
# depends on it.
_TORCH_ATTRS = frozenset(torch.nn.Module().__dict__) - {"training"}
_SCALARS = frozenset((bool, int, float, str, type(None)))
_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks")
# The pre-hooks a trace takes: each sets a module attribute (the weight) to
# a function of the module's parameters and buffers, computed by tensor
# ops the trace records, so the step runs them at every call as eager's
# forward does (spectral norm's power iteration, which updates its u and v
# buffers in place in training, included).
_REPARAMETRIZATIONS = (WeightNorm, SpectralNorm)


def _plain(v):
    t = type(v)
    if t in _SCALARS:
        return True
    if t is not tuple:
        return False
    for e in v:  # a loop, not all() over a generator: this runs for every tuple attribute
        if type(e) not in _SCALARS and not _plain(e):
            return False
    return True


class _State(tuple):
    """A model_view's state, hashed once. A compiled step's key holds it,
    and the state is the largest part of the key: every call looks the key
    up and moves it to the end of the cache, and hashing the whole state
    cold from a step cost 0.3 ms of each call on mobilenet_v2. While
    ModelViews keeps a view, each call's key holds this same object."""

    def __new__(cls, items):
        self = super().__new__(cls, items)
        self._hash = tuple.__hash__(self)
        return self

    def __hash__(self):
        return self._hash


def model_view(model, who, training=True, spectral=None, modules=None):
    """One walk over `model`'s modules (this runs before every call):
    (state, parameters, buffers), the last two as model.parameters() and
    model.buffers() list them. `state` holds the plain Python attributes
    (numbers, strings, None, tuples of them) of every submodule, with its
    class: the settings a forward reads as Python values (Dropout.p,
    BatchNorm.momentum and eps, a user's flags), which a trace freezes; a
    change must trace again. Raises an Error for a module with a hook: a
    hook would run once, on the tracer's fake tensors; but for
    nn.utils.weight_norm's and nn.utils.spectral_norm's
    (_REPARAMETRIZATIONS), whose attribute is set here from the
    parameters and buffers the call starts from (refresh_reparametrized).
    `training` False: without the modules' train/eval flags. `spectral`, a
    list: the spectral-normed modules are appended to it (for
    refresh_spectral_norms after the call, without a second walk);
    `modules`, a list: every module walked (for ModelViews).

    Its cost is the step's on small models (1 ms a call on mobilenet_v2's
    213 modules, written plainly), so the walk keeps to C-level work where
    it can: tensors are told apart by id() (a tensor's hash is id() by a
    Python call), and a module without pre-hooks skips their checks."""
    state, params, buffers = [], [], []
    seen_modules, seen_params, seen_buffers = set(), set(), set()
    torch_attrs, scalars = _TORCH_ATTRS, _SCALARS
    stack = [model]
    while stack:
        m = stack.pop()
        if m in seen_modules:
            continue
        seen_modules.add(m)
        if modules is not None:
            modules.append(m)
        d = m.__dict__
        if d["_forward_hooks"] or d["_backward_hooks"]:
            _hook_error(model, m, who)
        pre = d["_forward_pre_hooks"]
        if pre:
            if any(not isinstance(h, _REPARAMETRIZATIONS) for h in pre.values()):
                _hook_error(model, m, who)
            refresh_reparametrized(m)
            if spectral is not None and any(isinstance(h, SpectralNorm) for h in pre.values()):
                spectral.append(m)
        state.append(type(m))
        state.append(tuple([(k, v) for k, v in d.items()
                            if k not in torch_attrs
                            and (type(v) in scalars or type(v) is tuple and _plain(v))
                            and (training or k != "training")]))
        for t in d["_parameters"].values():
            if t is not None and id(t) not in seen_params:
                seen_params.add(id(t))
                params.append(t)
        for t in d["_buffers"].values():
            if t is not None and id(t) not in seen_buffers:
                seen_buffers.add(id(t))
                buffers.append(t)
        # Children in reverse onto the stack: visited in order, depth first.
        stack.extend(c for c in reversed(d["_modules"].values()) if c is not None)
    return _State(state), params, buffers


# The dicts of a module model_view reads, beside its __dict__.
_VIEW_DICTS = ("_parameters", "_buffers", "_modules") + _HOOKS


class ModelViews:
    """model_view of one model, for a step called again and again: the
    last view, while nothing it read can have changed. The walk reads
    each module's type, its __dict__ (its plain attributes, `training`
    among them) and the dicts in it of its parameters, buffers, children
    and hooks; _C.module_dicts gives the state of those dicts (each
    dict's version tag, which every change of it replaces), so equal
    states mean the same view, and a C loop over them replaces the walk
    (1.2 ms a call on mobilenet_v2's 213 modules, cold from the step).
    Not kept for a model with pre-hooks (weight or spectral norm: the
    walk sets their attributes, and the view's refresh must run each
    call), nor on a Python whose dicts keep no version tags (module_dicts
    says None): then every call walks. A walk whose state equals the last
    one's gives that same state object (a trace changes the dicts and so
    walks again after it): a key holding it is then found by identity,
    not by comparing the whole state."""

    def __init__(self, model, who, training=True):
        self.model, self.who, self.training = model, who, training
        self._modules = None  # the modules of the kept view; None: none kept
        self._types = None  # their types, held so that no type's address is reused
        self._dicts = None
        self._view = None
        self._state = None  # the last walk's state

    def __call__(self, spectral=None):
        if self._modules is not None \
                and _C.module_dicts(self._modules, _VIEW_DICTS) == self._dicts:
            return self._view
        self._modules = None
        modules = []
        view = model_view(self.model, self.who, self.training, spectral, modules)
        if view[0] == self._state:
            view = (self._state,) + view[1:]
        self._state = view[0]
        if not any(m._forward_pre_hooks for m in modules):
            dicts = _C.module_dicts(modules, _VIEW_DICTS)
            if dicts is not None:
                self._modules, self._types, self._dicts = modules, list(map(type, modules)), dicts
                self._view = view
        return view


def refresh_reparametrized(module):
    """A weight-normed or spectral-normed module's attribute computed from
    its parameters and buffers as they are, without gradient (a tensor
    deepcopy can copy): weight norm's g v / |v|; spectral norm's weight over
    its largest singular value estimated from u and v as they are, without
    the power iteration, which the next forward runs."""
    for h in module._forward_pre_hooks.values():
        if isinstance(h, WeightNorm):
            with torch.no_grad():
                setattr(module, h.name, h.compute_weight(module))
        elif isinstance(h, SpectralNorm):
            with torch.no_grad():
                setattr(module, h.name, h.compute_weight(module, do_power_iteration=False))


def refresh_spectral_norms(modules):
    """After a step, each spectral-normed module's attribute (`modules`:
    model_view's `spectral`) from the parameters and the u and v the step's
    power iteration left: the weight the next forward starts from (eager's
    attribute holds the weight its forward used, before the update; the u
    and v are the same)."""
    for m in modules:
        refresh_reparametrized(m)


def reparametrizations(model):
    """(module, attribute name) of every nn.utils.weight_norm and
    nn.utils.spectral_norm on `model` (_REPARAMETRIZATIONS: the only hooks
    a step or forward takes)."""
    return [(m, h.name) for m in model.modules() for h in m._forward_pre_hooks.values()
            if isinstance(h, _REPARAMETRIZATIONS)]


@contextlib.contextmanager
def reparametrized_attributes_kept(model):
    """The reparametrized modules' computed attributes as they were before
    the block: a trace leaves its own tensors there."""
    kept = [(m, name, m.__dict__.get(name)) for m, name in reparametrizations(model)]
    try:
        yield
    finally:
        for m, name, value in kept:
            if value is None:
                m.__dict__.pop(name, None)
            else:
                setattr(m, name, value)


def _hook_error(model, module, who):
    path = next(p for p, m in model.named_modules() if m is module)
    kind = next(h for h in _HOOKS if module.__dict__[h]).strip("_").replace("_", " ")[:-1]
    raise Error(f"{who}: module {path or '(the model)'} "
                f"({type(module).__module__}.{type(module).__qualname__}) has a {kind}: "
                f"wholestep traces the forward once, so the hook would not run at each step; "
                f"remove it (its handle's remove()) before the step runs")


def check_global_hooks(who):
    """Hooks registered for every module (torch.nn.modules.module's
    register_module_forward_hook) would run once, at the trace."""
    mod = torch.nn.modules.module
    for name in ("_global_forward_hooks", "_global_forward_pre_hooks",
                 "_global_backward_hooks"):
        if getattr(mod, name, None):
            raise Error(f"{who}: a global module hook is registered ({name[1:]}): it would run "
                        f"once, at the trace, not at each step; remove it before compiling")


# One lock per model: the steps and forwards compiled over one model's
# tensors run one at a time, whichever thread calls them (the step layer
# runs without the GIL).
_model_locks = weakref.WeakKeyDictionary()
_model_locks_lock = threading.Lock()


def model_lock(model):
    with _model_locks_lock:
        lock = _model_locks.get(model)
        if lock is None:
            lock = _model_locks[model] = threading.RLock()
        return lock


# torch.get_num_threads() as it was after our last call or set: a different
# value now is the user's torch.set_num_threads(n), which our pool follows.
_torch_threads = torch.get_num_threads()


def follow_torch_threads():
    """Sets the pool wholestep and oneDNN share to the user's
    torch.set_num_threads(n), if it changed since; returns torch's count,
    to restore after the call (a step sets the OpenMP runtime's, which
    torch reads, to its own team)."""
    global _torch_threads
    n = torch.get_num_threads()
    if n != _torch_threads:
        _C.set_num_threads(n)
        _torch_threads = n
    return n


def restore_torch_threads(n):
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)


def set_num_threads(n):
    global _torch_threads
    _C.set_num_threads(n)
    _torch_threads = torch.get_num_threads()


@contextlib.contextmanager
def sigint_held():
    """Ctrl-C (SIGINT) waits until the block ends, then raises
    KeyboardInterrupt: a block that changes the model's and the optimizer's
    state does so whole (and torch's tracer aborts the process on a
    KeyboardInterrupt). Only the main thread receives signals; elsewhere a
    no-op."""
    if threading.current_thread() is not threading.main_thread() \
            or _signal.getsignal(signal.SIGINT) is None:  # installed outside Python
        yield
        return
    caught = []
    previous = _signal.signal(signal.SIGINT, lambda sig, frame: caught.append(frame))
    try:
        yield
    finally:
        _signal.signal(signal.SIGINT, previous)
        if caught and callable(previous):
            previous(signal.SIGINT, caught[0])  # Python's default: raises KeyboardInterrupt
        elif caught and previous != signal.SIG_IGN:
            raise KeyboardInterrupt
