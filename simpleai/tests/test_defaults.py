"""What `simpleai run` fills in: a name, 1 GPU, the smallest server type with that many GPUs."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from simpleai.defaults import fill_defaults, smallest_fitting
from simpleai.errors import SimpleAIError

from .fake_console import SERVER_TYPES

TYPES = SERVER_TYPES["results"]
NOW = datetime(2026, 12, 4, tzinfo=UTC)


def test_the_cheapest_type_per_gpu_hour_that_offers_the_gpus_wins():
    assert smallest_fitting(TYPES, 1) == "g2"
    small = {**TYPES[0], "name": "g1", "gpus_per_node": 2, "on_demand_price_per_gpu_hour": "3.1000",
             "allocations": [{"name": "x", "gpus": 1, "vcpus": 1, "memory_gb": 1}, {"name": "y", "gpus": 2, "vcpus": 1, "memory_gb": 1}]}
    assert smallest_fitting([*TYPES, small], 2) == "g1"  # as cheap as g2, on a smaller node
    assert smallest_fitting([*TYPES, small], 8) == "g2"


def test_no_type_with_that_many_gpus_says_which_counts_there_are():
    with pytest.raises(SimpleAIError, match="no server type offers 3 GPUs per node: choose --gpus from 1, 2, 4, 8"):
        smallest_fitting(TYPES, 3)


def test_nothing_given_is_one_gpu_on_the_smallest_type_with_a_new_name():
    filled = fill_defaults({"command": "x"}, NOW, lambda: TYPES)
    assert filled["gpus_per_node"] == 1 and filled["server_type"] == "g2" and filled["name"].startswith("job-20261204-")
    assert filled["image_url"] == ""  # the environment's image: the process runtime needs none


def test_the_catalogue_is_not_asked_when_the_type_is_given():
    def refuse() -> list:
        raise AssertionError("asked for the server types")

    assert fill_defaults({"server_type": "g3", "name": "mine"}, NOW, refuse) == {
        "server_type": "g3", "name": "mine", "gpus_per_node": 1, "image_url": ""}


def test_a_gpu_count_the_api_will_refuse_is_left_to_it():
    assert "server_type" not in fill_defaults({"gpus_per_node": "many"}, NOW, lambda: TYPES)
