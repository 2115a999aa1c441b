#!/usr/bin/python3
"""The DDP peer of `flotilla bench parity`: the job's model (DATA/model.pt, TorchScript, its
initial weights) trained with PyTorch DistributedDataParallel, N processes on the CPU with
the gloo backend, on the data as Flotilla prepared it (DATA/x_train.npy, y_train.npy,
x_test.npy, y_test.npy: standardized float32 inputs, int64 labels).

Each rank takes every N-th sample of an epoch's shuffled order, in batches of --batch-size
(so a step averages the gradients of N batches); the learning rate follows the job's
schedule per step, with the warmup as the same share of the job's steps. Each epoch rank 0
evaluates on the test set and prints one JSON line
    {"epoch": 1, "accuracy": 0.85, "seconds": 12.3, "eval_seconds": 0.9}
With --slow-rank F, rank 1 pauses after every step for F - 1 times what the step took.
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

START = time.monotonic()


def rate(args, step, total):
    warmup = min(total, round(args.warmup_steps * total / max(1, args.job_steps))) if args.warmup_steps else 0
    step = min(max(step, 0), total - 1)
    if step < warmup:
        return args.lr * (step + 1) / warmup
    if args.schedule == "step":
        every = args.step_epochs * args.steps_per_epoch
        return args.lr * args.gamma ** (step // every) if every > 0 else args.lr
    if args.schedule == "cosine":
        span = total - warmup - 1
        t = (step - warmup) / span if span > 0 else 1.0
        return args.lr * (args.floor + (1 - args.floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))
    return args.lr


def run(rank, args):
    # On an emulated machine of its own (flotilla bench scaling): the rank moves itself into
    # its machine's cgroup before it does any work.
    if args.cgroups:
        with open(args.cgroups.split(",")[rank], "w") as procs:
            procs.write(str(os.getpid()))
    torch.set_num_threads(args.threads)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    dist.init_process_group("gloo", rank=rank, world_size=args.processes)
    x = torch.from_numpy(np.load(os.path.join(args.data, "x_train.npy")))
    y = torch.from_numpy(np.load(os.path.join(args.data, "y_train.npy")))
    tx = torch.from_numpy(np.load(os.path.join(args.data, "x_test.npy")))
    ty = torch.from_numpy(np.load(os.path.join(args.data, "y_test.npy")))
    model = torch.jit.load(os.path.join(args.data, "model.pt"))
    model.train()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    betas = tuple(float(b) for b in args.betas.split(","))
    if args.optimizer == "adam":
        opt = torch.optim.Adam(ddp.parameters(), lr=args.lr, betas=betas, eps=args.eps, weight_decay=args.weight_decay)
    elif args.optimizer == "adamw":
        opt = torch.optim.AdamW(ddp.parameters(), lr=args.lr, betas=betas, eps=args.eps, weight_decay=args.weight_decay)
    else:
        opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=args.momentum, nesterov=args.nesterov,
                              weight_decay=args.weight_decay)
    n = x.shape[0]
    per_rank = (n + args.processes - 1) // args.processes
    args.steps_per_epoch = (per_rank + args.batch_size - 1) // args.batch_size
    args.job_steps = args.epochs * ((n + args.batch_size - 1) // args.batch_size)
    total = args.epochs * args.steps_per_epoch
    step = 0
    eval_seconds = 0.0
    for epoch in range(1, args.epochs + 1):
        g = torch.Generator()
        g.manual_seed(args.seed * 1000 + epoch)
        order = torch.randperm(n, generator=g)
        mine = order[rank::args.processes]
        # Every rank takes the same number of steps (DDP's all-reduce needs them all).
        mine = torch.cat([mine, order[: per_rank - mine.shape[0]]]) if mine.shape[0] < per_rank else mine
        ddp.train()
        for i in range(0, per_rank, args.batch_size):
            began = time.monotonic()
            idx = mine[i:i + args.batch_size]
            for group in opt.param_groups:
                group["lr"] = rate(args, step, total)
            step += 1
            opt.zero_grad()
            F.cross_entropy(ddp(x[idx]), y[idx], label_smoothing=args.label_smoothing).backward()
            if args.clip_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(ddp.parameters(), args.clip_grad_norm)
            opt.step()
            if rank == 1 and args.slow_rank > 1:
                time.sleep((time.monotonic() - began) * (args.slow_rank - 1))
        if rank == 0:
            began = time.monotonic()
            model.eval()
            correct = 0
            with torch.no_grad():
                for i in range(0, tx.shape[0], 1000):
                    correct += (model(tx[i:i + 1000]).argmax(1) == ty[i:i + 1000]).sum().item()
            eval_seconds += time.monotonic() - began
            print(json.dumps({"epoch": epoch, "accuracy": round(correct / tx.shape[0], 4),
                              "seconds": round(time.monotonic() - START, 2), "eval_seconds": round(eval_seconds, 3)}),
                  flush=True)
        dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--optimizer", default="sgd")
    p.add_argument("--lr", type=float, default=0.03)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--nesterov", action="store_true")
    p.add_argument("--betas", default="0.9,0.999")
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--clip-grad-norm", type=float, default=0.0)
    p.add_argument("--label-smoothing", type=float, default=0.0)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--schedule", default="cosine")
    p.add_argument("--warmup-steps", type=int, default=0)
    p.add_argument("--floor", type=float, default=0.05)
    p.add_argument("--step-epochs", type=int, default=5)
    p.add_argument("--gamma", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--port", type=int, default=29500)
    p.add_argument("--slow-rank", type=float, default=1.0)
    p.add_argument("--cgroups", default="", help="one cgroup procs file per rank (emulated machines)")
    args = p.parse_args()
    try:
        mp.spawn(run, args=(args,), nprocs=args.processes, join=True)
    except Exception as e:  # a rank failed: say so on one line, as the caller reads it
        print(json.dumps({"failed": str(e).splitlines()[-1] if str(e) else type(e).__name__,
                          "seconds": round(time.monotonic() - START, 2)}), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
