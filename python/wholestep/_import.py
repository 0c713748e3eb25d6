"""An ATen graph (from _capture.trace) translated into the IR graph of a
step: placeholders become the inputs their roles say, every live node its
IR ops (_aten.TABLE), in-place writes to buffers become the buffers' new
values, and the graph's result the loss (or the forward's output).

Every failure names the torch op, the module path and class that called
it, and the user's source line.
"""

import operator

import torch

from . import _C
from . import _aten, _aten_nn  # noqa: F401  (they fill the table)
from ._capture import describe
from ._ir import TABLE, Builder, Transposed, Unsupported, Value, ir_dtype

# Ops whose translation reads a Transposed operand as a transpose flag.
_READS_TRANSPOSED = {"aten.mm.default", "aten.addmm.default", "aten.bmm.default"}


def error(node, message):
    return _C.Error(f"{message}; {describe(node.meta.get('ws_module'), node.meta.get('ws_line'))}")


def _is_inplace(node):
    return node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) \
        and node.target._schema.name.endswith("_") and node.args \
        and isinstance(node.args[0], torch.fx.Node)


def _written(node):
    """The placeholder an in-place op writes, through a chain of them
    (`buf.mul_(a).add_(b)` writes buf twice), or None."""
    while _is_inplace(node):
        node = node.args[0]
        if node.op == "placeholder":
            return node
    return None


def _live(gm, mutating):
    """Nodes the result or a buffer's mutation depends on."""
    live = set()
    stack = [n for n in gm.graph.nodes if n.op == "output" or n in mutating]
    while stack:
        n = stack.pop()
        if n in live:
            continue
        live.add(n)
        stack.extend(n.all_input_nodes)
    return live


class Importer:
    """Translates `gm` into `graph`. `inputs[i]` says what the i-th
    placeholder is: ("persistent", role, name, tensor) for a bound torch
    tensor (the _C.Tensor over its storage) or ("data", dtype, shape)."""

    def __init__(self, gm, graph, inputs, sync_world_size=1):
        self.gm = gm
        self.g = graph
        self.env = {}
        self.buffers = {}  # IR input value -> the persistent _C.Tensor of a buffer
        self.roles = {}    # placeholder node -> its role
        self.b = Builder(graph, self._assign, sync_world_size)
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        for node, spec in zip(placeholders, inputs):
            if spec[0] == "persistent":
                _, role, name, tensor = spec
                v = Value(graph.persistent(role, name, tensor))
                if role == "buffer":
                    self.buffers[v] = tensor
            else:
                v = Value(graph.data(spec[1], spec[2]))
                role = "data"
            self.env[node] = v
            self.roles[node] = (role, spec[2] if spec[0] == "persistent" else None)
        self.current = None

    def _assign(self, buffer_value, new_value):
        tensor = self.buffers.get(buffer_value)
        if tensor is None:
            raise Unsupported("a write to a tensor that is not one of the model's buffers")
        self.g.assign(tensor, new_value)

    def value(self, x):
        if isinstance(x, torch.fx.Node):
            return self.env[x]
        if isinstance(x, (list, tuple)):
            return type(x)(self.value(e) for e in x)
        return x

    def materialize(self, v):
        if isinstance(v, Transposed):  # the last two dims swapped
            rank = len(self.b.shape(v.source))
            return self.b.transpose(v.source, list(range(rank - 2)) + [rank - 1, rank - 2])
        if isinstance(v, (list, tuple)):
            return type(v)(self.materialize(e) for e in v)
        return v

    def run(self):
        mutating = {n for n in self.gm.graph.nodes
                    if _written(n) is not None
                    or n.op == "call_function"
                    and str(n.target) == "aten.native_batch_norm.default"}
        live = _live(self.gm, mutating)
        result = None
        for node in self.gm.graph.nodes:
            if node not in live or node.op == "placeholder":
                continue
            self.current = node
            line = node.meta.get("ws_line")
            if line is not None:
                self.g.set_loc(line[0], line[1])
            try:
                if node.op == "output":
                    # make_fx returns the flattened results
                    result = node.args[0]
                    if isinstance(result, (list, tuple)) and len(result) == 1:
                        result = result[0]
                    break
                self.env[node] = self.translate(node)
            except (Unsupported, _C.Error) as e:
                raise error(node, f"{e}") from None
            except Exception as e:  # a translation's bug: still a wholestep.Error
                raise error(node, f"internal error in wholestep translating {node.target}: "
                                  f"{type(e).__name__}: {e}") from e
        return self.value(result) if result is not None else None

    def translate(self, node):
        if node.op == "get_attr":
            return self.constant(node, getattr(self.gm, node.target))
        if node.op != "call_function":
            raise Unsupported(f"an fx node of kind {node.op}")
        if node.target is operator.getitem:
            parts, index = self.value(node.args[0]), node.args[1]
            out = parts[index]
            if out is None:
                raise Unsupported(f"result {index} of {node.args[0].target}")
            return out
        name = str(node.target)
        fn = TABLE.get(name)
        if fn is None:
            raise Unsupported(f"the torch op {name} is not supported by wholestep "
                              f"(its operands: {self.describe(node.args)})")
        target = _written(node)
        writes = target is not None
        if writes:
            role, input_name = self.roles[target]
            if role == "data":
                writes = False  # the step's own view of its argument: not written back
            elif role != "buffer":
                raise Unsupported(f"{name} writes to the {role} '{input_name}' in place; only "
                                  f"buffers may be written")
        args = self.value(node.args)
        kwargs = {k: self.value(v) for k, v in node.kwargs.items()
                  if k not in ("device", "layout", "pin_memory", "memory_format")}
        if name not in _READS_TRANSPOSED:
            args, kwargs = self.materialize(args), {k: self.materialize(v)
                                                     for k, v in kwargs.items()}
        out = fn(self.b, node, *args, **kwargs)
        if writes:
            self._assign(self.env[target], out)
        self.check(node, out)
        return out

    def check(self, node, out):
        """The translation's type is torch's: a wrong one is a bug here."""
        val = node.meta.get("val")
        if any(_is_inplace(u) and u.args[0] is node for u in node.users):
            return  # its fake tensor shows what a later in-place op (squeeze_) made of it
        if isinstance(val, torch.Tensor) and isinstance(out, Value):
            dtype, shape = self.b.type(out)
            if list(shape) != list(val.shape) or dtype != ir_dtype(val.dtype):
                raise Unsupported(f"internal: {node.target} translated to {dtype}{list(shape)}, "
                                  f"torch has {val.dtype}{list(val.shape)}")

    def constant(self, node, t):
        if not isinstance(t, torch.Tensor):
            raise Unsupported(f"the constant {node.target} of type {type(t).__name__}")
        if t.numel() > 1 << 16:
            raise Unsupported(f"a tensor constant of {t.numel()} elements ({node.target}); make "
                              f"it a parameter or a buffer")
        dtype = ir_dtype(t.dtype)
        if dtype is None:
            raise Unsupported(f"a tensor constant of dtype {t.dtype}")
        return self.b.constant(t.flatten().tolist(), dtype, t.shape)

    def describe(self, args):
        out = []
        for a in args:
            if isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.Tensor):
                v = a.meta["val"]
                out.append(f"{str(v.dtype).replace('torch.', '')}{list(v.shape)}")
            else:
                out.append(repr(a))
        return ", ".join(out)
