"""Which parameters a traced loss gets gradients for, read from the ATen
graph's fake values: torch marks every value that autograd would
differentiate (requires_grad), so a walk back from the loss through such
values reaches exactly the parameters whose .grad eager torch would set.

A value torch computed without tracking gradients from values that track
them (under torch.no_grad(), or a detach()) stops the gradient there: the
importer makes it a stop_gradient (untracked_from_tracked); but not a
tensor autograd saved and unpacked for a backward run with create_graph.
"""

import torch


def _val(node):
    return node.meta.get("val")


def untracked_from_tracked(node):
    """A floating-point result torch did not track, made from operands it
    did: computed under no_grad, or detached."""
    v = _val(node)
    if not isinstance(v, torch.Tensor) or v.requires_grad or not v.is_floating_point():
        return False
    name = str(node.target)
    if "_like." in name or ".new_" in name:
        return False  # reads only its operand's shape and dtype (zeros_like, new_ones, ...)
    if _saved_for_a_tracked_backward(node):
        return False
    return any(isinstance(_val(a), torch.Tensor) and _val(a).requires_grad
               for a in node.all_input_nodes)


def _saved_for_a_tracked_backward(node):
    """A value autograd saved for a backward that a forward runs with
    create_graph (torch.autograd.grad in a gradient penalty): the trace
    shows the saving as a detach that does not track, and its unpacking
    as a detach of that which does; between the two the gradient goes on,
    as the saved tensor's own does in eager torch."""
    detach = torch.ops.aten.detach.default
    return node.target is detach and bool(node.users) and all(
        u.target is detach and isinstance(_val(u), torch.Tensor) and _val(u).requires_grad
        for u in node.users)


def untracked_write(node):
    """An in-place op torch ran with gradients off (under torch.no_grad())
    into a tensor that tracks them: autograd does not see it, the tensor's
    gradient passes on as if it had not been written, and its other
    operands get none from it."""
    from ._import import _is_inplace
    if not _is_inplace(node) or node.meta.get("ws_grad", True):
        return False
    v = _val(node.args[0])
    return isinstance(v, torch.Tensor) and v.requires_grad


def _writes_into(gm):
    """{tensor node: the in-place ops that write into it, directly or
    through views of it}: a later read of the tensor reads what they wrote
    (`a = p.clone(); a[:, 1:] += v` makes a read of `a` depend on v), which
    the graph's edges do not show."""
    from ._import import _is_inplace, _view_chain
    out = {}
    for n in gm.graph.nodes:
        if _is_inplace(n) and not untracked_write(n):
            base, _ = _view_chain(n)
            target = base if base is not None else n.args[0]
            while _is_inplace(target):  # a chain of in-place ops: the tensor they all write
                target = target.args[0]
            out.setdefault(target, []).append(n)
    return out


def loss_parameters(gm, n_params):
    """The indices (among the first `n_params` placeholders) of the
    parameters the loss depends on through differentiable values,
    in-place writes into a value read included (but for the operands of
    those made under torch.no_grad(): untracked_write)."""
    placeholders = {n: i for i, n in enumerate(n for n in gm.graph.nodes
                                               if n.op == "placeholder")}
    writers = _writes_into(gm)
    output = next(n for n in gm.graph.nodes if n.op == "output")
    used, seen = set(), set()
    stack = list(output.all_input_nodes)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack.extend(writers.get(n, ()))
        v = _val(n)
        if isinstance(v, torch.Tensor) and not v.requires_grad \
                and not _saved_for_a_tracked_backward(n):
            continue  # no gradient flows back through it, as in torch
        if n.op == "placeholder":
            if placeholders[n] < n_params:
                used.add(placeholders[n])
            continue
        stack.extend([n.args[0]] if untracked_write(n) else n.all_input_nodes)
    return used
