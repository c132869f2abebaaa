"""A placement says whose job it is: the node runs it in that tenant's Unix group and mounts that
tenant's File Storage share (nodeagent.jobusers, nodeagent.sandbox)."""

from __future__ import annotations

import pytest

from jobs import actions, lifecycle
from jobs.nodes import desired
from jobs.scheduling.decision import Assignment

from .factories import job_fields
from .test_nodes import make_node


@pytest.mark.django_db
def test_a_placement_names_its_job_s_owner_as_the_tenant(alice, bob):
    node = make_node("gpu-01")
    for owner in (alice, bob):
        job = actions.create_job(owner, job_fields(), [])
        lifecycle.start_attempt(job.pk, [Assignment(node.pk, node.name, (len(desired.desired_placements(node.pk)),))])
    tenants = [placement["tenant"] for placement in desired.desired_placements(node.pk)]
    assert tenants == [{"id": alice.pk, "name": alice.username}, {"id": bob.pk, "name": bob.username}]
