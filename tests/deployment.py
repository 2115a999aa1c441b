#!/usr/bin/python3
"""Checks the headless-worker deployment files as far as the tools here allow.

  deployment.py SOURCE_DIR FLOTILLA_HEADLESS_BINARY

- Kubernetes manifests: valid YAML; a Deployment whose pods go to the cloud's spot/preemptible
  node pool (node selector and toleration), whose grace period leaves the worker time to hand
  in its partial result (terminationGracePeriodSeconds > the worker's --grace), and whose
  worker options are ones `flotilla-headless worker` accepts.
- The systemd unit: `systemd-analyze verify` has no complaint about it, and the hardening it
  promises is there.
- The SLURM script: `bash -n`, --requeue and a SIGTERM ahead of the end.
- The container recipe: two stages, the worker as entry point behind an init that passes
  SIGTERM on, not root, built without the desktop (no Qt Widgets, Charts or OpenGL).
Every one of them runs flotilla-headless, not the desktop's flotilla.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

SPOT_POOLS = {
    "gke-spot-workers.yaml": ("cloud.google.com/gke-spot", "true"),
    "eks-spot-workers.yaml": ("eks.amazonaws.com/capacityType", "SPOT"),
    "aks-spot-workers.yaml": ("kubernetes.azure.com/scalesetpriority", "spot"),
    "gke-spot-gpu-workers.yaml": ("cloud.google.com/gke-spot", "true"),
    "eks-spot-gpu-workers.yaml": ("eks.amazonaws.com/capacityType", "SPOT"),
}

failures = []


def fail(what):
    failures.append(what)
    print("FAIL:", what)


def worker_options(binary):
    """The long options `flotilla-headless worker --help` lists."""
    text = subprocess.run([binary, "worker", "--help"], capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"--([a-z][a-z-]+)", text))


def check_manifest(path, accepted):
    name = os.path.basename(path)
    with open(path, encoding="utf-8") as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    deployments = [d for d in docs if d.get("kind") == "Deployment"]
    if len(deployments) != 1:
        fail(f"{name}: expected one Deployment, found {len(deployments)}")
        return
    pod = deployments[0]["spec"]["template"]["spec"]
    key, value = SPOT_POOLS[name]
    if pod.get("nodeSelector", {}).get(key) != value:
        fail(f"{name}: nodeSelector does not pick {key}={value}")
    tolerations = pod.get("tolerations", [])
    if not any(t.get("key") == key or t.get("key") == "spot" for t in tolerations):
        fail(f"{name}: no toleration for the spot pool's taint")
    containers = pod.get("containers", [])
    if len(containers) != 1:
        fail(f"{name}: expected one container")
        return
    args = containers[0].get("args", [])
    grace = None
    for arg in args:
        m = re.match(r"--([a-z-]+)(=(.*))?$", arg)
        if not m:
            fail(f"{name}: argument {arg!r} is not --option=value")
            continue
        if m.group(1) not in accepted:
            fail(f"{name}: flotilla-headless worker has no option --{m.group(1)}")
        if m.group(1) == "grace":
            grace = int(m.group(3))
    period = pod.get("terminationGracePeriodSeconds")
    if grace is None or period is None or not period > grace:
        fail(f"{name}: terminationGracePeriodSeconds ({period}) must exceed the worker's --grace ({grace})")
    security = containers[0].get("securityContext", {})
    if security.get("allowPrivilegeEscalation") is not False or not pod.get("securityContext", {}).get("runAsNonRoot"):
        fail(f"{name}: the worker must run as non-root without privilege escalation")
    mounts = {m["mountPath"] for m in containers[0].get("volumeMounts", [])}
    if "/var/lib/flotilla" not in mounts or "/run/secrets" not in mounts:
        fail(f"{name}: the state folder and the token secret must be mounted")
    if "gpu" in name:
        limits = containers[0].get("resources", {}).get("limits", {})
        if limits.get("nvidia.com/gpu") != 1:
            fail(f"{name}: a GPU worker's pod must ask for one nvidia.com/gpu")
        if not any(t.get("key") == "nvidia.com/gpu" for t in tolerations):
            fail(f"{name}: no toleration for the GPU pool's nvidia.com/gpu taint")
        if "--device=cuda" not in args:
            fail(f"{name}: a GPU worker must train with --device=cuda")
        if containers[0].get("image", "").split(":")[0] != "flotilla-worker-cuda":
            fail(f"{name}: a GPU worker needs the CUDA image (Containerfile.cuda)")
    print(f"ok   {name}: spot pool {key}={value}, grace {grace} s < {period} s")


def verify_unit(unit_text, binary, dropin=None):
    """Complaints of `systemd-analyze verify` about an instance of the template (with a drop-in),
    pointing at the binary that was built; None where the tool is missing."""
    if shutil.which("systemd-analyze") is None:
        return None
    here = os.path.abspath(binary)
    with tempfile.TemporaryDirectory() as tmp:
        unit = os.path.join(tmp, "flotilla-worker@lab.service")
        with open(unit, "w", encoding="utf-8") as f:
            f.write(unit_text.replace("/usr/bin/flotilla-headless", here))
        if dropin is not None:
            os.makedirs(unit + ".d")
            with open(os.path.join(unit + ".d", "gpu.conf"), "w", encoding="utf-8") as f:
                f.write(dropin.replace("/usr/bin/flotilla-headless", here))
        env = dict(os.environ, SYSTEMD_UNIT_PATH=tmp + ":")
        run = subprocess.run(["systemd-analyze", "verify", "--man=no", unit], capture_output=True, text=True, env=env)
        return [l for l in (run.stdout + run.stderr).splitlines() if "flotilla-worker" in l or "gpu.conf" in l]


def check_systemd(path, binary):
    text = open(path, encoding="utf-8").read()
    for line in ("ExecStart=/usr/bin/flotilla-headless worker ", "DynamicUser=yes", "ProtectSystem=strict",
                 "Restart=on-failure", "LoadCredential=token:", "NoNewPrivileges=yes", "MemoryMax=", "CPUQuota=",
                 "KillSignal=SIGTERM"):
        if line not in text:
            fail(f"systemd unit lacks {line}")
    own = verify_unit(text, binary)
    if own is None:
        print("skip systemd-analyze verify: not installed")
    elif own:
        fail("systemd-analyze verify: " + " / ".join(own))
    else:
        print("ok   flotilla-worker@.service: systemd-analyze verify has no complaint")


def check_gpu_dropin(unit_path, dropin_path, binary):
    """The GPU drop-in opens the NVIDIA devices only, and the unit with it applied verifies."""
    text = open(dropin_path, encoding="utf-8").read()
    for line in ("PrivateDevices=no", "DevicePolicy=closed", "DeviceAllow=char-nvidia-frontend rw",
                 "DeviceAllow=char-nvidia-uvm rw", "ExecStart=\n", "ExecStart=/usr/bin/flotilla-headless worker ",
                 "--device cuda"):
        if line not in text:
            fail(f"gpu.conf lacks {line!r}")
    own = verify_unit(open(unit_path, encoding="utf-8").read(), binary, dropin=text)
    if own is None:
        print("skip systemd-analyze verify of the GPU drop-in: not installed")
    elif own:
        fail("systemd-analyze verify with gpu.conf: " + " / ".join(own))
    else:
        print("ok   gpu.conf: systemd-analyze verify of the unit with the drop-in has no complaint")


def check_slurm(path):
    run = subprocess.run(["bash", "-n", path], capture_output=True, text=True)
    if run.returncode != 0:
        fail(f"bash -n {path}: {run.stderr.strip()}")
    text = open(path, encoding="utf-8").read()
    for line in ("#SBATCH --requeue", "#SBATCH --signal=B:TERM@", "exec flotilla-headless worker"):
        if line not in text:
            fail(f"slurm script lacks {line}")
    print("ok   flotilla-worker.sbatch: bash -n, --requeue, SIGTERM ahead of the end")


def check_headless_build(name, text):
    """The image builds and ships flotilla-headless alone: no desktop, no widget, chart or OpenGL
    library in either stage."""
    if "-DFLOTILLA_BUILD_DESKTOP=OFF" not in text or "--target flotilla-headless" not in text:
        fail(f"{name}: the image must build flotilla-headless alone (-DFLOTILLA_BUILD_DESKTOP=OFF)")
    for package in ("qt6-charts-dev", "libqt6opengl6-dev", "libqt6widgets6", "libqt6charts6", "libqt6opengl6"):
        if package in text:
            fail(f"{name}: the headless image installs {package}")


def check_container(path):
    text = open(path, encoding="utf-8").read()
    if len(re.findall(r"^FROM debian:12", text, re.M)) != 2:
        fail("Containerfile: expected a Debian 12 build stage and a Debian 12 runtime stage")
    if not re.search(r'^ENTRYPOINT \["/usr/bin/tini", "--", "/usr/bin/flotilla-headless", "worker"', text, re.M):
        fail("Containerfile: the entry point must be the headless worker behind tini")
    check_headless_build("Containerfile", text)
    if not re.search(r"^USER flotilla$", text, re.M):
        fail("Containerfile: the worker must not run as root")
    print("ok   Containerfile: two stages, worker behind tini, not root")


def check_cuda_container(path):
    text = open(path, encoding="utf-8").read()
    if len(re.findall(r"^FROM debian:12", text, re.M)) != 2:
        fail("Containerfile.cuda: expected a Debian 12 build stage and a Debian 12 runtime stage")
    if "torch.utils.cmake_prefix_path" not in text or "--index-url" not in text:
        fail("Containerfile.cuda: LibTorch must come from a CUDA wheel, found by torch.utils.cmake_prefix_path")
    if "libtorch-dev" in text or "libtorch1.13" in text:
        fail("Containerfile.cuda: Debian's LibTorch has no CUDA")
    check_headless_build("Containerfile.cuda", text)
    if not re.search(r'^ENTRYPOINT \["/usr/bin/tini", "--", "/usr/bin/flotilla-headless", "worker".*"--device", "cuda"\]', text,
                     re.M | re.S):
        fail("Containerfile.cuda: the entry point must be the worker on cuda behind tini")
    if not re.search(r"^USER flotilla$", text, re.M):
        fail("Containerfile.cuda: the worker must not run as root")
    print("ok   Containerfile.cuda: CUDA LibTorch from the wheel, worker on cuda behind tini, not root")


def main():
    source, binary = sys.argv[1], sys.argv[2]
    accepted = worker_options(binary)
    for name in SPOT_POOLS:
        check_manifest(os.path.join(source, "packaging/kubernetes", name), accepted)
    check_systemd(os.path.join(source, "packaging/systemd/flotilla-worker@.service"), binary)
    check_slurm(os.path.join(source, "packaging/slurm/flotilla-worker.sbatch"))
    check_container(os.path.join(source, "packaging/container/Containerfile"))
    check_cuda_container(os.path.join(source, "packaging/container/Containerfile.cuda"))
    check_gpu_dropin(os.path.join(source, "packaging/systemd/flotilla-worker@.service"),
                     os.path.join(source, "packaging/systemd/gpu.conf"), binary)
    if failures:
        print(f"{len(failures)} problem(s)")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
