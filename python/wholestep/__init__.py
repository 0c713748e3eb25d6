"""wholestep: a whole training step (forward, backward and the optimizer
update) compiled into one graph and run on the CPU.

``wholestep.torch`` trains unmodified PyTorch models (docs/pytorch.md).
"""

from ._C import Error, backend_info

__all__ = ["Error", "backend_info"]
