#!/usr/bin/env bash
# MPS limits on a real GPU (H100, driver 580, no network, no podman): what the stand-ins in the
# test suite cannot prove. It runs MPS in whatever compute mode the GPU already has and changes
# no GPU setting at all: no compute mode, persistence, accounting, time-slice, MIG or reset (the
# machine is borrowed). Every nvidia-smi call goes through `smi`, which refuses those flags.
#
#   tests/device/mps_check.sh [OUT_DIR]      (about 5 minutes; every step under `timeout`)
#
# Needs: nvidia-smi, nvidia-cuda-mps-control and libcuda.so.1 (found under /usr/local/nvidia, then
# PATH and ld.so), and the probe (build/tests/device/cuda_probe, or $PROBE). Writes a report of
# "key=value" findings to OUT_DIR/report.txt and the raw outputs beside it.
set -uo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-${OUT:-/tmp/mps-check}}"
mkdir -p "$out"
report="$out/report.txt"
: >"$report"
started=$(date +%s)

nvidia_root="${NVIDIA_ROOT:-/usr/local/nvidia}"
export PATH="$nvidia_root/bin:$PATH"
export LD_LIBRARY_PATH="$nvidia_root/lib64:$nvidia_root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
probe="${PROBE:-$here/../../build/tests/device/cuda_probe}"

say() { echo "$*" | tee -a "$report"; }
note() { echo "# $*" | tee -a "$report"; }

# nvidia-smi, queries only.
smi() {
  for arg in "$@"; do
    case "$arg" in
      -c|--compute-mode|-pm|--persistence-mode|-am|--accounting-mode|-mig|--multi-instance-gpu|\
      -r|--gpu-reset|compute-policy|--set-timeslice|-e|--ecc-config|-ac|-lgc|-pl|-rgc|-rac)
        echo "smi: refusing to change a GPU setting ($arg)" >&2
        return 99 ;;
    esac
  done
  timeout 30 nvidia-smi "$@"
}

for tool in nvidia-smi nvidia-cuda-mps-control; do
  command -v "$tool" >/dev/null || { say "error=missing tool=$tool"; exit 1; }
done
[ -x "$probe" ] || { say "error=missing_probe path=$probe (build it: cmake --build build --target cuda_probe)"; exit 1; }

# ---- 1. The GPU as it is (and as it must be again at the end) ----
smi --query-gpu=name,uuid,driver_version,compute_mode,memory.total,persistence_mode,mig.mode.current \
    --format=csv,noheader >"$out/gpu-before.csv" 2>&1
say "gpu_before=$(head -n1 "$out/gpu-before.csv")"
uuid=$(smi --query-gpu=uuid --format=csv,noheader | head -n1 | tr -d ' ')
total_mib=$(smi --query-gpu=memory.total --format=csv,noheader,nounits | head -n1 | tr -d ' ')
[ -n "$uuid" ] || { say "error=no_gpu"; exit 1; }
if smi --query-gpu=mig.mode.current --format=csv,noheader | grep -qi enabled; then
  say "error=mig_enabled (MPS is not for MIG devices here; nothing was changed)"
  exit 1
fi
smi -q -d COMPUTE >"$out/compute-before.txt" 2>&1

