"""Train unmodified PyTorch models as one compiled step.

    import wholestep.torch as wst
    step = wst.compile_train_step(model, opt, loss_fn=torch.nn.functional.cross_entropy)
    for x, y in loader:
        loss = step(x, y)        # forward, backward and the optimizer update
    predict = wst.compile_forward(model)

The model's forward and the loss are traced once per input signature (and
per train/eval state and optimizer structure) into wholestep's IR, with the
model's parameters, buffers and the optimizer's state bound where torch
keeps them: the step updates them in place, no copies. docs/pytorch.md
says what is supported and what differs from eager torch.
"""


import torch

from . import _C, _capture
from ._ir import Value, ir_dtype
from ._import import Importer
from ._optim import Optimizer, OptimizerError

Error = _C.Error

_MODES = ("single_graph", "three_graph", "interpret")


def _bound(name, t, what):
    """The _C.Tensor over torch tensor `t`'s storage, or an Error naming it."""
    if not isinstance(t, torch.Tensor):
        raise Error(f"{what} '{name}' is a {type(t).__name__}, not a torch.Tensor")
    dtype = ir_dtype(t.dtype)
    problems = []
    if t.device.type != "cpu":
        problems.append(f"on {t.device}")
    if dtype is None:
        problems.append(f"of dtype {t.dtype}")
    if not t.is_contiguous():
        problems.append("not contiguous")
    if t.requires_grad and t.grad_fn is not None:
        problems.append("the result of a differentiable computation")
    if problems:
        raise Error(f"{what} '{name}' {list(t.shape)} is {', '.join(problems)}: wholestep binds "
                    f"float32 (or int64, bool) contiguous CPU tensors")
    return _C.borrow(t.data_ptr(), dtype, list(t.shape), t)


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
        out.append((t.data_ptr(), dtype, list(t.shape)))
    return out


def _model_inputs(params, buffers, trained, types, binding):
    """What the placeholders of a traced model are, in their order (the
    importer's `inputs`): the parameters (role param if their name is in
    `trained`, else buffer), the buffers, then data arguments of `types`;
    and example tensors of those types to trace with. Records the bound
    tensors in `binding`."""
    binding.tensors.clear()
    inputs = []
    for name, t in params.items():
        role = "param" if name in trained else "buffer"
        inputs.append(("persistent", role, name, _bound(name, t.detach(), "parameter")))
        binding.add(t)
    for name, t in buffers.items():
        inputs.append(("persistent", "buffer", name, _bound(name, t, "buffer")))
        binding.add(t)
    examples = []
    for dtype, shape in types:
        inputs.append(("data", dtype, list(shape)))
        examples.append(torch.empty(shape, dtype=_TORCH_DTYPES[dtype]))
    return inputs, examples


def _modes(model):
    return tuple(m.training for m in model.modules())


class _Binding:
    """The torch tensors a compiled step is bound to, to check before each
    step that they are still where they were (load_state_dict on the
    optimizer, or `p.data = ...`, replaces them)."""

    def __init__(self):
        self.tensors = []

    def add(self, t):
        self.tensors.append((t, t.data_ptr()))

    def valid(self, current):
        if len(current) != len(self.tensors):
            return False
        return all(a is t and t.data_ptr() == p for a, (t, p) in zip(current, self.tensors))


