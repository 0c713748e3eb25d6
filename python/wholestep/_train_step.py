"""wholestep.torch's TrainStep: the compiled steps of one model and
optimizer, one per input signature, and what they report (torch.py makes
it: compile_train_step)."""


import collections
import math
import warnings

import torch

from . import _C, _capture, _grad_flow, _guards
from ._binding import (_TORCH_DTYPES, _Binding, _bound, _check_bindable, _data_args, _examples,
                       _model_inputs)
from ._ir import Value
from ._import import Importer
from ._optim import Optimizer, OptimizerError

Error = _C.Error


def _modes(model):
    return tuple(m.training for m in model.modules())


class _Entry:
    """A compiled step: its _C.TrainStep, what it is bound to, the update
    groups it trains (Optimizer.plan) and the traced ATen graph, which a
    rebinding of the same key reuses."""

    def __init__(self, step, binding, plan, gm, loss_dtype):
        self.step, self.binding, self.plan, self.gm = step, binding, plan, gm
        self.loss_dtype = loss_dtype  # the loss function's: float32 or float64


# What a compiled step's key holds, in its order (the recompile warning
# names the part that changed).
_KEY_PARTS = ("the input signature", "the optimizer's structure",
              "a parameter's requires_grad", "a module's attributes or train/eval state")


