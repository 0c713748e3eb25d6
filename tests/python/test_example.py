"""examples/pytorch/train_resnet18_fashion_mnist.py runs a few steps: it
exits 0, prints finite losses and an accuracy, and leaves a checkpoint
that torch loads back into a fresh ResNet-18 and Adam; with an accuracy
below --min-accuracy it exits 1."""

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torchvision

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "pytorch" / "train_resnet18_fashion_mnist.py"
DATA = Path("/usr/share/datasets/fashion-mnist")


needs_data = pytest.mark.skipif(not (DATA / "train-images-idx3-ubyte.gz").exists(),
                                reason="Debian's dataset-fashion-mnist is not installed")


def run_example(*args):
    return subprocess.run([sys.executable, str(SCRIPT), "--batch", "8", "--eval-batches", "1",
                           *args], capture_output=True, text=True, timeout=600)


@needs_data
def test_example_trains_evaluates_and_saves(tmp_path):
    out = tmp_path / "resnet18" / "checkpoint.pt"  # its directory made by the script
    run = run_example("--steps", "3", "--out", str(out))
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stdout}\n{run.stderr}"

    losses = [float(v) for v in re.findall(r"\bloss (\S+)", run.stdout)]
    assert losses, run.stdout
    assert all(math.isfinite(v) for v in losses), run.stdout
    assert re.search(r"test accuracy [01]\.\d+ \(8 images\)", run.stdout), run.stdout
    assert "ms/step" in run.stdout, run.stdout

    saved = torch.load(out)
    assert {"model", "optimizer"} <= set(saved)
    model = torchvision.models.resnet18(num_classes=10)
    model.load_state_dict(saved["model"])
    opt = torch.optim.Adam(model.parameters())  # the example's default
    opt.load_state_dict(saved["optimizer"])
    moments = [s["exp_avg"] for s in opt.state.values()]
    assert len(moments) == len(list(model.parameters()))
    assert all(torch.isfinite(m).all() for m in moments)
    assert any(m.abs().sum() > 0 for m in moments)
    assert all(int(s["step"]) == 3 for s in opt.state.values())


@needs_data
def test_example_fails_below_min_accuracy(tmp_path):
    run = run_example("--steps", "1", "--out", str(tmp_path / "checkpoint.pt"),
                      "--min-accuracy", "1.01")
    assert run.returncode == 1, f"exit {run.returncode}\n{run.stdout}\n{run.stderr}"
    assert "is below 1.01" in run.stderr, run.stderr
    assert (tmp_path / "checkpoint.pt").exists()
