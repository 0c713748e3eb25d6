"""Capture of a torch program as an ATen graph, each node tagged with the
module that made it and the user's source line.

The program is traced by ``make_fx`` in fake mode: every op runs on fake
tensors, so nothing is computed and the model's buffers are not touched
(in real mode, tracing would apply BatchNorm's running-statistic updates
once). ``make_fx`` works at the level of ATen ops, below the Python code,
so models whose forward unpacks shapes (torchvision's ViT, ShuffleNet)
trace as their authors wrote them, unlike ``torch.fx.symbolic_trace``.
"""

import contextlib
import os
import sys
import threading

import torch
import torch.fx

from . import _C, _guards, _traceable_distributions
from ._traceable import BATCH_NORM_FORWARD, traceable
from torch.fx.experimental import proxy_tensor
from torch.fx.experimental.proxy_tensor import make_fx
from torch.nn.utils import stateless

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep

# One trace at a time: tracing patches torch.fx.Graph.create_node and
# registers global module hooks, which two threads would interleave (one
# restoring the other's patch).
_LOCK = threading.RLock()


class _Where:
    """The module path stack while the model runs (global module hooks)."""

    def __init__(self, model):
        # Classes as the model has them: functional_call swaps a module's
        # class for a stateless stand-in while it runs.
        self.names = {id(m): (name, type(m)) for name, m in model.named_modules()}
        self.stack = []

    def pre(self, module, args):
        entry = self.names.get(id(module))
        if entry is not None:
            self.stack.append(entry)

    def post(self, module, args, out):
        if self.names.get(id(module)) is not None and self.stack:
            self.stack.pop()

    def module(self):
        return self.stack[-1] if self.stack else None


def _is_user_file(filename):
    """Code of the model or the loss function: not torch's, not this
    package's, not generated ("<string>": make_fx's wrappers)."""
    return not filename.startswith((_TORCH_DIR, _OWN_DIR, "<"))


def describe(module, line):
    """'in module m (pkg.Class), at file:line' for a node's (or a failure's)
    module entry and user line; either may be None."""
    parts = []
    if module is not None:
        path, cls = module
        parts.append(f"in module {path or '(the model)'} ({cls.__module__}.{cls.__qualname__})")
    else:
        parts.append("outside the model's modules (the loss function)")
    if line is not None:
        parts.append(f"at {line[0]}:{line[1]}")
    return ", ".join(parts)


def _failure_site(where, error):
    """'; in module m (Class), at file:line' for an exception raised while
    tracing: the module running then, and the innermost user frame."""
    tb, line = error.__traceback__, None
    while tb is not None:
        if _is_user_file(tb.tb_frame.f_code.co_filename):
            line = (tb.tb_frame.f_code.co_filename, tb.tb_lineno)
        tb = tb.tb_next
    return "; " + describe(where.module(), line)


def _user_frame():
    """The innermost frame outside torch and this package: the line of the
    model's (or the loss function's) code that called the op."""
    f = sys._getframe(2)
    while f is not None:
        if _is_user_file(f.f_code.co_filename):
            return f.f_code.co_filename, f.f_lineno
        f = f.f_back
    return None


@contextlib.contextmanager
def _tagging(where):
    """Tags every node the tracer creates with node.meta['ws_module'] (path,
    class), node.meta['ws_line'] (file, line) and node.meta['ws_grad'],
    whether gradients were on when its op ran (an in-place write under
    torch.no_grad() into a tensor that tracks them leaves it tracking them:
    its value alone does not tell; _grad_flow.untracked_write)."""
    original = torch.fx.Graph.create_node

    def create_node(graph, *args, **kwargs):
        node = original(graph, *args, **kwargs)
        node.meta["ws_module"] = where.module()
        node.meta["ws_line"] = _user_frame()
        node.meta["ws_grad"] = torch.is_grad_enabled()
        return node

    pre = torch.nn.modules.module.register_module_forward_pre_hook(where.pre)
    post = torch.nn.modules.module.register_module_forward_hook(where.post)
    torch.fx.Graph.create_node = create_node
    try:
        yield
    finally:
        torch.fx.Graph.create_node = original
        pre.remove()
        post.remove()


def _tied_names(model, names):
    """{other name: name in `names`} for every Parameter that named_parameters()
    lists once under its first name but the model holds under more."""
    first = {id(p): n for n, p in model.named_parameters() if n in names}
    aliases = {}
    for path, m in model.named_modules(remove_duplicate=False):
        for key, p in m._parameters.items():
            name = f"{path}.{key}" if path else key
            if p is not None and id(p) in first and first[id(p)] != name:
                aliases[name] = first[id(p)]
    return aliases


