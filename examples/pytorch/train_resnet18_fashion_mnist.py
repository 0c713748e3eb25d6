"""Train torchvision's ResNet-18 on Fashion-MNIST with wholestep.

The model, the optimizer, the learning-rate schedule and the loss are plain
PyTorch; wholestep compiles forward, backward and the optimizer update into
one step that updates the model's and the optimizer's own tensors in place.
By default: one epoch at 32x32, batch 64, Adam under a one-cycle schedule,
a label-smoothed cross-entropy (F.cross_entropy's label_smoothing), then the test
set evaluated through wst.compile_forward and everything saved with
torch.save.

    PYTHONPATH=build/python /usr/bin/python3 \\
        examples/pytorch/train_resnet18_fashion_mnist.py --min-accuracy 0.9

The data is Debian's dataset-fashion-mnist (apt-get install
dataset-fashion-mnist).
"""

import argparse
import copy
import gzip
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
import torchvision

import wholestep.torch as wst

DATA_DIR = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # of the training images, scaled to [0, 1]
PEAK_LR = {"sgd": 0.1, "adam": 0.004, "adamw": 0.004}
WEIGHT_DECAY = {"sgd": 5e-4, "adam": 0.0, "adamw": 0.05}


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


def random_flips(images, g):
    """A uint8 batch [B, 28, 28], each image mirrored left to right with
    probability 1/2."""
    mirror = torch.rand(len(images), generator=g) < 0.5
    return torch.where(mirror[:, None, None], images.flip(2), images)


def batches(images, labels, batch, seed=0):
    """Shuffled batches, epoch after epoch. The last partial batch of an
    epoch is dropped: a new input shape would trace the step again."""
    g = torch.Generator().manual_seed(seed)
    while True:
        order = torch.randperm(len(labels), generator=g)
        for i in range(0, len(order) - batch + 1, batch):
            idx = order[i:i + batch]
            yield images[idx], labels[idx]


def smoothed_cross_entropy(smoothing):
    """F.cross_entropy with its labels smoothed by `smoothing`."""
    def loss_fn(logits, labels):
        return F.cross_entropy(logits, labels, label_smoothing=smoothing)
    return loss_fn


def make_optimizer(model, name, lr, weight_decay):
    if name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, nesterov=True,
                               weight_decay=weight_decay)
    if name == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    return torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)


class EMA:
    """An exponential moving average of a model's parameters and floating
    buffers (BatchNorm's running statistics; its integer step count is
    copied), kept in a copy of the model and updated after every step."""

    def __init__(self, model, decay):
        self.model = copy.deepcopy(model)
        self.decay = decay

    @torch.no_grad()
    def update(self, model):
        for avg, new in zip(self.model.state_dict().values(), model.state_dict().values()):
            if avg.is_floating_point():
                avg.lerp_(new, 1 - self.decay)
            else:
                avg.copy_(new)


def make_schedule(opt, name, lr, steps, pct_start):
    """The learning rate (and, one-cycle, the momentum or Adam's beta1) of
    every step. wholestep reads them from opt.param_groups before each
    step: a scheduler needs no recompile."""
    if name == "onecycle":
        return torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps,
                                                   pct_start=pct_start)
    return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)


def evaluate(model, images, labels, batch, size):
    """Test accuracy through wst.compile_forward: eval mode (BatchNorm's
    running statistics), the same parameter storage as the train step."""
    predict = wst.compile_forward(model)
    correct = 0
    for i in range(0, len(labels), batch):
        x = prepare(images[i:i + batch], size)
        correct += (predict(x).argmax(1) == labels[i:i + batch]).sum().item()
    return correct / len(labels)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=float, default=1.0,
                   help="passes over the 60000 training images (the last partial batch "
                        "of each dropped)")
    p.add_argument("--steps", type=int, help="training steps (instead of --epochs)")
    p.add_argument("--batch", type=int, default=64, help="batch size")
    p.add_argument("--mode", default="single_graph",
                   choices=["single_graph", "three_graph", "interpret"])
    p.add_argument("--optimizer", default="adam", choices=["adam", "adamw", "sgd"],
                   help="adam, adamw (decoupled weight decay) or sgd (Nesterov momentum "
                        "0.9)")
    p.add_argument("--weight-decay", type=float,
                   help=f"weight decay (sgd {WEIGHT_DECAY['sgd']}, adam "
                        f"{WEIGHT_DECAY['adam']:g}, adamw {WEIGHT_DECAY['adamw']})")
    p.add_argument("--lr", type=float,
                   help=f"peak learning rate (sgd {PEAK_LR['sgd']}, adam and adamw "
                        f"{PEAK_LR['adam']})")
    p.add_argument("--schedule", default="onecycle", choices=["onecycle", "cosine"],
                   help="onecycle: warm up over the first --pct-start of the steps, then "
                        "anneal (momentum cycled the other way); cosine: from the peak "
                        "down to 0")
    p.add_argument("--pct-start", type=float, default=0.25,
                   help="one-cycle: the fraction of the steps spent warming up")
    p.add_argument("--ema", type=float, default=0.0,
                   help="decay of an exponential moving average of the weights, "
                        "evaluated instead of them (0: none)")
    p.add_argument("--flip", action="store_true",
                   help="augment the training images with random horizontal flips")
    p.add_argument("--seed", type=int, default=0,
                   help="of the initial weights, the data order and the flips")
    p.add_argument("--label-smoothing", type=float, default=0.1,
                   help="of the cross-entropy's targets (0: plain F.cross_entropy)")
    p.add_argument("--size", type=int, default=32,
                   help="image side: 32 pads the 28x28 images, more resizes them")
    p.add_argument("--threads", type=int, help="threads (default: all cores)")
    p.add_argument("--eval-batches", type=int,
                   help="test batches to evaluate (default: the whole test set)")
    p.add_argument("--print-every", type=int, default=50, help="steps between loss lines")
    p.add_argument("--data", default=DATA_DIR, help="directory of the IDX files")
    p.add_argument("--out", default="resnet18_fashion_mnist.pt", help="checkpoint to write")
    p.add_argument("--min-accuracy", type=float,
                   help="exit with status 1 if the test accuracy is below this")
    return p.parse_args()


