"""What a trace cannot follow, refused while a model is traced
(_traceable.traceable() enters and leaves it), each with an error naming
it, where following it would train wrongly without a word: a custom
torch.autograd.Function (its backward never runs; torch.utils.checkpoint's
runs its function plainly), Tensor.register_hook (the hook never runs on
the step's gradients), assigning a tensor's .data (no op of the trace
records it), torch.manual_seed (the step's random numbers are not torch's
generator's) and Python's and NumPy's random numbers (drawn once, when
tracing), and torch.multinomial, whose own check fake tensors cannot run.
Each refuses only in the thread that traces: another thread's eager
autograd, hooks and draws run as before."""

import threading

import torch
import torch.utils.checkpoint

_FUNCTION_APPLY = torch._C._FunctionBase.__dict__["apply"]


# The thread that traces while traceable() is entered: the guards below
# refuse only there (another thread's eager autograd runs as before).
_TRACING = {"thread": None}


def _in_trace():
    return threading.get_ident() == _TRACING["thread"]


def _function_apply(cls, *args, **kwargs):
    """torch.autograd.Function.apply while tracing. The trace records the
    ops a Function's forward runs and wholestep differentiates them: its
    backward is never called, so a Function whose backward is not the
    derivative of its forward (a gradient reversal, a straight-through
    estimator) would train wrongly without a word; its forward refuses
    (_guard_functions), unless its class says its backward is that
    derivative (`wholestep_differentiate_forward = True`).
    torch.utils.checkpoint's Function runs its function plainly:
    recomputing instead of keeping is the compiler's choice (the min-cut
    partition's), and the values and gradients are the same (none inside
    when no input requires one, as torch's)."""
    if not _in_trace():
        return _FUNCTION_APPLY.__get__(None, cls)(*args, **kwargs)
    if cls is torch.utils.checkpoint.CheckpointFunction:
        run, _preserve_rng_state, *inputs = args
        if not any(isinstance(a, torch.Tensor) and a.requires_grad for a in inputs):
            with torch.no_grad():  # as torch's: nothing inside gets a gradient
                return run(*inputs)
        return run(*inputs)
    if not _traceable_function(cls):
        _refuse_function(cls)
    return _FUNCTION_APPLY.__get__(None, cls)(*args, **kwargs)


def _traceable_function(cls):
    """wholestep's own Functions, torch's checkpoint, and those that declare
    their backward the derivative of their forward."""
    return cls.__module__.startswith("wholestep.") \
        or cls is torch.utils.checkpoint.CheckpointFunction \
        or getattr(cls, "wholestep_differentiate_forward", False)


def _refuse_function(cls):
    raise NotImplementedError(
        f"a custom torch.autograd.Function, {cls.__module__}.{cls.__qualname__}, is not "
        f"supported: wholestep differentiates the ops its forward runs and never calls its "
        f"backward. If its backward is the derivative of its forward, set "
        f"wholestep_differentiate_forward = True on the class")


def _traced_forward(cls, original):
    """A Function's forward that refuses to run in a trace (_function_apply):
    an `.apply` kept from before the trace reaches it too."""

    def forward(*args, **kwargs):
        if _in_trace():
            _refuse_function(cls)
        return original.__get__(None, cls)(*args, **kwargs)
    return staticmethod(forward)


def _guard_functions():
    """Every torch.autograd.Function class but wholestep's own, torch's
    checkpoint and those that declare their backward the derivative of their
    forward, its forward refusing; returns what _unguard_functions restores."""
    kept, stack = [], [torch.autograd.Function]
    while stack:
        for cls in stack.pop().__subclasses__():
            stack.append(cls)
            if "forward" not in cls.__dict__ or _traceable_function(cls):
                continue
            kept.append((cls, cls.__dict__["forward"]))
            cls.forward = _traced_forward(cls, cls.__dict__["forward"])
    return kept


def _unguard_functions(kept):
    for cls, forward in kept:
        cls.forward = forward


_REGISTER_HOOK = torch.Tensor.register_hook


def _register_hook(self, hook):
    # a hook on a tensor of the trace would never run (the step's backward
    # is wholestep's): its change to the gradient would be lost
    if not _in_trace():
        return _REGISTER_HOOK(self, hook)
    raise NotImplementedError(
        "Tensor.register_hook in a forward is not supported: the hook would never run on the "
        "step's gradients, which wholestep computes; the gradient would be the plain one")


