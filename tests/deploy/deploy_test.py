#!/usr/bin/env python3
"""deploy/ with real helm: the chart lints, the committed manifests are what `helm template`
renders, and the rendered objects (defaults and non-default values) say what the cluster needs.
Schema validation of the same objects is k8s_schema_test.

usage: deploy_test.py SOURCE_DIR BUILD_DIR"""
import glob
import json
import os
import subprocess
import sys

import yaml

ROOT = sys.argv[1]
BUILD = sys.argv[2]
HELM = os.environ.get("HELM", "/usr/local/bin/helm")
# The kubectl scripts/setup-test-tools.sh installs, never an older one earlier on PATH (Debian's /usr/bin).
KUBECTL = os.environ.get("KUBECTL", "/usr/local/bin/kubectl")
CHART = os.path.join(ROOT, "deploy", "helm", "tessera")
NAMESPACE = "tessera-system"
failures = []


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        failures.append(what)


def run(args):
    return subprocess.run(args, capture_output=True, text=True)


def template(*overrides):
    """Objects `helm template` renders with `--set` overrides (none: the defaults)."""
    args = [HELM, "template", "tessera", CHART, "--namespace", NAMESPACE]
    for o in overrides:
        args += ["--set", o]
    r = run(args)
    if r.returncode != 0:
        print(r.stderr)
        return None
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def objects(paths):
    out = []
    for path in paths:
        with open(path) as f:
            out += [d for d in yaml.safe_load_all(f) if d]
    return out


def find(objs, kind, name):
    return next((o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name), None)


def container(pod_spec, name):
    return next((c for c in pod_spec["containers"] if c["name"] == name), None)


def rules_of(role):
    """{resource: set(verbs)} over every rule of a Role or ClusterRole."""
    out = {}
    for rule in role["rules"]:
        for resource in rule["resources"]:
            out.setdefault(resource, set()).update(rule["verbs"])
    return out


def host_paths(pod_spec, mounts):
    """{mountPath: (hostPath path, readOnly)} of `mounts` that come from hostPath volumes."""
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    out = {}
    for m in mounts:
        host = volumes.get(m["name"], {}).get("hostPath")
        if host:
            out[m["mountPath"]] = (host["path"], m.get("readOnly", False))
    return out


def flags_known(binary, args):
    """Flags in `args` that `binary --help` does not list."""
    r = run([binary, "--help"])
    unknown = []
    for a in args:
        if a.startswith("--"):
            flag = a.split("=", 1)[0]
            if flag + " " not in r.stdout and flag + "," not in r.stdout and flag + "\n" not in r.stdout:
                unknown.append(flag)
    return unknown


# 0. The tools are the ones setup.sh installs.
r = run([HELM, "version", "--template", "{{ .Version }}"])
check(r.returncode == 0 and r.stdout.startswith("v4."), f"helm {r.stdout.strip()} (4.x)")
r = run([KUBECTL, "version", "--client", "-o", "json"])
client = json.loads(r.stdout)["clientVersion"] if r.returncode == 0 else {}
check(client.get("major") == "1" and client.get("minor") == "35", f"kubectl {client.get('gitVersion')} (1.35)")

# 1. The chart lints strictly, with the defaults and with every switch flipped.
r = run([HELM, "lint", "--strict", CHART])
check(r.returncode == 0, "helm lint --strict (defaults) " + (r.stdout + r.stderr).strip().splitlines()[-1])
r = run([HELM, "lint", "--strict", CHART, "--set", "dra.enabled=false", "--set", "controlPlane.replicas=1",
         "--set", "createNamespace=false", "--set", "runtimes.gvisor.enabled=false"])
check(r.returncode == 0, "helm lint --strict (switches off)")

# 2. The committed plain manifests, the chart's crds/ and deploy/dra/deviceclasses.yaml are what
# helm renders now.
r = run(["bash", os.path.join(ROOT, "scripts", "render-manifests.sh"), "--check"])
check(r.returncode == 0, "deploy/manifests, chart crds/ and deploy/dra/deviceclasses.yaml are current " +
      (r.stdout + r.stderr).strip())
defaults = template()
check(defaults is not None, "helm template with defaults")
committed = objects(sorted(glob.glob(os.path.join(ROOT, "deploy", "manifests", "*.yaml"))))
key = lambda o: (o["kind"], o["metadata"]["name"])
check(sorted(map(key, committed)) == sorted(map(key, defaults)) and
      all(find(defaults, *key(o)) == o for o in committed), "deploy/manifests equal the defaults' render")
