#!/usr/bin/python3
"""The peer of `flotilla bench accuracy`: the same small CNN trained on Fashion-MNIST with
PyTorch DistributedDataParallel, N processes on the CPU with the gloo backend.

Each epoch rank 0 evaluates on the test set and prints one JSON line
    {"epoch": 1, "accuracy": 0.85, "seconds": 12.3, "eval_seconds": 0.9}
(seconds since this script started; eval_seconds: the evaluations so far took that long, so
the caller can keep them off its clock), and the caller stops it once a target is reached.
With --link RATE/RTT (e.g. 50mbit/40ms) every all-reduce of gradients takes at least as long
as it would over such a link between the two ranks: one round trip plus the bucket's bytes at
the rate (a ring all-reduce of two ranks sends the whole bucket each way, in two halves).
Gloo's own connections cannot be relayed through the benchmark's link shaper (their
addresses are exchanged inside gloo), so the same link is applied here, in a
communication hook.
With --slow-rank F, rank 1 pauses after each step for F - 1 times what the step took (a
machine F times slower; flotilla demo --slow-worker F slows a worker the same way).
With --kill-rank-after S, rank 1 SIGKILLs itself S seconds after the start, as a spot
preemption would; DDP has no way to go on without it, and the run ends with an error line
    {"failed": "...", "seconds": ...}
"""

import argparse
import gzip
import json
import os
import signal
import struct
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

START = time.monotonic()


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return torch.frombuffer(bytearray(data[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)


def load(folder, train_limit):
    x = read_idx(os.path.join(folder, "train-images-idx3-ubyte.gz")).float().div_(255).unsqueeze(1)
    y = read_idx(os.path.join(folder, "train-labels-idx1-ubyte.gz")).long()
    tx = read_idx(os.path.join(folder, "t10k-images-idx3-ubyte.gz")).float().div_(255).unsqueeze(1)
    ty = read_idx(os.path.join(folder, "t10k-labels-idx1-ubyte.gz")).long()
    if train_limit > 0:
        x, y = x[:train_limit], y[:train_limit]
    mean, std = x.mean().item(), x.std().item()  # per channel; one channel
    return (x - mean) / std, y, (tx - mean) / std, ty


class Cnn(nn.Module):
    """Flotilla's built-in cnn: conv 1→32 3×3, pool, conv 32→64 3×3, pool, fc 1600→128, fc 128→10."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.fc1 = nn.Linear(1600, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def parse_link(text):
    """'50mbit/40ms' -> (bits per second, round trip in seconds)."""
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
    rate, _, rtt = text.lower().partition("/")
    for unit, scale in units.items():
        if rate.endswith(unit):
            bps = float(rate[:-len(unit)]) * scale
            break
    else:
        raise ValueError(f"--link: '{text}' needs a rate in kbit, mbit or gbit, e.g. 50mbit/40ms")
    if rtt and not rtt.endswith("ms"):
        raise ValueError(f"--link: '{text}' needs the round trip in ms, e.g. 50mbit/40ms")
    return bps, (float(rtt[:-2]) / 1000 if rtt else 0.0)


def link_hook(bps, rtt):
    def hook(_state, bucket):
        started = time.monotonic()
        tensor = bucket.buffer()
        dist.all_reduce(tensor)
        tensor.div_(dist.get_world_size())
        wait = rtt + tensor.numel() * tensor.element_size() * 8 / bps - (time.monotonic() - started)
        if wait > 0:
            time.sleep(wait)
        done = torch.futures.Future()
        done.set_result(tensor)
        return done
    return hook


def emit(record):
    print(json.dumps(record), flush=True)


def run(rank, args, port):
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.processes,
                            timeout=timedelta(seconds=args.timeout))
    x, y, tx, ty = load(args.data, args.train_limit)
    torch.manual_seed(args.seed)
    model = nn.parallel.DistributedDataParallel(Cnn())
    if args.link:
        model.register_comm_hook(None, link_hook(*parse_link(args.link)))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    # Each process trains its own half of a shuffled epoch, like DistributedSampler.
    eval_seconds = 0.0
    for epoch in range(1, args.epochs + 1):
        g = torch.Generator().manual_seed(args.seed * 1000 + epoch)
        order = torch.randperm(len(x), generator=g)[rank::args.processes]
        model.train()
        for i in range(0, len(order) - args.batch_size + 1, args.batch_size):
            if args.kill_rank_after > 0 and rank == 1 and time.monotonic() - START > args.kill_rank_after:
                os.kill(os.getpid(), signal.SIGKILL)
            began = time.monotonic()
            idx = order[i:i + args.batch_size]
            optimizer.zero_grad()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            optimizer.step()
            if rank == 1 and args.slow_rank > 1:
                time.sleep((time.monotonic() - began) * (args.slow_rank - 1))
        if rank == 0:
            evaluation = time.monotonic()
            model.eval()
            with torch.no_grad():
                correct = sum((model.module(tx[i:i + 1000]).argmax(1) == ty[i:i + 1000]).sum().item()
                              for i in range(0, len(tx), 1000))
            eval_seconds += time.monotonic() - evaluation
            emit({"epoch": epoch, "accuracy": correct / len(tx), "seconds": time.monotonic() - START,
                  "eval_seconds": eval_seconds})
        dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.03)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--train-limit", type=int, default=0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--port", type=int, default=29517)
    p.add_argument("--timeout", type=float, default=60, help="seconds a collective waits for a missing process")
    p.add_argument("--kill-rank-after", type=float, default=0)
    p.add_argument("--slow-rank", type=float, default=1,
                   help="rank 1 pauses after each step for this many times, less one, what the step took")
    p.add_argument("--link", default="", help="an emulated link between the ranks, e.g. 50mbit/40ms")
    args = p.parse_args()
    if args.link:
        try:
            parse_link(args.link)
        except ValueError as e:
            emit({"failed": str(e), "seconds": time.monotonic() - START})
            return 2
    try:
        mp.spawn(run, args=(args, args.port), nprocs=args.processes, join=True)
    except Exception as e:  # a rank died: DDP cannot go on without it
        emit({"failed": str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__,
              "seconds": time.monotonic() - START})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
