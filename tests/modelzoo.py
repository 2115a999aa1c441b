#!/usr/bin/python3
"""Models a user writes in Python, for Flotilla to train: the model zoo.

  modelzoo.py make DIR
      Scripts each zoo model into DIR/NAME.pt (torch.jit.script(model).save), and the
      BatchNorm CNN in float64 and float16 (DIR/bn-cnn-float64.pt, DIR/bn-cnn-float16.pt).
  modelzoo.py evaluate DATA_DIR TEST_LIMIT RUN_DIR=INITIAL_MODEL ...
      For each run: loads RUN_DIR/model.pt with torch.jit.load, prepares the first TEST_LIMIT
      Fashion-MNIST test images (0 = all) as Flotilla did, from RUN_DIR/normalization.json,
      and prints one JSON line: the accuracy, whether the model is in eval mode, and which of
      its buffers still hold INITIAL_MODEL's values or count zero batches.
  modelzoo.py bench --flotilla BINARY [--model bn-cnn] [--epochs 5] [--workers 2] ...
      Trains one zoo model on full Fashion-MNIST under each aggregation rule (the default job
      otherwise, without preemptions) and prints a table: Flotilla's final test accuracy,
      Python's on model.pt, the counters, the wall time.
"""

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from torch import nn

RULES = ["vc-asgd", "staleness-aware", "async-delta", "sync-average"]


class BnCnn(nn.Module):
    """Two convolution blocks with BatchNorm, then a linear classifier."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Linear(32 * 7 * 7, 10)

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


class NormMlp(nn.Module):
    """An MLP with LayerNorm and GELU, as transformer blocks have them."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(), nn.Linear(784, 128), nn.LayerNorm(128), nn.GELU(),
            nn.Linear(128, 64), nn.LayerNorm(64), nn.GELU(), nn.Linear(64, 10))

    def forward(self, x):
        return self.net(x)


class Block(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(y)))


class SmallResNet(nn.Module):
    """A stem, two residual blocks with BatchNorm and an identity add, average pooling."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.block1 = Block(16)
        self.block2 = Block(16)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.block2(self.block1(self.stem(x)))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class DropoutCnn(nn.Module):
    """A CNN with spatial and plain dropout: different in training and in eval mode."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 16, 5, stride=2)
        self.drop2d = nn.Dropout2d(0.1)
        self.fc1 = nn.Linear(16 * 12 * 12, 64)
        self.drop = nn.Dropout(0.3)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = self.drop2d(torch.relu(self.conv(x))).flatten(1)
        return self.fc2(self.drop(torch.relu(self.fc1(x))))


ZOO = {"bn-cnn": BnCnn, "norm-mlp": NormMlp, "resnet": SmallResNet, "dropout-cnn": DropoutCnn}


def make(folder):
    os.makedirs(folder, exist_ok=True)
    for name, cls in ZOO.items():
        torch.manual_seed(0)
        torch.jit.script(cls()).save(os.path.join(folder, name + ".pt"))
    torch.manual_seed(0)
    torch.jit.script(BnCnn().double()).save(os.path.join(folder, "bn-cnn-float64.pt"))
    torch.jit.script(BnCnn().half()).save(os.path.join(folder, "bn-cnn-float16.pt"))


def read_idx(path, offset):
    with gzip.open(path) as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)


def test_set(data_dir, limit):
    images = read_idx(os.path.join(data_dir, "t10k-images-idx3-ubyte.gz"), 16).reshape(-1, 1, 28, 28)
    labels = read_idx(os.path.join(data_dir, "t10k-labels-idx1-ubyte.gz"), 8)
    if limit > 0:
        images, labels = images[:limit], labels[:limit]
    return torch.from_numpy(images.astype(np.float32)), torch.from_numpy(labels.astype(np.int64))