def _unlink_fake_values(gm):
    """Drop the tracer's proxy from every fake value of `gm`. make_fx leaves
    each fake tensor holding its proxy (proxy -> node -> graph -> module),
    and torch keeps the fake tensors alive from C++, where the collector
    cannot see the cycle: without this, every trace, and the GraphModule
    of every compiled step, would stay in memory for good."""
    for node in gm.graph.nodes:
        vals = node.meta.get("val")
        for v in vals if isinstance(vals, (list, tuple)) else (vals,):
            if isinstance(v, torch.Tensor):
                v.__dict__.pop(proxy_tensor.proxy_slot, None)


def _functional(overload):
    """The overload of `overload`'s op that takes its arguments but `out`
    and returns a new tensor, or None."""
    args = [a for a in overload._schema.arguments if a.name != "out"]
    packet = overload.overloadpacket
    for name in packet.overloads():
        other = getattr(packet, name)
        schema = other._schema
        if schema.is_mutable or len(schema.arguments) != len(args):
            continue
        if all(a.name == b.name and str(a.type) == str(b.type)
               for a, b in zip(schema.arguments, args)):
            return other
    return None


def _out_variants_as_writes(gm):
    """Each `op(..., out=t)` (F.normalize(..., out=v) in spectral norm's
    power iteration) as t.copy_(op(...)): the op's functional overload,
    then an in-place write, which the importer takes as every other."""
    for node in list(gm.graph.nodes):
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload) \
                or "out" not in node.kwargs:
            continue
        functional = _functional(target)
        if functional is None:
            continue  # the importer names the op it does not take
        kwargs = {k: v for k, v in node.kwargs.items() if k != "out"}
        with gm.graph.inserting_before(node):
            value = gm.graph.call_function(functional, node.args, kwargs)
            write = gm.graph.call_function(torch.ops.aten.copy_.default,
                                           (node.kwargs["out"], value))
        for new in (value, write):
            new.meta = dict(node.meta)
        node.replace_all_uses_with(write)
        gm.graph.erase_node(node)
    gm.recompile()


def trace(model, params, buffers, fn, examples):
    """``fn(model_call, *examples)`` as a GraphModule over (params, buffers,
    *examples), where ``model_call(*inputs)`` runs the model with the given
    tensors as its parameters and buffers. The placeholders are the params,
    then the buffers (in the dicts' order), then the examples."""
    names = list(params) + list(buffers)
    aliases = _tied_names(model, list(params))

    def program(p, b, *args):
        def model_call(*inputs):
            # A tied tensor (one Parameter under two names, as an LM head
            # sharing its embedding's weight) is one input, given under
            # every name it has.
            tensors = {**p, **b}
            tensors.update({alias: tensors[name] for alias, name in aliases.items()})
            return stateless.functional_call(model, tensors, inputs)

        # the distributions' validation tests, checked on the result
        return _traceable_distributions.anchored(fn(model_call, *args))

    for path, m in model.named_modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.momentum is None \
                and m.training and m.track_running_stats \
                and type(m).forward is not BATCH_NORM_FORWARD \
                and type(m).forward.__module__ == BATCH_NORM_FORWARD.__module__:
            raise _C.Error(f"{type(m).__qualname__} with momentum=None (a cumulative moving "
                           f"average) is not supported: its forward reads the count of batches "
                           f"as a number; give it a momentum; in module {path} "
                           f"({type(m).__module__}.{type(m).__qualname__})")
    with _LOCK, _guards.sigint_held():
        _guards.check_global_hooks("tracing the model")
        where = _Where(model)
        # With gradients on whatever the caller's mode: what the trace
        # records as not requiring gradients is then what the model's own
        # code chose (torch.no_grad() inside its forward; _grad_flow.py).
        with _tagging(where), torch.enable_grad(), traceable(), \
                _guards.reparametrized_attributes_kept(model):
            try:
                gm = make_fx(program, tracing_mode="fake")(params, buffers, *examples)
            except Exception as e:
                if isinstance(e, _C.Error):
                    raise
                raise _C.Error(f"tracing the model failed: {type(e).__name__}: {e}"
                               f"{_failure_site(where, e)}") from e
    _unlink_fake_values(gm)
    _out_variants_as_writes(gm)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(names) + len(examples):
        raise _C.Error(
            f"internal error in wholestep: {len(placeholders)} placeholders for {len(names)} "
            f"tensors and {len(examples)} arguments")
    return gm