# ---- 2. A daemon of our own: own pipe and log directories, limits, then clients ----
work=$(mktemp -d /tmp/mps-check.XXXXXX)
pipe="$work/pipe"; logs="$work/log"
mkdir -p "$pipe" "$logs"
export CUDA_MPS_PIPE_DIRECTORY="$pipe" CUDA_MPS_LOG_DIRECTORY="$logs"
control() { echo "$1" | timeout 20 nvidia-cuda-mps-control; }
cleanup() {
  local daemon
  daemon=$(cat "$pipe/nvidia-cuda-mps-control.pid" 2>/dev/null)
  control quit >/dev/null 2>&1
  sleep 1
  # Ours only, by the PID it wrote, and only if it outlived `quit`.
  [ -n "$daemon" ] && kill -0 "$daemon" 2>/dev/null && kill -9 "$daemon"
  cp -r "$logs" "$out/mps-logs" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# 20 GiB (a quarter of an H100 80GB), less on smaller boards.
limit_gib=$(( total_mib / 4096 < 20 ? total_mib / 4096 : 20 ))
percent=25
say "total_mib=$total_mib limit_gib=$limit_gib percent=$percent"
CUDA_VISIBLE_DEVICES="$uuid" timeout 30 nvidia-cuda-mps-control -d
sleep 1
control "set_default_device_pinned_mem_limit 0 ${limit_gib}G"
control "set_default_active_thread_percentage $percent"
say "default_active_thread_percentage=$(control get_default_active_thread_percentage)"
say "control_version=$(grep -o 'binary version: [0-9]*' "$logs/control.log" | head -n1 | awk '{print $3}')"

p() { CUDA_VISIBLE_DEVICES="$uuid" timeout "$1" "$probe" "${@:2}"; }
p 60 info | sed 's/^/info_mps: /' | tee -a "$report"

# ---- 3. Memory limit: two clients allocate until refused ----
note "memory: two clients, each expected to stop near ${limit_gib} GiB with CUDA_ERROR_OUT_OF_MEMORY"
PROBE_HOLD_SECONDS=8 p 120 alloc-until-oom >"$out/oom-a.txt" 2>&1 &
a=$!
PROBE_HOLD_SECONDS=8 p 120 alloc-until-oom >"$out/oom-b.txt" 2>&1 &
b=$!
sleep 5
control get_server_list >"$out/servers.txt" 2>&1
while read -r server; do
  [ -n "$server" ] && control "get_client_list $server"
done <"$out/servers.txt" >"$out/clients.txt" 2>&1
smi --query-compute-apps=pid,process_name,used_memory --format=csv >"$out/apps-during-oom.csv" 2>&1
wait $a $b
say "oom_a: $(cat "$out/oom-a.txt")"
say "oom_b: $(cat "$out/oom-b.txt")"
say "servers=$(tr '\n' ' ' <"$out/servers.txt") clients=$(tr '\n' ' ' <"$out/clients.txt")"

# ---- 4. Escapes ----
note "escape: a client that asks for more memory in its own environment"
CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=70G" p 120 alloc-until-oom >"$out/raise-memory.txt" 2>&1
say "raise_memory_env: $(cat "$out/raise-memory.txt")"
note "escape: two processes in one container (same environment) together"
p 120 alloc-until-oom >"$out/twin-a.txt" 2>&1 & a=$!
p 120 alloc-until-oom >"$out/twin-b.txt" 2>&1 & b=$!
wait $a $b
twin=$(( $(grep -o 'allocated_mib=[0-9]*' "$out/twin-a.txt" | cut -d= -f2) + \
         $(grep -o 'allocated_mib=[0-9]*' "$out/twin-b.txt" | cut -d= -f2) ))
say "two_processes_total_mib=$twin limit_mib=$((limit_gib * 1024))"
note "escape: a client without the pipe directory (compute mode unchanged: it may run without MPS)"
env -u CUDA_MPS_PIPE_DIRECTORY CUDA_VISIBLE_DEVICES="$uuid" timeout 60 "$probe" context \
  >"$out/no-pipe.txt" 2>&1
say "no_pipe_directory: $(cat "$out/no-pipe.txt") compute_mode=$(smi --query-gpu=compute_mode --format=csv,noheader | head -n1)"

# ---- 5. Compute share ----
note "compute: the same kernel at the daemon's ${percent}%, at 10% (a client may lower it), and without MPS"
p 60 spin 10 >"$out/spin-default.txt" 2>&1
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100 p 60 spin 10 >"$out/spin-raise.txt" 2>&1
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=10 p 60 spin 10 >"$out/spin-lower.txt" 2>&1
env -u CUDA_MPS_PIPE_DIRECTORY CUDA_VISIBLE_DEVICES="$uuid" timeout 60 "$probe" spin 10 \
  >"$out/spin-no-mps.txt" 2>&1
for f in default raise lower no-mps; do say "spin_$f: $(cat "$out/spin-$f.txt")"; done
smi pmon -c 3 -s um >"$out/pmon.txt" 2>&1 || true

# ---- 6. A fault in one client, and what the others see ----
note "fault: client A writes to an illegal address while B holds memory and launches kernels"
p 60 hold 1024 25 >"$out/bystander.txt" 2>&1 & bystander=$!
sleep 3
p 30 fault >"$out/fault.txt" 2>&1
fault_at=$(date +%s.%N)
# A new client right after: refused (807, cudaErrorMpsServerNotReady) until the server recovers?
recovered=""
for attempt in $(seq 1 40); do
  if p 20 context >"$out/new-client-$attempt.txt" 2>&1; then
    recovered=$(awk -v a="$(date +%s.%N)" -v b="$fault_at" 'BEGIN { printf "%.1f", a - b }')
    break
  fi
  sleep 0.5
done
wait $bystander
say "fault_client: $(cat "$out/fault.txt")"
say "bystander: $(cat "$out/bystander.txt")"
say "new_client_first: $(cat "$out/new-client-1.txt" 2>/dev/null)"
say "new_client_recovered_after_s=${recovered:-never}"
grep -E 'fatal|exited|Fault|fault' "$logs"/*.log >"$out/fault-log-lines.txt" 2>/dev/null
say "fault_log_lines=$(wc -l <"$out/fault-log-lines.txt")"

# ---- 6b. What a client can do through the pipe directory (tessera's design rests on it) ----
note "pipe: a client whose pipe directory is a read-only bind (as tessera gives containers)"
unshare -m sh -c "mount --bind -o ro '$pipe' '$pipe' && \
  CUDA_VISIBLE_DEVICES='$uuid' timeout 60 '$probe' context" >"$out/ro-pipe.txt" 2>&1
say "read_only_pipe_client: status=$? $(tail -n1 "$out/ro-pipe.txt")"
ls -la "$pipe" >"$out/pipe-listing.txt" 2>&1
say "pipe_entries=$(ls "$pipe" | tr '\n' ' ')"
note "admin: a client of the daemon's user, and of another user, moves the daemon's defaults"
control "set_default_active_thread_percentage 100" >"$out/admin-same-uid.txt" 2>&1
say "admin_same_uid: set=$(cat "$out/admin-same-uid.txt") now=$(control get_default_active_thread_percentage)"
control "set_default_active_thread_percentage $percent" >/dev/null 2>&1
echo "set_default_active_thread_percentage 100" | timeout 20 setpriv --reuid=65534 --regid=65534 \
  --clear-groups env CUDA_MPS_PIPE_DIRECTORY="$pipe" nvidia-cuda-mps-control \
  >"$out/admin-other-uid.txt" 2>&1
say "admin_other_uid: status=$? answer=$(tr '\n' ' ' <"$out/admin-other-uid.txt") now=$(control get_default_active_thread_percentage)"
say "default_pinned_mem_limit_answer=$(control 'get_default_device_pinned_mem_limit 0')"
control "set_default_active_thread_percentage $percent" >/dev/null 2>&1
note "daemon: the foreground daemon tessera runs (-f) answers like -d"
mkdir -p "$work/fg"
CUDA_VISIBLE_DEVICES="$uuid" CUDA_MPS_PIPE_DIRECTORY="$work/fg" CUDA_MPS_LOG_DIRECTORY="$work/fg" \
  timeout 10 nvidia-cuda-mps-control -f >"$out/foreground.txt" 2>&1 &
sleep 2
say "foreground_daemon: $(echo get_default_active_thread_percentage | CUDA_MPS_PIPE_DIRECTORY="$work/fg" timeout 5 nvidia-cuda-mps-control 2>&1)"
echo quit | CUDA_MPS_PIPE_DIRECTORY="$work/fg" timeout 5 nvidia-cuda-mps-control >/dev/null 2>&1

# ---- 7. Record only (r615+ features; nothing is set) ----
{ cat /sys/fs/cgroup/dmem.capacity 2>&1; timeout 10 nvidia-cuda-mps-control -h 2>&1 | head -n 30; } \
  >"$out/record-only.txt"

# ---- 8. Teardown, and proof that no setting changed ----
control quit >"$out/quit.txt" 2>&1
sleep 2
smi --query-gpu=name,uuid,driver_version,compute_mode,memory.total,persistence_mode,mig.mode.current \
    --format=csv,noheader >"$out/gpu-after.csv" 2>&1
if cmp -s "$out/gpu-before.csv" "$out/gpu-after.csv"; then
  say "settings_unchanged=yes"
else
  say "settings_unchanged=NO before=$(cat "$out/gpu-before.csv") after=$(cat "$out/gpu-after.csv")"
fi
say "seconds=$(( $(date +%s) - started ))"
