#!/bin/bash
# herdbook on a real NVIDIA GPU, end to end (docs/health.md "On a real GPU"): nvidia-smi for
# reference, `herd agent sample` (one telemetry sample of every GPU, real NVML, as JSON),
# `herd up` and a real-NVML `herd agent` (boot check, GPU checks every 5 s, telemetry every
# 5 s), node describe, gpu list/describe, GET /v1/gpus, both metrics pages, and a second sample
# under a bf16 matmul when PyTorch is there. Needs `herd` on PATH, a driver, ports 4222, 8080
# and 9100 free. Writes its files to OUT (default ./real-gpu-check); stops what it started.
#     benchmarks/real_gpu_check.sh [OUT]
set -u
OUT=${1:-${OUT:-./real-gpu-check}}; mkdir -p "$OUT"
NODE=${NODE:-$(hostname)-gpu}
WORK=$(mktemp -d); GPUS=$(nvidia-smi -L | grep -c "^GPU")
trap 'kill %1 %2 2>/dev/null; rm -rf "$WORK"' EXIT
exec > >(tee "$OUT/gpu-check.log") 2>&1
echo "== $(date -u +%FT%TZ) versions"; python3 --version; uname -r
python3 -m pip show typer rich prometheus-client aiohttp nvidia-ml-py pyyaml 2>/dev/null | grep -E '^(Name|Version)' | paste - -
nvidia-smi --query-gpu=index,name,uuid,serial,pci.bus_id,driver_version,temperature.gpu,power.draw,power.limit,utilization.gpu,memory.used,memory.total,clocks.sm,clocks.mem,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max --format=csv
ls -la /dev/kmsg; ls /sys/class/infiniband 2>&1 | head -3
echo "== herd agent sample (real NVML)"
time herd agent sample --node-id $NODE > "$OUT"/sample.json; echo "rc=$?"; cat "$OUT"/sample.json; echo
echo "== herd up + herd agent (real NVML)"
timeout 200 herd up --data-dir "$WORK/plane" --auto-approve --http-port 8080 --metrics-port 9100 > "$OUT"/up.log 2>&1 &
for i in $(seq 60); do herd status >/dev/null 2>&1 && break; kill -0 %1 2>/dev/null || { echo "herd up died"; tail -5 "$OUT"/up.log; exit 1; }; sleep 1; done; echo "up after ${i}s"
timeout 170 herd agent --node-id $NODE --state-dir "$WORK/agent" --health-interval 5s --telemetry-interval 5s --info-interval 10s --expected-gpus "$GPUS" --labels rack=r1,gpu=real > "$OUT"/agent.log 2>&1 &
for i in $(seq 60); do herd node list 2>/dev/null | grep -q "$NODE.*READY" && break; kill -0 %2 2>/dev/null || { echo "agent died"; tail -20 "$OUT"/agent.log; break; }; sleep 1; done; echo "READY after ${i}s"
sleep 8
herd node list; herd node describe $NODE; herd gpu list; herd gpu list -o json; herd gpu describe $NODE/0
echo "== under load (bf16 matmul 25 s, where PyTorch is installed)"
python3 -c "
import torch,time
a=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16); t=time.time()
while time.time()-t<25: a@a
torch.cuda.synchronize()" &
sleep 12; herd agent sample --node-id $NODE > "$OUT"/sample-load.json; cat "$OUT"/sample-load.json; echo
sleep 6; herd gpu list; wait %3 2>/dev/null
echo "== HTTP API + metrics"
NODE="$NODE" OUT="$OUT" python3 - <<'PY'
import json, os, urllib.request as u
node, out = os.environ["NODE"], os.environ["OUT"]
api = {p: json.load(u.urlopen("http://127.0.0.1:8080" + p)) for p in ("/v1/gpus", f"/v1/nodes/{node}/gpus")}
open(f"{out}/api.json", "w").write(json.dumps(api, indent=1))
for page, name in (("/metrics/gpus", "metrics-gpus.txt"), ("/metrics", "metrics.txt")):
    open(f"{out}/{name}", "wb").write(u.urlopen("http://127.0.0.1:9100" + page).read())
PY
head -c 3000 "$OUT"/api.json; echo
grep -v '^#' "$OUT"/metrics-gpus.txt | head -60; grep -E '^herd_(gpu|node_health)' "$OUT"/metrics.txt | head -20
herd status
echo "== agent log"; tail -40 "$OUT"/agent.log
echo "== done $(date -u +%FT%TZ)"
