"""Which parameters a traced loss gets gradients for, read from the ATen
graph's fake values: torch marks every value that autograd would
differentiate (requires_grad), so a walk back from the loss through such
values reaches exactly the parameters whose .grad eager torch would set.

A value torch computed without tracking gradients from values that track
them (under torch.no_grad(), or a detach()) and that the loss reads is
refused: the IR has no stop-gradient, so wholestep would differentiate
through it where torch does not.
"""

import torch

from ._capture import describe
from . import _C


def _val(node):
    return node.meta.get("val")


def _untracked_from_tracked(node):
    """A floating-point result torch did not track, made from operands it
    did: computed under no_grad, or detached."""
    v = _val(node)
    if not isinstance(v, torch.Tensor) or v.requires_grad or not v.is_floating_point():
        return False
    name = str(node.target)
    if "_like." in name or ".new_" in name:
        return False  # reads only its operand's shape and dtype (zeros_like, new_ones, ...)
    return any(isinstance(_val(a), torch.Tensor) and _val(a).requires_grad
               for a in node.all_input_nodes)


def loss_parameters(gm, n_params):
    """The indices (among the first `n_params` placeholders) of the
    parameters the loss depends on through differentiable values. Raises
    an Error if the loss reads a value torch did not differentiate
    through."""
    placeholders = {n: i for i, n in enumerate(n for n in gm.graph.nodes
                                               if n.op == "placeholder")}
    output = next(n for n in gm.graph.nodes if n.op == "output")
    used, seen, untracked = set(), set(), set()
    stack = list(output.all_input_nodes)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        v = _val(n)
        if isinstance(v, torch.Tensor) and not v.requires_grad:
            _check_untracked(n, untracked)
            continue  # no gradient flows back through it, as in torch
        if n.op == "placeholder":
            if placeholders[n] < n_params:
                used.add(placeholders[n])
            continue
        stack.extend(n.all_input_nodes)
    return used


def _check_untracked(node, seen):
    """Raises if `node`, a value torch did not track, was computed (at some
    remove) from tracked values by a floating-point op: the start of a
    torch.no_grad() block, or a detach(). `seen`: the untracked values
    already checked."""
    stack = [node]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if not _val(n).is_floating_point():
            continue  # an index or a mask: no gradient through it either way
        if _untracked_from_tracked(n):
            raise _C.Error(_refusal(n))
        stack.extend(a for a in n.all_input_nodes
                     if isinstance(_val(a), torch.Tensor) and not _val(a).requires_grad)


def _refusal(node):
    where = describe(node.meta.get("ws_module"), node.meta.get("ws_line"))
    if str(node.target) == "aten.detach.default":
        what = "a detach() of a value that depends on parameters"
    else:
        what = (f"a value computed under torch.no_grad() ({node.target}) from values that "
                f"depend on parameters")
    return (f"{what} is used by the loss: torch does not differentiate through it, and "
            f"wholestep cannot stop a gradient yet (the IR has no stop-gradient), so this is not "
            f"supported; compute it with gradients enabled, or make it a buffer the forward "
            f"updates; {where}")