def main():
    args = parse_args()
    if args.threads:
        wst.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    train_images, train_labels = load("train", args.data)
    test_images, test_labels = load("t10k", args.data)
    steps = args.steps or max(1, round(args.epochs * (len(train_labels) // args.batch)))

    model = torchvision.models.resnet18(num_classes=10)
    lr = args.lr or PEAK_LR[args.optimizer]
    wd = WEIGHT_DECAY[args.optimizer] if args.weight_decay is None else args.weight_decay
    opt = make_optimizer(model, args.optimizer, lr, wd)
    sched = make_schedule(opt, args.schedule, lr, steps, args.pct_start)
    ema = EMA(model, args.ema) if args.ema else None
    loss_fn = smoothed_cross_entropy(args.label_smoothing)
    step = wst.compile_train_step(model, opt, loss_fn, mode=args.mode)
    print(f"{steps} steps of batch {args.batch} at {args.size}x{args.size}: "
          f"{type(opt).__name__}, {args.schedule} schedule to lr {lr:g}", flush=True)

    data = batches(train_images, train_labels, args.batch, args.seed)
    flips = torch.Generator().manual_seed(args.seed + 1)
    start = time.perf_counter()
    compile_s = 0.0  # the first step traces and compiles
    for i in range(1, steps + 1):
        images, labels = next(data)
        if args.flip:
            images = random_flips(images, flips)
        x, lr_now = prepare(images, args.size), opt.param_groups[0]["lr"]
        t0 = time.perf_counter()
        loss = step(x, labels)  # forward, backward and the update
        if i == 1:
            compile_s = time.perf_counter() - t0
        sched.step()
        if ema:
            ema.update(model)
        if i % args.print_every == 0 or i in (1, steps):
            print(f"step {i:5d}  loss {loss.item():.4f}  lr {lr_now:.4g}", flush=True)
    train_s = time.perf_counter() - start

    start = time.perf_counter()
    n = len(test_labels) if args.eval_batches is None else args.eval_batches * args.batch
    accuracy = evaluate(model, test_images[:n], test_labels[:n], args.batch, args.size)
    n = min(n, len(test_labels))
    if ema:
        print(f"test accuracy of the trained weights {accuracy:.4f} ({n} images)")
        accuracy = evaluate(ema.model, test_images[:n], test_labels[:n], args.batch,
                            args.size)
    eval_s = time.perf_counter() - start
    print(f"test accuracy {accuracy:.4f} ({n} images)"
          + (f" of the weights' moving average (decay {args.ema:g})" if ema else ""))
    ms = (train_s - compile_s) * 1e3 / max(1, steps - 1)
    print(f"training {train_s:.1f} s: {ms:.1f} ms/step after the first, which took "
          f"{compile_s:.1f} s with the compile ({args.mode}; traced {step.traces()}x); "
          f"evaluation {eval_s:.1f} s")

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    saved = {"model": model.state_dict(), "optimizer": opt.state_dict(),
             "scheduler": sched.state_dict(), "test_accuracy": accuracy}
    if ema:
        saved["ema_model"] = ema.model.state_dict()  # the weights evaluated
    torch.save(saved, args.out)
    print(f"saved {args.out}")
    if args.min_accuracy is not None and accuracy < args.min_accuracy:
        print(f"test accuracy {accuracy:.4f} is below {args.min_accuracy}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
