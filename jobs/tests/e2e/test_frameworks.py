"""The seed's "Run Job" commands, verbatim, on two nodes in the job's training environment.

Real agents (process runtime) build or reuse the environment of the job's framework version
(jobs.environments.offered → nodeagent.envcache), and the platform's `deepspeed`/`accelerate` wrappers
join both nodes into one world without ssh. The scripts and configs lie on the job's File
Storage volume, which both nodes mount, at absolute paths as in the seed.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from jobs.models import JobAttempt, Node, TrainingEnvironment, TrainingJob
from jobs.tests.e2e.conftest import SCRIPTS
from monitoring.models import LogLine

from . import environments
from .containers import RuntimeUnderTest
from .helpers import create_job, last_lines, stream_text, wait_for_checkpoint, wait_for_status
from .stack import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

CHECKPOINT_SCRIPTS = Path(__file__).resolve().parents[3] / "nodeagent" / "tests" / "checkpoint_scripts"
VOLUME_FILES = [SCRIPTS / name for name in ("version_check.py", "train_deepspeed.py", "train_accelerate.py", "fsdp_config.yaml")]
VOLUME_FILES += [CHECKPOINT_SCRIPTS / "support.py", CHECKPOINT_SCRIPTS / "tiny_corpus.txt"]


@pytest.fixture
def volume(stack, alice) -> Path:
    """Alice's File Storage share on the nodes (both agents' --file-storage-root), holding the
    scripts and configs, with room for results. Her jobs mount it at the same path, so the test
    reads what they wrote where they wrote it (a mount path names a place inside the job: it is
    the agent that binds the tenant's share there)."""
    folder = stack.share(alice.pk)
    for path in VOLUME_FILES:
        shutil.copy(path, folder / path.name)
    return folder


def ranks_in(job_id: int, stream: str, pattern: str) -> set[int]:
    return {int(m.group(1)) for line in stream_text(job_id, stream) if (m := re.search(pattern, line))}


def run_on_two_nodes(alice, framework: str, command: str, volume: Path | str, runtime: RuntimeUnderTest | None = None,
                     timeout: float = 240, **fields) -> TrainingJob:
    """`volume`: the job's File Storage mount path (the volume's own path, or where a container mounts it)."""
    version = TrainingEnvironment.objects.get(framework=framework).version
    job = create_job(alice, f"{framework}-shape", command, node_count=2, framework=framework, framework_version=version,
                     volume_mount_path=str(volume), **fields)
    try:
        job = wait_for_status(job.pk, "Completed", "Failed", "Pending - internalerror", timeout=timeout)
    except AssertionError as error:
        if runtime is None:
            raise
        raise AssertionError(f"{error}\nprocesses in its containers:\n{runtime.processes(job.pk)}") from None
    assert job.status == "Completed", f"{job.status_reason}\n{last_lines(job.pk, 30)}"
    return job


def assert_environment_used(job: TrainingJob, name: str) -> None:
    for stream in ("master", "worker-1"):
        lines = stream_text(job.pk, stream)
        assert any(line.startswith(f"[INFO] Training environment {name}") for line in lines), (stream, lines[:12])


def test_the_seed_python_command_joins_both_nodes_in_the_pytorch_environment(alice, start_nodes, upload_script, volume, e2e_settings):
    start_nodes("node-a", "node-b")
    command = 'PYTHONPATH=$CHECKPOINT_VENDOR HF_DATASETS_OFFLINE="1" python version_check.py'

    job = run_on_two_nodes(alice, "pytorch", command, volume, script_url=upload_script("version_check.py"))

    assert_environment_used(job, "pytorch-2.13.0")
    master, worker = stream_text(job.pk, "master"), stream_text(job.pk, "worker-1")
    line = next(text for text in master if text.startswith("rank 0 of 2 on node 0"))
    # exactly the environment's set: the seed's versions, torch from local disk, no deepspeed
    for version in ("torch 2.13.0", "transformers 5.10.2", "datasets 4.8.4", "safetensors 0.8.0", "accelerate 1.13.0",
                    "numpy 2.4.6", "deepspeed absent"):
        assert version in line, line
    assert "/environments/envs/" in line  # the environment's python, not the agent's
    assert "datasets rows 5; safetensors 6; all_reduce 1" in line  # 0 + 1: both nodes in one world
    assert any(text.startswith("rank 1 of 2 on node 1") and "all_reduce 1" in text for text in worker)


def test_torchrun_joins_both_nodes(alice, start_nodes, volume, e2e_settings):
    start_nodes("node-a", "node-b")
    command = f"PYTHONPATH=$CHECKPOINT_VENDOR torchrun --nproc_per_node=2 {volume}/version_check.py"

    job = run_on_two_nodes(alice, "pytorch", command, volume)

    assert ranks_in(job.pk, "master", r"^rank (\d) of 4 .*all_reduce 6") == {0, 1}
    assert ranks_in(job.pk, "worker-1", r"^rank (\d) of 4 .*all_reduce 6") == {2, 3}


@pytest.mark.duration(50)
def test_the_seed_deepspeed_command_trains_zero3_across_both_nodes_without_ssh(alice, start_nodes, volume, e2e_settings):
    start_nodes("node-a", "node-b")
    checkpoints = volume / "ds-checkpoints"
    # one rank per node keeps the suite quick on 2 cores; the failover test below runs two per node
    command = (f"PYTHONPATH=$CHECKPOINT_VENDOR deepspeed --num_gpus=1 {volume}/train_deepspeed.py "
               f"--zero 3 --steps 4 --every 2 --output_dir {checkpoints}")

    job = run_on_two_nodes(alice, "deepspeed", command, volume)

    assert_environment_used(job, "deepspeed-0.18.9")
    assert ranks_in(job.pk, "master", r"^rank (\d) step 4 loss") == {0}
    assert ranks_in(job.pk, "worker-1", r"^rank (\d) step 4 loss") == {1}
    assert any("deepspeed: node 1 of 2, master 127.0.0.1" in line and "(no ssh)" in line for line in stream_text(job.pk, "worker-1"))
    assert any("rank 0 of 2" in line and "deepspeed 0.18.9" in line for line in stream_text(job.pk, "master"))
    # every rank's ZeRO-3 partition went into one concurrent checkpoint on the shared volume
    manifest = json.loads((checkpoints / "concurrent_checkpoint" / "step-4" / "MANIFEST.json").read_text())
    assert sorted(f["rank"] for f in manifest["files"] if f["kind"] == "shard") == [0, 1]


@pytest.mark.duration(40)
def test_the_seed_accelerate_command_trains_the_trainer_across_both_nodes(alice, start_nodes, volume, e2e_settings):
    start_nodes("node-a", "node-b")
    command = (f"PYTHONPATH=$CHECKPOINT_VENDOR accelerate launch --config_file {volume}/fsdp_config.yaml "
               f"--num_processes 4 {volume}/train_accelerate.py")

    job = run_on_two_nodes(alice, "pytorch", command, volume)

    assert ranks_in(job.pk, "master", r"^rank (\d) of 4 step 6$") == {0, 1}
    assert ranks_in(job.pk, "worker-1", r"^rank (\d) of 4 step 6$") == {2, 3}
    assert any("accelerate: machine 1 of 2" in line for line in stream_text(job.pk, "worker-1"))
    assert any("{'loss'" in line for line in stream_text(job.pk, "master"))  # the Trainer's own log (rank 0)
    committed = volume / "results" / job.name / "concurrent_checkpoint"
    assert sorted(path.name for path in committed.iterdir() if path.name.startswith("step-")) == ["step-3", "step-6"]


@pytest.mark.duration(90)
# Four ranks of DeepSpeed on two cores take about a minute to their first step beside the suite's
# other workers, and the job starts twice: three minutes in CI, over four under a heavier load.
@pytest.mark.timeout(600)
def test_a_zero3_deepspeed_job_resumes_from_its_concurrent_checkpoint_after_a_failover(alice, start_nodes, volume, e2e_settings):
    from jobs.nodes import hardware

    start_nodes("node-a", "node-b")
    command = (f"PYTHONPATH=$CHECKPOINT_VENDOR deepspeed --num_gpus=2 {volume}/train_deepspeed.py "
               "--zero 3 --steps 24 --every 4 --sleep 0.25")
    job = create_job(alice, "zero3-failover", command, framework="deepspeed", framework_version="0.18.9",
                     failover_enabled=True, volume_mount_path=str(volume))
    wait_for_status(job.pk, "Running", timeout=120)
    wait_for_checkpoint(job.pk, 8, timeout=240)
    faulty = JobAttempt.objects.get(job=job, number=1).placements.get(role="master").node_name

    hardware.inject_fault(Node.objects.get(name=faulty).pk, "xid", 0, 79)  # the GPU falls off the bus

    job = wait_for_status(job.pk, "Completed", "Failed", "Pending - internalerror", "Pending - maxretriesexceeded", timeout=240)
    assert job.status == "Completed", job.status_reason
    resumed = JobAttempt.objects.get(job=job, number=2)
    assert resumed.kind == "failover" and resumed.resume_step >= 8
    assert faulty not in set(resumed.placements.values_list("node_name", flat=True))
    second = list(LogLine.objects.filter(job_id=job.pk, stream="master", attempt=2).order_by("seq").values_list("text", flat=True))
    # both ranks read their own ZeRO-3 partition back (from object storage: the new node has no copy)
    assert {int(m.group(1)) for t in second if (m := re.match(rf"rank (\d) resumed from checkpoint step {resumed.resume_step} ", t))} == {0, 1}
    steps = [int(m.group(1)) for t in second if (m := re.match(r"rank 0 step (\d+) loss", t))]
    assert steps[0] == resumed.resume_step + 1 and steps[-1] == 24
    assert any("training finished at step 24" in t for t in second)


# -- the Docker runtime: the job's image provides the environment -------------------------------

IN_CONTAINERS = pytest.mark.parametrize("runtime", ["docker"], indirect=True)
CONTAINER_VOLUME = "/mnt/experiment"  # where a container sees its owner's File Storage share
# Alone on two cores a job below takes about two minutes (the first pull of the 1.6 GB image one
# more), three imports of DeepSpeed per node most of it; beside the suite's other workers it
# took over four minutes in CI. Its limit is generous: these tests are about what runs, not speed.
CONTAINER_JOB_SECONDS = 480


@IN_CONTAINERS
@pytest.mark.duration(120)
@pytest.mark.timeout(CONTAINER_JOB_SECONDS + 120)
def test_in_containers_the_seed_python_command_runs_in_the_framework_image(alice, start_nodes, upload_script, e2e_settings, runtime):
    start_nodes("node-a", "node-b")
    command = 'PYTHONPATH=$CHECKPOINT_VENDOR HF_DATASETS_OFFLINE="1" python version_check.py'

    job = run_on_two_nodes(alice, "deepspeed", command, CONTAINER_VOLUME, runtime, CONTAINER_JOB_SECONDS,
                           script_url=upload_script("version_check.py"),
                           **runtime.job_fields(image_url=runtime.host.frameworks_image))

    master = stream_text(job.pk, "master")
    assert any(f"provided by the job's image {runtime.host.frameworks_image}" in line for line in master)
    line = next(text for text in master if text.startswith("rank 0 of 2 on node 0"))
    for version in ("torch 2.13.0", "transformers 5.10.2", "datasets 4.8.4", "safetensors 0.8.0", "accelerate 1.13.0",
                    "numpy 2.4.6", "deepspeed 0.18.9"):
        assert version in line, line
    assert "python /usr/bin/python" in line and "all_reduce 1" in line  # the image's python, both nodes in one world
    assert any(text.startswith("rank 1 of 2 on node 1") for text in stream_text(job.pk, "worker-1"))
    assert runtime.containers(job.pk) == []


@IN_CONTAINERS
@pytest.mark.duration(130)
@pytest.mark.timeout(CONTAINER_JOB_SECONDS + 120)
def test_in_containers_the_seed_deepspeed_command_joins_both_nodes(alice, start_nodes, e2e_settings, runtime):
    start_nodes("node-a", "node-b")
    # the scripts in Alice's File Storage share, which both nodes' containers mount (as their
    # user, in her group)
    volume = runtime.share(alice)
    for path in VOLUME_FILES:
        shutil.copy(path, volume / path.name)
    command = (f"PYTHONPATH=$CHECKPOINT_VENDOR deepspeed --num_gpus=1 {CONTAINER_VOLUME}/train_deepspeed.py "
               f"--zero 3 --steps 4 --every 2 --output_dir {CONTAINER_VOLUME}/ds-checkpoints")

    job = run_on_two_nodes(alice, "deepspeed", command, CONTAINER_VOLUME, runtime, CONTAINER_JOB_SECONDS,
                           **runtime.job_fields(image_url=runtime.host.frameworks_image))

    # the streams' ends say what happened when a rank's last step is missing
    assert ranks_in(job.pk, "master", r"^rank (\d) step 4 loss") == {0}, last_lines(job.pk, 40)
    assert ranks_in(job.pk, "worker-1", r"^rank (\d) step 4 loss") == {1}, last_lines(job.pk, 40)
    assert any("deepspeed: node 1 of 2" in line and "(no ssh)" in line for line in stream_text(job.pk, "worker-1"))
    assert (volume / "ds-checkpoints" / "concurrent_checkpoint" / "step-4" / "MANIFEST.json").is_file()


# -- environments: prepared once, cached, a failure says why ------------------------------------

def small_environment(name: str, version: str) -> TrainingEnvironment:
    """A staff-made environment, removed from the agents' cache so that this run builds it."""
    from jobs.environments.offered import spec_for

    environment = TrainingEnvironment.objects.create(
        name=name, framework="pytorch", version=version, requirements="torch==2.13.0\nsafetensors==0.8.0\n",
    )
    shutil.rmtree(environments.node_cache().entry(spec_for(environment)), ignore_errors=True)
    return environment


def test_an_environment_is_prepared_once_and_the_next_job_starts_with_it_cached(alice, start_nodes, e2e_settings):
    start_nodes("node-a", "node-b")
    small_environment("pytorch-small", "2.13.0-small")
    command = "python -c 'import safetensors, sys; print(\"ready in\", sys.prefix, safetensors.__version__)'"

    first = create_job(alice, "first-job", command, node_count=2, framework_version="2.13.0-small")
    first = wait_for_status(first.pk, "Completed", "Failed", timeout=180)

    assert first.status == "Completed", first.status_reason
    streams = [stream_text(first.pk, "master"), stream_text(first.pk, "worker-1")]
    built = [s for s in streams if any("preparing it on this node for the first time" in line for line in s)]
    assert len(built) == 1  # the two agents share the machine's cache: one builds, under its lock
    builder, other = built[0], next(s for s in streams if s is not built[0])
    assert any("Successfully installed safetensors-0.8.0" in line for line in builder)  # pip's progress, in the log
    assert any("torch 2.13.0: from this node's shared layer" in line for line in builder)  # torch not reinstalled
    assert any("Environment check: torch 2.13.0+cpu, safetensors 0.8.0" in line for line in builder)
    assert any(re.search(r"Training environment pytorch-small ready \(prepared in [\d.]+ s", line) for line in builder)
    assert any("Waiting: another job on this node is preparing the training environment pytorch-small" in line for line in other)
    assert any("prepared by another job on this node meanwhile, reused" in line for line in other)
    assert any(line.startswith("ready in") and "/environments/envs/" in line and "0.8.0" in line for line in builder)

    second = create_job(alice, "second-job", command, node_count=2, framework_version="2.13.0-small")
    second = wait_for_status(second.pk, "Completed", "Failed", timeout=90)

    assert second.status == "Completed", second.status_reason
    for stream in ("master", "worker-1"):
        lines = stream_text(second.pk, stream)
        assert any("Training environment pytorch-small (PyTorch 2.13.0-small): cached on this node" in line for line in lines)
        assert not any("first time" in line or "pip" in line for line in lines)


def test_an_environment_that_cannot_be_built_fails_the_job_with_the_reason(alice, stack, start_nodes, e2e_settings):
    from jobs.models import NodeToken

    small_environment("pytorch-unbuildable", "2.13.0-offline")
    _, token = NodeToken.mint("offline-node")
    # this node cannot reach a package index: pip finds nothing but torch's local wheel
    stack.agent("offline-node", token, env={"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "/nonexistent"})
    wait_until(lambda: Node.objects.filter(name="offline-node", connected=True).exists(), timeout=30, message="the node")

    job = create_job(alice, "cannot-build", "python -c 'print(1)'", framework_version="2.13.0-offline", failover_enabled=True)
    job = wait_for_status(job.pk, "Pending - internalerror", "Failed", "Completed", timeout=120)

    assert job.status == "Pending - internalerror"  # not a hardware fault: no failover
    # the reason names the environment, not an exit code the command never produced
    assert re.search(r"training environment .*could not be prepared", job.status_reason, re.I), job.status_reason
    master = stream_text(job.pk, "master")
    error = next(line for line in master if line.startswith("[ERROR] Training environment pytorch-unbuildable could not be prepared"))
    # which step failed (the build tools come first), and pip's own words
    assert re.search(r"on node offline-node: (installing the build tools|pip install) failed \(exit code 1\): .*"
                     r"No matching distribution found for (wheel|safetensors)", error), error
    assert not any("Starting the command" in line for line in master)
