#!/usr/bin/env bash
# The main job, each model trained as one compiled step:
#  - the reference CNN on Fashion-MNIST, 15 epochs of Adam (lr 0.01, cosine
#    decay to 0), evaluated on the test set after every epoch: about 0.91 test
#    accuracy; its loss and accuracy curves drawn by scripts/plot.py;
#  - the byte-level GPT on a text (GPL-3 by default), 2000 steps, then its
#    held-out loss and 200 bytes it writes after a prompt from the held-out
#    text;
#  - then the execution modes compared on gpt, cnn and mlp, and a picture of
#    mlp's compiled step in three_graph mode;
#  - last, the PyTorch path: torchvision's resnet18 (num_classes=10,
#    unmodified) on Fashion-MNIST at 32x32 through wholestep.torch, two
#    epochs of Adam under a one-cycle schedule (one epoch stayed below 0.90
#    in every recipe tried: docs/pytorch.md), the test set evaluated through
#    compile_forward, the model saved with torch.save; the script fails if
#    its test accuracy is below 0.90.
# Checkpoints, metrics (JSON Lines), curves and the picture go to runs/main/
# (git-ignored),
# or to $WS_RUNS. Arguments are passed to the CNN's `train`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# The command line and the Python package alone: the tests are test.sh's.
./scripts/setup.sh wholestep-cli wholestep_python
out=${WS_RUNS:-runs/main}
mkdir -p "$out/cnn" "$out/gpt" "$out/resnet18"

./build/wholestep train --model cnn --epochs 15 --save "$out/cnn" \
  --metrics "$out/cnn/metrics.jsonl" "$@"
/usr/bin/python3 scripts/plot.py "$out/cnn/metrics.jsonl" -o "$out/cnn/curves.png"

./build/wholestep train --model gpt --steps 2000 --eval-every 500 --save "$out/gpt" \
  --metrics "$out/gpt/metrics.jsonl" --sample 200 --temperature 0.5
/usr/bin/python3 scripts/plot.py "$out/gpt/metrics.jsonl" -o "$out/gpt/curves.png"

./build/wholestep compare --model gpt --steps 20 --warmup 2 --no-alias-rows
./build/wholestep compare --model cnn --steps 8 --warmup 2
./build/wholestep compare --model mlp --steps 30 --warmup 3
./build/wholestep graph --model mlp --mode three_graph -o "$out/mlp_three_graph.svg"

start=$SECONDS
PYTHONPATH=build/python /usr/bin/python3 examples/pytorch/train_resnet18_fashion_mnist.py \
  --epochs 2 --print-every 200 --out "$out/resnet18/resnet18_fashion_mnist.pt" --min-accuracy 0.90
echo "resnet18 through wholestep.torch: $((SECONDS - start)) s"

echo "outputs in $out/: cnn/ and gpt/ hold the last checkpoint (checkpoint-<step>/)," \
  "the metrics (metrics.jsonl) and the curves (curves.png); mlp_three_graph.svg is mlp's step;" \
  "resnet18/resnet18_fashion_mnist.pt is the ResNet-18 saved by torch.save"
