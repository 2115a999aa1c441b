#!/usr/bin/python3
"""Jobs beyond classification, for `flotilla train --task`: their data, models, job files and figures.

  task_jobs.py make DIR [--flotilla BINARY]
      Writes, the same on every run (fixed seeds):
        DIR/regression.csv       6,000 rows: 12 numeric features x0..x11 and two targets,
                                 target_a and target_b, each a linear part plus nonlinear terms
                                 (sin(x0*x1), x2^2, tanh(2*x3)*x4, |x5|, ...) plus small noise;
                                 a linear fit explains about half of their variance
        DIR/multilabel/x.npy     4,000 uint8 images 1x16x16 on a noisy background, each with 0
        DIR/multilabel/y.npy     to 3 of 5 shape kinds (horizontal bar, vertical bar, square,
                                 cross, diagonal) at random places; y is float32 (N, 5) of 0/1
        DIR/chars/train.bin      the texts of /usr/share/common-licenses, one character a token
        DIR/chars/val.bin        (uint16 ids, nanoGPT's format): the first 90% and the last 10%;
        DIR/chars/meta.json      and the vocabulary: its size and the sorted characters (itos)
        DIR/char-transformer.pt  a decoder-only Transformer (2 layers, width 64, 4 heads, causal
                                 self-attention, learned positions up to 64) scripted with
                                 torch.jit.script: int64 [B, T] ids to logits [B, T, vocabulary]
        DIR/regression.json      job files, written by `flotilla train ... --save-job`: the
        DIR/multilabel.json      built-in MLP, Adam 1e-3, batch 64, 10 epochs; the built-in CNN,
        DIR/chars.json           Adam 1e-3, batch 64, 15 epochs; the Transformer, AdamW 1e-3
                                 with weight decay 0.01, batch 32, context 64, 8 epochs. All with
                                 a cosine schedule, 2 workers and no simulated preemptions.
      BINARY defaults to build/release/app/flotilla under the repository.
  task_jobs.py figures --flotilla BINARY [--workers 1,2] [--threads N] [--epochs-scale F] [--dir DIR]
      Makes the data (in a temporary folder, or DIR, kept), then trains each job with the plain
      single-process loop (`flotilla bench parity-loop`, N threads, default: every core) and
      with Flotilla at each number of workers (N / workers threads each), and prints a table:
      the final score, test loss and the task's further metric, and the wall time of each.
      F scales every job's epochs (at least 1).
  task_jobs.py check-lm --flotilla BINARY [--dir DIR]
      The test suite's check that next-token training learns: a character set from the first
      40,000 characters of the corpus, a one-layer Transformer of width 32, two epochs with one
      worker. Passes (exit 0) when the last evaluation's test perplexity is below the first's and
      below half the vocabulary (an untrained model's is about the vocabulary) and the token
      accuracy rose; fails with exit 1 and what was wrong; exit 77 (skipped) without torch.
"""

import argparse
import csv
import errno
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
    import torch
    from torch import nn
except ImportError as error:
    IMPORT_ERROR = error
    nn = None
else:
    IMPORT_ERROR = None

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_FLOTILLA = os.path.join(REPO, "build", "release", "app", "flotilla")
CORPUS = "/usr/share/common-licenses"
MAX_CONTEXT = 64
SKIPPED = 77

# Per task: the job file, its score (test_<score> in metrics.csv, "accuracy" in the plain
# loop's lines) and the one further metric the table shows.
TASKS = [
    {"task": "regression", "job": "regression.json", "score": "r2", "extra": "rmse"},
    {"task": "multi-label", "job": "multilabel.json", "score": "f1_macro", "extra": "f1_micro"},
    {"task": "next-token", "job": "chars.json", "score": "token_accuracy", "extra": "perplexity"},
]


# ---------------------------------------------------------------------------------------------
# Data


