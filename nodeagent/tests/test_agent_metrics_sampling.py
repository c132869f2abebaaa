"""GPU and node sampling: the simulated model follows the job, NVML through a fake, /proc parsing."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from nodeagent import gpu_metrics as g
from nodeagent import node_stats as n
from nodeagent.gpus import NvmlBackend, SimulatedBackend
from nodeagent.metrics import MetricsCollector, gpu_owners
from nodeagent.tests.agent_support import make_placement
from nodeagent.tests.test_agent_gpus import FakeNvml


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_simulated_gpus_work_while_their_command_runs_and_idle_otherwise():
    backend = SimulatedBackend("n1", 2, "g2")
    backend._sensors = g.SimulatedSensors(clock := Clock())
    first = backend.sample(busy={0})
    assert first[0][g.GPU_UTILIZATION] >= 86 and first[1][g.GPU_UTILIZATION] == 0
    assert first[0][g.GPU_MEMORY_USED] > 55 and first[1][g.GPU_MEMORY_USED] < 1
    assert first[0][g.GPU_POWER] > 500 > 100 > first[1][g.GPU_POWER]
    assert first[0][g.GPU_MEMORY_TOTAL] == 80
    # the busy die heats up over a minute, the idle one stays cool; once idle it cools down
    clock.now += 60
    warm = backend.sample(busy={0})
    assert warm[0][g.GPU_TEMPERATURE] > 65 and warm[1][g.GPU_TEMPERATURE] < 36
    clock.now += 60
    assert backend.sample(busy=set())[0][g.GPU_TEMPERATURE] < 45


def test_a_simulated_gpu_that_fell_off_the_bus_reports_nothing():
    backend = SimulatedBackend("n1", 2, "g2")
    backend.devices[1].lost = True
    assert list(backend.sample(busy={0, 1})) == [0]


class SamplingNvml(FakeNvml):
    """The fake of the probe test, plus the readings; PCIe is 'Not Supported' on this card."""

    NVML_TEMPERATURE_GPU, NVML_CLOCK_SM, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC = 0, 1, 1, 0
    NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES = 0, 1
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, NVML_NVLINK_MAX_LINKS = 138, 139, 2

    def __init__(self) -> None:
        super().__init__()
        self.kib = 0

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu=97, memory=41)

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(total=80 * 2**30, free=16 * 2**30, used=64 * 2**30)

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return 71

    def nvmlDeviceGetPowerUsage(self, handle):
        return 654_321  # mW

    def nvmlDeviceGetClockInfo(self, handle, clock):
        return 1980

    def nvmlDeviceGetTotalEccErrors(self, handle, error_type, counter):
        return 2 if handle == "handle-1" else 0

    def nvmlDeviceGetPcieThroughput(self, handle, counter):
        raise self.NVMLError("Not Supported")

    def nvmlDeviceGetFieldValues(self, handle, requests):
        # link 0 exists and counts; link 1 answers an error of its own
        return [SimpleNamespace(nvmlReturn=0 if link == 0 else 3, value=SimpleNamespace(ullVal=self.kib))
                for _, link in requests]


def test_nvml_readings_are_converted_and_unsupported_ones_left_out(monkeypatch):
    nvml = SamplingNvml()
    backend = NvmlBackend(nvml)
    clock = Clock()
    monkeypatch.setattr("nodeagent.gpus.time.monotonic", clock)
    first = backend.sample(busy=())
    assert first[0] == {
        g.GPU_UTILIZATION: 97.0, g.GPU_MEMORY_UTILIZATION: 41.0, g.GPU_MEMORY_USED: 64.0, g.GPU_MEMORY_TOTAL: 80.0,
        g.GPU_TEMPERATURE: 71.0, g.GPU_POWER: 654.321, g.GPU_SM_CLOCK: 1980.0, g.GPU_ECC_UNCORRECTED: 0.0,
    }  # no PCIe (not supported), no NVLink yet (a rate needs two readings)
    assert first[1][g.GPU_ECC_UNCORRECTED] == 2.0
    nvml.kib = 1_000_000  # KiB moved on link 0 in the second between the readings
    clock.now += 1
    second = backend.sample(busy=())
    assert second[0][g.GPU_NVLINK_RX] == second[0][g.GPU_NVLINK_TX] == 1_000_000 * 1024 / 1e6


PROC_STAT = "cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 50 0 50 350 50 0 0 0 0 0\n"
PROC_STAT_LATER = "cpu  250 0 250 750 150 0 0 0 0 0\n"
MEMINFO = "MemTotal:       16000000 kB\nMemFree:         1000000 kB\nMemAvailable:    4000000 kB\n"
DISKSTATS = (
    " 252       0 vda 100 0 2000 0 50 0 4000 0 0 0 0\n"
    " 252       1 vda1 100 0 2000 0 50 0 4000 0 0 0 0\n"
    "   7       0 loop0 9 0 9000 0 9 0 9000 0 0 0 0\n"
)
NET_DEV = (
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n"
    "    lo: 999999 1 0 0 0 0 0 0 999999 1 0 0 0 0 0 0\n"
    "  eth0: 5000000 10 0 0 0 0 0 0 2000000 10 0 0 0 0 0 0\n"
    "veth12: 777777 1 0 0 0 0 0 0 777777 1 0 0 0 0 0 0\n"
)


def test_proc_parsers_count_physical_devices_once():
    assert n.parse_cpu(PROC_STAT) == (200, 1000)  # idle + iowait are not busy
    assert n.parse_meminfo(MEMINFO) == (12_000_000 * 1024, 16_000_000 * 1024)
    assert n.parse_diskstats(DISKSTATS, {"vda"}) == (2000 * 512, 4000 * 512)  # not the partition, not loop0
    assert n.parse_net_dev(NET_DEV) == (5_000_000, 2_000_000)  # not lo, not the container's veth


def test_node_rates_come_from_two_readings(tmp_path):
    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    (proc / "meminfo").write_text(MEMINFO)
    (proc / "diskstats").write_text(DISKSTATS)
    (proc / "net" / "dev").write_text(NET_DEV)
    (proc / "stat").write_text(PROC_STAT)
    clock = Clock()
    stats = n.NodeStats(tmp_path, proc=proc, clock=clock)
    stats.disks = {"vda"}
    first = stats.read()
    assert first[n.NODE_MEMORY_UTILIZATION] == 75.0 and n.NODE_CPU not in first
    (proc / "stat").write_text(PROC_STAT_LATER)
    (proc / "net" / "dev").write_text(NET_DEV.replace("eth0: 5000000", "eth0: 7000000"))
    clock.now += 2
    second = stats.read()
    assert second[n.NODE_CPU] == 75.0  # 300 of 400 more jiffies busy
    assert second[n.NODE_NET_RX] == 1.0 and second[n.NODE_NET_TX] == 0.0  # MB/s
    assert 0 <= second[n.NODE_DISK_SPACE] <= 100


class FakeRunner:
    def __init__(self, job_id: int, gpus: list[int], state: str) -> None:
        self.placement = make_placement(job_id=job_id, gpu_indices=gpus)
        self.state = state


def test_gpu_samples_name_the_job_that_holds_the_gpu(tmp_path):
    supervisor = SimpleNamespace(runners={"a": FakeRunner(7, [0], "running"), "b": FakeRunner(8, [1], "preparing")})
    assert gpu_owners(supervisor) == ({0: 7, 1: 8}, {0})
    sent: list = []
    outbox = SimpleNamespace(metrics=sent.append)
    collector = MetricsCollector(SimulatedBackend("n1", 3, "g2"), supervisor, outbox, 10.0, Path(tmp_path), clock=lambda: 1234.5)  # type: ignore[arg-type]
    samples = collector.sample()
    util = {s[3].get("gpu"): (s[2], s[3].get("job")) for s in samples if s[0] == g.GPU_UTILIZATION}
    assert util[0][1] == 7 and util[0][0] > 80  # running: busy
    assert util[1] == (0.0, 8)  # held while it prepares: the job's, but idle
    assert util[2] == (0.0, None)  # free: the node's
    assert {s[1] for s in samples} == {1234.5}
    assert any(s[0] == n.NODE_MEMORY_UTILIZATION and s[3] == {} for s in samples)


def test_simulated_gpus_work_as_hard_as_their_command():
    """A script that sleeps does not show 95 % and 600 W: the model follows the command's CPU use."""
    backend = SimulatedBackend("n1", 2, "g2")
    backend._sensors = g.SimulatedSensors(Clock())
    reading = backend.sample(busy={0, 1}, loads={0: 0.02, 1: 1.0})
    assert reading[0][g.GPU_UTILIZATION] <= 2 and reading[0][g.GPU_POWER] < 90 and reading[0][g.GPU_SM_CLOCK] < 400
    assert reading[1][g.GPU_UTILIZATION] >= 86 and reading[1][g.GPU_POWER] > 500
    assert reading[0][g.GPU_MEMORY_USED] > 55  # the memory it holds is held, working or not


