"""torch.optim optimizers as wholestep update groups.

The compiled step reads and writes the optimizer's own state tensors, with
torch's names and layouts (``momentum_buffer``; ``step``, ``exp_avg``,
``exp_avg_sq``, ``max_exp_avg_sq``), so ``opt.state_dict()`` is what torch
would hold and eager torch can continue from it. Hyperparameters are read
from ``opt.param_groups`` before every step; only which terms exist (a
momentum, a weight decay, nesterov, amsgrad, maximize) is compiled in.
"""

import torch

from . import _C

# Keys torch's lr schedulers add to a param group (OneCycleLR, CyclicLR,
# SWALR, ...): their bookkeeping, which the update never reads; what they
# change (lr, momentum, betas) is read before every step.
_SCHEDULER_KEYS = {"initial_lr", "max_lr", "min_lr", "max_momentum", "base_momentum",
                   "swa_lr"}
# The state of a parameter that has none (read only).
_NO_STATE = {}
_SGD_OPTIONS = {"lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize",
                "foreach", "differentiable", "params"} | _SCHEDULER_KEYS
_ADAM_OPTIONS = {"lr", "betas", "eps", "weight_decay", "amsgrad", "maximize", "foreach",
                 "capturable", "differentiable", "fused", "params"} | _SCHEDULER_KEYS


class OptimizerError(_C.Error):
    """An optimizer wholestep does not compile (a wholestep.Error)."""


def _kind(opt):
    # AdamW is checked first: it is not a subclass of Adam in torch 1.13,
    # but a user's subclass of either would be a different rule.
    for cls, kind in ((torch.optim.AdamW, "adamw"), (torch.optim.Adam, "adam"),
                      (torch.optim.SGD, "sgd")):
        if type(opt) is cls:
            return kind
    raise OptimizerError(
        f"the optimizer {type(opt).__module__}.{type(opt).__qualname__} is not supported: "
        f"wholestep compiles torch.optim.SGD, Adam and AdamW")


