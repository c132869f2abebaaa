"""Every rule of jobs.validation as plain unit tests: no database, each message asserted."""

from __future__ import annotations

import pytest

from jobs.scheduling.catalogue import allocations
from jobs.validation import (
    FRAMEWORK_MESSAGE,
    LEARNING_TYPE_MESSAGE,
    SERVER_TYPE_MESSAGE,
    ServerTypeInfo,
    command_error,
    image_error,
    mount_path_error,
    name_error,
    registry_errors,
    script_url_error,
    tags_error,
    validate_job,
)

G2 = ServerTypeInfo("g2", tuple(allocations("g2", "h", 8, 96, 2048)))
G3 = ServerTypeInfo("g3", tuple(allocations("g3", "b", 8, 128, 4096)))
CATALOGUE = {"g2": G2, "g3": G3}


def valid(**overrides) -> dict:
    data = {
        "name": "llama-finetune", "learning_type": "on_demand", "framework": "pytorch",
        "framework_version": "2.13.0", "failover_enabled": False, "server_type": "g2",
        "gpus_per_node": 1, "memory_gb": 256, "node_count": 1, "shm_size_gb": 64,
        "image_url": "registry.example.com:5000/team/trainer:1.0", "registry_username": "",
        "registry_password": "", "volume_mount_path": "", "script_url": "", "command": "torchrun train.py",
        "tags": [],
    }
    data.update(overrides)
    return data


def test_it_accepts_a_valid_job():
    assert validate_job(valid(), CATALOGUE) == {}


# --- name ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["abc", "a" * 63, "llama-3.1-8b", "0run", "run.9"])
def test_it_accepts_names(name):
    assert name_error(name) is None


@pytest.mark.parametrize("name", ["", "ab", "a" * 64])
def test_it_rejects_names_of_the_wrong_length(name):
    assert name_error(name) == "Enter 3 to 63 characters."


@pytest.mark.parametrize("name", ["Llama", "llama_2", "llama 2", "lláma", "abc\n", "abc/d"])
def test_it_rejects_names_with_other_characters(name):
    assert name_error(name) == "Use only lowercase letters, digits, '-' and '.'."


@pytest.mark.parametrize("name", ["-abc", "abc-", ".abc", "abc."])
def test_it_rejects_names_not_starting_and_ending_with_a_letter_or_digit(name):
    assert name_error(name) == "The name must start and end with a lowercase letter or digit."


# --- learning type, framework, failover --------------------------------------------------------

@pytest.mark.parametrize("value", ["", None, "reserved", "On-Demand"])
def test_it_rejects_an_unknown_learning_type(value):
    assert validate_job(valid(learning_type=value), CATALOGUE) == {"learning_type": LEARNING_TYPE_MESSAGE}


@pytest.mark.parametrize("value", ["", None, "tensorflow"])
def test_it_rejects_an_unknown_framework(value):
    assert validate_job(valid(framework=value), CATALOGUE) == {"framework": FRAMEWORK_MESSAGE}


def test_it_rejects_spot_with_failover():
    errors = validate_job(valid(learning_type="spot", failover_enabled=True), CATALOGUE)
    assert errors == {"failover_enabled": "Spot Training cannot be used with Job Failover"}


def test_it_accepts_spot_without_failover_and_on_demand_with_failover():
    assert validate_job(valid(learning_type="spot"), CATALOGUE) == {}
    assert validate_job(valid(failover_enabled=True), CATALOGUE) == {}


@pytest.mark.parametrize(("framework", "version", "offered"), [
    ("pytorch", "0.18.9", "2.13.0"),
    ("pytorch", "", "2.13.0"),
    ("pytorch", "2.12.1", "2.13.0"),  # the seed's torch: not offered, it does not install here
    ("deepspeed", "2.13.0", "0.18.9"),
])
def test_it_rejects_a_version_of_another_framework(framework, version, offered):
    errors = validate_job(valid(framework=framework, framework_version=version), CATALOGUE)
    assert errors == {"framework_version": f"Choose a version of the framework: {offered}."}


def test_it_accepts_every_offered_version():
    for framework, version in [("pytorch", "2.13.0"), ("deepspeed", "0.18.9")]:
        assert validate_job(valid(framework=framework, framework_version=version), CATALOGUE) == {}


def test_the_offered_versions_are_those_given_by_the_environments():
    offered = {"pytorch": ["2.13.0"], "deepspeed": ["0.19.0", "0.18.9"]}
    assert validate_job(valid(framework="deepspeed", framework_version="0.19.0"), CATALOGUE, framework_versions=offered) == {}
    errors = validate_job(valid(framework="deepspeed", framework_version="0.17.6"), CATALOGUE, framework_versions=offered)
    assert errors == {"framework_version": "Choose a version of the framework: 0.19.0, 0.18.9."}
    none = validate_job(valid(framework="deepspeed", framework_version="0.18.9"), CATALOGUE, framework_versions={"pytorch": ["2.13.0"]})
    assert none == {"framework_version": "No version of DeepSpeed is offered at the moment."}


