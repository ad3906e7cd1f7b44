#!/usr/bin/env bash
# The proof kit's own parts on this machine, where the GPU is a fixture host (vm-h100-local-nvidia:
# the driver under /usr/local/nvidia, off ld.so.cache) and NVML the stand-in library:
#  - the kit is made (scripts/gpu-proof-kit.sh) and its tessera and runc run from it;
#  - `gpu-proof compare` agrees with an nvidia-smi CSV of the same GPU and names the field of one
#    that differs, exiting 1;
#  - `gpu-proof cdi-check` passes tessera's spec and fails one naming a missing host path;
#  - a container run by the kit's runc, its config given only the CDI edits, sees the GPU's node
#    and the driver's libraries where its loader is told to look.
set -euo pipefail
source_dir=$1 build_dir=$2 fake_nvml=$3
work=$(mktemp -d)
name="tessera-kit-test-$$"
cleanup() { "$kit/bin/runc" delete --force "$name" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

kit="$work/kit"
bash "$source_dir/scripts/gpu-proof-kit.sh" "$build_dir" "$kit"
# gpu-proof.sh links the kit here; its programs' interpreter and libraries are found through it.
ln -sfn "$kit" /tmp/tessera-gpu-proof-kit
[ "$(readelf -l "$kit/bin/runc" | grep -o '/tmp/tessera-gpu-proof-kit/lib/ld-linux[^]]*')" ] ||
  fail "runc's interpreter is not the kit's"
"$kit/bin/tessera" --version >/dev/null || fail "the kit's tessera does not run"

root="$work/host"
python3 "$source_dir/tests/fixtures/materialize.py" vm-h100-local-nvidia "$root"
cp "$source_dir/tests/fixtures/hosts/vm-h100-local-nvidia.nvml" "$work/state.nvml"
TESSERA_FAKE_NVML_STATE="$work/state.nvml" "$kit/bin/tessera" inventory --root "$root" \
  --nvml "$fake_nvml" --format json > "$work/inventory.json"

header="pci.bus_id, uuid, name, memory.total [MiB], driver_version"
printf '%s\n00000000:00:05.0, GPU-0b5c2a9e-7d41-4f63-8e2a-5c9d1f3b7a60, NVIDIA H100 80GB HBM3, 81559 MiB, 580.65.06\n' \
  "$header" > "$work/agree.csv"
printf 'pci.bus_id, mig.mode.current\n00000000:00:05.0, Disabled\n' > "$work/mig.csv"
"$kit/bin/gpu-proof" compare "$work/inventory.json" "$work/agree.csv" "$work/mig.csv" > "$work/agree.txt" ||
  fail "compare disagreed: $(cat "$work/agree.txt")"
for field in pci.bus_id uuid name memory.total driver_version mig.mode.current; do
  grep -qx "0000:00:05.0 $field: agree (.*)" "$work/agree.txt" || fail "no agreement on $field: $(cat "$work/agree.txt")"
done
sed 's/GPU-0b5c2a9e/GPU-ffffffff/' "$work/agree.csv" > "$work/differ.csv"
if "$kit/bin/gpu-proof" compare "$work/inventory.json" "$work/differ.csv" > "$work/differ.txt"; then
  fail "a different UUID was not a disagreement"
fi
grep -qx "0000:00:05.0 uuid: DISAGREE (tessera GPU-0b5c2a9e-7d41-4f63-8e2a-5c9d1f3b7a60, nvidia-smi GPU-ffffffff-7d41-4f63-8e2a-5c9d1f3b7a60)" \
  "$work/differ.txt" || fail "the disagreement is not named: $(cat "$work/differ.txt")"

"$kit/bin/tessera" cdi generate --root "$root" --output-dir "$work/cdi" >/dev/null
"$kit/bin/gpu-proof" cdi-check "$work/cdi" > "$work/check.txt" || fail "cdi-check: $(cat "$work/check.txt")"
mkdir "$work/broken" && sed 's|libcuda.so.580.65.06"|libcuda.so.gone"|' "$work/cdi/"*.json > "$work/broken/nvidia.com-gpu.json"
if "$kit/bin/gpu-proof" cdi-check "$work/broken" > "$work/broken.txt"; then fail "a missing host path passed"; fi
grep -q "host path $root/usr/local/nvidia/lib64/libcuda.so.gone" "$work/broken.txt" ||
  fail "the missing host path is not named: $(cat "$work/broken.txt")"

rootfs="$work/rootfs"
mkdir -p "$rootfs"/{bin,dev,proc,sys,tmp,etc} "$work/bundle"
cp "$kit/bin/busybox" "$rootfs/bin/busybox" && ln -s busybox "$rootfs/bin/sh"
(cd "$work/bundle" && "$kit/bin/runc" spec)
"$kit/bin/gpu-proof" cdi-apply -spec-dir "$work/cdi" -config "$work/bundle/config.json" \
  -rootfs "$rootfs" -device nvidia.com/gpu=0 -- /bin/busybox sh -c \
  'busybox stat -c "%n %t:%T" /dev/nvidia0 /dev/nvidiactl; echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH";
   busybox ls /usr/local/nvidia/lib64/libcuda.so.1' > /dev/null
"$kit/bin/runc" run --bundle "$work/bundle" "$name" > "$work/run.txt" 2>&1 || fail "runc run: $(cat "$work/run.txt")"
for line in "/dev/nvidia0 c3:0" "/dev/nvidiactl c3:ff" "LD_LIBRARY_PATH=/usr/local/nvidia/lib64" \
            "/usr/local/nvidia/lib64/libcuda.so.1"; do
  grep -qx "$line" "$work/run.txt" || fail "the container did not show '$line': $(cat "$work/run.txt")"
done
echo "ok"
