"""wholestep.torch data-parallel under `mpirun -np 2` (CTest runs it so;
tests/CMakeLists.txt): each rank steps on its half of every global batch and
ends where torch eager ends over the whole batch, with the mean loss; with
synchronized BatchNorm, also its running statistics."""

import copy
import sys

import torch

import wholestep.torch as wst


def train_against_eager(make_model, inputs, classes, **options):
    """10 SGD steps on 2 ranks, each on its half of every global batch,
    against torch eager over the whole batch: the losses and the final
    parameters and buffers within 1e-5."""
    rank, world = wst.process_group()
    assert world == 2, f"run under mpirun -np 2, not {world} process(es)"
    torch.manual_seed(0)
    model = make_model()
    eager = copy.deepcopy(model)
    sgd = dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3)
    opt = torch.optim.SGD(model.parameters(), **sgd)
    eager_opt = torch.optim.SGD(eager.parameters(), **sgd)
    loss_fn = torch.nn.functional.cross_entropy
    step = wst.compile_train_step(model, opt, loss_fn, data_parallel=True, **options)
    g = torch.Generator().manual_seed(1)
    for i in range(10):
        x = torch.randn(8, *inputs, generator=g)
        y = torch.randint(0, classes, (8,), generator=g)
        mine = slice(rank * 4, rank * 4 + 4)
        loss = float(step(x[mine], y[mine]))
        eager_opt.zero_grad()
        expected = loss_fn(eager(x), y)
        expected.backward()
        eager_opt.step()
        assert abs(loss - float(expected)) <= 1e-5 * abs(float(expected)), (i, loss, expected)
    for (name, p), q in zip(model.state_dict().items(), eager.state_dict().values()):
        if p.is_floating_point():
            diff = float((p - q).abs().max() / q.abs().max())
            assert diff <= 1e-5, f"{name}: {diff}"
        else:
            assert torch.equal(p, q), name
    return step


def main():
    step = train_against_eager(
        lambda: torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                    torch.nn.Linear(32, 4)),
        (16,), 4, bucket_bytes=1024)
    assert step.stats()["collectives"] > 1, step.stats()
    # Synchronized BatchNorm: the statistics (and running statistics) of the
    # global batch, as eager computes them over the whole batch.
    train_against_eager(
        lambda: torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8),
                                    torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                    torch.nn.Flatten(), torch.nn.Linear(8, 5)),
        (3, 6, 6), 5, sync_batch_norm=True)
    rank = wst.process_group()[0]
    print(f"rank {rank}: 10 steps as torch eager over the global batch, without and with "
          f"synchronized BatchNorm")


if __name__ == "__main__":
    sys.exit(main())
