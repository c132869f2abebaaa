"""What a job asks Slurm for, from its allocation and the cluster's rules: one plain function."""

from __future__ import annotations

import dataclasses

import pytest

from jobs.slurm.adapters import adapter_for
from jobs.slurm.request import Ask, Rules, duration, parse_options, resources, sbatch_line, time_limit

# g3: 8 GPUs, 128 vCPUs and 4096 GB per node; half a node is 4 GPUs, 64 vCPUs, 2048 GB
HALF = Ask(node_count=2, gpus_per_node=4, vcpus_per_node=64, memory_gb_per_node=2048, node_gpus=8, spot=False, failover=False)
WHOLE = dataclasses.replace(HALF, gpus_per_node=8, vcpus_per_node=128, memory_gb_per_node=4096)
RULES = Rules(on_demand_partition="gpu", spot_partition="gpu-spot")


def test_a_share_of_a_node_asks_for_its_memory_cpus_and_gpus_and_nothing_else():
    request = resources(HALF, RULES)
    assert request == {
        "nodes": 2, "tasks_per_node": 1, "cpus_per_task": 64, "memory_per_node": 2048 * 1024, "gres": "gpu:4",
        "partition": "gpu", "time_limit": 24 * 60, "requeue": False,
    }


def test_a_whole_node_is_exclusive_with_all_its_memory():
    request = resources(WHOLE, RULES)
    assert request["exclusive"] is True and request["memory_per_node"] == 0 and request["cpus_per_task"] == 128
    assert "--exclusive" in sbatch_line(request) and "--mem=0" in sbatch_line(request)


def test_typed_gres_constraints_qos_and_account_come_from_the_clusters_rules():
    rules = dataclasses.replace(RULES, gpu_type="b300", constraint="ib&nvlink", qos="normal", spot_qos="scavenger", account="ml")
    on_demand = resources(HALF, rules)
    assert on_demand["gres"] == "gpu:b300:4"
    assert (on_demand["constraints"], on_demand["qos"], on_demand["account"]) == ("ib&nvlink", "normal", "ml")
    spot = resources(dataclasses.replace(HALF, spot=True, account="team-a"), rules)
    assert (spot["partition"], spot["qos"], spot["account"]) == ("gpu-spot", "scavenger", "team-a")


@pytest.mark.parametrize(("spot", "failover", "requeue"), [(False, False, False), (False, True, True), (True, False, True)])
def test_requeue_exactly_when_failover_or_spot_asks_for_it(spot, failover, requeue):
    request = resources(dataclasses.replace(HALF, spot=spot, failover=failover), RULES)
    assert request["requeue"] is requeue
    # slurmrestd 22.05 ignores `requeue: false`: the adapter says no_requeue instead
    job = adapter_for("v0.0.38").submit_body("", request)["job"]
    assert ("requeue" in job, job.get("no_requeue", False)) == (requeue, not requeue)


def test_the_adapter_writes_exclusive_in_sbatchs_words():
    assert adapter_for("v0.0.38").submit_body("", resources(WHOLE, RULES))["job"]["exclusive"] == "exclusive"


def test_the_time_limit_is_the_jobs_own_or_the_clusters_default_and_never_over_the_maximum():
    rules = dataclasses.replace(RULES, default_time_minutes=60, max_time_minutes=48 * 60)
    assert resources(HALF, rules)["time_limit"] == 60
    assert resources(dataclasses.replace(HALF, time_limit_minutes=90), rules)["time_limit"] == 90
    with pytest.raises(ValueError, match=r"The time limit of 3 d is longer than this cluster allows \(2 d\)"):
        time_limit(3 * 24 * 60, rules)
    assert duration(90) == "1 h 30 min"


def test_fixed_sbatch_options_are_added_and_the_jobs_own_values_win():
    rules = dataclasses.replace(RULES, qos="normal", extra_options="--reservation=train --mail-type=END,FAIL "
                                                                   "--qos high --nice=10 -C ib")
    request = resources(HALF, rules)
    assert (request["reservation"], request["mail_type"], request["nice"]) == ("train", "END,FAIL", 10)
    assert request["qos"] == "normal" and request["constraints"] == "ib"
    assert sbatch_line(request).startswith("sbatch --reservation=train --mail-type=END,FAIL --qos=normal --nice=10 "
                                           "--constraint=ib --nodes=2 --ntasks-per-node=1 --cpus-per-task=64 ")


@pytest.mark.parametrize(("text", "message"), [
    ("--mem=10G", "--mem is set by the console from the job itself"),
    ("--partition=other", "--partition is set by the console"),
    ("--begin=now+1h", "'--begin' is not an option the console can pass to Slurm (it can: --account, "),
    ("--reservation", "--reservation needs a value"),
    ("--nice=high", "--nice takes a whole number, not 'high'"),
    ("--mail-user='unbalanced", "not a command line"),
])
def test_fixed_options_the_console_cannot_pass_are_refused_with_a_reason(text, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        parse_options(text)


def test_the_sbatch_line_says_the_whole_request():
    line = sbatch_line(resources(dataclasses.replace(HALF, time_limit_minutes=30, failover=True), RULES))
    assert line == ("sbatch --nodes=2 --ntasks-per-node=1 --cpus-per-task=64 --mem=2097152M --gres=gpu:4 "
                    "--partition=gpu --time=30 --requeue")
