#!/usr/bin/env python3
"""Every Kubernetes object tessera ships or builds, validated strictly against current schemas by
tests/tools/k8s-schema/validate.mjs (kubernetes-models for built-in kinds, the CRDs' own
openAPIV3Schema for tessera.dev and Cilium kinds): the CRDs, every helm render (defaults and
non-default values), the standalone manifests, the objects the C++ builders make (printed by the
k8s_objects tool), and the README's DRA example. Then proof that the validator is strict.

usage: schema_test.py SOURCE_DIR K8S_OBJECTS_BINARY"""
import glob
import json
import os
import subprocess
import sys
import tempfile

import yaml

ROOT = sys.argv[1]
K8S_OBJECTS = sys.argv[2]
HELM = os.environ.get("HELM", "/usr/local/bin/helm")
CHART = os.path.join(ROOT, "deploy", "helm", "tessera")
VALIDATOR = os.path.join(ROOT, "tests", "tools", "k8s-schema", "validate.mjs")
CRD_DIRS = [os.path.join(ROOT, "deploy", "crds"), os.path.join(ROOT, "tests", "tools", "k8s", "crds")]
failures = []


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        failures.append(what)


def validate(files):
    """(exit status, output) of the validator over `files`."""
    args = ["node", VALIDATOR]
    for d in CRD_DIRS:
        args += ["--crds", d]
    r = subprocess.run(args + files, capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def count_objects(files):
    n = 0
    for path in files:
        with open(path) as f:
            text = f.read()
        if path.endswith(".jsonl"):
            n += sum(1 for line in text.splitlines() if line.strip())
        else:
            n += sum(1 for d in yaml.safe_load_all(text) if d)
    return n


def results(files):
    """{file: (ok count, INVALID lines)} from one validator run over `files` (one run: node and the
    schema modules load once)."""
    status, out = validate(files)
    per_file = {f: [0, []] for f in files}
    for line in out.splitlines():
        for f in files:
            if line.startswith(f + ": ok "):
                per_file[f][0] += 1
            elif line.startswith(f + ": INVALID "):
                per_file[f][1].append(line[len(f) + 2:])
    if status not in (0, 1):
        print(out)
    return per_file


def helm_render(tmp, name, *args):
    path = os.path.join(tmp, name + ".yaml")
    r = subprocess.run([HELM, "template", "tessera", CHART, "--namespace", "tessera-system"] + list(args),
                       capture_output=True, text=True)
    check(r.returncode == 0, f"helm template {name} " + r.stderr.strip())
    with open(path, "w") as f:
        f.write(r.stdout)
    return path


with tempfile.TemporaryDirectory() as tmp:
    # 1. What tessera ships.
    shipped = []
    for d in ["crds", "manifests", "dra", "device-plugin"]:
        shipped += sorted(glob.glob(os.path.join(ROOT, "deploy", d, "*.yaml")))
    renders = [
        helm_render(tmp, "defaults-with-crds", "--include-crds"),
        helm_render(tmp, "overrides", "--set", "sharing.timeSlicingReplicas=4", "--set", "controlPlane.cilium=true",
                    "--set", "runtimes.gvisor.enabled=false", "--set", "createNamespace=false",
                    "--set", "controlPlane.replicas=3", "--set", "nodeAgent.resources.memory=256Mi"),
        helm_render(tmp, "no-dra-one-replica", "--set", "dra.enabled=false", "--set", "controlPlane.replicas=1",
                    "--set", "runtimes.kata.enabled=false"),
    ]

    # 2. What the C++ code builds.
    built = os.path.join(tmp, "built.jsonl")
    r = subprocess.run([K8S_OBJECTS], capture_output=True, text=True)
    check(r.returncode == 0, "k8s_objects printed the built objects " + r.stderr.strip())
    with open(built, "w") as f:
        f.write(r.stdout)
    kinds = sorted({json.loads(line)["kind"] for line in r.stdout.splitlines() if line.strip()})
    check({"Namespace", "NetworkPolicy", "CiliumNetworkPolicy", "Pod", "PersistentVolume", "PersistentVolumeClaim",
           "Job", "GpuLease", "Tenancy", "CustomResourceDefinition", "ResourceSlice", "Service",
           "GpuContainer"} <= set(kinds),
          f"built kinds: {kinds}")

    # 3. The README's DRA example (what a user writes).
    readme = open(os.path.join(ROOT, "README.md")).read()
    section = readme[readme.index("## Kubernetes with DRA"):]
    example = section[section.index("```yaml") + len("```yaml"):]
    example = example[:example.index("```")]
    example_path = os.path.join(tmp, "readme-dra.yaml")
    with open(example_path, "w") as f:
        f.write(example)

    files = shipped + renders + [built, example_path]
    per_file = results(files)
    for path in files:
        oks, invalid = per_file[path]
        expected = count_objects([path])
        label = os.path.relpath(path, ROOT) if path.startswith(ROOT) else os.path.basename(path)
        check(not invalid and oks == expected, f"{label}: {oks}/{expected} objects valid")
        for line in invalid:
            print("     " + line)
    check(count_objects([built]) > 0 and per_file[built][0] == count_objects([built]),
          "every object the C++ code builds is valid")

    # 4. The validator is strict: each of these must be refused, naming the problem.
    slice_obj = next((json.loads(line) for line in r.stdout.splitlines() if '"ResourceSlice"' in line), {})
    lease = next((json.loads(line) for line in r.stdout.splitlines() if '"GpuLease"' in line),
                 {"metadata": {}, "spec": {}})
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n"},
           "spec": {"resourceClaims": [{"name": "gpus", "resourceClaimName": "two"}],
                    "containers": [{"name": "c", "image": "i", "resources": {"claims": [{"name": "gpus"}]}}]}}
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c", "namespace": "n"},
             "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                 "deviceClassName": "gpu.tessera.dev", "allocationMode": "ExactCount", "count": 2}}]}}}

    def mutated(obj, change):
        obj = json.loads(json.dumps(obj))
        change(obj)
        return obj

    bad = {
        "unknown container field": (mutated(pod, lambda o: o["spec"]["containers"][0].update(gpus=1)),
                                    "containers[0].gpus: unknown field"),
        "container without a name": (mutated(pod, lambda o: o["spec"]["containers"][0].pop("name")),
                                     "required property name"),
        "unknown field in a Pod's resourceClaims": (
            mutated(pod, lambda o: o["spec"]["resourceClaims"][0].update(claimName="two")), "claimName: unknown field"),
        "v1beta1 field name in a v1 ResourceClaim": (
            mutated(claim, lambda o: o["spec"]["devices"]["requests"][0].update(deviceClassName="x")),
            "deviceClassName: unknown field"),
        "count as a string": (
            mutated(claim, lambda o: o["spec"]["devices"]["requests"][0]["exactly"].update(count="2")),
            "must be integer"),
        "unknown device attribute value type": (
            mutated(slice_obj, lambda o: o["spec"]["devices"][0]["attributes"].update(
                {"type": {"text": "gpu"}})) if slice_obj else {}, "unknown field"),
        "GpuLease state outside the CRD's enum": (
            mutated(lease, lambda o: o.update(status={"state": "borrowed"})), "not in"),
        "unknown GpuLease spec field": (mutated(lease, lambda o: o["spec"].update(gpus=1)), "spec.gpus: unknown field"),
        "unknown metadata field on a custom resource": (
            mutated(lease, lambda o: o["metadata"].update(label={})), "metadata.label: unknown field"),
        "kind without a schema": ({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "x"}},
                                  "no schema"),
        "name that is not DNS-1123": (mutated(claim, lambda o: o["metadata"].update(name="Two_GPUs")),
                                      "DNS-1123"),
    }
    cases = {}
    for i, (what, (obj, message)) in enumerate(bad.items()):
        path = os.path.join(tmp, f"bad-{i}.json")
        with open(path, "w") as f:
            json.dump(obj, f)
        cases[path] = (what, message, False)
    for i, (what, obj) in enumerate({"the strictness cases' base Pod": pod, "their base ResourceClaim": claim}.items()):
        path = os.path.join(tmp, f"good-{i}.json")
        with open(path, "w") as f:
            json.dump(obj, f)
        cases[path] = (what, None, True)
    per_file = results(list(cases))
    for path, (what, message, valid) in cases.items():
        oks, invalid = per_file[path]
        if valid:
            check(oks == 1 and not invalid, f"accepted: {what} " + " ".join(invalid))
        else:
            check(oks == 0 and any(message in line for line in invalid), f"refused: {what}: " + " ".join(invalid))

sys.exit(1 if failures else 0)
