#!/usr/bin/env python3
"""The fleet service's figures (docs/benchmarks.md, "One fleet, many jobs"), measured with
real processes on this machine:

1. shares: two long jobs at weights 2:1 on three workers for SECONDS; the share of the
   worker-seconds each held (from the queue) against 2/3 and 1/3;
2. idle time between jobs: a queue of three short jobs run one after another by the same
   four worker processes; for each worker and each change of job, the time from its last lease of
   one job ending to its first lease of the next being issued (from the jobs' stores);
3. throughput: the same two jobs on the same two workers, run at once (--concurrent-jobs 2)
   and one after the other (--concurrent-jobs 1); samples trained per second from the first
   job's start to the last one's end (from the queue), and the ratio of the two.

Usage: scripts/fleet_figures.py BUILD_DIR [SECONDS]
"""
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time

build = sys.argv[1] if len(sys.argv) > 1 else "build/release"
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 60.0
binary = os.path.join(build, "app", "flotilla")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def flotilla(*args, identity):
    run = subprocess.run([binary, *args, "--identity-dir", identity], capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        raise SystemExit(f"flotilla {' '.join(args)}: {run.stderr}")
    return run.stdout


def job_file(folder, name, epochs, train_limit):
    base = os.path.join(folder, "base.json")
    if not os.path.exists(base):
        subprocess.run([binary, "train", "--save-job", base], check=True, capture_output=True)
    job = json.load(open(base))
    job["name"] = name
    job["training"]["epochs"] = epochs
    job["training"]["shards"] = 8
    job["dataset"]["train_limit"] = train_limit
    job["dataset"]["test_limit"] = 500
    job["fleet"]["workers"] = 0
    job["fleet"]["preemption"]["mean_interval_s"] = 0
    path = os.path.join(folder, name + ".json")
    json.dump(job, open(path, "w"))
    return path


def queue(identity):
    db = sqlite3.connect(os.path.join(identity, "fleet.db"))
    rows = db.execute("SELECT id, name, state, weight, worker_seconds, run_dir FROM queue ORDER BY id").fetchall()
    db.close()
    return rows


class Fleet:
    def __init__(self, folder, concurrent):
        self.folder = folder
        self.identity = os.path.join(folder, "identity")
        self.port = free_port()
        self.token = os.path.join(folder, "token")
        self.serve = subprocess.Popen(
            [binary, "serve", "--identity-dir", self.identity, "--listen", "127.0.0.1", "--host", "127.0.0.1",
             "--port", str(self.port), "--token-file", self.token, "--concurrent-jobs", str(concurrent), "--quiet"],
            stdout=open(os.path.join(folder, "serve.out"), "w"), stderr=subprocess.STDOUT)
        while not os.path.exists(self.token):
            time.sleep(0.1)
        self.workers = []

    def worker(self, name):
        token = open(self.token).read().strip()
        self.workers.append(subprocess.Popen(
            [binary, "worker", "--join", token, "--state-dir", os.path.join(self.folder, "workers", name), "--name",
             name, "--threads", "1"],
            stdout=open(os.path.join(self.folder, name + ".out"), "w"), stderr=subprocess.STDOUT))

    def stop(self):
        for p in self.workers + [self.serve]:
            p.send_signal(signal.SIGTERM)
        for p in self.workers + [self.serve]:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


def shares():
    with tempfile.TemporaryDirectory() as folder:
        fleet = Fleet(folder, 2)
        flotilla("submit", job_file(folder, "heavy", 1000, 6000), "--weight", "2", identity=fleet.identity)
        flotilla("submit", job_file(folder, "light", 1000, 6000), "--weight", "1", identity=fleet.identity)
        for name in ("w1", "w2", "w3"):
            fleet.worker(name)
        time.sleep(10)  # joins, speed probes, the first subtasks
        start = {row[1]: row[4] for row in queue(fleet.identity)}
        time.sleep(seconds)
        end = {row[1]: row[4] for row in queue(fleet.identity)}
        fleet.stop()
    held = {name: end[name] - start[name] for name in end}
    total = sum(held.values())
    for name, want in (("heavy", 2 / 3), ("light", 1 / 3)):
        got = held[name] / total if total else 0
        print(f"share {name}: {got:.3f} of {total:.0f} worker-seconds over {seconds:.0f} s, target {want:.3f}, "
              f"error {abs(got - want) / want * 100:.1f}%")


def idle_between_jobs():
    with tempfile.TemporaryDirectory() as folder:
        fleet = Fleet(folder, 1)
        for name in ("q1", "q2", "q3"):
            flotilla("submit", job_file(folder, name, 1, 4000), identity=fleet.identity)
        for name in ("w1", "w2", "w3", "w4"):
            fleet.worker(name)
        deadline = time.time() + 600
        while time.time() < deadline and any(row[2] != "finished" for row in queue(fleet.identity)):
            time.sleep(0.5)
        rows = queue(fleet.identity)
        alive = sum(1 for p in fleet.workers if p.poll() is None)
        spans = []
        for _id, name, state, _w, _ws, run_dir in rows:
            db = sqlite3.connect(os.path.join(run_dir, "flotilla.db"))
            names = dict(db.execute("SELECT id, name FROM workers").fetchall())
            per_worker = {}
            for worker, issued, ended in db.execute("SELECT worker_id, issued_ms, ended_ms FROM leases"):
                first, last = per_worker.get(names[worker], (issued, ended))
                per_worker[names[worker]] = (min(first, issued), max(last, ended))
            spans.append((name, state, per_worker))
            db.close()
        fleet.stop()
    gaps = []
    for (a, _, before), (b, _, after) in zip(spans, spans[1:]):
        for worker in sorted(set(before) & set(after)):
            gap = (after[worker][0] - before[worker][1]) / 1000.0
            gaps.append(gap)
            print(f"idle {worker} from job {a} to job {b}: {gap:.2f} s")
    print(f"states: {[s[1] for s in spans]}, workers still running after the queue: {alive} of 4")
    if gaps:
        print(f"idle between jobs: mean {sum(gaps) / len(gaps):.2f} s, longest {max(gaps):.2f} s")


def samples_per_second(concurrent):
    with tempfile.TemporaryDirectory() as folder:
        fleet = Fleet(folder, concurrent)
        for name in ("t1", "t2"):
            flotilla("submit", job_file(folder, name, 2, 12000), identity=fleet.identity)
        fleet.worker("w1")
        fleet.worker("w2")
        deadline = time.time() + 900
        while time.time() < deadline and any(row[2] != "finished" for row in queue(fleet.identity)):
            time.sleep(0.5)
        db = sqlite3.connect(os.path.join(fleet.identity, "fleet.db"))
        started, ended = db.execute("SELECT MIN(started_ms), MAX(ended_ms) FROM queue").fetchone()
        states = [row[0] for row in db.execute("SELECT state FROM queue")]
        db.close()
        samples = 0
        for row in queue(fleet.identity):
            run = sqlite3.connect(os.path.join(row[5], "flotilla.db"))
            samples += run.execute("SELECT COALESCE(SUM(samples), 0) FROM assimilations").fetchone()[0]
            run.close()
        fleet.stop()
    rate = samples / ((ended - started) / 1000.0)
    print(f"--concurrent-jobs {concurrent}: {samples} samples in {(ended - started) / 1000.0:.1f} s = {rate:.0f} "
          f"samples/s ({states})")
    return rate


def throughput():
    sequential = samples_per_second(1)
    together = samples_per_second(2)
    print(f"throughput of two concurrent jobs / one after the other: {together / sequential:.3f}")


shares()
idle_between_jobs()
throughput()