# --- nodes and resources ----------------------------------------------------------------------

@pytest.mark.parametrize("nodes", [None, 0, -1, 65])
def test_it_rejects_a_node_count_outside_1_to_64(nodes):
    errors = validate_job(valid(node_count=nodes), CATALOGUE)
    assert errors == {"node_count": "Enter 1 to 64 nodes (distributed training from 2)."}


@pytest.mark.parametrize("nodes", [1, 2, 64])
def test_it_accepts_node_counts(nodes):
    assert validate_job(valid(node_count=nodes), CATALOGUE) == {}


@pytest.mark.parametrize("server_type", ["", "g9", None])
def test_it_rejects_a_server_type_outside_the_catalogue(server_type):
    assert validate_job(valid(server_type=server_type), CATALOGUE) == {"server_type": SERVER_TYPE_MESSAGE}


@pytest.mark.parametrize("gpus", [None, 0, 3, 16])
def test_it_rejects_gpus_per_node_the_type_does_not_offer(gpus):
    errors = validate_job(valid(gpus_per_node=gpus), CATALOGUE)
    assert errors == {"gpus_per_node": "Server type g2 offers 1, 2, 4, 8 GPUs per node."}


@pytest.mark.parametrize(("server_type", "gpus", "memory"), [
    ("g2", 1, 256), ("g2", 2, 512), ("g2", 4, 1024), ("g2", 8, 2048),
    ("g3", 1, 512), ("g3", 2, 1024), ("g3", 4, 2048), ("g3", 8, 4096),
])
def test_it_accepts_every_allocation_with_its_memory(server_type, gpus, memory):
    assert validate_job(valid(server_type=server_type, gpus_per_node=gpus, memory_gb=memory), CATALOGUE) == {}


def test_it_rejects_memory_that_does_not_go_with_the_allocation():
    errors = validate_job(valid(server_type="g3", gpus_per_node=2, memory_gb=256), CATALOGUE)
    assert errors == {"memory_gb": "2 GPU(s) on g3 come with 1024 GB of memory."}


@pytest.mark.parametrize("shm", [None, 0, 129])
def test_it_rejects_shared_memory_outside_half_the_allocation(shm):
    errors = validate_job(valid(shm_size_gb=shm), CATALOGUE)
    assert errors == {"shm_size_gb": "Shared memory must be 1 to 128 GB for this allocation."}


def test_it_accepts_shared_memory_up_to_half_the_allocation():
    assert validate_job(valid(shm_size_gb=128), CATALOGUE) == {}
    assert validate_job(valid(server_type="g3", gpus_per_node=8, memory_gb=4096, shm_size_gb=2048), CATALOGUE) == {}


# --- image and registry -----------------------------------------------------------------------

@pytest.mark.parametrize("url", [
    "ubuntu", "ubuntu:24.04", "nvcr.io/nvidia/pytorch:24.05-py3", "registry.example.com:5000/team/trainer:1.0",
    "localhost/trainer", "[::1]:5000/trainer:latest",
    "trainer@sha256:" + "a" * 64, "ghcr.io/org/img:v1@sha256:" + "0" * 64,
])
def test_it_accepts_image_references(url):
    assert image_error(url) is None


def test_it_asks_for_an_image():
    assert image_error("") == "Enter the AI Training Image URL."


@pytest.mark.parametrize("url", [
    "Ubuntu", "https://registry.example.com/trainer", "trainer:", "trainer:-x", "trainer:é",
    "trainer latest", "trainer:1.0\n", "registry.example.com/" + "a" * 250,
])
def test_it_rejects_malformed_image_references(url):
    assert image_error(url) == "Enter a valid image reference, e.g. registry.example.com:5000/team/trainer:1.0."


def test_it_accepts_no_registry_credentials_or_both():
    assert registry_errors("", "") == {}
    assert registry_errors("robot", "s3cret") == {}


def test_it_requires_a_password_with_a_user_id():
    assert registry_errors("robot", "") == {"registry_password": "Enter the registry password for this user ID."}


def test_it_requires_a_user_id_with_a_password():
    assert registry_errors("", "s3cret") == {"registry_username": "Enter the registry user ID that goes with this password."}


def test_it_rejects_registry_credentials_longer_than_their_columns():
    assert registry_errors("u" * 129, "p") == {"registry_username": "Enter a user ID of at most 128 characters."}
    assert registry_errors("u", "p" * 257) == {"registry_password": "Enter a password of at most 256 characters."}
    assert registry_errors("u" * 128, "p" * 256) == {}


# --- volume, script, command ------------------------------------------------------------------

@pytest.mark.parametrize("path", ["", "/mnt/data", "/data", "/mnt/data/"])
def test_it_accepts_absolute_mount_paths(path):
    assert mount_path_error(path) is None


def test_it_rejects_a_relative_mount_path():
    assert mount_path_error("mnt/data") == "Enter an absolute path for the File Storage mount path, e.g. /mnt/data (not 'mnt/data')."


