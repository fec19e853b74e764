"""The Slurm notifier against a real slurmctld (Debian's slurmctld, slurmd and munge): a
generated slurm.conf names two nodes, each with its own slurmd on this host (a Port per
node), so a node is really IDLE, runs a job, and is DRAINING then DRAINED."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from herdbook.agent.main import Agent, AgentOptions
from herdbook.api.messages import DrainNode, NodeCommand
from herdbook.cli.client import attempt
from herdbook.config import parse_config
from herdbook.control.plane import ControlPlane
from herdbook.events.node import NodeInfo, NodeNotificationFailed, NodeRegistered
from herdbook.events.states import Intent, Lifecycle
from herdbook.reactors.decide_runner import DecideRunner
from herdbook.reactors.notifier import Notifier
from herdbook.reactors.slurm import Slurm
from tests.conftest import free_port
from tests.fakes import FakeClock, FakeProjector, FakeStore
from tests.integration.conftest import running_plane
from tests.integration.test_agent_executor import eventually

pytestmark = pytest.mark.timeout(120)
BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "scontrol", "sinfo", "sbatch", "scancel")
NODES = ("gpu-1", "gpu-2")


class SlurmCluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.procs: list[subprocess.Popen[bytes]] = []

    def run(self, *argv: str, check: bool = True) -> str:
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=15)
        if check and done.returncode != 0:
            raise AssertionError(f"{argv}: {done.stdout}{done.stderr}")
        return done.stdout + done.stderr

    def state(self, node: str) -> str:
        out = self.run("scontrol", "-o", "show", "node", node)
        return next(f for f in out.split() if f.startswith("State=")).removeprefix("State=")

    def reason(self, node: str) -> str:
        out = self.run("scontrol", "show", "node", node)
        return next(line.strip() for line in out.splitlines()
                    if line.strip().startswith("Reason=")).removeprefix("Reason=")

    def submit(self, node: str) -> str:
        """A job holding ``node`` until cancelled."""
        return self.run("sbatch", "--parsable", "-w", node, "-o", "/dev/null",
                        "--wrap", "sleep 600").strip()

    def resume(self, node: str) -> None:
        if "DRAIN" in self.state(node):
            self.run("scontrol", "update", f"NodeName={node}", "State=RESUME")

    def spawn(self, *argv: str) -> None:
        with open(self.root / "log" / f"{argv[0]}.err", "ab") as err:
            self.procs.append(subprocess.Popen(argv, env=self.env, start_new_session=True,
                                               stdout=subprocess.DEVNULL, stderr=err))

    def log_tail(self) -> str:
        return " | ".join(line for path in sorted((self.root / "log").iterdir())
                          for line in path.read_text(errors="replace").splitlines()[-3:])

    def start(self) -> None:
        root = self.root
        for sub in ("munge", "state", "log", *(f"spool/{n}" for n in NODES)):
            (root / sub).mkdir(parents=True)
        (root / "munge").chmod(0o700)
        subprocess.run(["mungekey", "-c", "-k", str(root / "munge/munge.key")], check=True,
                       capture_output=True)
        socket = root / "munge/sock"
        self.spawn("munged", "-F", "-f", f"--socket={socket}",
                   f"--key-file={root / 'munge/munge.key'}", f"--log-file={root / 'log/munged'}",
                   f"--pid-file={root / 'munge/pid'}", f"--seed-file={root / 'munge/seed'}")
        nodes = "\n".join(f"NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 "
                          f"Port={free_port()} CPUs=1 State=UNKNOWN" for n in NODES)
        self.conf.write_text(f"""\
ClusterName=herdtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={socket}
StateSaveLocation={root / 'state'}
SlurmdSpoolDir={root / 'spool'}/%n
SlurmctldPidFile={root / 'slurmctld.pid'}
SlurmdPidFile={root / 'spool'}/%n/slurmd.pid
SlurmctldLogFile={root / 'log/slurmctld.log'}
SlurmdLogFile={root / 'log'}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
        deadline = time.monotonic() + 5
        while not socket.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.spawn("slurmctld", "-D", "-f", str(self.conf))
        for node in NODES:
            self.spawn("slurmd", "-D", "-N", node, "-f", str(self.conf))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            out = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False)
            if all(f"{n} idle" in out for n in NODES):
                return
            time.sleep(0.2)
        raise RuntimeError(f"the nodes are not idle after 20s: {out.strip()!r}")

    def stop(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):  # no slurmctld answers
            self.run("scancel", "--user", "root", check=False)
            deadline = time.monotonic() + 10
            while self.run("squeue", "-h", check=False).strip() and time.monotonic() < deadline:
                time.sleep(0.2)
        for proc in reversed(self.procs):     # slurmds, then slurmctld, then munged
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)   # a slurmstepd left behind


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        reason = (f"Slurm test skipped: {', '.join(missing)} not installed "
                  "(apt-get install slurmctld slurmd munge)")
        print(reason)
        pytest.skip(reason)
    cluster = SlurmCluster(Path(tempfile.mkdtemp(prefix="herd-slurm-")))
    try:
        try:
            cluster.start()
        except (OSError, RuntimeError, subprocess.SubprocessError) as err:
            # Installed but not starting is a broken fixture or Slurm, not a missing
            # package: the issue allows a skip only where the packages cannot be installed.
            pytest.fail(f"slurmctld/slurmd did not start: {err}; "
                        f"logs: {cluster.log_tail()[-600:]}")
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(cluster.root, ignore_errors=True)


@pytest.fixture
def idle(slurm: SlurmCluster) -> Iterator[SlurmCluster]:
    """Every test starts with both nodes IDLE and no jobs."""
    yield slurm
    slurm.run("scancel", "--user", "root", check=False)
    for node in NODES:
        slurm.resume(node)


