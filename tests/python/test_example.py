"""examples/pytorch/train_resnet18_fashion_mnist.py runs a few steps: it
exits 0, prints finite losses and an accuracy, and leaves a checkpoint
that torch loads back into a fresh ResNet-18 and SGD."""

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


@pytest.mark.skipif(not (DATA / "train-images-idx3-ubyte.gz").exists(),
                    reason="Debian's dataset-fashion-mnist is not installed")
def test_example_trains_evaluates_and_saves(tmp_path):
    out = tmp_path / "checkpoint.pt"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--steps", "3", "--batch", "8", "--eval-batches", "1",
         "--out", str(out)],
        capture_output=True, text=True, timeout=600)
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
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    opt.load_state_dict(saved["optimizer"])
    buffers = [s["momentum_buffer"] for s in opt.state.values()]
    assert len(buffers) == len(list(model.parameters()))
    assert all(torch.isfinite(b).all() for b in buffers)
    assert any(b.abs().sum() > 0 for b in buffers)
