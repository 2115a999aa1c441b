#!/usr/bin/python3
"""Trains the same job on Fashion-MNIST read two ways, in one invocation: from Debian's IDX
files (--dataset fashion-mnist) and from the same images written out as PNG class folders
(--dataset images, by bench/fashion_images.py). Runs alternate, so that neither always meets
a warmer machine. Prints, per run and as the ratio images / IDX: the time to load the data,
the time per epoch (from the first epoch's evaluation to the last's, in the run's store),
the final test accuracy and the process's peak resident memory.

    python3 bench/images_vs_idx.py --folder /tmp/fashion-png --repeats 2 -- --model cnn --epochs 3

Flags after -- go to both `flotilla train` runs unchanged.
"""

import argparse
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def run(binary, dataset_flags, extra, run_dir):
    started = time.monotonic()
    process = subprocess.Popen([binary, "train", "--run-dir", run_dir, "--quiet", "--preempt-mean", "0",
                                "--device", "cpu"] + dataset_flags + extra, stdout=subprocess.DEVNULL)
    # wait4 gives this process's own peak resident set (the workers are its threads).
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"flotilla train exited with {process.returncode} ({run_dir})")
    wall = time.monotonic() - started
    with open(os.path.join(run_dir, "flotilla.log"), encoding="utf-8") as f:
        loaded = re.search(r"loaded (\d+) training and (\d+) test samples .* in ([0-9.]+) s", f.read())
    if not loaded:
        raise SystemExit(f"{run_dir}/flotilla.log does not say how the data was loaded")
    db = sqlite3.connect(os.path.join(run_dir, "flotilla.db"))
    rows = db.execute("SELECT epoch, accuracy, at_ms FROM evaluations WHERE job_id = (SELECT MAX(id) FROM jobs) "
                      "ORDER BY epoch").fetchall()
    if len(rows) < 2:
        raise SystemExit(f"{run_dir}: {len(rows)} evaluations; use --epochs 2 or more")
    per_epoch = (rows[-1][2] - rows[0][2]) / 1000.0 / (rows[-1][0] - rows[0][0])
    return {"load": float(loaded.group(3)), "epoch": per_epoch, "accuracy": rows[-1][1], "wall": wall,
            "rss": usage.ru_maxrss / 1024.0,
            "samples": f"{loaded.group(1)}+{loaded.group(2)}"}


def main():
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=os.path.join(HERE, "..", "build", "release", "app", "flotilla"))
    parser.add_argument("--folder", required=True, help="the PNG folder (written first if it does not exist)")
    parser.add_argument("--idx", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if not os.path.isdir(args.folder):
        subprocess.run([sys.executable, os.path.join(HERE, "fashion_images.py"), "--idx", args.idx, "--out",
                        args.folder], check=True)
    kinds = {"idx": ["--dataset", "fashion-mnist", "--data", args.idx],
             "images": ["--dataset", "images", "--data", args.folder]}
    results = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory() as scratch:
        for r in range(args.repeats):
            order = ["idx", "images"] if r % 2 == 0 else ["images", "idx"]
            for kind in order:
                out = run(args.binary, kinds[kind], extra, os.path.join(scratch, f"{kind}{r}"))
                results[kind].append(out)
                print(f"repeat {r + 1} {kind:6}: {out['samples']} samples, load {out['load']:.2f} s, "
                      f"{out['epoch']:.2f} s/epoch, accuracy {out['accuracy']:.4f}, peak RSS {out['rss']:.0f} MiB, "
                      f"wall {out['wall']:.1f} s",
                      flush=True)
    print()
    print("| | load (s) | s/epoch | test accuracy | peak RSS (MiB) |")
    print("|---|---|---|---|---|")
    for kind in kinds:
        rs = results[kind]
        print(f"| {kind} | {statistics.median(x['load'] for x in rs):.2f} | "
              f"{statistics.median(x['epoch'] for x in rs):.2f} | "
              f"{statistics.median(x['accuracy'] for x in rs):.4f} | {statistics.median(x['rss'] for x in rs):.0f} |")
    ratios = [i["epoch"] / d["epoch"] for i, d in zip(results["images"], results["idx"])]
    print(f"| images / idx, s/epoch per repeat | | {' '.join(f'{x:.2f}' for x in ratios)} | | |")


if __name__ == "__main__":
    main()
