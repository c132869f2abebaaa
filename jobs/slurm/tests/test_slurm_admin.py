"""Staff register a Slurm cluster in the admin; its secrets are write-only; "check connection" asks the real one."""

from __future__ import annotations

import base64
import io

import pytest

from jobs.models import ServerType
from jobs.slurm.models import SlurmCluster

pytestmark = pytest.mark.django_db
ADD = "/admin/slurm/slurmcluster/add/"
KEY = bytes(range(32))


def form(**overrides) -> dict:
    data = {
        "name": "hpc", "server_type": ServerType.objects.get(name="g3").pk, "enabled": "on",
        "rest_url": "http://slurm-head:6820", "api_version": "v0.0.38", "user_name": "simpleai",
        "on_demand_partition": "gpu", "spot_partition": "gpu-spot", "gpus_per_node": "8",
        "console_url": "http://console:8000", "launcher": "/opt/simpleai/.venv/bin/python -m nodeagent.slurm_step",
        "work_dir": "/var/tmp/simpleai", "jobcomp_path": "/var/log/slurm/jobcomp.txt", "stop_grace_seconds": "30",
        "gpu_metrics": "auto", "metrics_interval_seconds": "10", "jwt_key": base64.b64encode(KEY).decode(), "token": "",
        "default_time_limit_minutes": "1440", "max_time_limit_minutes": "10080",
        # the Slurm accounts inline: none
        "accounts-TOTAL_FORMS": "0", "accounts-INITIAL_FORMS": "0", "accounts-MIN_NUM_FORMS": "0", "accounts-MAX_NUM_FORMS": "1000",
    }
    data.update(overrides)
    return data


def test_staff_register_a_cluster_and_the_key_is_stored_encrypted_and_never_shown(staff_client):
    response = staff_client.post(ADD, form())
    assert response.status_code == 302, response.content.decode()[-2000:]
    cluster = SlurmCluster.objects.get(name="hpc")
    assert cluster.server_type.name == "g3" and cluster.gpus_per_node == 8
    assert base64.b64encode(KEY).decode() not in cluster.jwt_key_encrypted
    assert cluster.token().count(".") == 2  # a JWT minted with the key, for the service user
    page = staff_client.get(f"/admin/slurm/slurmcluster/{cluster.pk}/change/").content.decode()
    assert base64.b64encode(KEY).decode() not in page and cluster.jwt_key_encrypted not in page


def test_a_token_instead_of_the_key_is_used_as_given(staff_client):
    staff_client.post(ADD, form(jwt_key="", token=" eyJ.static.token "))
    assert SlurmCluster.objects.get(name="hpc").token() == "eyJ.static.token"


def test_saving_without_retyping_the_secret_keeps_it(staff_client):
    staff_client.post(ADD, form())
    cluster = SlurmCluster.objects.get(name="hpc")
    before = cluster.jwt_key_encrypted
    response = staff_client.post(f"/admin/slurm/slurmcluster/{cluster.pk}/change/", form(jwt_key="", user_name="svc2"))
    assert response.status_code == 302
    cluster.refresh_from_db()
    assert cluster.user_name == "svc2" and cluster.jwt_key_encrypted == before


@pytest.mark.parametrize(("overrides", "message"), [
    ({"jwt_key": "", "token": ""}, "Give either the JWT signing key or a token for the service user."),
    ({"jwt_key": "not base64!"}, "The JWT key must be the key file in base64"),
    ({"gpus_per_node": "4"}, "Server type g3 offers allocations of up to 8 GPUs per node"),
    ({"spot_partition": "gpu"}, "Spot work needs its own, preemptible partition."),
    ({"launcher": "python 'unbalanced"}, "Not a command line"),
    ({"api_version": "v0.0.41"}, "Select a valid choice"),
    ({"extra_sbatch_options": "--mem=10G"}, "--mem is set by the console from the job itself"),
    ({"default_time_limit_minutes": "20000"}, "The default time limit is longer than the maximum."),
])
def test_a_cluster_registration_that_cannot_work_is_refused_with_a_reason(staff_client, overrides, message):
    response = staff_client.post(ADD, form(**overrides))
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not SlurmCluster.objects.exists()


def test_a_server_type_is_served_by_one_cluster_at_most(staff_client):
    staff_client.post(ADD, form())
    response = staff_client.post(ADD, form(name="second"))
    assert "Slurm cluster with this Server type already exists." in response.content.decode()


def test_users_who_are_not_staff_cannot_see_clusters(alice_client):
    response = alice_client.get("/admin/slurm/slurmcluster/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def check(client, cluster: SlurmCluster) -> str:
    """Run the admin action on `cluster`; returns the message it left."""
    page = client.post("/admin/slurm/slurmcluster/", {"action": "check_connection", "_selected_action": [cluster.pk]}, follow=True)
    return [str(m) for m in page.context["messages"]][-1]


@pytest.mark.slow
def test_check_connection_asks_the_real_cluster_for_its_version_and_partitions(staff_client, idle_slurm):
    response = staff_client.post(ADD, form(rest_url=idle_slurm.rest_url, user_name=idle_slurm.job_user,
                                           jwt_key=base64.b64encode(idle_slurm.jwt_key).decode(),
                                           on_demand_partition="ondemand", spot_partition="spot"))
    assert response.status_code == 302
    good = SlurmCluster.objects.get()

    assert check(staff_client, good) == "hpc: Slurm 22.05.8 answers; partitions found"
    good.refresh_from_db()
    assert good.slurm_version == "22.05.8" and good.last_error == ""

    SlurmCluster.objects.update(spot_partition="nosuch")
    assert check(staff_client, good) == "hpc: Slurm 22.05.8 answers, but there is no partition nosuch (Slurm has ondemand, spot)"

    SlurmCluster.objects.update(rest_url="http://127.0.0.1:9")
    assert check(staff_client, good).startswith("hpc: slurmrestd at http://127.0.0.1:9 is unreachable")


@pytest.mark.slow
def test_the_management_command_registers_and_checks_a_cluster(idle_slurm, tmp_path):
    from django.core.management import CommandError, call_command

    key = tmp_path / "jwt.key"
    key.write_bytes(idle_slurm.jwt_key)
    out = io.StringIO()
    call_command("slurm_cluster", "add", "hpc", "--server-type", "g3", "--rest-url", idle_slurm.rest_url,
                 "--user", idle_slurm.job_user, "--jwt-key-file", str(key), "--on-demand-partition", "ondemand",
                 "--spot-partition", "spot", "--gpus-per-node", "8", "--console-url", "http://console:8000",
                 "--jobcomp-path", str(idle_slurm.jobcomp), "--gpu-type", "b300", stdout=out)

    assert out.getvalue().splitlines() == ["registered Slurm cluster hpc for server type g3",
                                           "hpc: Slurm 22.05.8 answers; partitions found"]
    assert SlurmCluster.objects.get().gpu_type == "b300"
    SlurmCluster.objects.update(rest_url="http://127.0.0.1:9")
    with pytest.raises(CommandError, match="hpc: slurmrestd at http://127.0.0.1:9 is unreachable"):
        call_command("slurm_cluster", "check", "hpc")
    with pytest.raises(CommandError, match="spot_partition: Spot work needs its own, preemptible partition."):
        call_command("slurm_cluster", "add", "second", "--server-type", "g2", "--rest-url", "http://x:6820", "--user", "u",
                     "--token", "t", "--on-demand-partition", "p", "--spot-partition", "p", "--gpus-per-node", "8",
                     "--console-url", "http://c:8000", "--jobcomp-path", "/j")
