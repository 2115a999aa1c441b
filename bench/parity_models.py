#!/usr/bin/python3
"""Models a user would write in Python for `flotilla bench parity`, scripted for Flotilla:

  parity_models.py DIR [--channels 3] [--classes 4] [--size 32]

writes DIR/bn-cnn.pt (two convolution blocks with BatchNorm, then a linear classifier) and,
where python3-torchvision is installed, DIR/resnet18.pt (torchvision.models.resnet18 with
that many classes). Each is torch.jit.script(model).save(path), in float32, with the
initial weights of torch.manual_seed(1). A model already there is kept.
"""

import argparse
import os
import sys

import torch
from torch import nn


class BnCnn(nn.Module):
    def __init__(self, channels, classes, size):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(channels, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Linear(64 * (size // 4) * (size // 4), classes)

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--channels", type=int, default=3)
    parser.add_argument("--classes", type=int, default=4)
    parser.add_argument("--size", type=int, default=32)
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    made = []
    path = os.path.join(args.dir, "bn-cnn.pt")
    if not os.path.exists(path):
        torch.manual_seed(1)
        torch.jit.script(BnCnn(args.channels, args.classes, args.size)).save(path)
        made.append("bn-cnn.pt")
    path = os.path.join(args.dir, "resnet18.pt")
    if not os.path.exists(path):
        try:
            import torchvision
        except ImportError:
            print("torchvision is not installed (Debian: python3-torchvision): no resnet18.pt")
            return 0
        torch.manual_seed(1)
        model = torchvision.models.resnet18(num_classes=args.classes)
        if args.channels != 3:
            model.conv1 = nn.Conv2d(args.channels, 64, 7, 2, 3, bias=False)
        torch.jit.script(model).save(path)
        made.append("resnet18.pt")
    if made:
        print("Made " + ", ".join(made) + " in " + args.dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