chart_crds = sorted(os.path.basename(p) for p in glob.glob(os.path.join(CHART, "crds", "*.yaml")))
check(chart_crds == sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "deploy", "crds", "*.yaml"))),
      f"chart crds/ hold deploy/crds: {chart_crds}")

# kubectl 1.35 decodes every shipped manifest with its own scheme, offline (--local): each object
# maps to a resource it knows (DeviceClass as resource.k8s.io).
shipped = []
for d in ["manifests", "dra", "device-plugin"]:
    shipped += sorted(glob.glob(os.path.join(ROOT, "deploy", d, "*.yaml")))
r = run([KUBECTL, "label", "--local", "-o", "name", "tessera.dev/checked=true"] +
        [a for f in shipped for a in ("-f", f)])
decoded = r.stdout.split()
check(r.returncode == 0 and len(decoded) == len(objects(shipped)) and
      "deviceclass.resource.k8s.io/gpu.tessera.dev" in decoded and
      "deployment.apps/tessera-control-plane" in decoded,
      f"kubectl decodes all {len(objects(shipped))} shipped objects " + r.stderr.strip())

# 3. What the defaults render.
kinds = sorted({o["kind"] for o in defaults})
check(kinds == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "Deployment", "DeviceClass",
                "Namespace", "NetworkPolicy", "PodDisruptionBudget", "Role", "RoleBinding", "RuntimeClass", "Service",
                "ServiceAccount"], f"kinds: {kinds}")
chart = yaml.safe_load(open(os.path.join(CHART, "Chart.yaml")))
image = f"ghcr.io/tessera/tessera:{chart['appVersion']}"
images = {c["image"] for o in defaults if o["kind"] in ("Deployment", "DaemonSet")
          for c in o["spec"]["template"]["spec"]["containers"] + o["spec"]["template"]["spec"].get("initContainers", [])}
check(images == {image}, f"every container runs {image} (the image scripts/build-image.sh builds): {images}")

gvisor = find(defaults, "RuntimeClass", "gvisor")
check(gvisor is not None and gvisor["handler"] == "runsc", "RuntimeClass gvisor -> handler runsc")
kata = find(defaults, "RuntimeClass", "kata-qemu-nvidia-gpu")
check(kata is not None and kata["overhead"]["podFixed"]["memory"] == "2560Mi",
      "RuntimeClass kata-qemu-nvidia-gpu with podFixed memory overhead")

# Control plane: highly available, no state in the Pod.
deploy = find(defaults, "Deployment", "tessera-control-plane")
cp_pod = deploy["spec"]["template"]["spec"]
serve = container(cp_pod, "serve")
# Two replicas by default: the records live in the cluster, every replica serves the API.
check(deploy["spec"]["replicas"] == 2, "control plane: 2 replicas by default")
default_pdb = find(defaults, "PodDisruptionBudget", "tessera-control-plane")
check(default_pdb is not None and default_pdb["spec"]["minAvailable"] == 1,
      "the default render keeps a PodDisruptionBudget (minAvailable 1) over the control plane")
check("--leader-elect" in serve["command"], "control plane replicas elect a leader")
anti = cp_pod.get("affinity", {}).get("podAntiAffinity", {}).get("preferredDuringSchedulingIgnoredDuringExecution", [])
check(len(anti) == 1 and anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname" and
      anti[0]["podAffinityTerm"]["labelSelector"]["matchLabels"] == deploy["spec"]["selector"]["matchLabels"],
      "replicas prefer different nodes (anti-affinity by hostname)")
check(serve["readinessProbe"].get("httpGet", {}).get("path") == "/readyz" and
      serve["readinessProbe"]["httpGet"]["port"] == "http", "readinessProbe GET /readyz")
check(serve["livenessProbe"].get("httpGet", {}).get("path") == "/healthz", "livenessProbe GET /healthz")
env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in serve.get("env", [])}
check(env.get("POD_NAME") == "metadata.name" and env.get("POD_NAMESPACE") == "metadata.namespace",
      f"POD_NAME and POD_NAMESPACE from the downward API: {env}")
volumes = cp_pod.get("volumes", [])
check(all(set(v) <= {"name", "emptyDir"} for v in volumes) and
      all(v["emptyDir"].get("sizeLimit") for v in volumes),
      "control plane mounts no host path, PVC or unbounded emptyDir")