class TrainStep:
    """One training step of a torch model, compiled. Call it with the model's
    inputs then the loss function's targets; returns the loss (a 0-d
    tensor) computed before the update. Calls from several threads run one
    at a time (with those of every step and forward of the same model)."""

    def __init__(self, model, opt, loss_fn, mode, num_inputs, options, clip_grad_norm=None,
                 error_if_nonfinite=False):
        if not isinstance(model, torch.nn.Module):
            raise Error(f"compile_train_step: model is a {type(model).__name__}, not a "
                        f"torch.nn.Module")
        if not isinstance(num_inputs, int) or num_inputs < 0:
            raise Error(f"compile_train_step: num_inputs must be an int >= 0, got {num_inputs!r}")
        _guards.check_clipping(clip_grad_norm, error_if_nonfinite, "compile_train_step")
        # Every step option, checked as the step layer checks them.
        options = _guards.step_options(dict(options, mode=mode), "compile_train_step")
        _guards.check_autocast("compile_train_step")
        try:
            self._opt = Optimizer(opt, clip_grad_norm, error_if_nonfinite)
        except OptimizerError as e:
            raise Error(f"compile_train_step: {e}") from None
        self.model, self.optimizer, self.loss_fn = model, opt, loss_fn
        self.mode, self.num_inputs = mode, num_inputs
        # A non-finite loss is reported here, after the step's bookkeeping
        # (the optimizer's step count, its state kept): the step layer
        # would raise before it.
        self._on_nonfinite = options["on_nonfinite"]
        nonfinite = "ignore" if self._on_nonfinite == "error" else self._on_nonfinite
        self._options = dict(options, on_nonfinite=nonfinite)
        self._max_cached = options["max_cached"]
        # accumulate=k: the gradient sums and the cycle's position, shared
        # by the compiled step of every key (a short last batch continues
        # the cycle).
        self._accumulate = options["accumulate"]
        self._accumulation = _C.Accumulation()
        self._warn_after = options["recompile_warning"]
        # key -> _Entry, least recently used first. Each _C.TrainStep
        # compiles one key, so this bounds them all (max_cached).
        self._steps = collections.OrderedDict()
        self._traces = 0
        self._stepped = 0  # steps applied (not skipped), over every compiled key
        self._last_key = None
        self._last = None
        self._lock = _guards.model_lock(model)
        self._view = _guards.ModelViews(model, "train step")
        names = {id(p): n for n, p in model.named_parameters()}
        for i, p in enumerate(self._opt.params()):
            if id(p) not in names:
                raise Error(f"compile_train_step: the optimizer's parameter {i} "
                            f"{list(p.shape)} is not a parameter of the model")
        self._names = names

    def _key(self, data, params, state):
        return (tuple((d, tuple(s)) for _, d, s in data), self._opt.structure(),
                tuple([p.requires_grad for p in params]), state)

    def _program(self):
        n_in, loss_fn = self.num_inputs, self.loss_fn

        def program(model_call, *args):
            return loss_fn(model_call(*args[:n_in]), *args[n_in:])

        return program

    def _compile(self, key, data, old):
        """A new _Entry for `key` (`old`: the entry of the same key bound to
        tensors since replaced, whose trace serves), and an undo of the
        optimizer state it created, for a first step that fails before it
        runs. Raises before changing anything on an error of the model."""
        model = self.model
        params = dict(model.named_parameters())
        buffers = dict(model.named_buffers())
        names = {id(p): n for n, p in params.items()}
        for i, p in enumerate(self._opt.params()):
            if id(p) not in names:
                raise Error(f"train step: the optimizer's parameter {i} "
                            f"('{self._names.get(id(p), '?')}' {list(p.shape)}) is no longer "
                            f"a parameter of the model (was its module replaced after the "
                            f"optimizer was made?); make the optimizer and the step again over "
                            f"the model's parameters")
        _guards.check_sparse_gradients(model, self.optimizer)
        for name, t in params.items():
            _check_bindable(name, t.detach(), "parameter")
        for name, t in buffers.items():
            _check_bindable(name, t, "buffer")
        types = [(d, s) for _, d, s in data]
        gm = old.gm if old is not None else _capture.trace(
            model, dict(params), dict(buffers), self._program(), _examples(types))
        # Trained: what the optimizer holds and the loss gives a gradient
        # (torch skips a parameter whose .grad is None: no update, no state).
        order = list(params)
        held = {id(p) for p in self._opt.params()}
        trained = {id(params[order[i]]) for i in _grad_flow.loss_parameters(gm, len(params))}
        plan = self._opt.plan(trained & held)
        planned = {id(p) for _, ps in plan for p in ps}
        trained_names = [n for n, p in params.items() if id(p) in planned]
        index = {id(params[n]): i for i, n in enumerate(trained_names)}
        groups = self._opt.groups(plan, lambda p: index[id(p)])
        state, undo = self._opt.state(plan, lambda p: names[id(p)])
        try:
            binding = _Binding()
            loss_dtypes = []
            build = self._builder(gm, params, buffers, trained_names, state, groups, types,
                                  binding, loss_dtypes)
            built = [build()]  # import errors before the step layer runs anything

            def trace(called_types):
                return built.pop() if built else build()

            step = _C.TrainStep(trace, groups, self._options, self._accumulation)
        except BaseException:
            undo()
            raise
        return _Entry(step, binding, plan, gm, _TORCH_DTYPES[loss_dtypes[0]]), undo

    def _builder(self, gm, params, buffers, trained_names, state, groups, types, binding,
                 loss_dtypes):
        sync = self._options.get("sync_batch_norm") and self._options.get("data_parallel")
        world = _C.process_group()[1] if sync else 1

        def build():
            g = _C.Graph()
            inputs = _model_inputs(params, buffers, set(trained_names), types, binding)
            # The optimizer's state, update group after group, param-major;
            # then its hyperparameters: the order append_step reads them in.
            for name, t in state:
                g.persistent("opt_state", name, _bound(name, t, "optimizer state"))
                binding.add(t)
            # Named per group after the first (the names identify inputs).
            for gi, group in enumerate(groups):
                for h in group["hyper_names"]:
                    g.hyper(h if gi == 0 else f"group{gi}.{h}")
            loss = Importer(gm, g, inputs, world).run()
            if not isinstance(loss, Value) or g.type(loss)[1] != () \
                    or g.type(loss)[0] not in ("f32", "f64"):
                raise Error("compile_train_step: the loss function must return a 0-d "
                            "floating-point tensor")
            # Returned in its own dtype, as torch returns it.
            loss_dtypes.append(g.type(loss)[0])
            g.output("loss", loss, "loss")
            return g.finish()

        return build

    def _current(self, params, buffers, plan):
        """The tensors a compiled step of `plan` would bind now (`params`,
        `buffers`: the model's), in its binding's order (without creating
        missing optimizer state: its absence is a change)."""
        return params + buffers + self._opt.state_tensors(plan)

    def _counted(self, key):
        """Counts a trace, warning past recompile_warning with what changed."""
        self._traces += 1
        if self._traces > self._warn_after:
            last = self._last_key
            changed = [part for part, a, b in zip(_KEY_PARTS, key, last or key) if a != b]
            why = ("a bound tensor was replaced (p.data = ..., or the optimizer's "
                   "load_state_dict)" if last == key else f"{', '.join(changed)} changed")
            warnings.warn(f"wholestep: the train step has been traced {self._traces} times "
                          f"(this time: {why}); each change of the input signature, "
                          f"train/eval state, module attributes, requires_grad, optimizer "
                          f"structure or bound tensors traces and compiles again",
                          RuntimeWarning, stacklevel=3)

    def __call__(self, *args):
        _guards.check_autocast("train step")
        with self._lock:
            if len(args) < self.num_inputs:
                raise Error(f"train step: {len(args)} arguments for a model taking "
                            f"{self.num_inputs} inputs")
            data = _data_args(args, "train step")
            spectral = []
            state, params, buffers = self._view(spectral)
            key = self._key(data, params, state)
            # Ctrl-C waits for the step's effects to be whole (the update,
            # the optimizer's state and step count all, or none of them).
            with _guards.sigint_held():
                threads = _guards.follow_torch_threads()
                try:
                    loss, norm, updated, loss_dtype = self._run(key, data, params, buffers)
                finally:
                    _guards.restore_torch_threads(threads)
                _guards.refresh_spectral_norms(spectral)
            step_count = self._stepped
            calls = self._accumulation.calls
        if self._opt.error_if_nonfinite and norm is not None and not math.isfinite(norm):
            dropped = (f"; the gradients summed over the cycle (accumulate={self._accumulate}) "
                       f"are dropped, as opt.zero_grad() would" if self._accumulate > 1 else "")
            raise Error(f"step {step_count + 1}: the total norm of the gradients is {norm}, so "
                        f"they cannot be clipped (clip_grad_norm={self._opt.clip_grad_norm}, "
                        f"error_if_nonfinite=True): the update was not applied, the parameters "
                        f"and the optimizer's state are as they were (as torch's "
                        f"clip_grad_norm_ raises before optimizer.step()){dropped}. To clip by "
                        f"the non-finite norm anyway, set error_if_nonfinite=False")
        if self._on_nonfinite == "error" and not math.isfinite(loss):
            what = ("the step's update has been applied" if updated or calls == 0 else
                    f"its gradients have been added to those summed for the next update "
                    f"(call {calls} of accumulate={self._accumulate})")
            raise Error(f"step {step_count}: the loss is {loss}; {what} (as torch's would "
                        f"be). Lower the learning rate or check the data, or skip such steps "
                        f"(on_nonfinite='skip')")
        return torch.tensor(loss, dtype=loss_dtype)

    def _run(self, key, data, params, buffers):
        entry = self._steps.get(key)
        undo = None
        if entry is None or not entry.binding.valid(self._current(params, buffers, entry.plan)):
            fresh, undo = self._compile(key, data, entry)
            self._counted(key)
        else:
            fresh = None
            self._steps.move_to_end(key)
        current = fresh or entry
        if self._options["zero"] and self._last is not None and self._last is not current:
            # ZeRO: the step that trained last holds the optimizer state in
            # its shards; this one takes it over from torch's tensors.
            self._last.step.gather_optimizer_state()
        try:
            loss, _, _, norm, updated = current.step.run(data, self._opt.hypers(current.plan))
        except BaseException:
            if undo is not None:
                undo()  # it failed before it ran: nothing changed
            raise
        if fresh is not None:
            # The replaced entry (rebinding) or the least recently used
            # goes: at most max_cached compiled steps live.
            self._steps.pop(key, None)
            while 0 < self._max_cached <= len(self._steps):
                self._steps.popitem(last=False)
            self._steps[key] = fresh
        self._last_key = key
        if updated:
            self._stepped += 1
            self._opt.stepped()
            # The count torch's lr schedulers check to see that the
            # optimizer stepped (torch.optim.lr_scheduler wraps
            # optimizer.step to increment it; the compiled step is that step).
            if hasattr(self.optimizer, "_step_count"):
                self.optimizer._step_count += 1
        self._last = current
        return loss, norm, updated, current.loss_dtype

    def profile(self, *args, steps=10):
        """One step on this batch (compiling it if it is new), then `steps`
        more timed kernel by kernel; all of them train. Returns {"step_ms":
        median, "kernels": [(name, calls, ms, flops)], "programs": [(name,
        ms)], "reorders": {"weights", "other", "transposes"} (the layout
        conversions a step makes), "chrome_trace": JSON}."""
        with self._lock:
            self(*args)
            entry = self._last
            with _guards.sigint_held():
                out = entry.step.profile(_data_args(args, "profile"),
                                         self._opt.hypers(entry.plan), steps)
                if hasattr(self.optimizer, "_step_count"):
                    self.optimizer._step_count += steps
                self._opt.stepped()
        return out

    def floor(self, *args, rounds=10):
        """The floor under the step compiled for this batch: each of its
        convolutions and matrix products alone, one oneDNN primitive
        reading and writing every operand in the layout it picks (or, for
        a convolution over NHWC images, reading them where they lie, if
        faster), timed over `rounds` passes on the whole pool; trains nothing. Returns
        {"ms": the sum, "parts": [(what, impl, calls, ms, flops)]}, most
        time first."""
        with self._lock:
            data = _data_args(args, "floor")
            state, params, _ = _guards.model_view(self.model, "floor")
            entry = self._steps.get(self._key(data, params, state))
            if entry is None:
                raise Error("floor: no step is compiled for this batch's shapes and "
                            "dtypes: run the step on it first")
            with _guards.sigint_held():
                return entry.step.floor(data, rounds)

    def _step(self):
        if self._last is None:
            raise Error("the step has not run yet: nothing was compiled")
        return self._last.step

    def stats(self):
        """Counters of the last step: graphs, kernels, bytes_copied,
        interface_bytes, arena_bytes, persistent_bytes, peak_bytes, flops,
        collectives, comm_bytes; grad_norm: with clip_grad_norm, the
        total 2-norm of the gradients before clipping (what
        torch.nn.utils.clip_grad_norm_ returns; None in a call that did
        not update), else None; updated: whether the optimizer updated;
        accumulated: with accumulate=k, the calls of the current cycle
        whose gradients the step holds summed after it (0 .. k-1; 0 after
        an update); threads: the team the step ran on (the pool, or one
        thread when adapt_threads found one faster)."""
        return self._step().stats()

    @property
    def accumulated(self):
        """accumulate=k: the calls of the current cycle whose gradients the
        step holds summed (0: the next call starts a cycle; k - 1: it
        updates)."""
        return self._accumulation.calls

    def state_dict(self):
        """What the step holds besides the model and the optimizer: with
        accumulate=k, the gradients summed in the current cycle, which
        neither model.state_dict() nor optimizer.state_dict() holds.
        {"accumulate": k, "accumulated": calls summed, "grads": {parameter
        name: sum}} (copies). Saved mid-cycle with the model and the
        optimizer and loaded back (load_state_dict), the cycle continues
        where it was; without it, the resumed run starts a new cycle."""
        with self._lock:
            return {"accumulate": self._accumulate, "accumulated": self._accumulation.calls,
                    "grads": {name: torch.from_numpy(a)
                              for name, a in self._accumulation.sums().items()}}

    def load_state_dict(self, state):
        """Continues the cycle `state` (state_dict()) was saved in. An Error,
        with nothing changed, when it was saved with another accumulate or
        a sum's shape or dtype is not the parameter's."""
        with self._lock:
            if not isinstance(state, dict) or set(state) != {"accumulate", "accumulated",
                                                              "grads"}:
                raise Error("load_state_dict: expected the dict TrainStep.state_dict() returns "
                            "({'accumulate', 'accumulated', 'grads'}), got "
                            f"{sorted(state) if isinstance(state, dict) else type(state)}")
            if state["accumulate"] != self._accumulate:
                raise Error(f"load_state_dict: the state was saved by a step with "
                            f"accumulate={state['accumulate']}, this one has "
                            f"accumulate={self._accumulate}")
            params = dict(self.model.named_parameters())
            sums = {}
            for name, t in state["grads"].items():
                p = params.get(name)
                if p is None or tuple(t.shape) != tuple(p.shape) or t.dtype != p.dtype:
                    have = "no such parameter" if p is None else \
                        f"the parameter is {p.dtype} {list(p.shape)}"
                    raise Error(f"load_state_dict: the gradient sum of '{name}' is "
                                f"{t.dtype} {list(t.shape)}; {have}")
                sums[name] = t.detach().contiguous().numpy()
            self._accumulation.load(self._accumulate, state["accumulated"], sums)

    @property
    def clip_grad_norm(self):
        """The total norm the gradients are clipped to (None: no
        clipping). Another number, set between steps, is read by the next
        step without recompiling; switching clipping on or off recompiles."""
        return self._opt.clip_grad_norm

    @clip_grad_norm.setter
    def clip_grad_norm(self, value):
        _guards.check_clipping(value, self._opt.error_if_nonfinite, "clip_grad_norm")
        self._opt.clip_grad_norm = value

    def options(self):
        """Every step option of the step, as the compiled step holds it
        ({name: value}; on_nonfinite as given: 'error' is raised here)."""
        return dict(self._options, on_nonfinite=self._on_nonfinite)

    def gather_optimizer_state(self):
        """zero=True: makes the optimizer's state tensors (torch's own,
        opt.state) current from every process's part, which the step keeps
        and updates between; call it on every process before reading them
        (opt.state_dict() for a checkpoint). The next step takes the state
        over again from them. Nothing to do otherwise."""
        with self._lock:
            if self._last is not None:
                self._last.step.gather_optimizer_state()

    def graphs_text(self):
        """The IR of the graphs the last step ran, as their Programs run them."""
        return self._step().graphs_text()

    def explain(self):
        """What the forward keeps for the backward and what it recomputes."""
        return self._step().partition_report()

    def traces(self):
        """How many times the model was traced and compiled (once per input
        signature, train/eval state, module attributes, requires_grad,
        optimizer structure, and again when a bound tensor was replaced)."""
        return self._traces

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
