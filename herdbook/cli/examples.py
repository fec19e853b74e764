"""One example (or a few) per command, shown at the end of its --help. Kept in one table
so the CLI's examples read as one voice; a command's own ``epilog`` wins over this."""

from __future__ import annotations

EXAMPLES: dict[str, tuple[str, ...]] = {
    # getting started
    "up": ("herd up --demo 4 --auto-approve", "herd up -c herd.yaml --auth"),
    "agent": ("herd agent --node-id gpu-017 --server nats://cp:4222",
              "herd agent --node-id dev-1 --fake-gpus 8 --heartbeat-interval 2s"),
    "agent inject": ("herd agent inject --node gpu-017 xid 79",),
    "agent sample": ("herd agent sample", "herd agent sample --fake-gpus 8 --node-id dev-1"),
    "status": ("herd status", "herd status -o json"),
    "top": ("herd top", "herd top --once"),
    # nodes and the fleet
    "node list": ("herd node list --filter-state down", "herd node list -l pool=a100 --wide"),
    "node describe": ("herd node describe gpu-017", "herd node describe gpu-017 --at 2h"),
    "node history": ("herd node history gpu-017",),
    "node status": ("herd node status gpu-017",),
    "node add": ("herd node add gpu-042 --labels pool=a100",),
    "node approve": ("herd node approve gpu-017", "herd node approve -l pool=a100"),
    "node reject": ("herd node reject gpu-017 -m 'unknown host'",),
    "node delete": ("herd node delete gpu-017",),
    "node cordon": ("herd node cordon gpu-017 -m 'fan noise'", "herd node cordon -l rack=r12"),
    "node uncordon": ("herd node uncordon gpu-017",),
    "node drain": ("herd node drain gpu-017 --deadline 30m",),
    "node undrain": ("herd node undrain gpu-017",),
    "node disable": ("herd node disable gpu-017 -m 'RMA'",),
    "node enable": ("herd node enable gpu-017",),
    "node reboot": ("herd node reboot gpu-017",),
    "node validate": ("herd node validate gpu-017", "herd node validate -l rack=r3 -m 'PDU swap'"),
    "node claim": ("herd node claim secure-3 --user ana",),
    "node release": ("herd node release secure-3 -m 'job done'",),
    "node fingerprint": ("herd node fingerprint secure-3",),
    "node conformance": ("herd node conformance",),
    "gpu list": ("herd gpu list --health critical,fatal", "herd gpu list -l pool=a100 -o csv",
                 "herd gpu list --node gpu-017 -o json"),
    "gpu describe": ("herd gpu describe gpu-017/3",),
    "pool list": ("herd pool list",),
    "pool status": ("herd pool status a100",),
    "pool scale": ("herd pool scale a100 12 -m 'training week'",),
    "fleet repairs": ("herd fleet repairs", "herd fleet repairs --since 30d --pool a100 -o json",
                      "herd fleet repairs --node gpu-017 --steps"),
    "instance list": ("herd instance list",),
    "instance describe": ("herd instance describe i-0abc",),
    "health check-policy": ("herd health check-policy policy.yaml",),
    "context list": ("herd context list",),
    "context show": ("herd context show", "herd context show prod -o json"),
    "context use": ("herd context use prod",),
    "context set": ("herd context set prod --server nats://nats.prod:4222 --creds "
                    "op-admin.creds --use",),
    "context delete": ("herd context delete staging",),
    "health test-policy": ("herd health test-policy policy.yaml -e "
                           "'{\"kind\": \"xid\", \"gpu\": 0, \"xid\": 79}'",),
    "breaker status": ("herd breaker status", "herd breaker status -o json"),
    "breaker reset": ("herd breaker reset --reason 'driver 550 rolled back'",
                      "herd breaker reset --scope pool:a100 -m 'checked the rack'"),
    "admin node wipe": ("herd admin node wipe secure-3 --force",),
    # jobs
    "job list": ("herd job list", "herd job list --status running -o json"),
    "job run": ("herd job run job.yaml",),
    "job plan": ("herd job plan job.yaml", "herd job plan job.yaml -o json"),
    "job status": ("herd job status train-1",),
    "job stop": ("herd job stop train-1 -m 'superseded'",),
    "eval list": ("herd eval list",),
    "eval status": ("herd eval status 3f2a",),
    "eval describe": ("herd eval describe 3f2a",),
    "eval retry": ("herd eval retry 3f2a",),
    "alloc list": ("herd alloc list",),
    "alloc status": ("herd alloc status 9c1e",),
    "alloc logs": ("herd alloc logs 9c1e", "herd alloc logs 9c1e -f --tail 50"),
    "alloc requeue": ("herd alloc requeue 9c1e -m 'checked the node'",),
    # history
    "events tail": ("herd events tail -n 50", "herd events tail --since 10m -o json",
                    "herd events tail -f --subject 'herd.node.gpu-017.>'"),
    "events schema": ("herd events schema > herd-events.schema.json",),
    "audit list": ("herd audit list --since 1d", "herd audit list --node gpu-017"),
    "audit verify": ("herd audit verify",),
    "view rebuild": ("herd view rebuild",),
    # operating herdbook
    "creds agent": ("herd creds agent gpu-017",
                    "herd creds agent gpu-017 --out /creds/agent.creds --keep"),
    "creds operator": ("herd creds operator --name alice",),
    "creds list": ("herd creds list",),
    "creds revoke": ("herd creds revoke op-alice",),
    "nats cluster": ("herd nats cluster --size 3 --dir ./nats-cluster",),
    "nats config": ("herd nats config --auth --out /etc/herd/nats --cluster-routes "
                    "nats-route://nats1:6222,nats-route://nats2:6222,nats-route://nats3:6222",),
    "sim": ("herd sim scenarios/xid-storm.yaml",),
    "version": ("herd version",),
}


def epilog(path: str) -> str | None:
    """``Examples:`` and one command per line, or None for a command not in the table."""
    lines = EXAMPLES.get(path)
    if not lines:
        return None
    return "Example" + ("s" if len(lines) > 1 else "") + ":\n\n" + "\n\n".join(
        f"  {line}" for line in lines)
