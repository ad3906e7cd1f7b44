#!/usr/bin/env python3
"""deploy/ tests: generated files current, every object valid, values take effect."""
import glob
import os
import subprocess
import sys
import tempfile

import yaml

ROOT = sys.argv[1]
GENERATE = os.path.join(ROOT, "deploy", "generate.py")
VALIDATE = os.path.join(ROOT, "tests", "tools", "k8s", "k8s_validate.py")
CRDS = os.path.join(ROOT, "deploy", "crds")
failures = []


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        failures.append(what)


def objects(directory):
    out = []
    for path in sorted(glob.glob(os.path.join(directory, "*.yaml"))):
        with open(path) as f:
            out += [d for d in yaml.safe_load_all(f) if d]
    return out


def validate(files):
    run = subprocess.run([sys.executable, VALIDATE, "--crds", CRDS] + files,
                         capture_output=True, text=True)
    if run.returncode != 0:
        print(run.stdout + run.stderr)
    return run.returncode == 0


def find(objs, kind, name):
    return next((o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name), None)


# 1. The committed manifests and chart CRDs are what the chart renders to.
run = subprocess.run([sys.executable, GENERATE, "--check"], capture_output=True, text=True)
check(run.returncode == 0, "deploy/manifests and the chart's crds/ are current (" +
      (run.stdout.strip() or "no stale files") + ")")

# 2. Everything in deploy/ validates.
manifests = sorted(glob.glob(os.path.join(ROOT, "deploy", "manifests", "*.yaml")))
crd_files = sorted(glob.glob(os.path.join(CRDS, "*.yaml")))
check(validate(crd_files + manifests), "CRDs and plain manifests validate")
standalone = sorted(glob.glob(os.path.join(ROOT, "deploy", "device-plugin", "*.yaml")))
check(not standalone or validate(standalone), "deploy/device-plugin manifests validate")
defaults = objects(os.path.join(ROOT, "deploy", "manifests"))
kinds = sorted({o["kind"] for o in defaults})
check(kinds == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "Deployment",
                "Namespace", "RuntimeClass", "Service", "ServiceAccount"], f"kinds: {kinds}")
gvisor = find(defaults, "RuntimeClass", "gvisor")
check(gvisor is not None and gvisor["handler"] == "runsc", "RuntimeClass gvisor -> handler runsc")
kata = find(defaults, "RuntimeClass", "kata-qemu-nvidia-gpu")
check(kata is not None and kata["overhead"]["podFixed"]["memory"] == "2560Mi",
      "RuntimeClass kata-qemu-nvidia-gpu with podFixed memory overhead")
ds = find(defaults, "DaemonSet", "tessera-node-agent")
names = [c["name"] for c in ds["spec"]["template"]["spec"]["containers"]]
check(names == ["cdi-writer", "device-plugin", "lease-sync"], f"node agent containers {names}")
pod = ds["spec"]["template"]["spec"]
inits = pod.get("initContainers", [])
check([c["name"] for c in inits] == ["firmware-baseline"], "node agent records firmware baselines first")
record = inits[0] if inits else {"command": [], "volumeMounts": []}
check(record["command"][1:5] == ["gpu-check", "--record", "--all", "--root"] and
      record["command"][-2:] == ["--baseline-dir", "/var/lib/tessera/firmware"],
      f"baseline init container command {record['command']}")
volumes = {v["name"]: v for v in pod["volumes"]}
mounts = {m["mountPath"]: m for m in record["volumeMounts"]}
baselines = mounts.get("/var/lib/tessera/firmware", {})
check(not baselines.get("readOnly", False) and
      volumes.get(baselines.get("name"), {}).get("hostPath", {}).get("path") == "/var/lib/tessera/firmware",
      "baseline dir is the host's /var/lib/tessera/firmware, writable")
sysfs = mounts.get("/host/sys", {})
check(not sysfs.get("readOnly", False) and
      volumes.get(sysfs.get("name"), {}).get("hostPath", {}).get("path") == "/sys",
      "host sysfs writable at /host/sys (ROM enable)")
cm = find(defaults, "ConfigMap", "tessera-device-plugin")
check("sharing" not in yaml.safe_load(cm["data"]["config.yaml"]), "no time-slicing by default")
role = find(defaults, "ClusterRole", "tessera-control-plane")
check(any("gpuleases/status" in r["resources"] for r in role["rules"]), "control plane may write lease status")
check(any("nodes" in r["resources"] and {"list", "watch"} <= set(r["verbs"]) for r in role["rules"]),
      "control plane may list and watch nodes (their GPU annotations)")
agent_role = find(defaults, "ClusterRole", "tessera-node-agent")
check(any("nodes" in r["resources"] and "patch" in r["verbs"] for r in agent_role["rules"]),
      "node agent may patch its node (GPU annotation)")
sync = ds["spec"]["template"]["spec"]["containers"][2]
check("--root" in sync["command"] and sync["command"][sync["command"].index("--root") + 1] == "/host"
      and {"name": "host", "mountPath": "/host", "readOnly": True} in sync["volumeMounts"],
      "lease-sync reads the host's inventory from a read-only /host")

# 3. Non-default values render valid objects and take effect.
with tempfile.TemporaryDirectory() as tmp:
    run = subprocess.run([sys.executable, GENERATE, "--render-to", tmp,
                          "--set", "sharing.timeSlicingReplicas=4",
                          "--set", "runtimes.gvisor.enabled=false",
                          "--set", "controlPlane.cilium=true",
                          "--set", "nodeAgent.resources.memory=256Mi",
                          "--set", "createNamespace=false"], capture_output=True, text=True)
    check(run.returncode == 0, "render with overrides " + run.stderr.strip())
    check(validate(sorted(glob.glob(os.path.join(tmp, "*.yaml")))), "overridden render validates")
    varied = objects(tmp)
    check(find(varied, "RuntimeClass", "gvisor") is None, "gvisor RuntimeClass switched off")
    check(find(varied, "RuntimeClass", "kata-qemu-nvidia-gpu") is not None, "kata kept")
    check(find(varied, "Namespace", "tessera-system") is None, "namespace left to the installer")
    config = yaml.safe_load(find(varied, "ConfigMap", "tessera-device-plugin")["data"]["config.yaml"])
    check(config["sharing"]["timeSlicing"]["resources"][0]["replicas"] == 4, "time-slicing replicas 4")
    serve = find(varied, "Deployment", "tessera-control-plane")["spec"]["template"]["spec"]["containers"][0]
    check("--k8s-cilium" in serve["command"], "control plane told to create Cilium policies")
    agent = find(varied, "DaemonSet", "tessera-node-agent")["spec"]["template"]["spec"]["containers"][1]
    check(agent["resources"]["limits"]["memory"] == "256Mi", "node agent memory from values")

sys.exit(1 if failures else 0)