data_dir = next((a.split("=", 1)[1] for a in serve["command"] if a.startswith("--data-dir=")), None)
scratch = [m["mountPath"] for m in serve.get("volumeMounts", [])]
check(data_dir is not None and any(data_dir.startswith(p.rstrip("/") + "/") for p in scratch),
      f"--data-dir {data_dir} is scratch on {scratch}")
check(serve["securityContext"].get("readOnlyRootFilesystem") is True, "control plane root filesystem read-only")
serve_binary = os.path.join(BUILD, "src", "cli", "tessera-serve")
check(not flags_known(serve_binary, serve["command"][2:]),
      f"tessera-serve knows every flag the chart passes: unknown {flags_known(serve_binary, serve['command'][2:])}")

role = find(defaults, "ClusterRole", "tessera-control-plane")
verbs = rules_of(role)
check("gpuleases/status" in verbs, "control plane may write lease status")
check({"list", "watch"} <= verbs.get("nodes", set()), "control plane may list and watch nodes (their GPU annotations)")
all_verbs = {"get", "list", "watch", "create", "update", "patch", "delete"}
check(all_verbs <= verbs.get("services", set()), "control plane: Services of published ports, all verbs")
check(all_verbs <= verbs.get("gpucontainers", set()) and all_verbs <= verbs.get("gpucontainers/status", set()),
      "control plane: gpucontainers and their status, all verbs")
check({"create", "get", "list", "watch", "delete", "update", "patch"} <= verbs.get("resourceclaims", set()),
      "control plane: resourceclaims create/get/list/watch/delete/update/patch")
check({"get", "list", "watch"} <= verbs.get("resourceslices", set()) and
      {"get", "list", "watch"} <= verbs.get("deviceclasses", set()),
      "control plane reads resourceslices and deviceclasses")
ns_role = find(defaults, "Role", "tessera-control-plane")
check(ns_role is not None and ns_role["metadata"]["namespace"] == NAMESPACE, "control plane Role in its namespace")
ns_verbs = rules_of(ns_role) if ns_role else {}
check({"get", "create", "update", "watch", "list"} <= ns_verbs.get("leases", set()) and
      any("coordination.k8s.io" in r["apiGroups"] and "leases" in r["resources"] for r in ns_role["rules"]),
      "control plane: coordination.k8s.io leases get/create/update/watch/list (leader election)")
check({"get", "list", "watch", "create", "update", "patch", "delete"} <= ns_verbs.get("secrets", set()),
      "control plane: secrets in its namespace (hashed tokens)")
check({"get", "list", "watch", "create", "patch"} <= ns_verbs.get("configmaps", set()),
      "control plane: configmaps in its namespace (GPU lease records)")
check("secrets" not in verbs and "leases" not in verbs and "configmaps" not in verbs,
      "no cluster-wide secrets, configmaps or leases for the control plane")
binding = find(defaults, "RoleBinding", "tessera-control-plane")
check(binding is not None and binding["roleRef"]["kind"] == "Role" and
      binding["subjects"][0]["name"] == cp_pod["serviceAccountName"], "Role bound to the control plane's account")

# Node agent.
ds = find(defaults, "DaemonSet", "tessera-node-agent")
pod = ds["spec"]["template"]["spec"]
names = [c["name"] for c in pod["containers"]]
check(names == ["cdi-writer", "device-plugin", "lease-sync", "dra-plugin"], f"node agent containers {names}")
inits = pod.get("initContainers", [])
check([c["name"] for c in inits] == ["firmware-baseline"], "node agent records firmware baselines first")
record = inits[0] if inits else {"command": [], "volumeMounts": []}
check(record["command"][1:5] == ["gpu-check", "--record", "--all", "--root"] and
      record["command"][-2:] == ["--baseline-dir", "/var/lib/tessera/firmware"],
      f"baseline init container command {record['command']}")
mounts = host_paths(pod, record["volumeMounts"])
check(mounts.get("/var/lib/tessera/firmware") == ("/var/lib/tessera/firmware", False),
      "baseline dir is the host's /var/lib/tessera/firmware, writable")