def slurm_config(cluster: SlurmCluster, extra: str = "") -> str:
    return (f"notifier: {{type: slurm, retries: 1, backoff: 100ms, drain_status_interval: "
            f"200ms, slurm: {{conf: '{cluster.conf}', node_name: '{{label:slurm-node}}'}}}}\n"
            f"{extra}")


async def test_drain_sets_the_reason_and_drained_is_what_slurm_says(idle: SlurmCluster) -> None:
    slurm = Slurm(parse_config(slurm_config(idle)).notifier.slurm)
    await slurm.update("drain", "gpu-1", 'XID 79 "fell off the bus"; $(reboot) `id`')
    assert idle.state("gpu-1") == "IDLE+DRAIN"
    assert idle.reason("gpu-1").startswith('herdbook: XID 79 "fell off the bus"; $(reboot) `id`')
    assert await slurm.drained("gpu-1") == (True, "Slurm node gpu-1 is IDLE+DRAIN")

    await slurm.update("uncordon", "gpu-1", "")
    # (NOT_RESPONDING for a moment after RESUME, until slurmctld pings the slurmd)
    assert idle.state("gpu-1").split("+")[0] == "IDLE" and "DRAIN" not in idle.state("gpu-1")
    # Slurm refuses RESUME for a node it does not hold; uncordon again is still a success
    await slurm.update("uncordon", "gpu-2", "")
    assert (await slurm.drained("gpu-1"))[0] is False


async def test_a_node_running_a_job_is_draining_until_the_job_ends(idle: SlurmCluster) -> None:
    slurm = Slurm(parse_config(slurm_config(idle)).notifier.slurm)
    job = idle.submit("gpu-2")
    await eventually(lambda: _async(idle.state("gpu-2") == "ALLOCATED"), what="job running")
    await slurm.update("cordon", "gpu-2", "")
    assert await slurm.drained("gpu-2") == (False, "Slurm node gpu-2 is ALLOCATED+DRAIN")
    assert idle.reason("gpu-2").startswith("herdbook: cordon")
    idle.run("scancel", job)
    await eventually(lambda: _drained(slurm, "gpu-2"), what="gpu-2 drained")


async def test_an_unknown_slurm_node_is_retried_then_recorded(idle: SlurmCluster) -> None:
    projector = FakeProjector()
    store = FakeStore(projector)
    store.fold(NodeRegistered(node_id="n9", boot_id="b",
                              info=NodeInfo(labels={"slurm-node": "gpu-9"})))
    clock = FakeClock()
    notifier = Notifier(parse_config(slurm_config(idle)).notifier, projector,  # type: ignore[arg-type]
                        clock=clock,
                        runner=DecideRunner(store, projector, clock))  # type: ignore[arg-type]
    assert not await notifier.notify("drain", "n9", "x")
    [(event, _)] = store.appended
    assert isinstance(event, NodeNotificationFailed) and event.attempts == 2
    assert "Invalid node name specified" in event.reason


async def test_the_control_plane_drains_the_slurm_node_and_waits_for_its_jobs(
        idle: SlurmCluster, nats_server: Any, tmp_path: Path) -> None:
    async with plane_and_agent(idle, nats_server, tmp_path) as (plane, nc):
        projector = plane.projector
        assert projector is not None
        job = idle.submit("gpu-1")
        await eventually(lambda: _async(idle.state("gpu-1") == "ALLOCATED"), what="job running")

        # when an operator drains the herdbook node labelled slurm-node=gpu-1
        await attempt(nc, "node.drain", DrainNode(id="n1", reason="bad HBM"))
        await eventually(lambda: _async(idle.state("gpu-1") == "ALLOCATED+DRAIN"),
                         what="Slurm DRAIN")
        assert idle.reason("gpu-1").startswith("herdbook: bad HBM")
        # then DRAINED waits for Slurm: the job still runs
        await asyncio.sleep(1.0)
        assert projector.nodes["n1"].intent is Intent.DRAINING
        idle.run("scancel", job)
        await eventually(lambda: _async(projector.nodes["n1"].intent is Intent.DRAINED),
                         what="DRAINED")
        assert projector.nodes["n1"].intent_reason == "Slurm node gpu-1 is IDLE+DRAIN"

        # and undrain resumes the Slurm node
        await attempt(nc, "node.undrain", NodeCommand(id="n1"))
        await eventually(lambda: _async("DRAIN" not in idle.state("gpu-1")), what="RESUME")


@contextlib.asynccontextmanager
async def plane_and_agent(cluster: SlurmCluster, nats_server: Any,
                          tmp_path: Path) -> AsyncIterator[tuple[ControlPlane, Any]]:
    import nats

    async with running_plane(
            f"nats: {{url: '{nats_server.url}'}}\ndata_dir: '{tmp_path / 'd'}'\nnode_id: cp\n"
            f"approval: {{auto_approve: true}}\n" + slurm_config(cluster)) as plane:
        agent = Agent(AgentOptions(server=nats_server.url, node_id="n1",
                                   state_dir=str(tmp_path / "n1"), heartbeat_interval=0.2,
                                   fake_gpus=1, labels={"slurm-node": "gpu-1"}))
        task = asyncio.create_task(agent.run())
        nc = await nats.connect(nats_server.url)
        try:
            projector = plane.projector
            assert projector is not None
            await eventually(lambda: _async("n1" in projector.nodes and projector.nodes["n1"]
                                            .lifecycle is Lifecycle.READY), what="n1 READY")
            yield plane, nc
        finally:
            await nc.close()
            await agent.stop()
            await task


async def _async(value: bool) -> bool:
    return value


async def _drained(slurm: Slurm, name: str) -> bool:
    return (await slurm.drained(name))[0]
