"""The health policy a fleet runs with when its config names none (``Policy.load(None)``):
the XID classes of Navarch's health-monitoring reference, in herdbook's format
(``version: 1``), with the rules herdbook adds (GPU pulls, row remaps, NVSwitch,
NVLink, InfiniBand, throttling). Data only: ``health.policy`` parses it like any file.
"""

DEFAULT_POLICY_YAML = """\
version: 1
metadata:
  name: herdbook-default
  description: XID classes of the Navarch health-monitoring reference
hold: 10m
rules:
  - name: gpu-lost
    description: XID 79, the GPU has fallen off the bus; its work is lost, so DOWN too
    condition: event.kind == "xid" && event.xid == 79
    result: fatal
  - name: ecc-double-bit
    description: an uncorrectable ECC error counted by NVML
    condition: event.kind == "ecc_dbe"
    result: fatal
  - name: critical-xid
    description: stopped processing, double-bit ECC, page retirement; replace the node
    condition: event.kind == "xid" && event.xid in [43, 48, 63]
    result: critical
  - name: repeated-xid
    description: the same recoverable XID 3 times within 24 h on one GPU, this one counted
    condition: >-
      event.kind == "xid" && event.xid in [13, 31, 45, 64, 92, 94]
      && history.xid_count(event.gpu, event.xid, duration("24h")) >= 3
    result: critical
    action: inspect_hardware
  - name: recoverable-xid
    condition: event.kind == "xid" && event.xid in [13, 31, 45, 64, 92, 94]
    result: degraded
  - name: thermal-critical
    condition: event.kind == "thermal" && event.value >= 95.0
    result: unhealthy
  - name: thermal-warning
    condition: event.kind == "thermal" && event.value >= 85.0
    result: degraded
  - name: nvlink-errors
    condition: event.kind == "nvlink"
    result: degraded
  - name: pcie-errors
    condition: event.kind == "pcie"
    result: degraded
  - name: gpu-pulled-twice
    description: >-
      a GPU of this node took its node out (critical or fatal) twice within a week, on
      this node or another (by serial); any node holding it stays out
    condition: event.kind == "check" && event.name == "gpu" && history.max_gpu_pulls(duration("168h")) >= 2
    result: critical
    action: inspect_hardware
  - name: remap-failed
    description: a row remap failed (an RMA criterion); the next uncorrectable error cannot be contained
    condition: event.kind == "remap_failed"
    result: critical
  - name: gpu-missing
    description: fewer GPUs than the node registered with; a job shaped for the whole node cannot run
    condition: event.kind == "gpu_count"
    result: critical
  - name: nvswitch-fatal
    description: a fatal NVSwitch SXid; the NVLink fabric of every GPU is down until a reset
    condition: event.kind == "sxid" && event.fatal
    result: critical
  - name: nvswitch-error
    condition: event.kind == "sxid"
    result: degraded
  - name: nvlink-down
    description: NVLink links down; collectives fail or fall back; 2 reports in a row, as a link may retrain
    condition: event.kind == "nvlink_down"
    result: unhealthy
  - name: ib-port-down
    description: an InfiniBand port that was ACTIVE is not; 2 reports in a row
    condition: event.kind == "ib_port_down"
    result: unhealthy
  - name: ib-flapping
    condition: event.kind == "ib_flap"
    result: degraded
  - name: remap-pending
    description: a row remap waits for a GPU reset; work still runs correctly (NVIDIA)
    condition: event.kind == "remap_pending"
    result: degraded
  - name: clock-throttled
    description: HW slowdown, HW thermal or power brake throttling sustained over the agent's window
    condition: event.kind == "throttle"
    result: degraded
  - name: pcie-link-degraded
    condition: event.kind == "pcie_link"
    result: degraded
  - name: failed-check
    condition: event.kind == "check" && event.status == "unhealthy"
    result: unhealthy
  - name: warning-check
    condition: event.kind == "check" && event.status == "degraded"
    result: degraded
"""
