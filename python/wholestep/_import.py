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
from . import (_aten, _aten_combine, _aten_loss, _aten_lookup, _aten_math, _aten_nn,  # noqa: F401
               _aten_backward, _aten_random, _aten_reduce, _aten_round, _aten_sample,
               _aten_scatter, _aten_shape, _aten_space)  # the table
from ._capture import describe
from ._grad_flow import untracked_from_tracked, untracked_write
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


# Views an in-place write can be scattered back through into its base, and
# views it cannot (a write through one is refused).
_REGION_VIEWS = {"aten.slice.Tensor", "aten.select.int", "aten.alias.default",
                 "aten.detach.default"}
_OTHER_VIEWS = {"aten.view.default", "aten._reshape_alias.default", "aten.transpose.int",
                "aten.permute.default", "aten.t.default", "aten.unsqueeze.default",
                "aten.squeeze.dim", "aten.squeeze.default", "aten.expand.default",
                "aten.diagonal.default", "aten.as_strided.default", "aten.unfold.default",
                "aten.split.Tensor", "aten.split_with_sizes.default", "aten.unbind.int"}


# Views that are a bijection of the whole tensor: a write through one is
# undone on the written value (_undo_whole_view).
_WHOLE_VIEWS = {"aten.view.default", "aten._reshape_alias.default", "aten.unsqueeze.default",
                "aten.squeeze.dim", "aten.squeeze.default", "aten.transpose.int",
                "aten.permute.default", "aten.t.default", "aten.alias.default",
                "aten.detach.default"}


def _undo_whole_view(b, view, value):
    """`value`, a new value of `view` (a _WHOLE_VIEWS node), as the new
    value of the tensor it views."""
    name = str(view.target)
    rank = len(b.shape(value))
    if name == "aten.transpose.int":
        d0, d1 = view.args[1] % max(rank, 1), view.args[2] % max(rank, 1)
        perm = list(range(rank))
        perm[d0], perm[d1] = perm[d1], perm[d0]
        return b.transpose(value, perm)
    if name == "aten.t.default":
        return b.transpose(value, [1, 0]) if rank == 2 else value
    if name == "aten.permute.default":
        dims = [d % rank for d in view.args[1]]
        inverse = [0] * rank
        for i, d in enumerate(dims):
            inverse[d] = i
        return b.transpose(value, inverse)
    source = view.args[0].meta["val"]
    return b.reshape(value, list(source.shape))


def _is_view(node):
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:  # a part of a split, not a result of an op
        return _is_view(node.args[0])
    name = str(node.target)
    return name in _REGION_VIEWS or name in _OTHER_VIEWS


def _view_chain(node):
    """For an in-place op writing through views (`mask[a:b] = v`): the base
    tensor and the views from it to the one written; (None, []) when it
    writes its operand itself, or changes only its view (transpose_)."""
    if torch.Tag.inplace_view in node.target.tags:
        return None, []
    chain, n = [], node.args[0]
    # An in-place op's result is its operand (`v.mul_(2).add_(1)`, or a
    # second write through the same view): skipped, as its operand's views.
    while _is_view(n) or (_is_inplace(n) and not _changes_view_only(n)):
        if _is_view(n):
            chain.append(n)
        n = n.args[0]
    return (n, chain[::-1]) if chain else (None, [])


def _changes_view_only(node):
    """An in-place op that changes a tensor's view (transpose_, squeeze_),
    not its elements."""
    return _is_inplace(node) and torch.Tag.inplace_view in node.target.tags