def evaluate_run(run_dir, initial, images, labels):
    # What Flotilla does to a sample: bytes to [0, 1], then (x - mean) / std per channel.
    with open(os.path.join(run_dir, "normalization.json")) as f:
        norm = json.load(f)
    mean = torch.tensor(norm["mean"]).view(1, -1, 1, 1)
    std = torch.tensor(norm["std"]).view(1, -1, 1, 1)
    model = torch.jit.load(os.path.join(run_dir, "model.pt"))
    report = {"run": run_dir, "training": model.training}
    with torch.no_grad():
        predicted = torch.cat([model((batch / 255.0 - mean) / std).argmax(1) for batch in images.split(500)])
    report["accuracy"] = (predicted == labels).double().mean().item()
    start = torch.jit.load(initial).state_dict()
    buffers = dict(model.named_buffers())
    report["buffers"] = sorted(buffers)
    report["unchanged"] = sorted(k for k, v in buffers.items() if v.is_floating_point() and torch.equal(v, start[k]))
    report["counters"] = {k: int(v.item()) for k, v in buffers.items() if not v.is_floating_point()}
    report["invalid"] = sorted(k for k, v in buffers.items() if v.is_floating_point()
                               and (not torch.isfinite(v).all() or ("running_var" in k and (v <= 0).any())))
    return report


def evaluate(data_dir, limit, runs):
    images, labels = test_set(data_dir, limit)
    for spec in runs:
        run_dir, initial = spec.split("=", 1)
        print(json.dumps(evaluate_run(run_dir, initial, images, labels)), flush=True)


def final_accuracy(run_dir):
    """Flotilla's last test accuracy, from the run's metrics.csv."""
    last = None
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        header = f.readline().strip().split(",")
        column = header.index("test_accuracy")
        for line in f:
            value = line.strip().split(",")[column]
            if value:
                last = float(value)
    return last


def bench(args):
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or scratch
        make(folder)
        model = os.path.join(folder, args.model + ".pt")
        images, labels = test_set(args.data, 0)
        print(f"{args.model}, Fashion-MNIST (60,000 / 10,000), {args.epochs} epochs, {args.workers} workers, "
              f"{os.cpu_count()} cores, load average before: {os.getloadavg()[0]:.1f}")
        print("| Rule | Flotilla's accuracy | Python's accuracy on model.pt | num_batches_tracked | Wall time |")
        print("|---|---|---|---|---|")
        for rule in args.rules:
            run_dir = os.path.join(folder, f"run-{args.model}-{rule}")
            command = [args.flotilla, "train", "--model-file", model, "--rule", rule, "--epochs", str(args.epochs),
                       "--workers", str(args.workers), "--shards", str(args.shards), "--preempt-mean", "0",
                       "--run-dir", run_dir, "--quiet"]
            if rule == "async-delta" and args.async_delta_outer_lr is not None:
                # The outer learning rate has no flag: write the job file with it.
                job_file = os.path.join(folder, "async-delta.json")
                subprocess.run(command[:2] + ["--save-job", job_file], check=True, stdout=subprocess.DEVNULL)
                with open(job_file) as f:
                    job = json.load(f)
                job["aggregation"]["outer_learning_rate"] = args.async_delta_outer_lr
                with open(job_file, "w") as f:
                    json.dump(job, f)
                command += ["--job", job_file]
            started = time.monotonic()
            subprocess.run(command, check=True)
            wall = time.monotonic() - started
            report = evaluate_run(run_dir, model, images, labels)
            counters = sorted(set(report["counters"].values()))
            print(f"| `{rule}` | {100 * final_accuracy(run_dir):.2f}% | {100 * report['accuracy']:.2f}% | "
                  f"{', '.join(map(str, counters))} | {wall:.0f} s |", flush=True)
        print(f"load average after: {os.getloadavg()[0]:.1f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("make").add_argument("folder")
    ev = sub.add_parser("evaluate")
    ev.add_argument("data")
    ev.add_argument("limit", type=int)
    ev.add_argument("runs", nargs="+")
    b = sub.add_parser("bench")
    b.add_argument("--flotilla", required=True)
    b.add_argument("--model", default="bn-cnn", choices=sorted(ZOO))
    b.add_argument("--epochs", type=int, default=5)
    b.add_argument("--workers", type=int, default=2)
    b.add_argument("--shards", type=int, default=30)
    b.add_argument("--rules", nargs="+", default=RULES, choices=RULES)
    b.add_argument("--async-delta-outer-lr", type=float, help="async-delta's outer learning rate (default: the job's, 1)")
    b.add_argument("--data", default=os.environ.get("FLOTILLA_FASHION_MNIST", "/usr/share/datasets/fashion-mnist"))
    b.add_argument("--keep", help="keep the models and run directories in this folder")
    args = parser.parse_args()
    if args.command == "make":
        make(args.folder)
    elif args.command == "evaluate":
        evaluate(args.data, args.limit, args.runs)
    else:
        bench(args)


if __name__ == "__main__":
    sys.exit(main())