def make_regression(path, rows=6000, features=12, seed=11):
    """Two targets, each a linear part and nonlinear terms an MLP can learn; returns a linear
    least-squares fit's R² on a held-out tenth, for reference."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, features))
    w_a = rng.standard_normal(features)
    w_b = rng.standard_normal(features)
    w_a /= np.linalg.norm(w_a)
    w_b /= np.linalg.norm(w_b)
    noise = 0.05
    target_a = (x @ w_a + 1.2 * np.sin(x[:, 0] * x[:, 1]) + 0.35 * (x[:, 2] ** 2 - 1)
                + noise * rng.standard_normal(rows))
    target_b = (x @ w_b + 1.0 * np.tanh(2 * x[:, 3]) * x[:, 4] + 0.6 * (np.abs(x[:, 5]) - math.sqrt(2 / math.pi))
                + 0.5 * np.cos(x[:, 6] + x[:, 7]) + noise * rng.standard_normal(rows))
    targets = np.stack([target_a, target_b], axis=1)
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow([f"x{i}" for i in range(features)] + ["target_a", "target_b"])
        for features_row, target_row in zip(x, targets):
            out.writerow([f"{v:.6f}" for v in features_row] + [f"{v:.6f}" for v in target_row])
    held = rows // 10
    design = np.hstack([x, np.ones((rows, 1))])
    coefficients, *_ = np.linalg.lstsq(design[:-held], targets[:-held], rcond=None)
    residual = targets[-held:] - design[-held:] @ coefficients
    centred = targets[-held:] - targets[-held:].mean(axis=0)
    return float(np.mean(1 - (residual ** 2).sum(axis=0) / (centred ** 2).sum(axis=0)))


SHAPES = ["horizontal bar", "vertical bar", "square", "cross", "diagonal"]


def draw_shape(image, kind, rng):
    side = image.shape[0]
    ink = rng.integers(170, 256)
    if kind == 0:
        length = rng.integers(7, 10)
        r, c = rng.integers(0, side), rng.integers(0, side - length + 1)
        image[r, c:c + length] = ink
    elif kind == 1:
        length = rng.integers(7, 10)
        r, c = rng.integers(0, side - length + 1), rng.integers(0, side)
        image[r:r + length, c] = ink
    elif kind == 2:
        size = rng.integers(4, 7)
        r, c = rng.integers(0, side - size + 1, size=2)
        image[r, c:c + size] = ink
        image[r + size - 1, c:c + size] = ink
        image[r:r + size, c] = ink
        image[r:r + size, c + size - 1] = ink
    elif kind == 3:
        r, c = rng.integers(2, side - 2, size=2)
        image[r, c - 2:c + 3] = ink
        image[r - 2:r + 3, c] = ink
    else:
        length = rng.integers(5, 8)
        r, c = rng.integers(0, side - length + 1, size=2)
        steps = np.arange(length)
        if rng.integers(2):
            image[r + steps, c + steps] = ink
        else:
            image[r + steps, c + length - 1 - steps] = ink


def make_multilabel(folder, count=4000, side=16, seed=12):
    rng = np.random.default_rng(seed)
    images = np.zeros((count, 1, side, side), np.uint8)
    labels = np.zeros((count, len(SHAPES)), np.float32)
    for i in range(count):
        canvas = np.clip(rng.normal(30, 18, (side, side)), 0, 255)
        kinds = rng.choice(len(SHAPES), size=rng.integers(0, 4), replace=False)
        for kind in kinds:
            draw_shape(canvas, kind, rng)
            labels[i, kind] = 1
        canvas = np.clip(canvas + rng.normal(0, 12, (side, side)), 0, 255)
        images[i, 0] = canvas.astype(np.uint8)
    os.makedirs(folder, exist_ok=True)
    np.save(os.path.join(folder, "x.npy"), images)
    np.save(os.path.join(folder, "y.npy"), labels)
    return labels.mean(axis=0)


def corpus_text(limit=0):
    """Every regular file of the corpus (links to others left out), sorted by name, as one text."""
    parts = []
    for name in sorted(os.listdir(CORPUS)):
        path = os.path.join(CORPUS, name)
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            parts.append(f.read().decode("utf-8", errors="replace"))
    text = "".join(parts)
    return text[:limit] if limit > 0 else text


def make_chars(folder, limit=0):
    """train.bin, val.bin (uint16 ids) and meta.json; returns the vocabulary's size."""
    text = corpus_text(limit)
    vocabulary = sorted(set(text))
    index = {ch: i for i, ch in enumerate(vocabulary)}
    ids = np.array([index[ch] for ch in text], dtype="<u2")
    split = int(len(ids) * 0.9)
    os.makedirs(folder, exist_ok=True)
    ids[:split].tofile(os.path.join(folder, "train.bin"))
    ids[split:].tofile(os.path.join(folder, "val.bin"))
    with open(os.path.join(folder, "meta.json"), "w") as f:
        json.dump({"source": CORPUS, "vocab_size": len(vocabulary), "itos": vocabulary,
                   "train_tokens": split, "val_tokens": len(ids) - split}, f, ensure_ascii=False, indent=1)
    return len(vocabulary)