class Optimizer:
    """Reads `opt`'s groups. A step updates the parameters of a plan: per
    param group, those that get a gradient ([(group index, [params])],
    from plan()); the others are left alone with no state, as torch skips
    a parameter whose .grad is None.

    `clip_grad_norm` (None: off) clips every gradient of the plan together
    first, as torch.nn.utils.clip_grad_norm_ over the optimizer's
    parameters; with `error_if_nonfinite`, a step whose gradients' norm is
    not finite applies no update. The plan's first update group carries
    both (the step clips every group's gradients together, by its
    max_grad_norm)."""

    def __init__(self, opt, clip_grad_norm=None, error_if_nonfinite=False):
        self.opt = opt
        self.kind = _kind(opt)
        self.clip_grad_norm = clip_grad_norm
        self.error_if_nonfinite = error_if_nonfinite
        # SGD: ids of parameters whose momentum buffer we made and no step
        # has used yet (torch's first step makes the buffer the gradient).
        self._first = set()
        # state_tensors' last lookup: (plan, opt.state, its version tag,
        # the plan's slots, [(a parameter's state dict, slot)]).
        self._state_dicts = None
        for i, group in enumerate(opt.param_groups):
            allowed = _SGD_OPTIONS if self.kind == "sgd" else _ADAM_OPTIONS
            unknown = sorted(set(group) - allowed)
            if unknown:
                raise OptimizerError(f"param group {i} has options wholestep does not know: "
                                     f"{', '.join(unknown)}")
            for flag in ("capturable", "differentiable", "fused"):
                if group.get(flag):
                    raise OptimizerError(f"param group {i}: {flag}=True is not supported")

    def params(self):
        return [p for g in self.opt.param_groups for p in g["params"]]

    def structure(self):
        """What the compiled graph depends on (a change recompiles)."""
        out = [(self.clip_grad_norm is not None, self.error_if_nonfinite)]
        for g in self.opt.param_groups:
            if self.kind == "sgd":
                out.append((g["momentum"] != 0, g["nesterov"], g["weight_decay"] != 0,
                            g["maximize"], len(g["params"])))
            else:
                out.append((g["amsgrad"], g["weight_decay"] != 0, g["maximize"],
                            len(g["params"])))
        return tuple(out)

    def _missing(self, p, slot):
        st = self.opt.state.get(p)  # .get: opt.state is a defaultdict
        return st is None or st.get(slot) is None

    def plan(self, trained):
        """The update groups of a step training the parameters whose id is
        in `trained`: [(group index, [params])]. An SGD group whose momentum
        buffers exist for some parameters only (one was frozen before) is
        two update groups: the new buffers' first step differs."""
        out = []
        for gi, g in enumerate(self.opt.param_groups):
            if self.kind == "sgd" and g["nesterov"] and (g["momentum"] <= 0 or g["dampening"]):
                raise OptimizerError("SGD: nesterov needs a momentum and zero dampening")
            ps = [p for p in g["params"] if id(p) in trained]
            parts = [ps]
            if self.kind == "sgd" and g["momentum"] != 0:
                fresh = [p for p in ps if self._missing(p, "momentum_buffer")]
                parts = [fresh, [p for p in ps if not self._missing(p, "momentum_buffer")]]
            out += [(gi, part) for part in parts if part]
        return out

    def _slots(self, g):
        if self.kind == "sgd":
            return ["momentum_buffer"] if g["momentum"] != 0 else []
        return ["step", "exp_avg", "exp_avg_sq"] + (["max_exp_avg_sq"] if g["amsgrad"] else [])

    def _hyper_names(self, g):
        if self.kind == "sgd":
            names = ["lr"]
            if g["momentum"] != 0:
                names += ["momentum", "dampening_factor"]
            if g["weight_decay"] != 0:
                names.append("weight_decay")
            return names
        return ["lr", "beta1", "beta2", "eps"] + (["weight_decay"] if g["weight_decay"] != 0
                                                  else [])

    def _clips(self, i):
        """Whether the plan's update group `i` carries the clipping."""
        return i == 0 and self.clip_grad_norm is not None

    def groups(self, plan, param_index):
        """The update groups of `plan` for the extension module."""
        out = []
        for i, (gi, ps) in enumerate(plan):
            g = self.opt.param_groups[gi]
            clips = self._clips(i)
            out.append({
                "kind": self.kind,
                "momentum": self.kind == "sgd" and g["momentum"] != 0,
                "nesterov": self.kind == "sgd" and bool(g["nesterov"]),
                "weight_decay": g["weight_decay"] != 0,
                "amsgrad": self.kind != "sgd" and bool(g["amsgrad"]),
                "maximize": bool(g["maximize"]),
                "clip": clips,
                "skip_nonfinite_norm": clips and self.error_if_nonfinite,
                "state_slots": self._slots(g),
                "global_slots": [],
                "hyper_names": self._hyper_names(g) + (["max_grad_norm"] if clips else []),
                "params": [param_index(p) for p in ps],
            })
        return out

    def state(self, plan, name_of):
        """Creates the state torch would create at its first step of the
        plan's parameters, where it is missing (zeros; SGD's first step
        then makes the buffer the gradient, as torch does). Returns [(name,
        tensor)] in the order of the step's opt_state inputs, and an undo
        for a step that failed before it ran."""
        created = []
        out = []
        for gi, ps in plan:
            slots = self._slots(self.opt.param_groups[gi])
            for p in ps:
                for slot in slots:
                    if self._missing(p, slot):
                        self.opt.state[p][slot] = (
                            torch.tensor(0.0) if slot == "step"
                            else torch.zeros_like(p, memory_format=torch.preserve_format))
                        created.append((p, slot))
                        if slot == "momentum_buffer":
                            self._first.add(id(p))
                    out.append((f"{name_of(p)}.{slot}", self.opt.state[p][slot]))

        def undo():
            for p, slot in created:
                self._first.discard(id(p))
                del self.opt.state[p][slot]
                if not self.opt.state[p]:
                    del self.opt.state[p]
        return out, undo

    def state_tensors(self, plan):
        """The state tensors a step of `plan` binds, in state()'s order, as
        they are now: None where one is missing. This runs before every
        call: while opt.state is the dict it was, unchanged (its version
        tag), and the plan and its slots are the last call's, each
        parameter's state dict is the one found then, and only the slots
        are read again (a lookup keyed by a tensor hashes it in Python:
        0.1 ms a call on mobilenet_v2)."""
        state = self.opt.state
        slots = [self._slots(self.opt.param_groups[gi]) for gi, _ in plan]
        tag = _C.dict_version(state)
        c = self._state_dicts
        if tag is None or c is None or c[0] is not plan or c[1] is not state or c[2] != tag \
                or c[3] != slots:
            found = []
            for (_, ps), names in zip(plan, slots):
                for p in ps:
                    st = state.get(p, _NO_STATE)
                    found += [(st, slot) for slot in names]
            c = self._state_dicts = (plan, state, tag, slots, found)
        return [st.get(slot) for st, slot in c[4]]

    def hypers(self, plan):
        """This step's hyperparameters, update group after update group."""
        out = []
        for i, (gi, ps) in enumerate(plan):
            g = self.opt.param_groups[gi]
            if self.kind == "sgd":
                out.append(g["lr"])
                if g["momentum"] != 0:
                    out.append(g["momentum"])
                    out.append(1.0 if id(ps[0]) in self._first else 1.0 - g["dampening"])
                if g["weight_decay"] != 0:
                    out.append(g["weight_decay"])
            else:
                beta1, beta2 = g["betas"]
                out += [g["lr"], beta1, beta2, g["eps"]]
                if g["weight_decay"] != 0:
                    out.append(g["weight_decay"])
            if self._clips(i):
                out.append(self.clip_grad_norm)
        return [float(v) for v in out]

    def stepped(self):
        """A step's update was applied."""
        self._first.clear()
