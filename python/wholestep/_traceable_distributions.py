"""torch.distributions' argument validation while a model is traced
(_traceable.traceable() enters and leaves it).

A distribution made with validation on (torch's default) tests its
parameters against their constraints when it is made, and the value
log_prob, cdf and icdf are given against its support, by reading whether
every element passes: a value fake tensors do not hold. While tracing,
each such test is recorded instead (the bool tensor of which elements
pass, and torch's message less the values it would print), and once the
traced function has returned, its first floating-point result passes
through a wholestep::check of each: the step fails with torch's message
when an element is outside, and changes nothing, as eager raises before
its update. The shape tests, which read no values, run as torch runs them.
"""

import torch
from torch.distributions import constraints
from torch.distributions.distribution import Distribution
from torch.distributions.utils import lazy_property
from torch.utils._pytree import tree_flatten, tree_unflatten

from ._ir import TRACED

TRACED.append(("`torch.distributions` with their argument validation (rewritten while "
               "tracing)", ["check (wholestep)"],
               "a parameter or value outside its constraint fails the step with torch's "
               "message"))

# (bool tensor, message) of the tests the trace has met, in order
_PENDING = []


class _Passed:
    """What a recorded test answers to torch's `valid.all()`."""

    def all(self):
        return True


def _record(valid, message):
    """A test's verdict: recorded when it is a traced tensor, else read."""
    if isinstance(valid, torch.Tensor):
        _PENDING.append((valid, message))
        return _Passed()
    return valid


class _Recorded(constraints.Constraint):
    """A constraint whose check records its test under `message(value)`."""

    def __init__(self, constraint, message):
        super().__init__()
        self.constraint, self.message = constraint, message
        self.is_discrete = constraint.is_discrete
        self.event_dim = constraint.event_dim

    def check(self, value):
        return _record(self.constraint.check(value), self.message(value))

    def __repr__(self):
        return repr(self.constraint)


def _kind(value):
    """What torch's message calls the value: its class as eager sees it."""
    return "Tensor" if isinstance(value, torch.Tensor) else type(value).__name__


def _validate_arguments(d):
    """The parameter tests Distribution.__init__ makes when it validates."""
    try:
        arg_constraints = d.arg_constraints
    except NotImplementedError:
        return  # torch warns and validates nothing
    for param, constraint in arg_constraints.items():
        if constraints.is_dependent(constraint):
            continue
        if param not in d.__dict__ and isinstance(getattr(type(d), param), lazy_property):
            continue
        value = getattr(d, param)
        message = (f"Expected parameter {param} ({_kind(value)} of shape "
                   f"{tuple(value.shape)}) of distribution {d!r} to satisfy the constraint "
                   f"{constraint!r}, but found invalid values")
        if not _record(constraint.check(value), message).all():
            raise ValueError(message)


def _init(original):
    def __init__(self, batch_shape=torch.Size(), event_shape=torch.Size(), validate_args=None):
        validate = self._validate_args if validate_args is None else validate_args
        original(self, batch_shape, event_shape, validate_args=False)
        self._validate_args = validate
        if validate:
            _validate_arguments(self)
    return __init__


def _validate_sample(original):
    def validate_sample(self, value):
        try:
            support = self.support
        except NotImplementedError:
            return original(self, value)  # torch's shape tests, then its warning
        recorded = _Recorded(support, lambda v: (
            f"Expected value argument ({_kind(v)} of shape {tuple(v.shape)}) to be "
            f"within the support ({support!r}) of the distribution {self!r}, but found "
            f"invalid values"))
        return original(_SupportView(self, recorded), value)
    return validate_sample


class _SupportView:
    """A distribution as torch's _validate_sample reads it, its support's
    test recorded."""

    def __init__(self, d, support):
        self._d, self.support = d, support

    def __getattr__(self, name):
        return getattr(self._d, name)

    def __repr__(self):
        return repr(self._d)


def anchored(out):
    """`out` with its first floating-point tensor passed through a
    wholestep::check of every test recorded since enter()."""
    if not _PENDING:
        return out
    leaves, spec = tree_flatten(out)
    at = next((i for i, t in enumerate(leaves)
               if isinstance(t, torch.Tensor) and t.is_floating_point()), None)
    if at is None:
        raise ValueError("a distribution's argument validation needs a floating-point result "
                         "to fail the step through")
    for valid, message in _PENDING:
        leaves[at] = torch.ops.wholestep.check(leaves[at], valid, message)
    _PENDING.clear()
    return tree_unflatten(leaves, spec)


def enter():
    _PENDING.clear()
    kept = [(Distribution, "__init__", Distribution.__init__),
            (Distribution, "_validate_sample", Distribution._validate_sample)]
    Distribution.__init__ = _init(Distribution.__init__)
    Distribution._validate_sample = _validate_sample(Distribution._validate_sample)
    return kept


def leave(kept):
    _PENDING.clear()
    for owner, name, original in kept:
        setattr(owner, name, original)
