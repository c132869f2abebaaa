"""Partial recovery's placement (jobs.scheduling.regang): a resumed gang keeps its healthy nodes at their
ranks, and only the failed node's rank moves. Plain data, no database."""

from __future__ import annotations

from jobs.scheduling.decision import Assignment
from jobs.scheduling.placement import schedule
from jobs.scheduling.regang import keep_ranks, prefer
from jobs.tests.test_scheduling import ledger, node, request


def test_the_healthy_nodes_are_chosen_again_and_only_the_failed_rank_moves():
    # attempt 1 ran on node-3 (rank 0) and node-1 (rank 1); node-1 failed (it is offline)
    gang = {3: 0}
    book = ledger([node(1, gpus=1, online=False), node(2, gpus=1), node(3, gpus=1), node(4, gpus=1)])
    placed = schedule([prefer(request(9, 1, 2), gang)], book).placed[9]
    assert [a.node_id for a in keep_ranks(placed, gang)] == [3, 2]  # node-3 is rank 0 still; rank 1 moved


def test_a_surviving_worker_keeps_its_rank_when_the_master_failed():
    new, kept = Assignment(5, "node-5", (0,)), Assignment(2, "node-2", (0,))
    assert keep_ranks([kept, new], {2: 1}) == [new, kept]


def test_a_first_attempt_is_placed_as_before():
    placed = [Assignment(2, "node-2", (0,)), Assignment(1, "node-1", (0,))]
    assert keep_ranks(placed, None) == placed and prefer(request(9, 1, 2), None) == request(9, 1, 2)
