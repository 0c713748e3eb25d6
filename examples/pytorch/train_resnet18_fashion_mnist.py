"""Train torchvision's ResNet-18 on Fashion-MNIST with wholestep.

The model, the optimizer and the loss are plain PyTorch; wholestep compiles
forward, backward and the optimizer update into one step that updates the
model's and the optimizer's own tensors in place.

    PYTHONPATH=build/python /usr/bin/python3 \\
        examples/pytorch/train_resnet18_fashion_mnist.py --steps 500

The data is Debian's dataset-fashion-mnist (apt-get install
dataset-fashion-mnist).
"""

import argparse
import gzip
import struct
import time

import numpy as np
import torch
import torch.nn.functional as F
import torchvision

import wholestep.torch as wst

DATA_DIR = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # of the training images, scaled to [0, 1]


def read_idx(path):
    """An IDX file of unsigned bytes (MNIST's format), gzip-compressed, as
    a numpy array."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, kind, ndim = struct.unpack_from(">HBB", data)
    if zero != 0 or kind != 0x08:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes")
    shape = struct.unpack_from(f">{ndim}I", data, 4)
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load(split, data_dir):
    """(images [N, 28, 28] uint8, labels [N] int64) of 'train' or 't10k'."""
    images = read_idx(f"{data_dir}/{split}-images-idx3-ubyte.gz")
    labels = read_idx(f"{data_dir}/{split}-labels-idx1-ubyte.gz")
    return torch.from_numpy(images.copy()), torch.from_numpy(labels.astype(np.int64))


def prepare(images, size):
    """uint8 [B, 28, 28] as normalized float32 [B, 3, size, size]: padded to
    32x32, or resized to a larger side; the grey channel repeated to the
    three channels ResNet's first convolution takes."""
    x = (images.float().div(255) - MEAN).div(STD).unsqueeze(1)
    if size == 32:
        x = F.pad(x, (2, 2, 2, 2), value=-MEAN / STD)
    else:
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    return x.repeat(1, 3, 1, 1)  # a contiguous copy: wholestep binds contiguous tensors


def batches(images, labels, batch, seed=0):
    """Shuffled batches, epoch after epoch. The last partial batch of an
    epoch is dropped: a new input shape would trace the step again."""
    g = torch.Generator().manual_seed(seed)
    while True:
        order = torch.randperm(len(labels), generator=g)
        for i in range(0, len(order) - batch + 1, batch):
            idx = order[i:i + batch]
            yield images[idx], labels[idx]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=500, help="training steps")
    p.add_argument("--batch", type=int, default=64, help="batch size")
    p.add_argument("--mode", default="single_graph",
                   choices=["single_graph", "three_graph", "interpret"])
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "adam"])
    p.add_argument("--lr", type=float, help="peak learning rate (sgd 0.05, adam 0.001)")
    p.add_argument("--size", type=int, default=64,
                   help="image side: 32 pads the 28x28 images, more resizes them")
    p.add_argument("--threads", type=int, help="threads (default: all cores)")
    p.add_argument("--eval-batches", type=int,
                   help="test batches to evaluate (default: the whole test set)")
    p.add_argument("--print-every", type=int, default=50, help="steps between loss lines")
    p.add_argument("--data", default=DATA_DIR, help="directory of the IDX files")
    p.add_argument("--out", default="resnet18_fashion_mnist.pt", help="checkpoint to write")
    args = p.parse_args()

    if args.threads:
        wst.set_num_threads(args.threads)
    torch.manual_seed(0)
    train_images, train_labels = load("train", args.data)
    test_images, test_labels = load("t10k", args.data)

    model = torchvision.models.resnet18(num_classes=10)
    if args.optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=args.lr or 0.05, momentum=0.9,
                              weight_decay=5e-4)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=args.lr or 1e-3)
    # The learning rate is read before every step: a scheduler needs no recompile.
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps)
    step = wst.compile_train_step(model, opt, F.cross_entropy, mode=args.mode)

    data = batches(train_images, train_labels, args.batch)
    seconds = 0.0  # in the steps after the first, which traces and compiles
    for i in range(1, args.steps + 1):
        images, labels = next(data)
        x, lr = prepare(images, args.size), opt.param_groups[0]["lr"]
        start = time.perf_counter()
        loss = step(x, labels)  # forward, backward and the update
        if i > 1:
            seconds += time.perf_counter() - start
        sched.step()
        if i % args.print_every == 0 or i in (1, args.steps):
            print(f"step {i:5d}  loss {loss.item():.4f}  lr {lr:.4g}", flush=True)
    ms = seconds * 1e3 / max(1, args.steps - 1)

    predict = wst.compile_forward(model)  # eval mode, over the same parameters
    n = len(test_labels) if args.eval_batches is None else args.eval_batches * args.batch
    correct = total = 0
    for i in range(0, min(n, len(test_labels)), args.batch):
        images, labels = test_images[i:i + args.batch], test_labels[i:i + args.batch]
        correct += (predict(prepare(images, args.size)).argmax(1) == labels).sum().item()
        total += len(labels)
    print(f"test accuracy {correct / total:.4f} ({total} images)")
    print(f"{ms:.1f} ms/step after the first ({args.mode}, batch {args.batch}, "
          f"{args.size}x{args.size}; traced {step.traces()}x)")

    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict()}, args.out)
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
