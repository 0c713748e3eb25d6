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


from . import _C, _guards
from ._check import check
from ._compare import compare
from ._forward import Forward, compile_forward
from ._train_step import TrainStep

Error = _C.Error


def compile_train_step(model, optimizer, loss_fn, mode="single_graph", num_inputs=1,
                       clip_grad_norm=None, error_if_nonfinite=False, **options):
    """A compiled training step of `model` with `optimizer` (torch.optim.SGD,
    Adam or AdamW): step(*inputs, *targets) computes
    loss_fn(model(*inputs), *targets), its gradients and the update, and
    returns the loss. `num_inputs`: how many leading arguments the model
    takes.

    `clip_grad_norm`: clip the gradients by their total 2-norm inside the
    step before the update, as torch.nn.utils.clip_grad_norm_(the
    optimizer's parameters, clip_grad_norm) between backward and
    optimizer.step() would (None: no clipping); step.stats()["grad_norm"]
    is the norm before clipping. `error_if_nonfinite`: a step whose norm is
    inf or NaN applies no update and raises an Error (torch's).

    `mode` and `options` are the step options (docs/pytorch.md lists them;
    wholestep.torch.step_options() describes them; an unknown one is an
    Error naming the options):

"""
    return TrainStep(model, optimizer, loss_fn, mode, num_inputs, options, clip_grad_norm,
                     error_if_nonfinite)


def step_options():
    """The step options compile_train_step takes, one dict each: name,
    kind (flag, integer, number, choice), default, allowed (what a value
    must be), needs (the flag option without which it has no effect, or
    '') and meaning; from include/wholestep/step_options.def, which the
    command line's flags and the docs' tables come from too."""
    return [{k: o[k] for k in ("name", "kind", "default", "allowed", "needs", "meaning")}
            for o in _C.step_option_schema()]


if compile_train_step.__doc__:  # not under python -OO
    compile_train_step.__doc__ += "".join(
        f"    {o['name']}={o['default']!r}: {o['meaning']} ({o['allowed']})\n"
        for o in step_options())


def process_group():
    """(rank, world size) of this process among those `mpirun` started
    ((0, 1) when it started alone), joining the group (MPI) if need be."""
    return _C.process_group()


def set_num_threads(n):
    """Threads of the pool wholestep and oneDNN share (torch's too, when it
    uses the same OpenMP runtime, as Debian's does). A later
    torch.set_num_threads(n) sets it too."""
    _guards.set_num_threads(n)


def manual_seed(seed):
    """Restarts wholestep's random stream, which dropout's masks and the
    random numbers a forward draws (torch.randn_like, rand, randint, ...)
    come from, at `seed`: the steps after it draw the same numbers as after
    any other manual_seed(seed) in any process. torch.manual_seed does not
    reach it (the numbers are wholestep's, not torch's generator's)."""
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2 ** 63:
        raise ValueError(f"manual_seed: a seed is an integer in [0, 2^63), got {seed!r}")
    _C.manual_seed(seed)


__all__ = ["compile_train_step", "compile_forward", "TrainStep", "Forward", "Error",
           "set_num_threads", "manual_seed", "process_group", "step_options", "check",
           "compare"]