check(mounts.get("/host/sys") == ("/sys", False), "host sysfs writable at /host/sys (ROM enable)")
cm = find(defaults, "ConfigMap", "tessera-device-plugin")
check("sharing" not in yaml.safe_load(cm["data"]["config.yaml"]), "no time-slicing by default")
agent_verbs = rules_of(find(defaults, "ClusterRole", "tessera-node-agent"))
check("patch" in agent_verbs.get("nodes", set()), "node agent may patch its node (GPU annotation)")
sync = container(pod, "lease-sync")
check("--root" in sync["command"] and sync["command"][sync["command"].index("--root") + 1] == "/host"
      and {"name": "host", "mountPath": "/host", "readOnly": True} in sync["volumeMounts"],
      "lease-sync reads the host's inventory from a read-only /host")
plugin = container(pod, "device-plugin")
check(host_paths(pod, sync["volumeMounts"]).get("/var/lib/kubelet/pod-resources") ==
      ("/var/lib/kubelet/pod-resources", True), "lease-sync reads kubelet's pod-resources dir, read-only")
check("patch" in agent_verbs.get("gpuleases/status", set()) and
      "patch" not in agent_verbs.get("gpuleases", set()),
      "node agent may patch only the status of leases (allocatedDevices)")
# GPU telemetry (on by default): /metrics on 9402, the host's /proc read-only, its node's Pods.
sync_binary = os.path.join(BUILD, "src", "cli", "tessera-lease-sync")
sync_args = sync.get("args", [])
check(not flags_known(sync_binary, sync_args), f"lease-sync: flags it knows ({sync_args})")
check("--metrics-listen=:9402" in sync_args and "--proc-dir=/host-proc" in sync_args and
      {"name": "metrics", "containerPort": 9402} in sync.get("ports", []),
      "lease-sync: telemetry on, /metrics on port 9402, the host's /proc as its proc dir")
check(host_paths(pod, sync["volumeMounts"]).get("/host-proc") == ("/proc", True),
      "lease-sync reads the host's /proc, read-only")
# The node agent's endpoint: the token from a Secret volume (no subPath: kubelet's updates reach
# it), and a NetworkPolicy letting only the scraper's namespace and Pods reach the port.
volumes = {v["name"]: v for v in pod["volumes"]}
token_mount = next((m for m in sync["volumeMounts"] if m["name"] == "metrics-token"), None)
check("--metrics-token-file=/etc/tessera/metrics-token/token" in sync_args and
      token_mount == {"name": "metrics-token", "mountPath": "/etc/tessera/metrics-token", "readOnly": True} and
      volumes.get("metrics-token", {}).get("secret", {}).get("secretName") == "tessera-node-metrics" and
      volumes["metrics-token"]["secret"]["items"] == [{"key": "token", "path": "token"}],
      "lease-sync: /metrics token from the Secret tessera-node-metrics, mounted whole and read-only")


def metrics_policy(objs):
    return find(objs, "NetworkPolicy", "tessera-node-agent-metrics")


policy = metrics_policy(defaults)
agent_labels = find(defaults, "DaemonSet", "tessera-node-agent")["spec"]["template"]["metadata"]["labels"]
check(policy is not None and policy["metadata"]["namespace"] == NAMESPACE and
      policy["spec"]["podSelector"]["matchLabels"].items() <= agent_labels.items() and
      policy["spec"]["policyTypes"] == ["Ingress"] and
      policy["spec"]["ingress"] == [{
          "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}],
          "ports": [{"protocol": "TCP", "port": 9402}]}],
      "NetworkPolicy: only the scraper's Pods in its namespace reach the node agent, on 9402 only")
check({"get", "list", "watch"} <= agent_verbs.get("pods", set()) and
      "patch" not in agent_verbs.get("pods", set()),
      "node agent: pods get/list/watch only (which Pod a GPU process is in)")

dra = container(pod, "dra-plugin")
dra_mounts = host_paths(pod, dra["volumeMounts"] if dra else [])
for path in ["/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins/gpu.tessera.dev", "/var/run/cdi"]:
    check(dra_mounts.get(path) == (path, False), f"dra-plugin: host {path} at the same path, writable")
