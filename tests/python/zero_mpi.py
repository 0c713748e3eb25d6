"""wholestep.torch with zero=True (ZeRO stage 1) under `mpirun -np 2` (CTest
runs it so; tests/CMakeLists.txt): each rank keeps and updates its part of
torch's optimizer state, and training matches zero=False step by step
(the losses, the gradients' norm with clipping, the parameters), and after
gather_optimizer_state() torch's optimizer state too, for SGD with
momentum, Adam (a step count per parameter) and AdamW, in both compiled
modes and with batches of two sizes (two compiled steps over one state);
training goes on from the gathered state."""

import sys

import torch

import wholestep.torch as wst

F = torch.nn.functional
OPTIMIZERS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True,
                                      weight_decay=1e-3),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.01, weight_decay=1e-3, amsgrad=True),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.01),
}


def model():
    torch.manual_seed(0)
    # 37 outputs: the buckets' elements are no multiple of the two ranks
    # (the last part is padded).
    return torch.nn.Sequential(torch.nn.Linear(16, 33), torch.nn.ReLU(), torch.nn.Linear(33, 37))


def close(a, b, what, tol=1e-5):
    diff = float((a - b).abs().max() / (b.abs().max() + 1e-12))
    assert diff <= tol, f"{what}: {diff}"


def train(opt_name, mode, zero, steps, start=0, run=None, sizes=(4,)):
    """`steps` steps of `opt_name` on this rank's half of each global
    batch (from batch `start`), continuing `run` (model, optimizer, step)
    when given; returns the run and [(loss, grad_norm)] per step. The
    batches per rank are of `sizes` in turn (another size is another
    compiled step)."""
    rank, _ = wst.process_group()
    if run is None:
        m = model()
        opt = OPTIMIZERS[opt_name](m.parameters())
        step = wst.compile_train_step(m, opt, F.cross_entropy, mode=mode, data_parallel=True,
                                      bucket_bytes=2048, zero=zero, clip_grad_norm=0.5)
        run = (m, opt, step)
    step = run[2]
    out = []
    for i in range(start, start + steps):
        n = sizes[i % len(sizes)]
        g = torch.Generator().manual_seed(i)
        x = torch.randn(2 * n, 16, generator=g)
        y = torch.randint(0, 37, (2 * n,), generator=g)
        mine = slice(rank * n, rank * n + n)
        loss = float(step(x[mine], y[mine]))
        out.append((loss, step.stats()["grad_norm"]))
    return run, out


def compare(opt_name, mode, sizes=(4,)):
    plain, plain_out = train(opt_name, mode, False, 10, sizes=sizes)
    sharded, sharded_out = train(opt_name, mode, True, 10, sizes=sizes)
    assert sharded[2].stats()["state_bytes"] < plain[2].stats()["state_bytes"], \
        (sharded[2].stats()["state_bytes"], plain[2].stats()["state_bytes"])
    for i, ((loss, norm), (zloss, znorm)) in enumerate(zip(plain_out, sharded_out)):
        assert abs(zloss - loss) <= 1e-5 * abs(loss), (opt_name, mode, i, zloss, loss)
        assert abs(znorm - norm) <= 1e-5 * norm, (opt_name, mode, i, znorm, norm)
        assert norm > 0.5, f"clipping is active: norm {norm} at step {i + 1}"
    for (name, p), q in zip(sharded[0].named_parameters(), plain[0].parameters()):
        close(p.detach(), q.detach(), f"{opt_name} {mode} {name}")
    # torch's own state tensors, made current from both ranks' parts.
    sharded[2].gather_optimizer_state()
    zs, ps = sharded[1].state_dict()["state"], plain[1].state_dict()["state"]
    assert zs.keys() == ps.keys()
    for p in ps:
        for slot, v in ps[p].items():
            close(zs[p][slot], v, f"{opt_name} {mode} state {p} {slot}")
    # The next steps take the state over again from torch's tensors.
    _, plain_more = train(opt_name, mode, False, 3, 10, plain, sizes)
    _, sharded_more = train(opt_name, mode, True, 3, 10, sharded, sizes)
    for (loss, _), (zloss, _) in zip(plain_more, sharded_more):
        assert abs(zloss - loss) <= 1e-5 * abs(loss), (opt_name, mode, zloss, loss)


def main():
    rank, world = wst.process_group()
    assert world == 2, f"run under mpirun -np 2, not {world} process(es)"
    for opt_name in OPTIMIZERS:
        compare(opt_name, "single_graph")
    compare("adam", "three_graph")
    # Batches of two sizes: two compiled steps over the same optimizer
    # state, each taking it over from torch's tensors in turn.
    compare("adam", "single_graph", sizes=(4, 3))
    print(f"rank {rank}: zero=True trains as zero=False (SGD, Adam, AdamW; clipped), and "
          f"torch's optimizer state gathered is the same")


if __name__ == "__main__":
    sys.exit(main())
