"""Gang placement (jobs.scheduling): plain data, no database."""

from jobs.scheduling import JobRequest, NodeSlot, master_port, schedule

EIGHT = tuple(range(8))


def node(node_id: int, free=EIGHT, server_type: str = "g2") -> NodeSlot:
    return NodeSlot(node_id, f"node-{node_id}", server_type, tuple(free))


def test_it_places_a_two_node_job_on_two_distinct_nodes():
    decision = schedule([JobRequest(1, "g2", 8, 2)], [node(1), node(2)])
    assignments = decision.placed[1]
    assert {a.node_id for a in assignments} == {1, 2}
    assert all(a.gpu_indices == EIGHT for a in assignments)


def test_it_places_all_or_nothing_and_says_why_the_job_waits():
    decision = schedule([JobRequest(1, "g2", 8, 2)], [node(1), node(2, free=(0, 1, 2))])
    assert decision.placed == {}
    assert decision.waiting[1] == "waiting for 2 × g2 nodes with 8 free GPUs; 1 available"


def test_it_ignores_nodes_of_another_server_type():
    decision = schedule([JobRequest(1, "g3", 1, 1)], [node(1, server_type="g2")])
    assert decision.waiting[1] == "waiting for 1 × g3 node with 1 free GPU; 0 available"


def test_it_never_gives_one_gpu_to_two_jobs():
    requests = [JobRequest(1, "g2", 4, 1), JobRequest(2, "g2", 4, 1), JobRequest(3, "g2", 4, 1)]
    decision = schedule(requests, [node(1)])
    first, second = decision.placed[1][0].gpu_indices, decision.placed[2][0].gpu_indices
    assert set(first).isdisjoint(second)
    assert set(first) | set(second) == set(EIGHT)
    assert 3 in decision.waiting


def test_it_is_fifo_with_backfill_of_smaller_jobs():
    # job 1 needs two whole nodes and only one exists; job 2 behind it fits now
    requests = [JobRequest(1, "g2", 8, 2), JobRequest(2, "g2", 2, 1)]
    decision = schedule(requests, [node(1)])
    assert 1 in decision.waiting
    assert decision.placed[2][0].node_id == 1


def test_the_first_job_in_line_gets_capacity_before_later_ones():
    requests = [JobRequest(1, "g2", 8, 1), JobRequest(2, "g2", 8, 1)]
    decision = schedule(requests, [node(1)])
    assert list(decision.placed) == [1]
    assert 2 in decision.waiting


def test_best_fit_keeps_whole_nodes_free():
    decision = schedule([JobRequest(1, "g2", 2, 1)], [node(1), node(2, free=(6, 7))])
    assert decision.placed[1][0].node_id == 2


def test_excluded_and_allowed_nodes_are_respected():
    excluded = JobRequest(1, "g2", 1, 1, excluded_nodes=frozenset({1}))
    assert schedule([excluded], [node(1), node(2)]).placed[1][0].node_id == 2
    reserved = JobRequest(2, "g2", 1, 1, allowed_nodes=frozenset({1}))
    assert schedule([reserved], [node(1, free=()), node(2)]).waiting[2].endswith("0 available")


def test_master_ports_differ_between_attempts_and_stay_in_range():
    ports = {master_port(job, attempt) for job in range(1, 50) for attempt in range(1, 4)}
    assert all(20000 <= port < 40000 for port in ports)
    assert master_port(7, 1) != master_port(7, 2)