def _storage(node):
    """The node whose tensor holds `node`'s elements, and the views from it
    to `node` (in-place ops on the way, which keep their operand's
    storage, are skipped; those changing a view only are views)."""
    chain = []
    while True:
        if _is_view(node) or _changes_view_only(node):
            chain.append(node)
        elif not _is_inplace(node):
            return node, chain[::-1]
        node = node.args[0]


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
        self.placeholders = {}  # placeholder node -> its input value
        self.written = {}  # a value written into a buffer -> the buffer's input value
        self.b = Builder(graph, self._assign, sync_world_size)
        # Tensors written in place, and the views of them: a view read after
        # a write to its storage (through another view, or directly) is made
        # again from the storage's new value, as torch's views see it.
        self.versions = {}  # storage node -> its writes so far
        self.latest = {}    # storage node -> its value after its last write
        self.views = {}     # view node -> (storage node, views from it, version)
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
            self.placeholders[node] = v
            self.roles[node] = (role, spec[2] if spec[0] == "persistent" else None)
        self.current = None
        self.current_write = None  # set by a write through views while it translates

    def _wrote(self, node, value):
        """Records that in-place op `node` left `value` in its storage."""
        storage = _storage(node)[0]
        self.versions[storage] = self.versions.get(storage, 0) + 1
        self.latest[storage] = value
        self.current_write = node

    def _view_again(self, node, storage, chain):
        """View `node` of `storage` made again from the storage's value
        after its last write; recorded as current."""
        v = self.latest[storage]
        for view in chain:
            if view.target is operator.getitem:
                v = v[view.args[1]]
                continue
            args = [self.materialize(v)] + self.materialize(self.value(list(view.args[1:])))
            kwargs = {k: self.materialize(self.value(a)) for k, a in view.kwargs.items()}
            v = TABLE[str(view.target)](self.b, view, *args, **kwargs)
        self.views[node] = (storage, chain, self.versions.get(storage, 0))
        return v

    def _assign(self, buffer_value, new_value):
        """An op of the current node writes `new_value` into its operand of
        value `buffer_value` (BatchNorm's running statistics): a buffer holds
        it after the step; a tensor the forward made (InstanceNorm's
        repeated statistics) is read as it from then on."""
        root = self.written.get(buffer_value, buffer_value)
        tensor = self.buffers.get(root)
        if tensor is not None:
            self.g.assign(tensor, new_value)
            # later reads of the buffer see the write, as eager's do (a
            # BatchNorm called twice updates its first update)
            bases = [n for n, v in self.placeholders.items() if v == root]
            for node in list(self.env):
                if node in bases or _is_inplace(node) and _written(node) in bases:
                    self.env[node] = new_value
            self.written[new_value] = root
            return
        operands = [a for a in self.current.all_input_nodes if self.env.get(a) == buffer_value]
        if not operands or any(a.op == "placeholder" and self.roles[a][0] != "data"
                               for a in operands):
            raise Unsupported("a write to a tensor that is not one of the model's buffers")
        for a in operands:
            self.env[a] = new_value

    def value(self, x):
        if isinstance(x, torch.fx.Node):
            seen = self.views.get(x)
            if seen is not None and self.versions.get(seen[0], 0) != seen[2]:
                self.env[x] = self._view_again(x, *seen[:2])
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
        # Writes through views change their base without being its value:
        # make_fx keeps reading the base's own node after them.
        mutating = {n for n in self.gm.graph.nodes
                    if _written(n) is not None
                    or n.op == "call_function"
                    and str(n.target) == "aten.native_batch_norm.default"
                    or _is_inplace(n) and _view_chain(n)[0] is not None}
        live = _live(self.gm, mutating)
        self.b.live = live
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
                if _is_inplace(node) and not _changes_view_only(node) \
                        and self.current_write is None:
                    self._wrote(node, self.env[node])  # the whole tensor, not through a view
                self.current_write = None
                if _is_view(node) or _is_inplace(node):  # its elements are a storage's
                    storage, chain = _storage(node)
                    self.views[node] = (storage, chain, self.versions.get(storage, 0))
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
                target = node.args[0].target
                if "with_indices" in str(target):
                    raise Unsupported(f"the indices (result {index}) of {target} are not "
                                      f"supported by wholestep, only its values")
                raise Unsupported(f"result {index} of {target} is not supported by wholestep")
            return out
        name = str(node.target)
        fn = TABLE.get(name)
        if fn is None:
            raise Unsupported(f"the torch op {name} is not supported by wholestep "
                              f"(its operands: {self.describe(node.args)})")
        base, chain = _view_chain(node) if _is_inplace(node) else (None, [])
        if base is not None:
            return self.write_through_views(node, fn, base, chain)
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
        out = self.untracked(node, fn(self.b, node, *args, **kwargs), args[0])
        if untracked_from_tracked(node) and isinstance(out, Value):
            # computed under no_grad or detached: no gradient crosses it
            out = self.b.unary("stop_gradient", out)
        if writes:
            self._assign(self.env[target], out)
        self.check(node, out)
        return out

    def untracked(self, node, out, operand):
        """`out`, the value an in-place op writes into `operand`; for a
        write under torch.no_grad() into a tensor that tracks gradients
        (_grad_flow.untracked_write), with eager's gradient: the tensor's
        passes on as if the write had not been, the op's operands get none
        (`a[:, 1:] += v` leaves v.grad None and a's gradient whole)."""
        if not untracked_write(node):
            return out
        if not (isinstance(out, Value) and isinstance(operand, Value)
                and self.b.type(out) == self.b.type(operand)):
            raise Unsupported(f"{node.target} under torch.no_grad() into a tensor that requires "
                              f"gradients, writing {self.describe(node.args)}: only a write of "
                              f"the tensor's own type and shape is translated")
        return self.b.op("straight_through", [out, operand])

    def write_through_views(self, node, fn, base, chain):
        """An in-place op on slices and selections of `base`: the op's value
        on the view, scattered into the base's value (a select of the view's
        new elements and the base's others), which later reads of the base
        see; a buffer holds it after the step."""
        name = str(node.target)
        # Views of the whole tensor (reshapes, permutations) nearest the
        # write are undone on the written value; the views from the base to
        # them must be slices and selections.
        n_whole = 0
        while n_whole < len(chain) and str(chain[-1 - n_whole].target) in _WHOLE_VIEWS:
            n_whole += 1
        region_chain, whole_chain = chain[:len(chain) - n_whole], chain[len(chain) - n_whole:]
        for v in region_chain:
            if str(v.target) not in _REGION_VIEWS:
                raise Unsupported(f"{name} writes in place through a view made by {v.target}; "
                                  f"only writes into slices and selections (x[a:b] = ..., "
                                  f"x[i] = ...), reshapes and permutations of them are "
                                  f"translated")
        role = self.roles.get(base, ("", None))[0] if base.op == "placeholder" else None
        if role not in (None, "data", "buffer"):
            raise Unsupported(f"{name} writes to the {role} '{self.roles[base][1]}' in place; only "
                              f"buffers may be written")
        args = self.materialize(self.value(node.args))
        kwargs = {k: self.materialize(self.value(v)) for k, v in node.kwargs.items()}
        result = self.untracked(node, fn(self.b, node, *args, **kwargs), args[0])
        b = self.b
        out = result
        for v in reversed(whole_chain):  # the written value in each view's source's shape
            out = _undo_whole_view(b, v, out)
        before = self.latest.get(_storage(base)[0], self.env[base])
        shape = b.shape(before)
        lo, hi, dims = [0] * len(shape), list(shape), list(range(len(shape)))
        for v in chain:  # the region of the base the view is
            if str(v.target) == "aten.slice.Tensor":
                _, dim, start, end, step = (list(v.args) + [0, None, None, 1][len(v.args) - 1:])[:5]
                d = dims[dim % len(dims)]
                n = hi[d] - lo[d]
                start = 0 if start is None else (start + n if start < 0 else start)
                end = n if end is None else (end + n if end < 0 else end)
                start, end = max(0, min(start, n)), max(0, min(end, n))
                if step != 1:
                    raise Unsupported(f"{name} writes in place into a slice of step {step} "
                                      f"(only step 1)")
                lo[d], hi[d] = lo[d] + start, lo[d] + max(start, end)
            elif str(v.target) == "aten.select.int":
                dim, index = v.args[1], v.args[2]
                d = dims.pop(dim % len(dims))
                lo[d] += index % (hi[d] - lo[d])
                hi[d] = lo[d] + 1
        region = [h - l for l, h in zip(lo, hi)]
        value = b.convert(b.reshape(out, region), b.dtype(before))
        mask = b.full(1.0, "bool", region)
        for d in range(len(shape)):  # both placed in the base's shape
            pads = [(lo[d], 0.0), (shape[d] - hi[d], 0.0)]
            if any(size for size, _ in pads):
                parts = []
                for x in (value, mask):
                    around = []
                    for size, fill in pads:
                        s = b.shape(x)
                        s[d] = size
                        around.append(b.full(fill, b.dtype(x), s) if size else None)
                    parts.append(b.op("concat", [p for p in (around[0], x, around[1])
                                                 if p is not None], axis=d))
                value, mask = parts
        after = b.select(mask, value, before)
        self.env[base] = after
        self._wrote(node, after)
        if role == "buffer":
            self._assign(self.placeholders[base], after)
        return result

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