def test_it_rejects_mounting_at_the_root():
    assert mount_path_error("/") == "File Storage cannot be mounted at the root directory; use a path such as /mnt/data."


@pytest.mark.parametrize("path", ["/mnt/../etc", "/mnt//data", "/mnt/./data", "//mnt", "//"])
def test_it_rejects_unnormalised_mount_paths(path):
    assert mount_path_error(path) == (
        "Enter a normalised absolute path without '.', '..' or '//' for the File Storage mount path, "
        f"e.g. /mnt/data (not {path!r})."
    )


def test_it_rejects_a_mount_path_longer_than_a_node_mounts():
    assert mount_path_error("/" + "a" * 255) == "The File Storage mount path may be at most 255 characters long."


@pytest.mark.parametrize(("path", "system"), [("/etc", "/etc"), ("/run/docker.sock", "/run"), ("/var", "/var/run"),
                                              ("/usr/local/lib", "/usr"), ("/proc/1", "/proc")])
def test_it_rejects_mounting_over_the_jobs_system_directories(path, system):
    """A mount path is inside the job: a tenant's share over /etc or the engine's socket path would
    stand in for the system's own files (it never names a host path either way)."""
    assert mount_path_error(path) == (
        f"{path} is a system directory of the job's own file system ({system}); mount File Storage elsewhere, e.g. /mnt/data."
    )


@pytest.mark.parametrize("path", ["/simpleai", "/simpleai/work"])
def test_it_rejects_the_platforms_own_mounts(path):
    assert mount_path_error(path) == (
        f"{path} overlaps /simpleai, which the platform mounts inside the job; mount File Storage elsewhere, e.g. /mnt/data."
    )


@pytest.mark.parametrize("url", ["", "s3://bucket/train.py", "s3://my.bucket-1/scripts/train.py"])
def test_it_accepts_script_urls(url):
    assert script_url_error(url) is None


@pytest.mark.parametrize(("url", "message"), [
    ("https://bucket/train.py", "Enter an object storage URL of the form s3://bucket/path/to/script.py."),
    ("bucket/train.py", "Enter an object storage URL of the form s3://bucket/path/to/script.py."),
    ("s3://Bucket/train.py", "The bucket name must be 3 to 63 lowercase letters, digits, '-' or '.'."),
    ("s3://ab/train.py", "The bucket name must be 3 to 63 lowercase letters, digits, '-' or '.'."),
    ("s3://bucket", "The URL must name an object (a file), not a bucket or folder."),
    ("s3://bucket/", "The URL must name an object (a file), not a bucket or folder."),
    ("s3://bucket/scripts/", "The URL must name an object (a file), not a bucket or folder."),
    ("s3://bucket/" + "k" * 1013, "Enter a URL of at most 1,024 characters."),
])
def test_it_rejects_script_urls(url, message):
    assert script_url_error(url) == message


@pytest.mark.parametrize("command", ["", "ls", "   ab   ", "x" * 1025])
def test_it_rejects_a_command_outside_3_to_1024_characters(command):
    assert command_error(command) == "Enter a command of 3 to 1,024 characters."


@pytest.mark.parametrize("command", ["abc", "x" * 1024, "torchrun --nproc-per-node 8 train.py"])
def test_it_accepts_commands(command):
    assert command_error(command) is None


# --- tags -------------------------------------------------------------------------------------

def tags(n: int) -> list[dict[str, str]]:
    return [{"key": f"k{i}", "value": f"v{i}"} for i in range(n)]


def test_it_accepts_up_to_50_tags():
    assert tags_error([]) is None
    assert tags_error(tags(50)) is None


def test_it_rejects_more_than_50_tags():
    assert tags_error(tags(51)) == "Add at most 50 tags."


@pytest.mark.parametrize("key", ["", "k" * 129])
def test_it_rejects_a_tag_key_outside_1_to_128_characters(key):
    assert tags_error([{"key": key, "value": "v"}]) == "A tag key must be 1 to 128 characters."


def test_it_accepts_edge_tag_lengths():
    assert tags_error([{"key": "k" * 128, "value": "v" * 256}, {"key": "empty", "value": ""}]) is None


def test_it_rejects_a_tag_value_over_256_characters():
    assert tags_error([{"key": "team", "value": "v" * 257}]) == "A tag value must be at most 256 characters (tag 'team')."


def test_it_rejects_duplicate_tag_keys():
    message = tags_error([{"key": "team", "value": "a"}, {"key": "team", "value": "b"}])
    assert message == "Tag keys must be unique: 'team' appears twice."


# --- validate_job as a whole -------------------------------------------------------------------

def test_it_reports_every_failing_field_at_once():
    errors = validate_job(valid(name="X", image_url="", command="", node_count=0, tags=tags(51)), CATALOGUE)
    assert set(errors) == {"name", "command", "node_count", "tags"}  # a blank image is the environment's


def test_it_checks_only_the_given_fields_when_partial():
    assert validate_job({"tags": tags(2)}, {}, partial=True) == {}
    assert validate_job({"tags": tags(51)}, {}, partial=True) == {"tags": "Add at most 50 tags."}