_DATA = torch._C._TensorBase.__dict__["data"]


def _get_data(self):
    return _DATA.__get__(self)


def _set_data(self, value):
    # the trace records no op for it: the forward would read one tensor and
    # the step another, without a word
    if _in_trace():
        raise NotImplementedError(
            "assigning a tensor's .data in a forward is not supported: the trace records no op "
            "for it; write the new values with an in-place op under torch.no_grad() into a "
            "buffer, or change the parameter outside the step")
    _DATA.__set__(self, value)


_MANUAL_SEED = torch.manual_seed


def _manual_seed(seed):
    # eager torch would draw the same numbers after it at every step; the
    # step's random numbers are wholestep's, drawn afresh each step
    if _in_trace():
        raise NotImplementedError(
            "torch.manual_seed in a forward is not supported: the step's random numbers come "
            "from wholestep's stream, not torch's generator, so they would not repeat as eager "
            "torch's do; seed that stream outside the step with wholestep.torch.manual_seed")
    return _MANUAL_SEED(seed)


_PY_RANDOM = ("random", "uniform", "randint", "randrange", "choice", "choices", "sample",
              "shuffle", "gauss", "normalvariate", "lognormvariate", "expovariate",
              "betavariate", "gammavariate", "triangular", "vonmisesvariate", "getrandbits")
_NP_RANDOM = ("rand", "randn", "random", "random_sample", "ranf", "sample", "randint",
              "random_integers", "uniform", "normal", "standard_normal", "choice",
              "permutation", "shuffle", "binomial", "poisson", "beta", "gamma", "exponential",
              "bernoulli", "laplace", "logistic", "lognormal", "multinomial", "dirichlet")


def _drawn_once(where, original):
    """`original`, refusing in the thread that traces (another thread, a
    data loader's, draws as before)."""
    def refuse(*args, **kwargs):
        if not _in_trace():
            return original(*args, **kwargs)
        raise NotImplementedError(
            f"{where} in a forward draws once, when the model is traced: every step would "
            f"reuse that number; draw with torch instead (torch.rand, randn, randint, ...: "
            f"wholestep's random stream, a new draw every step)")
    return refuse


def _guard_python_random():
    """random's and numpy.random's module functions refusing while tracing;
    returns what _unguard_python_random restores."""
    import random
    kept = [(random, name, getattr(random, name)) for name in _PY_RANDOM
            if hasattr(random, name)]
    try:
        import numpy.random
        kept += [(numpy.random, name, getattr(numpy.random, name)) for name in _NP_RANDOM
                 if hasattr(numpy.random, name)]
    except ImportError:
        pass
    for owner, name, original in kept:
        setattr(owner, name, _drawn_once(f"{owner.__name__}.{name}", original))
    return kept


def _unguard_python_random(kept):
    for owner, name, original in kept:
        setattr(owner, name, original)


def _multinomial(*args, **kwargs):
    # torch's own check of the probabilities reads them, which fake tensors
    # cannot: it would fail saying the probabilities sum to 0
    raise NotImplementedError("torch.multinomial is not supported by wholestep (random "
                              "numbers in a forward: see the support table)")


def enter():
    """Every guard in place; returns what leave restores."""
    kept = [(torch, "multinomial", torch.multinomial),
            (torch.Tensor, "multinomial", torch.Tensor.multinomial),
            (torch.Tensor, "register_hook", torch.Tensor.register_hook),
            (torch, "manual_seed", torch.manual_seed),
            (torch.random, "manual_seed", torch.random.manual_seed)]
    torch.multinomial = torch.Tensor.multinomial = _multinomial
    torch.Tensor.register_hook = _register_hook
    torch.Tensor.data = property(_get_data, _set_data)
    torch.manual_seed = torch.random.manual_seed = _manual_seed
    _TRACING["thread"] = threading.get_ident()
    torch.autograd.Function.apply = classmethod(_function_apply)
    return kept, _guard_functions(), _guard_python_random()


def leave(guards):
    kept, functions, python_random = guards
    for owner, name, original in kept:
        setattr(owner, name, original)
    del torch.Tensor.data
    del torch.autograd.Function.apply
    _TRACING["thread"] = None
    _unguard_functions(functions)
    _unguard_python_random(python_random)
