"""compile_forward: a model's forward in eval mode, compiled over the
storage its train step updates (wholestep.torch re-exports it)."""

import torch

from . import _C, _capture, _guards
from ._binding import _Binding, _data_args, _examples, _model_inputs
from ._import import Importer
from ._ir import Value

Error = _C.Error


class Forward:
    """The model's forward in eval mode, compiled, over the same storage.
    Calls from several threads run one at a time (with those of every step
    and forward of the same model)."""

    def __init__(self, model):
        if not isinstance(model, torch.nn.Module):
            raise Error(f"compile_forward: model is a {type(model).__name__}, not a "
                        f"torch.nn.Module")
        _guards.check_autocast("compile_forward")
        self.model = model
        self._compiled = None  # (_C.Forward, _Binding, module attributes)
        self._lock = _guards.model_lock(model)
        self._view = _guards.ModelViews(model, "forward", training=False)

    def _trace(self, binding):
        def trace(types):
            model = self.model
            params = dict(model.named_parameters())
            buffers = dict(model.named_buffers())
            g = _C.Graph()
            inputs = _model_inputs(params, buffers, (), types, binding)
            modes = [(m, m.training) for m in model.modules()]
            model.eval()
            try:
                gm = _capture.trace(model, params, buffers, lambda call, *a: call(*a),
                                    _examples(types))
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
        _guards.check_autocast("forward")
        with self._lock:
            data = _data_args(args, "forward")
            # The forward traces in eval mode whatever the modules' modes:
            # their attributes but `training` decide what it traced.
            attrs, params, buffers = self._view()
            current = params + buffers
            if self._compiled is None or self._compiled[2] != attrs \
                    or not self._compiled[1].valid(current):
                binding = _Binding()
                self._compiled = (_C.Forward(self._trace(binding)), binding, attrs)
            with _guards.sigint_held():
                threads = _guards.follow_torch_threads()
                try:
                    out = self._compiled[0].run(data)
                finally:
                    _guards.restore_torch_threads(threads)
        return torch.from_numpy(out)


def compile_forward(model):
    """`model`'s forward in eval mode (BatchNorm's running statistics, no
    dropout), compiled; call it with the model's inputs."""
    return Forward(model)