# ---------------------------------------------------------------------------------------------
# The Transformer

if nn is not None:

    class CausalSelfAttention(nn.Module):
        def __init__(self, width: int, heads: int, context: int):
            super().__init__()
            self.heads = heads
            self.qkv = nn.Linear(width, 3 * width)
            self.out = nn.Linear(width, width)
            # 1 where a position may attend: itself and the positions before it.
            self.register_buffer("causal", torch.tril(torch.ones(context, context)).view(1, 1, context, context))

        def forward(self, x):
            b, t, c = x.size()
            q, k, v = self.qkv(x).split(c, dim=2)
            q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
            k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
            v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
            scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(c // self.heads)
            scores = scores.masked_fill(self.causal[:, :, :t, :t] == 0, float("-inf"))
            y = torch.matmul(torch.softmax(scores, dim=-1), v)
            return self.out(y.transpose(1, 2).reshape(b, t, c))

    class Block(nn.Module):
        def __init__(self, width: int, heads: int, context: int):
            super().__init__()
            self.norm1 = nn.LayerNorm(width)
            self.attention = CausalSelfAttention(width, heads, context)
            self.norm2 = nn.LayerNorm(width)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

        def forward(self, x):
            x = x + self.attention(self.norm1(x))
            return x + self.mlp(self.norm2(x))

    class CharTransformer(nn.Module):
        """Token and learned position embeddings, pre-norm blocks, a final LayerNorm, a linear head."""

        def __init__(self, vocabulary: int, layers: int = 2, width: int = 64, heads: int = 4,
                     context: int = MAX_CONTEXT):
            super().__init__()
            self.context = context
            self.tokens = nn.Embedding(vocabulary, width)
            self.positions = nn.Embedding(context, width)
            self.blocks = nn.ModuleList([Block(width, heads, context) for _ in range(layers)])
            self.norm = nn.LayerNorm(width)
            self.head = nn.Linear(width, vocabulary)
            # Small initial weights (as GPT-2): the untrained model predicts nearly uniformly.
            for module in self.modules():
                if isinstance(module, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if isinstance(module, nn.Linear) and module.bias is not None:
                    nn.init.zeros_(module.bias)

        def forward(self, x):
            t = x.size(1)
            if t > self.context:
                raise RuntimeError("the context is longer than the model's positions")
            positions = torch.arange(t, dtype=torch.long, device=x.device)
            h = self.tokens(x) + self.positions(positions)
            for block in self.blocks:
                h = block(h)
            return self.head(self.norm(h))


def make_transformer(path, vocabulary, layers=2, width=64, heads=4, seed=13):
    torch.manual_seed(seed)
    scripted = torch.jit.script(CharTransformer(vocabulary, layers, width, heads))
    scripted.save(path)
    # What Flotilla will do with it: load it and run a batch of ids.
    loaded = torch.jit.load(path)
    ids = torch.randint(0, vocabulary, (3, MAX_CONTEXT), dtype=torch.long)
    with torch.no_grad():
        logits = loaded(ids)
        shorter = loaded(ids[:, :10])
    if list(logits.shape) != [3, MAX_CONTEXT, vocabulary]:
        raise RuntimeError(f"the scripted model gives {list(logits.shape)} for [3, {MAX_CONTEXT}] ids")
    # Causal: a position's logits do not depend on later tokens.
    if not torch.allclose(logits[:, :10], shorter, atol=1e-5):
        raise RuntimeError("the scripted model's logits depend on later tokens")
    return sum(p.numel() for p in scripted.parameters())


# ---------------------------------------------------------------------------------------------
# Jobs


class CannotStart(Exception):
    pass


def start(command, **kwargs):
    """subprocess.run, retried a few times while the binary is being rebuilt."""
    for attempt in range(4):
        try:
            return subprocess.run(command, **kwargs)
        except OSError as error:
            if attempt == 3 or error.errno not in (errno.ENOENT, errno.ETXTBSY, errno.ENOEXEC):
                raise CannotStart(f"cannot start {command[0]}: {error.strerror}; build it, or name it with "
                                  f"--flotilla") from error
            print(f"cannot start {command[0]} ({error.strerror}); retrying in 10 s", file=sys.stderr, flush=True)
            time.sleep(10)


def save_job(flotilla, path, flags):
    command = [flotilla, "train"] + flags + ["--save-job", path]
    done = start(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{shlex.join(command)} failed ({done.returncode}):\n{done.stdout.strip()}")
    # The name is the one field no flag sets.
    with open(path) as f:
        job = json.load(f)
    job["name"] = os.path.splitext(os.path.basename(path))[0]
    with open(path, "w") as f:
        json.dump(job, f, indent=4, sort_keys=True)
        f.write("\n")


def scaled(epochs, scale):
    return str(max(1, round(epochs * scale)))


def make_jobs(folder, flotilla, epochs_scale=1.0):
    common = ["--workers", "2", "--preempt-mean", "0", "--seed", "1", "--shards", "0", "--lr-schedule", "cosine"]
    save_job(flotilla, os.path.join(folder, "regression.json"), common + [
        "--task", "regression", "--regression-loss", "mse", "--dataset", "csv",
        "--data", os.path.join(folder, "regression.csv"), "--label-column", "target_a,target_b", "--test-fraction", "0.1",
        "--model", "mlp", "--optimizer", "adam", "--lr", "1e-3", "--weight-decay", "0", "--batch-size", "64",
        "--epochs", scaled(10, epochs_scale)])
    save_job(flotilla, os.path.join(folder, "multilabel.json"), common + [
        "--task", "multi-label", "--dataset", "npy", "--data", os.path.join(folder, "multilabel"),
        "--test-fraction", "0.1", "--model", "cnn", "--optimizer", "adam", "--lr", "1e-3", "--weight-decay", "0",
        "--batch-size", "64", "--epochs", scaled(15, epochs_scale)])
    save_job(flotilla, os.path.join(folder, "chars.json"), common + [
        "--task", "next-token", "--dataset", "tokens", "--data", os.path.join(folder, "chars"),
        "--token-type", "uint16", "--context", str(MAX_CONTEXT), "--model", "torchscript",
        "--model-file", os.path.join(folder, "char-transformer.pt"), "--optimizer", "adamw", "--lr", "1e-3",
        "--weight-decay", "0.01", "--batch-size", "32", "--epochs", scaled(8, epochs_scale)])


def make(folder, flotilla, epochs_scale=1.0):
    os.makedirs(folder, exist_ok=True)
    linear_r2 = make_regression(os.path.join(folder, "regression.csv"))
    print(f"regression.csv: 6000 rows, 12 features, 2 targets; a linear least-squares fit's R² on the last "
          f"tenth: {linear_r2:.3f}")
    shares = make_multilabel(os.path.join(folder, "multilabel"))
    print("multilabel/: 4000 images 1x16x16; share of images with each shape: "
          + ", ".join(f"{name} {share:.2f}" for name, share in zip(SHAPES, shares)))
    vocabulary = make_chars(os.path.join(folder, "chars"))
    with open(os.path.join(folder, "chars", "meta.json")) as f:
        meta = json.load(f)
    print(f"chars/: {meta['train_tokens']} training and {meta['val_tokens']} test tokens, vocabulary {vocabulary}")
    parameters = make_transformer(os.path.join(folder, "char-transformer.pt"), vocabulary)
    print(f"char-transformer.pt: {parameters} parameters")
    make_jobs(folder, flotilla, epochs_scale)
    print("regression.json, multilabel.json, chars.json: written in " + folder)


# ---------------------------------------------------------------------------------------------
# Running and reading


def evaluations(run_dir, score):
    """The rows of the run's metrics.csv that hold an evaluation, in order."""
    with open(os.path.join(run_dir, "metrics.csv"), newline="") as f:
        return [row for row in csv.DictReader(f) if row.get("test_" + score)]


def tail(path, lines=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]).strip()
    except OSError:
        return ""


def run_plain_loop(flotilla, job, threads, log):
    """The plain loop's last epoch as {score, loss, extra...}, or {"failed": message}."""
    command = [flotilla, "bench", "parity-loop", "--job", job, "--threads", str(threads)]
    with open(log, "w") as err:
        started = time.monotonic()
        done = start(command, stdout=subprocess.PIPE, stderr=err, text=True)
        wall = time.monotonic() - started
    last = None
    for line in done.stdout.splitlines():
        try:
            parsed = json.loads(line)
        except ValueError:
            continue
        if "failed" in parsed:
            return {"failed": parsed["failed"], "command": shlex.join(command), "wall": wall}
        last = parsed
    if done.returncode != 0 or last is None:
        return {"failed": f"exit {done.returncode}: {tail(log) or done.stdout.strip()}",
                "command": shlex.join(command), "wall": wall}
    last["wall"] = wall
    return last


def run_flotilla(flotilla, job, workers, threads, run_dir, log, score, extra):
    command = [flotilla, "train", "--job", job, "--workers", str(workers), "--threads", str(threads),
               "--run-dir", run_dir, "--quiet"]
    with open(log, "w") as out:
        started = time.monotonic()
        done = start(command, stdout=out, stderr=subprocess.STDOUT)
        wall = time.monotonic() - started
    if done.returncode != 0:
        return {"failed": f"exit {done.returncode}: {tail(log)}", "command": shlex.join(command), "wall": wall}
    try:
        rows = evaluations(run_dir, score)
    except OSError as error:
        return {"failed": f"no metrics.csv: {error}", "command": shlex.join(command), "wall": wall}
    if not rows:
        return {"failed": "metrics.csv holds no evaluation", "command": shlex.join(command), "wall": wall}
    last = rows[-1]
    return {"accuracy": float(last["test_" + score]), "loss": float(last["test_loss"]),
            extra: float(last["test_" + extra]), "epoch": int(last["epoch"]), "wall": wall}


def number(value):
    return f"{value:.4f}" if abs(value) < 100 else f"{value:.1f}"


def figures(args):
    started = time.monotonic()
    cores = os.cpu_count() or 1
    threads = args.threads or cores
    workers = [int(w) for w in args.workers.split(",") if w.strip()]
    print("Command: " + shlex.join([sys.executable] + sys.argv))
    print(f"{cores} cores, plain loop with {threads} threads, Flotilla with {threads} threads shared among the "
          f"workers; torch {torch.__version__} (data, model); load average before: {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.dir or scratch
        make(folder, args.flotilla, args.epochs_scale)
        print()
        rows, failures = [], []
        for spec in TASKS:
            job = os.path.join(folder, spec["job"])
            with open(job) as f:
                epochs = json.load(f)["training"]["epochs"]
            name = os.path.splitext(spec["job"])[0]
            contenders = [("plain loop", run_plain_loop(args.flotilla, job, threads,
                                                        os.path.join(folder, f"{name}-plain.log")))]
            for w in workers:
                run_dir = os.path.join(folder, f"run-{name}-{w}")
                contenders.append((f"Flotilla, {w} worker{'s' if w > 1 else ''}",
                                   run_flotilla(args.flotilla, job, w, max(1, threads // w), run_dir,
                                                os.path.join(folder, f"{name}-{w}.log"), spec["score"],
                                                spec["extra"])))
            for contender, result in contenders:
                if "failed" in result:
                    failures.append((spec["task"], contender, result))
                    rows.append(f"| {spec['task']} | {contender} | {spec['score']} | failed | | | "
                                f"{result['wall']:.0f} |")
                    continue
                rows.append(f"| {spec['task']} ({epochs} epochs) | {contender} | {spec['score']} | "
                            f"{number(result['accuracy'])} | {number(result['loss'])} | "
                            f"{spec['extra']} {number(result[spec['extra']])} | {result['wall']:.0f} |")
                print(f"{spec['task']}, {contender}: done in {result['wall']:.0f} s", file=sys.stderr, flush=True)
        print("| Task | Contender | Score | Final score | Test loss | Further metric | Wall s |")
        print("|---|---|---|---|---|---|---|")
        print("\n".join(rows))
        for task, contender, result in failures:
            print(f"\n{task}, {contender} failed: {result['command']}\n{result['failed']}")
        print(f"\nTotal wall time: {time.monotonic() - started:.0f} s; load average after: {os.getloadavg()[0]:.1f}")
    return 1 if failures else 0


# ---------------------------------------------------------------------------------------------
# The test suite's check


def untrained_perplexity(model_path, val_path, context):
    ids = torch.from_numpy(np.fromfile(val_path, dtype="<u2").astype(np.int64))
    usable = (len(ids) - 1) // context * context
    inputs = ids[:usable].view(-1, context)
    targets = ids[1:usable + 1].view(-1, context)
    model = torch.jit.load(model_path)
    with torch.no_grad():
        logits = model(inputs)
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
    return math.exp(loss.item())


def check_lm(args):
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.dir or scratch
        os.makedirs(folder, exist_ok=True)
        chars = os.path.join(folder, "chars-small")
        vocabulary = make_chars(chars, limit=40000)
        model = os.path.join(folder, "char-transformer-small.pt")
        make_transformer(model, vocabulary, layers=1, width=32, heads=4)
        context = 64
        before = untrained_perplexity(model, os.path.join(chars, "val.bin"), context)
        run_dir = os.path.join(folder, "run-check-lm")
        command = [args.flotilla, "train", "--task", "next-token", "--dataset", "tokens", "--data", chars,
                   "--context", str(context), "--model", "torchscript", "--model-file", model,
                   "--optimizer", "adamw", "--lr", "3e-3", "--weight-decay", "0.01", "--lr-schedule", "cosine",
                   "--batch-size", "16", "--epochs", "2", "--workers", "1", "--threads", "1",
                   "--preempt-mean", "0", "--seed", "1", "--run-dir", run_dir, "--quiet"]
        print("Command: " + shlex.join(command), flush=True)
        done = start(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            print(f"FAIL: flotilla train exited with {done.returncode}:\n{done.stdout.strip()}")
            return 1
        try:
            rows = evaluations(run_dir, "perplexity")
        except OSError as error:
            print(f"FAIL: the run left no metrics.csv: {error}")
            return 1
        if len(rows) < 2:
            print(f"FAIL: metrics.csv holds {len(rows)} evaluation(s); two epochs should give at least two")
            return 1
        first, last = rows[0], rows[-1]
        p0, p1 = float(first["test_perplexity"]), float(last["test_perplexity"])
        a0, a1 = float(first["test_token_accuracy"]), float(last["test_token_accuracy"])
        print(f"vocabulary {vocabulary}; untrained model's test perplexity {before:.2f}; "
              f"first evaluation (after epoch {int(first['epoch']) + 1}): perplexity {p0:.2f}, token accuracy {a0:.4f}; "
              f"last (after epoch {int(last['epoch']) + 1}): perplexity {p1:.2f}, token accuracy {a1:.4f}; "
              f"{time.monotonic() - started:.0f} s")
        problems = []
        if not p1 < p0:
            problems.append(f"the test perplexity did not fall: {p0:.3f} at the first evaluation, {p1:.3f} at the last")
        if not p1 < 0.5 * vocabulary:
            problems.append(f"the last test perplexity, {p1:.3f}, is not below half the vocabulary "
                            f"({0.5 * vocabulary:.1f}): the model learnt little more than an untrained one")
        if not a1 > a0:
            problems.append(f"the test token accuracy did not rise: {a0:.4f} at the first evaluation, {a1:.4f} at the last")
        for problem in problems:
            print("FAIL: " + problem)
        if problems:
            print("Run folder: " + run_dir + (" (removed; pass --dir to keep it)" if not args.dir else ""))
            return 1
        print("PASS")
        return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("make")
    m.add_argument("folder")
    m.add_argument("--flotilla", default=DEFAULT_FLOTILLA)
    f = sub.add_parser("figures")
    f.add_argument("--flotilla", default=DEFAULT_FLOTILLA)
    f.add_argument("--workers", default="1,2", help="Flotilla's worker counts, e.g. 1,2")
    f.add_argument("--threads", type=int, default=0, help="LibTorch threads in all (default: every core)")
    f.add_argument("--epochs-scale", type=float, default=1.0, help="scale every job's epochs")
    f.add_argument("--dir", help="make the data and keep the runs here")
    c = sub.add_parser("check-lm")
    c.add_argument("--flotilla", default=DEFAULT_FLOTILLA)
    c.add_argument("--dir", help="keep the data and the run here")
    args = parser.parse_args()
    if IMPORT_ERROR is not None:
        print(f"task_jobs.py needs numpy and torch (Debian: python3-numpy, python3-torch): {IMPORT_ERROR}")
        return SKIPPED if args.command == "check-lm" else 1
    args.flotilla = os.path.abspath(args.flotilla)
    try:
        if args.command == "make":
            make(args.folder, args.flotilla)
            return 0
        if args.command == "figures":
            return figures(args)
        return check_lm(args)
    except (CannotStart, RuntimeError) as error:
        print(("FAIL: " if args.command == "check-lm" else "") + str(error))
        return 1


if __name__ == "__main__":
    sys.exit(main())
