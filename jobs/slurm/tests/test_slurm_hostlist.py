"""Slurm host lists → node names in allocation order (the first is rank 0's host)."""

from __future__ import annotations

import pytest

from jobs.slurm.hostlist import HostlistError, expand


@pytest.mark.parametrize(("text", "names"), [
    ("n1", ["n1"]),
    ("n[1-2]", ["n1", "n2"]),
    ("n[1-3,7]", ["n1", "n2", "n3", "n7"]),
    ("gpu[08-11]", ["gpu08", "gpu09", "gpu10", "gpu11"]),
    ("n[1-2],login", ["n1", "n2", "login"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ("n[2,1]", ["n2", "n1"]),  # Slurm's order is kept
    ("n1,n1", ["n1"]),
    ("", []),
])
def test_it_expands_slurm_host_lists(text, names):
    assert expand(text) == names


@pytest.mark.parametrize("text", ["n[1-2", "n1-2]", "n[a-b]", "n[3-1]", "n[1-]"])
def test_it_refuses_what_is_not_a_host_list(text):
    with pytest.raises(HostlistError):
        expand(text)