class RunningCommand(FakeRunner):
    def __init__(self, job_id: int, gpus: list[int], pid: int) -> None:
        super().__init__(job_id, gpus, "running")
        self.command_pid, self.running_since = pid, 100.0


def test_the_collector_gives_each_gpu_the_load_of_the_command_on_it(tmp_path):
    supervisor = SimpleNamespace(runners={"sleeps": RunningCommand(7, [0], pid=11), "trains": RunningCommand(8, [1, 2], pid=22)})
    cpu = {11: 0.1, 22: 20.0}  # CPU seconds of each command's process tree after 10 s
    now = [110.0]
    collector = MetricsCollector(SimulatedBackend("n1", 4, "g2"), supervisor, SimpleNamespace(metrics=None), 10.0,  # type: ignore[arg-type]
                                 Path(tmp_path), cpu_seconds=cpu.get, monotonic=lambda: now[0])
    assert collector.command_loads() == {0: 0.01, 1: 1.0, 2: 1.0}
    # the next tick measures from the last one: the trainer went quiet
    cpu[22], now[0] = 21.0, 120.0
    assert collector.command_loads() == {0: 0.0, 1: 0.05, 2: 0.05}
    util = {s[3]["gpu"]: s[2] for s in collector.sample() if s[0] == g.GPU_UTILIZATION}
    assert util[0] < 2 and util[3] == 0.0


def test_a_process_trees_cpu_time_is_read_from_proc():
    import os

    from nodeagent.metrics import tree_cpu_seconds

    assert tree_cpu_seconds(os.getpid()) > 0
    assert tree_cpu_seconds(2**22 + 12345) is None  # no such process
