"""wholestep.torch data-parallel under `mpirun -np 2` (CTest runs it so;
tests/CMakeLists.txt): each rank steps on its half of every global batch and
ends where torch eager ends over the whole batch, with the mean loss."""

import copy
import sys

import torch

import wholestep.torch as wst


def main():
    rank, world = wst.process_group()
    assert world == 2, f"run under mpirun -np 2, not {world} process(es)"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    eager = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True,
                          weight_decay=1e-3)
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9, nesterov=True,
                                weight_decay=1e-3)
    loss_fn = torch.nn.functional.cross_entropy
    step = wst.compile_train_step(model, opt, loss_fn, data_parallel=True, bucket_bytes=1024)
    g = torch.Generator().manual_seed(1)
    for i in range(10):
        x, y = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
        mine = slice(rank * 4, rank * 4 + 4)
        loss = float(step(x[mine], y[mine]))
        eager_opt.zero_grad()
        expected = loss_fn(eager(x), y)
        expected.backward()
        eager_opt.step()
        assert abs(loss - float(expected)) <= 1e-5 * abs(float(expected)), (i, loss, expected)
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        diff = float((p - q).abs().max() / q.abs().max())
        assert diff <= 1e-5, f"{name}: {diff}"
    stats = step.stats()
    assert stats["collectives"] > 1, stats
    print(f"rank {rank}: 10 steps as torch eager over the global batch, "
          f"{stats['collectives']} collectives per step")


if __name__ == "__main__":
    sys.exit(main())
