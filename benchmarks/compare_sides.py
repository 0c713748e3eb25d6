"""The sides torchvision_compare.py times: torch eager, AOTAutograd and
wholestep's compiled step, each over its own copy of a model and its own
SGD optimizer (lr 0.01, momentum 0.9, weight decay 5e-4), a side's failure
kept as its row's result."""

import importlib.util
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_compare as pc  # noqa: E402  (TorchSide, the timing of eager steps)

SGD = dict(lr=0.01, momentum=0.9, weight_decay=5e-4)


def first_line(error):
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")


def make_sgd(model, foreach=None):
    import torch
    return torch.optim.SGD(model.parameters(), foreach=foreach, **SGD)


class Attempting:
    """A side whose failure is its row's result, not the run's: attempt()
    records the error's first line, and the side does nothing after."""

    error = None
    label = ""

    def attempt(self, what, *args):
        """Calls `what`; on an error, records its first line and returns None."""
        if self.error is not None:
            return None
        try:
            return what(*args)
        except Exception as e:  # noqa: BLE001 (any failure is a row's result)
            self.error = first_line(e)
            print(f"  {self.label}: {self.error}", file=sys.stderr, flush=True)
            return None


class EagerSide(pc.TorchSide):
    """torch eager, as pytorch_compare times it (zero_grad(set_to_none=True),
    forward, loss, backward, opt.step(), loss.item()), over a given model and
    batch; set_foreach and run serve pytorch_compare.warm_up_torch."""

    def __init__(self, model, batch):  # pylint: disable=super-init-not-called
        self.spec, self.model, (self.x, self.y) = None, model, batch
        self.opt = make_sgd(model, foreach=False)
        self.foreach = False


class AotSide(EagerSide, Attempting):
    """AOTAutograd as the seeds built it: functorch.compile.aot_module over
    the model (TorchScript forward and backward graphs, the min-cut
    partitioner), then torch's optimizer on the path eager picked; timed
    as eager is. Its first step traces and compiles."""

    def __init__(self, model, batch, foreach):
        from functorch.compile import aot_module, min_cut_rematerialization_partition, ts_compile
        super().__init__(model, batch)
        self.set_foreach(foreach)
        self.model = aot_module(model, fw_compiler=ts_compile, bw_compiler=ts_compile,
                                partition_fn=min_cut_rematerialization_partition)
        self.label = "aot"


def require_peers():
    """AOTAutograd's min-cut partitioner needs networkx; without it the
    table would lack the seeds' own design."""
    if importlib.util.find_spec("networkx") is None:
        sys.exit("torchvision_compare: AOTAutograd's min-cut partitioner needs networkx "
                 "(apt-get install python3-networkx; scripts/setup.sh installs it); "
                 "refusing to print a table without that peer")


class WholestepSide(Attempting):
    """compile_train_step in one mode, over its own copy of the model."""

    # A compiled step probes one thread now and then (docs/performance.md, "A
    # loaded machine"): the first probe once this many steps have run and a
    # second has passed; later ones far apart on a quiet machine.
    FIRST_PROBE_STEPS, FIRST_PROBE_S, SETTLE_MAX_S = 9, 1.5, 120

    def __init__(self, model, batch, loss_fn, mode):
        self.model, self.batch, self.loss_fn, self.mode = model, batch, loss_fn, mode
        self.label = f"wholestep {mode}"
        self.opt = make_sgd(model)
        self.compiled = None
        self.compile_s = self.first_loss = None
        self.error = None
        self.compiled_at = self.pool = None
        self.steps = 0  # since the compile
        self.teams = {}  # timed steps per team (threads)

    def compile(self):
        """The first step, capture and compilation included."""
        import torch
        import wholestep.torch as wst
        t0 = time.perf_counter()
        # Like eager, which never looks at the loss: a model that diverges on
        # the one batch it sees again and again (squeezenet1_1's dropout
        # makes every side's masks differ) keeps its row.
        self.compiled = wst.compile_train_step(self.model, self.opt, loss_fn=self.loss_fn,
                                               mode=self.mode, on_nonfinite="ignore")
        self.first_loss = self.step()
        self.compile_s = time.perf_counter() - t0
        self.compiled_at = time.perf_counter()
        self.pool = torch.get_num_threads()  # the step's pool follows torch's count

    def step(self):
        self.steps += 1
        return self.compiled(*self.batch)

    def run(self, steps):
        """Times `steps` steps (ms), counting the team each ran on."""
        times = []
        for _ in range(steps):
            times += pc.TorchSide.run(self, 1)
            team = self.compiled.stats()["threads"]
            self.teams[team] = self.teams.get(team, 0) + 1
        return times

    def fewer_threads(self):
        """The timed steps that ran on fewer threads than the pool."""
        return sum(n for team, n in self.teams.items() if team < self.pool)

    def settle(self, steps):
        """Warm-up: `steps` steps, and more until the step's first probe of
        one thread is over (FIRST_PROBE_STEPS steps and FIRST_PROBE_S seconds
        since the compile, the last step on the whole pool; at most
        SETTLE_MAX_S), so that timed steps are the ones a long run takes.
        Returns the step times (ms)."""
        times = pc.TorchSide.run(self, steps)
        deadline = time.perf_counter() + self.SETTLE_MAX_S
        while time.perf_counter() < deadline and (
                self.steps < self.FIRST_PROBE_STEPS
                or time.perf_counter() - self.compiled_at < self.FIRST_PROBE_S
                or self.compiled.stats()["threads"] != self.pool):
            times += pc.TorchSide.run(self, 1)
        return times