class TrainStep:
    """One training step of a torch model, compiled. Call it with the model's
    inputs then the loss function's targets; returns the loss (a 0-d
    tensor) computed before the update."""

    def __init__(self, model, opt, loss_fn, mode, num_inputs, options):
        if not isinstance(model, torch.nn.Module):
            raise Error(f"compile_train_step: model is a {type(model).__name__}, not a "
                        f"torch.nn.Module")
        if mode not in _MODES:
            raise Error(f"compile_train_step: mode '{mode}' is not one of {', '.join(_MODES)}")
        if num_inputs < 0:
            raise Error(f"compile_train_step: num_inputs must be >= 0, got {num_inputs}")
        try:
            self._opt = Optimizer(opt)
        except OptimizerError as e:
            raise Error(f"compile_train_step: {e}") from None
        self.model, self.optimizer, self.loss_fn = model, opt, loss_fn
        self.mode, self.num_inputs = mode, num_inputs
        self._options = dict(options, mode=mode)
        self._steps = {}  # (train/eval modes, optimizer structure) -> (_C.TrainStep, _Binding)
        self._last = None
        names = {id(p): n for n, p in model.named_parameters()}
        for i, p in enumerate(self._opt.params()):
            if id(p) not in names:
                raise Error(f"compile_train_step: the optimizer's parameter {i} "
                            f"{list(p.shape)} is not a parameter of the model")
        self._names = names

    # What each compiled step reads, in the order of its inputs.
    def _persistent(self):
        model = self.model
        opt_params = {id(p): i for i, p in enumerate(self._opt.params())}
        params = dict(model.named_parameters())
        buffers = dict(model.named_buffers())
        order = [n for n, p in params.items() if id(p) in opt_params]
        return params, buffers, order

    def _compile(self):
        params, buffers, order = self._persistent()
        index = {id(params[n]): i for i, n in enumerate(order)}
        state, undo = self._opt.state(lambda p: self._names[id(p)])
        try:
            groups = self._opt.groups(lambda p: index[id(p)])
            binding = _Binding()
            compiled = _C.TrainStep(self._tracer(params, buffers, order, state, groups, binding),
                                    groups, self._options)
        except BaseException:
            undo()
            raise
        return compiled, binding, undo

    def _tracer(self, params, buffers, order, state, groups, binding):
        n_in = self.num_inputs
        loss_fn = self.loss_fn

        def program(model_call, *args):
            return loss_fn(model_call(*args[:n_in]), *args[n_in:])

        def trace(types):
            g = _C.Graph()
            inputs, examples = _model_inputs(params, buffers, set(order), types, binding)
            # The optimizer's state, group after group, param-major; then
            # its hyperparameters: the order append_step reads them in.
            for name, t in state:
                g.persistent("opt_state", name, _bound(name, t, "optimizer state"))
                binding.add(t)
            # Named per group after the first (the names identify inputs).
            for gi, group in enumerate(groups):
                for h in group["hyper_names"]:
                    g.hyper(h if gi == 0 else f"group{gi}.{h}")
            gm = _capture.trace(self.model, dict(params), dict(buffers), program, examples)
            sync = self._options.get("sync_batch_norm") and self._options.get("data_parallel")
            loss = Importer(gm, g, inputs, _C.process_group()[1] if sync else 1).run()
            if not isinstance(loss, Value) or g.type(loss)[1] != () \
                    or g.type(loss)[0] not in ("f32", "f64"):
                raise Error("compile_train_step: the loss function must return a 0-d "
                            "floating-point tensor")
            g.output("loss", loss, "loss")
            return g.finish()

        return trace

    def _current(self):
        """The tensors a compiled step would bind now, in its binding's order
        (without creating missing optimizer state: its absence is a change)."""
        model = self.model
        return list(model.parameters()) + list(model.buffers()) + self._opt.state_tensors()

    def __call__(self, *args):
        if len(args) < self.num_inputs:
            raise Error(f"train step: {len(args)} arguments for a model taking "
                        f"{self.num_inputs} inputs")
        key = (_modes(self.model), self._opt.structure())
        entry = self._steps.get(key)
        if entry is not None and not entry[1].valid(self._current()):
            entry = None  # a bound tensor was replaced: bind again
        data = _data_args(args, "train step")
        undo = None
        if entry is None:
            compiled, binding, undo = self._compile()
            entry = self._steps[key] = (compiled, binding)
        try:
            loss, skipped, _ = entry[0].run(data, self._opt.hypers())
        except BaseException:
            if undo is not None:
                del self._steps[key]
                undo()
            raise
        if not skipped:
            self._opt.stepped()
            # The count torch's lr schedulers check to see that the
            # optimizer stepped (torch.optim.lr_scheduler wraps
            # optimizer.step to increment it; the compiled step is that step).
            if hasattr(self.optimizer, "_step_count"):
                self.optimizer._step_count += 1
        self._last = entry[0]
        return torch.tensor(loss, dtype=torch.float32)

    def profile(self, *args, steps=10):
        """One step on this batch (compiling it if it is new), then `steps`
        more timed kernel by kernel; all of them train. Returns {"step_ms":
        median, "kernels": [(name, calls, ms, flops)], "programs": [(name,
        ms)], "chrome_trace": JSON}."""
        self(*args)
        step = self._step()
        out = step.profile(_data_args(args, "profile"), self._opt.hypers(), steps)
        if hasattr(self.optimizer, "_step_count"):
            self.optimizer._step_count += steps
        self._opt.stepped()
        return out

    def _step(self):
        if self._last is None:
            raise Error("the step has not run yet: nothing was compiled")
        return self._last

    def stats(self):
        """Counters of the last step: graphs, kernels, bytes_copied,
        interface_bytes, arena_bytes, persistent_bytes, peak_bytes, flops."""
        return self._step().stats()

    def graphs_text(self):
        """The IR of the graphs the last step ran, as their Programs run them."""
        return self._step().graphs_text()

    def explain(self):
        """What the forward keeps for the backward and what it recomputes."""
        return self._step().partition_report()

    def traces(self):
        """How many times the model was traced (once per input signature,
        train/eval state and optimizer structure)."""
        return sum(s.traces() for s, _ in self._steps.values())

    def gradients(self):
        """three_graph: {parameter name: its gradient in the last step} (a
        copy; the graphs pass them between backward and optimizer). The
        other modes never hold them whole: an Error."""
        if self.mode != "three_graph":
            raise Error(f"gradients() needs mode three_graph, not {self.mode}: "
                        f"{self.mode} never holds the gradients whole")
        prefix = "grad."
        return {k[len(prefix):]: torch.from_numpy(v)
                for k, v in self._step().gradients().items()}

    def bound_storage(self):
        """{input name: address} of the memory the last step's parameters,
        buffers and optimizer state are bound to: the torch tensors' own."""
        return dict(self._step().bound_storage())