check(dra_mounts.get("/run/tessera") == ("/run/tessera", True), "dra-plugin: the lease dir, read-only")
check(dra is not None and {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in dra["env"],
      "dra-plugin: NODE_NAME from the downward API")
dra_binary = os.path.join(BUILD, "src", "cli", "tessera-dra-plugin")
check(dra is not None and dra["command"] == ["/usr/local/bin/tessera-dra-plugin"] and
      not flags_known(dra_binary, dra["args"]), "dra-plugin: tessera-dra-plugin with flags it knows")
check({"create", "update", "delete", "list", "watch"} <= agent_verbs.get("resourceslices", set()) and
      "get" in agent_verbs.get("resourceclaims", set()) and "get" in agent_verbs.get("nodes", set()),
      "node agent: resourceslices create/update/delete/list/watch, resourceclaims get, nodes get")
classes = {o["metadata"]["name"]: o["spec"]["selectors"][0]["cel"]["expression"]
           for o in defaults if o["kind"] == "DeviceClass"}
want = {f"{prefix}gpu.tessera.dev": f'device.driver == "gpu.tessera.dev" && '
        f'device.attributes["gpu.tessera.dev"].type == "{kind}"'
        for prefix, kind in [("", "gpu"), ("vfio.", "vfio"), ("mig.", "mig")]}
check(classes == want, f"DeviceClasses gpu/vfio/mig.gpu.tessera.dev select driver and type: {sorted(classes)}")

# 4. The standalone deploy/dra and deploy/device-plugin run what the chart's node agent runs.
standalone_dra = objects([os.path.join(ROOT, "deploy", "dra", "daemonset.yaml")])[0]
sa_pod = standalone_dra["spec"]["template"]["spec"]
sa = sa_pod["containers"][0]
check(sa["image"] == image and sa["command"] == dra["command"] and sa["args"] == dra["args"] and
      sa["env"] == dra["env"], "deploy/dra DaemonSet: same image, command, flags and env as the chart's dra-plugin")
check(host_paths(sa_pod, sa["volumeMounts"]) == dra_mounts, "deploy/dra DaemonSet: same host paths as the chart's")
sa_verbs = rules_of(next(o for o in objects([os.path.join(ROOT, "deploy", "dra", "rbac.yaml")])
                         if o["kind"] == "ClusterRole"))
check(all(agent_verbs.get(r, set()) >= v for r, v in sa_verbs.items()),
      "the chart grants the node agent all deploy/dra/rbac.yaml grants")
dp_standalone = next(o for o in objects([os.path.join(ROOT, "deploy", "device-plugin", "daemonset.yaml")])
                     if o["kind"] == "DaemonSet")
dp = dp_standalone["spec"]["template"]["spec"]["containers"][0]
check(dp["image"] == image and dp["command"] == plugin["command"] and dp["args"] == plugin["args"],
      "deploy/device-plugin DaemonSet: same image, binary and flags as the chart's device plugin")

# 5. Non-default values take effect.
varied = template("sharing.timeSlicingReplicas=4", "runtimes.gvisor.enabled=false", "controlPlane.cilium=true",
                  "nodeAgent.resources.memory=256Mi", "createNamespace=false", "controlPlane.replicas=3",
                  "image.tag=9.9.9", "image.repository=registry.example.com/tessera")
check(varied is not None, "helm template with overrides")
varied = varied or []
check(find(varied, "RuntimeClass", "gvisor") is None, "gvisor RuntimeClass switched off")
check(find(varied, "RuntimeClass", "kata-qemu-nvidia-gpu") is not None, "kata kept")
check(find(varied, "Namespace", NAMESPACE) is None, "namespace left to the installer")
config = yaml.safe_load(find(varied, "ConfigMap", "tessera-device-plugin")["data"]["config.yaml"])
check(config["sharing"]["timeSlicing"]["resources"][0]["replicas"] == 4, "time-slicing replicas 4")
vdeploy = find(varied, "Deployment", "tessera-control-plane")
check("--k8s-cilium" in container(vdeploy["spec"]["template"]["spec"], "serve")["command"],
      "control plane told to create Cilium policies")
published = template("controlPlane.publish.serviceType=LoadBalancer",
                     "controlPlane.publish.ingressFrom={203.0.113.0/24,198.51.100.0/24}")
check(published is not None, "helm template with published-port values")
serve_command = container(find(published or [], "Deployment", "tessera-control-plane")["spec"]["template"]["spec"],
                          "serve")["command"] if published else []
check("--publish-service-type=LoadBalancer" in serve_command and
      "--publish-ingress-from=203.0.113.0/24" in serve_command and
      "--publish-ingress-from=198.51.100.0/24" in serve_command,
      "control plane told the published ports' Service type and ingress sources")
check(not any(a.startswith("--publish-ingress-from") for a in
              container(find(defaults, "Deployment", "tessera-control-plane")["spec"]["template"]["spec"],
                        "serve")["command"]),
      "by default nobody outside a tenancy reaches its published ports")
pdb = find(varied, "PodDisruptionBudget", "tessera-control-plane")
check(vdeploy["spec"]["replicas"] == 3 and pdb is not None and pdb["spec"]["minAvailable"] == 1 and
      pdb["spec"]["selector"]["matchLabels"] == vdeploy["spec"]["selector"]["matchLabels"],
      "3 replicas keep a PodDisruptionBudget (minAvailable 1) over the control plane's Pods")
agent = container(find(varied, "DaemonSet", "tessera-node-agent")["spec"]["template"]["spec"], "device-plugin")
check(agent["resources"]["limits"]["memory"] == "256Mi", "node agent memory from values")
check(agent["image"] == "registry.example.com/tessera:9.9.9", f"image from values: {agent['image']}")

scraper = template("nodeAgent.telemetry.networkPolicy.scraperNamespaceSelector.matchLabels.team=observability",
                   "nodeAgent.telemetry.networkPolicy.scraperPodSelector.matchLabels.app=vmagent",
                   "nodeAgent.telemetry.metricsPort=9500", "nodeAgent.telemetry.tokenSecret=scrape-token") or []
peer = (metrics_policy(scraper) or {"spec": {"ingress": [{"from": [{}], "ports": [{}]}]}})["spec"]["ingress"][0]
scraper_pod = find(scraper, "DaemonSet", "tessera-node-agent")["spec"]["template"]["spec"]
check(peer["from"][0]["namespaceSelector"]["matchLabels"].get("team") == "observability" and
      peer["from"][0]["podSelector"]["matchLabels"].get("app") == "vmagent" and
      peer["ports"] == [{"protocol": "TCP", "port": 9500}] and
      next(v for v in scraper_pod["volumes"] if v["name"] == "metrics-token")["secret"]["secretName"] == "scrape-token",
      "the scraper's selectors, the port and the token Secret come from values")
check(metrics_policy(template("nodeAgent.telemetry.networkPolicy.enabled=false") or []) is None,
      "networkPolicy.enabled=false: no NetworkPolicy (the token alone guards the port)")
quiet = template("nodeAgent.telemetry.intervalMs=0") or []
quiet_pod = find(quiet, "DaemonSet", "tessera-node-agent")["spec"]["template"]["spec"]
check(metrics_policy(quiet) is None and not any(v["name"] == "metrics-token" for v in quiet_pod["volumes"]),
      "telemetry off: no endpoint, so no token volume and no NetworkPolicy")

single = template("controlPlane.replicas=1", "dra.enabled=false") or []
check(find(single, "Deployment", "tessera-control-plane")["spec"]["replicas"] == 1 and
      find(single, "PodDisruptionBudget", "tessera-control-plane") is None,
      "one replica: no PodDisruptionBudget (it would block every drain)")
nodra = find(single, "DaemonSet", "tessera-node-agent")["spec"]["template"]["spec"]
check(container(nodra, "dra-plugin") is None and not any(o["kind"] == "DeviceClass" for o in single) and
      "resourceslices" not in rules_of(find(single, "ClusterRole", "tessera-node-agent")) and
      not any(v["name"] == "plugins-registry" for v in nodra["volumes"]),
      "dra.enabled=false: no dra-plugin container, DeviceClasses, DRA RBAC or DRA host paths")
check(container(nodra, "device-plugin") is not None, "the device plugin stays without DRA")

# MIG by demand: off by default (the plugin unprivileged); on, its flags, NVML from the host, a
# writable /dev for new instances' capability nodes, and privileged for NVML's instance calls.
check(dra is not None and not any(a.startswith("--mig-by-demand") for a in dra["args"]) and
      "privileged" not in dra["securityContext"], "MIG by demand off by default, dra-plugin unprivileged")
migd = template("dra.migByDemand.enabled=true",
                "dra.migByDemand.profiles={/host/etc/tessera/a100-40gb.yaml}") or []
mpod = find(migd, "DaemonSet", "tessera-node-agent")["spec"]["template"]["spec"]
mdra = container(mpod, "dra-plugin") or {"args": [], "securityContext": {}, "volumeMounts": []}
check("--mig-by-demand=true" in mdra["args"] and
      "--nvml=/host/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1" in mdra["args"] and
      "--mig-profiles=/host/etc/tessera/a100-40gb.yaml" in mdra["args"] and
      not flags_known(dra_binary, mdra["args"]) and mdra["securityContext"].get("privileged") is True and
      host_paths(mpod, mdra["volumeMounts"]).get("/dev") == ("/dev", False),
      "dra.migByDemand.enabled: --mig-by-demand, host NVML, profile tables, writable /dev, privileged")

# 6. TLS: the certificate Secret (kubernetes.io/tls, as cert-manager's Certificate writes it) is
# mounted and named in serve's flags; without one serve says plain HTTP is meant.
def serve_of(objs):
    return container(find(objs, "Deployment", "tessera-control-plane")["spec"]["template"]["spec"], "serve")
plain = serve_of(defaults or [])
check("--insecure-http" in plain["command"] and not any(f.startswith("--tls-") for f in plain["command"]),
      "no tls.secretName: --insecure-http, no --tls-* flags")
for tls_values, client_ca in [(("tls.secretName=api-tls",), False),
                              (("tls.secretName=api-tls", "tls.clientCA=true"), True)]:
    rendered = template(*tls_values) or []
    spec = find(rendered, "Deployment", "tessera-control-plane")["spec"]["template"]["spec"]
    serve = container(spec, "serve")
    flags = serve["command"]
    volume = next((v for v in spec["volumes"] if v["name"] == "tls"), None)
    mount = next((m for m in serve["volumeMounts"] if m["name"] == "tls"), None)
    check("--tls-cert=/etc/tessera/tls/tls.crt" in flags and "--tls-key=/etc/tessera/tls/tls.key" in flags and
          "--insecure-http" not in flags and
          ("--tls-client-ca=/etc/tessera/tls/ca.crt" in flags) == client_ca,
          f"{tls_values}: serve's TLS flags {[f for f in flags if 'tls' in f or 'insecure' in f]}")
    check(volume is not None and volume["secret"]["secretName"] == "api-tls" and
          volume["secret"]["defaultMode"] == 0o400 and mount is not None and
          mount["mountPath"] == "/etc/tessera/tls" and mount.get("readOnly") is True,
          f"{tls_values}: Secret api-tls mounted read-only at /etc/tessera/tls, key mode 0400")
    probe = serve["readinessProbe"]
    check(("tcpSocket" in probe) if client_ca else probe["httpGet"].get("scheme") == "HTTPS",
          f"{tls_values}: readiness probe {probe}")
    service = find(rendered, "Service", "tessera-control-plane")
    check(service["spec"]["ports"][0]["name"] == "https", f"{tls_values}: Service port named https")

# 7. The node agent's endpoint over HTTPS: the kubernetes.io/tls Secret mounted read-only and
# passed as --metrics-tls-cert/--metrics-tls-key; without one, no such flags or volume.
def lease_sync(rendered):
    pod = find(rendered, "DaemonSet", "tessera-node-agent")["spec"]["template"]["spec"]
    sync = next(c for c in pod["containers"] if "tessera-lease-sync" in " ".join(c.get("command", [])))
    return pod, sync
plain_pod, plain_sync = lease_sync(template() or [])
check(not any(f.startswith("--metrics-tls-") for f in plain_sync.get("args", [])) and
      not any(v["name"] == "metrics-tls" for v in plain_pod["volumes"]),
      "no nodeAgent.telemetry.tlsSecretName: the node agent's endpoint is plain, no TLS volume")
tls_pod, tls_sync = lease_sync(template("nodeAgent.telemetry.tlsSecretName=node-metrics-tls") or [])
tls_volume = next((v for v in tls_pod["volumes"] if v["name"] == "metrics-tls"), None)
tls_mount = next((m for m in tls_sync["volumeMounts"] if m["name"] == "metrics-tls"), None)
check("--metrics-tls-cert=/etc/tessera/metrics-tls/tls.crt" in tls_sync["args"] and
      "--metrics-tls-key=/etc/tessera/metrics-tls/tls.key" in tls_sync["args"] and
      tls_volume is not None and tls_volume["secret"]["secretName"] == "node-metrics-tls" and
      tls_volume["secret"]["defaultMode"] == 0o400 and
      tls_mount is not None and tls_mount["mountPath"] == "/etc/tessera/metrics-tls" and
      tls_mount.get("readOnly") is True,
      "nodeAgent.telemetry.tlsSecretName: the node agent's endpoint speaks HTTPS with the Secret")

sys.exit(1 if failures else 0)
