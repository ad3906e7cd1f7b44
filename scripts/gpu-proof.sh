#!/usr/bin/env bash
# Proves tessera on a real NVIDIA GPU machine (docs/real-gpu.md): the inventory against
# nvidia-smi, NVML read without changing anything, the CDI spec, and a real runc container given
# only the spec's edits, running a CUDA kernel. Written for a short-lived machine: H100/H200 in a
# VM, the driver under /usr/local/nvidia (read-only), CUDA's nvcc, no podman, no network, root.
# Everything else comes in KIT (made here by scripts/gpu-proof-kit.sh).
#   bash scripts/gpu-proof.sh KIT     report in $OUT/report.md (default ./gpu-proof-out)
# Exit 1 on any disagreement or failure; 0 with one line and no claim where there is no GPU.
# It never changes a GPU setting (MIG included) and never resets a GPU.
set -uo pipefail
kit=$(cd "${1:?usage: bash scripts/gpu-proof.sh KIT}" && pwd)
out=${OUT:-$PWD/gpu-proof-out}
mkdir -p "$out"
report="$out/report.md"
export PATH="$PATH:/usr/local/nvidia/bin"  # where such machines keep nvidia-smi

driver=$(sed -n 's/.*Kernel Module *\([0-9.]*\).*/\1/p' /proc/driver/nvidia/version 2>/dev/null)
{
  echo "# tessera GPU proof"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "machine: $(uname -n), kernel $(uname -r), $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-unknown OS}")"
  echo "driver: ${driver:-none}"
  echo "kit: $(head -n 1 "$kit/MANIFEST" 2>/dev/null)"
} > "$report"
if ! ls /proc/driver/nvidia/gpus/*/information >/dev/null 2>&1; then
  echo "result: no NVIDIA GPU on this machine; nothing was checked" | tee -a "$report"
  exit 0
fi

# The kit's tessera and runc load their libraries from here (scripts/gpu-proof-kit.sh).
ln -sfn "$kit" /tmp/tessera-gpu-proof-kit
tessera="$kit/bin/tessera" runc="$kit/bin/runc" proof="$kit/bin/gpu-proof"
work=$(mktemp -d)
checks=0 failed=0
# check NAME COMMAND...: runs it, keeps its output in $out/NAME.txt, one report line either way.
check() {
  local name=$1
  shift
  checks=$((checks + 1))
  if "$@" > "$out/$name.txt" 2>&1; then
    echo "- PASS $name" | tee -a "$report"
  else
    failed=$((failed + 1))
    echo "- FAIL $name (see $name.txt)" | tee -a "$report"
  fi
  sed 's/^/    /' "$out/$name.txt" >> "$report"
}
gpu_settings() {  # what tessera must not change
  nvidia-smi --query-gpu=pci.bus_id,mig.mode.current,mig.mode.pending,persistence_mode,compute_mode,ecc.mode.current --format=csv
}

{
  echo "## facts"
  nvidia-smi -L; nvcc --version | tail -n 1
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"; cat /etc/ld.so.conf.d/*.conf 2>/dev/null
  ldconfig -p | grep -E 'libcuda\.so|libnvidia-ml\.so' || echo "(no NVIDIA library in ld.so.cache)"
} > "$out/facts.txt" 2>&1
gpu_settings > "$out/settings-before.csv"
nvidia-smi -q > "$out/nvidia-smi-q.txt" 2>&1
echo "## checks" >> "$report"

# 1. The inventory against nvidia-smi, field by field; NVML is only read.
"$tessera" inventory --root / --format json > "$out/inventory.json" 2> "$out/inventory.err"
nvidia-smi --query-gpu=pci.bus_id,uuid,name,memory.total,driver_version --format=csv > "$out/nvidia-smi.csv"
nvidia-smi --query-gpu=pci.bus_id,mig.mode.current --format=csv > "$out/nvidia-smi-mig.csv"
check inventory-vs-nvidia-smi "$proof" compare "$out/inventory.json" "$out/nvidia-smi.csv" "$out/nvidia-smi-mig.csv"

# 2. The driver's libraries where the dynamic loader takes them from: CUDA's own load of
# libcuda (LD_DEBUG) against the file tessera found.
check nvcc-builds-the-cuda-probe nvcc -O2 -o "$work/cuda_probe" "$kit/src/cuda_probe.cu"
check cuda-on-the-host env LD_DEBUG=libs LD_DEBUG_OUTPUT="$work/ld" "$work/cuda_probe"
loaded=$(grep -ho 'calling init: [^ ]*libcuda\.so[^ ]*' "$work"/ld.* 2>/dev/null | head -n 1 | cut -d' ' -f3)
found=$("$proof" libraries "$out/inventory.json" libcuda.so.1 libnvidia-ml.so.1 | awk '$1 == "libcuda.so.1" {print $2}')
check driver-libraries-as-the-loader-finds-them \
  test -n "$loaded" -a "$(readlink -f "$loaded" 2>/dev/null)" = "$found"
echo "    loader: $loaded, tessera: ${found:-(none)}" >> "$report"

# 3. The CDI spec: tessera's validator, the reference library's, and every host path present.
"$tessera" cdi generate --output-dir "$out/cdi" > "$out/cdi-generate.txt" 2>&1
check cdi-validate "$tessera" cdi validate "$out/cdi"
check cdi-reference-library "$kit/bin/cdi-validate-go" "$out/cdi"
check cdi-host-paths-exist "$proof" cdi-check "$out/cdi"

# 4. A real container (runc) whose config gets only the CDI edits of the last GPU, running the
# CUDA program: it must see exactly that GPU and run a kernel.
index=$(($(grep -c . "$out/nvidia-smi.csv") - 2))
bus=$(tail -n 1 "$out/nvidia-smi.csv" | cut -d, -f1 | tr 'A-F' 'a-f' | grep -o '....:..:..\..$')
uuid=$(tail -n 1 "$out/nvidia-smi.csv" | cut -d, -f2 | tr -d ' ')
rootfs="$work/rootfs"
mkdir -p "$rootfs"/{bin,dev,proc,sys,tmp,etc} "$work/bundle"
cp "$kit/bin/busybox" "$rootfs/bin/busybox" && ln -s busybox "$rootfs/bin/sh"
cp "$work/cuda_probe" "$rootfs/cuda_probe"
for library in $(ldd "$work/cuda_probe" | grep -o '/[^ ]*'); do  # its libraries, from this host
  mkdir -p "$rootfs$(dirname "$library")" && cp -L "$library" "$rootfs$library"
done
(cd "$work/bundle" && "$runc" spec)
check cdi-apply "$proof" cdi-apply -spec-dir "$out/cdi" -config "$work/bundle/config.json" \
  -rootfs "$rootfs" -device "nvidia.com/gpu=$index" -- /cuda_probe
cp "$work/bundle/config.json" "$out/container-config.json"
check container-run "$runc" run --bundle "$work/bundle" "tessera-gpu-proof-$$"
"$runc" delete --force "tessera-gpu-proof-$$" >/dev/null 2>&1
check container-sees-exactly-that-gpu \
  grep -qx "devices 1" "$out/container-run.txt"
check "container-gpu-is-$bus" \
  grep -qiE "^device 0 bus (0000)?$bus uuid $uuid " "$out/container-run.txt"
check container-kernel-ran grep -q "^kernel ok" "$out/container-run.txt"

# 5. Nothing about the GPUs changed.
gpu_settings > "$out/settings-after.csv"
check gpu-settings-unchanged cmp "$out/settings-before.csv" "$out/settings-after.csv"

rm -rf "$work"
if [ "$failed" -eq 0 ]; then
  echo "result: PASS ($checks checks)" | tee -a "$report"
else
  echo "result: FAIL ($failed of $checks checks failed)" | tee -a "$report"
  exit 1
fi