_TORCH_DTYPES = {"f32": torch.float32, "f64": torch.float64, "i64": torch.int64,
                 "bool": torch.bool}


def compile_train_step(model, optimizer, loss_fn, mode="single_graph", num_inputs=1,
                       **options):
    """A compiled training step of `model` with `optimizer` (torch.optim.SGD,
    Adam or AdamW): step(*inputs, *targets) computes
    loss_fn(model(*inputs), *targets), its gradients and the update, and
    returns the loss. `num_inputs`: how many leading arguments the model
    takes. `options`: wholestep's StepOptions (fuse, recompute,
    memory_budget, on_nonfinite, max_cached, adapt_threads, aliasing,
    data_parallel, bucket_bytes, sync_batch_norm). With data_parallel=True, under `mpirun`,
    each process passes its own part of the global batch and the step
    averages the gradients (and the loss it returns) over the processes
    inside the compiled step (docs/distributed.md)."""
    return TrainStep(model, optimizer, loss_fn, mode, num_inputs, options)


class Forward:
    """The model's forward in eval mode, compiled, over the same storage."""

    def __init__(self, model):
        if not isinstance(model, torch.nn.Module):
            raise Error(f"compile_forward: model is a {type(model).__name__}, not a "
                        f"torch.nn.Module")
        self.model = model
        self._compiled = None

    def _trace(self, binding):
        def trace(types):
            model = self.model
            params = dict(model.named_parameters())
            buffers = dict(model.named_buffers())
            g = _C.Graph()
            inputs, examples = _model_inputs(params, buffers, (), types, binding)
            modes = [(m, m.training) for m in model.modules()]
            model.eval()
            try:
                gm = _capture.trace(model, params, buffers, lambda call, *a: call(*a), examples)
            finally:
                for m, training in modes:
                    m.training = training
            out = Importer(gm, g, inputs).run()
            if not isinstance(out, Value):
                raise Error("compile_forward: the model must return one tensor")
            g.output("user", out, "output")
            return g.finish()

        return trace

    def __call__(self, *args):
        current = list(self.model.parameters()) + list(self.model.buffers())
        if self._compiled is None or not self._compiled[1].valid(current):
            binding = _Binding()
            self._compiled = (_C.Forward(self._trace(binding)), binding)
        out = self._compiled[0].run(_data_args(args, "forward"))
        return torch.from_numpy(out)


def compile_forward(model):
    """`model`'s forward in eval mode (BatchNorm's running statistics, no
    dropout), compiled; call it with the model's inputs."""
    return Forward(model)


def process_group():
    """(rank, world size) of this process among those `mpirun` started
    ((0, 1) when it started alone), joining the group (MPI) if need be."""
    return _C.process_group()


def set_num_threads(n):
    """Threads of the pool wholestep and oneDNN share (torch's too, when it
    uses the same OpenMP runtime, as Debian's does)."""
    _C.set_num_threads(n)


__all__ = ["compile_train_step", "compile_forward", "TrainStep", "Forward", "Error",
           "set_num_threads", "process_group"]
