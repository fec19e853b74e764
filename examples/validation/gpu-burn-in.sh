#!/bin/sh
# A validation check (docs/remediation.md#validation): gpu-burn on every GPU for the
# given minutes (default 5), then no uncorrected ECC error and no hardware slowdown on
# any GPU. Exit 0 passes; the last line printed is the reason a failure shows.
#   validation: {name: burn-in, command: [/opt/site/gpu-burn-in.sh, "5"], timeout: 15m}
set -u
minutes=${1:-5}
out=$(gpu_burn -tc $((minutes * 60)) 2>&1)
rc=$?
faulty=$(printf '%s\n' "$out" | grep -oE 'GPU [0-9]+: FAULTY' | paste -sd, -)
if [ -n "$faulty" ]; then echo "gpu_burn: $faulty"; exit 1; fi
if [ "$rc" -ne 0 ]; then printf '%s\n' "$out" | tail -n 3; echo "gpu_burn exited $rc"; exit 1; fi
query=$(nvidia-smi --format=csv,noheader \
  --query-gpu=index,ecc.errors.uncorrected.volatile.total,clocks_throttle_reasons.hw_slowdown) \
  || { echo "nvidia-smi failed after the burn-in"; exit 1; }
printf '%s\n' "$query" | awk -F', *' '
  ($2 + 0 > 0) || ($3 == "Active") { bad = bad " GPU " $1 " (uncorrected ECC " $2 ", HW slowdown " $3 ")" }
  END { if (bad != "") { print "after burn-in:" bad; exit 1 } }' || exit 1
echo "burn-in passed: ${minutes}m, no faulty GPU, no uncorrected ECC error, no HW slowdown"
