"""Gang placement on the capacity ledger (jobs.scheduling.placement, jobs.scheduling.capacity): plain data, no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from jobs.scheduling.capacity import GpuUse, JobHold, NodeInfo, Reservation, WarmHold, build
from jobs.scheduling.decision import JobRequest, master_port
from jobs.scheduling.placement import schedule

NOW = datetime(2026, 11, 30, 14, 0, tzinfo=UTC)
GRACE = timedelta(seconds=40)
EIGHT = tuple(range(8))
ALICE, BOB, CAROL = 1, 2, 3


def node(node_id: int, server_type: str = "g2", gpus: int = 8, **fields) -> NodeInfo:
    return NodeInfo(node_id, f"node-{node_id}", server_type, tuple(range(gpus)), **fields)


def hold(node_id: int, gpus, job_id: int, owner: int = ALICE, **fields) -> JobHold:
    return JobHold(node_id, tuple(gpus), job_id, f"job-{job_id}", owner, **fields)


def warm(node_id: int, gpus, job_id: int, owner: int = ALICE, minutes_left: float = 5) -> WarmHold:
    return WarmHold(node_id, tuple(gpus), 100 + job_id, job_id, f"job-{job_id}", owner, NOW + timedelta(minutes=minutes_left))


def ledger(nodes, jobs=(), warm_holds=(), reservations=()):
    return build(nodes, jobs, warm_holds, reservations, NOW, GRACE)


def request(job_id: int, gpus: int = 1, nodes: int = 1, owner: int = BOB, **fields) -> JobRequest:
    return JobRequest(job_id, owner, fields.pop("server_type", "g2"), gpus, nodes, **fields)


# --- the ledger ----------------------------------------------------------------------------


def test_the_ledger_says_who_holds_each_gpu():
    stopped = NOW - timedelta(seconds=10)
    book = ledger(
        [node(1, unhealthy=frozenset({7}))],
        jobs=[hold(1, (0, 1), 10), hold(1, (2,), 11, stop_requested_at=stopped)],
        warm_holds=[warm(1, (3,), 12)],
    )
    uses = {i: s.use for i, s in book.node(1).gpus.items()}
    assert uses == {0: GpuUse.JOB, 1: GpuUse.JOB, 2: GpuUse.STOPPING, 3: GpuUse.WARM, 4: GpuUse.FREE,
                    5: GpuUse.FREE, 6: GpuUse.FREE, 7: GpuUse.UNHEALTHY}
    assert book.node(1).gpus[2].until == stopped + GRACE
    assert book.job_gpus(10) == {1: frozenset({0, 1})}


def test_a_stopped_jobs_placement_holds_nothing_after_the_grace():
    book = ledger([node(1)], jobs=[hold(1, EIGHT, 10, stop_requested_at=NOW - GRACE - timedelta(seconds=1))])
    assert book.node(1).indices(GpuUse.FREE) == frozenset(EIGHT)
    assert book.job_gpus(10) == {}


def test_warm_holds_end_with_their_keep_alive_and_never_cover_a_running_job():
    book = ledger([node(1)], jobs=[hold(1, (0,), 10)], warm_holds=[warm(1, (0, 1), 11), warm(1, (2,), 12, minutes_left=-1)])
    assert book.node(1).gpus[0].use is GpuUse.JOB
    assert book.node(1).gpus[1].use is GpuUse.WARM
    assert book.node(1).gpus[2].use is GpuUse.FREE


def test_the_ledger_records_a_gpu_held_twice():
    book = ledger([node(1)], jobs=[hold(1, (0, 1), 10), hold(1, (1, 2), 11)])
    assert book.conflicts == [(1, 1, (10, 11))]


# --- gang placement ------------------------------------------------------------------------


def test_it_places_a_two_node_job_on_two_distinct_nodes():
    decision = schedule([request(1, 8, 2)], ledger([node(1), node(2)]))
    assignments = decision.placed[1]
    assert {a.node_id for a in assignments} == {1, 2}
    assert all(a.gpu_indices == EIGHT for a in assignments)


def test_it_places_all_or_nothing_and_says_what_blocks_it():
    book = ledger([node(1), node(2)], jobs=[hold(2, range(5), 10, owner=ALICE)])
    decision = schedule([request(1, 8, 2)], book)
    assert decision.placed == {}
    assert decision.waiting[1] == "Waiting for 2 × g2 nodes with 8 free GPUs: 1 fits now; 5 GPUs in use by other users' jobs"


def test_it_ignores_nodes_of_another_server_type():
    decision = schedule([request(1, server_type="g3")], ledger([node(1)]))
    assert decision.waiting[1] == "Waiting for 1 × g3 node with 1 free GPU: no g3 node is registered"


def test_it_never_gives_one_gpu_to_two_jobs():
    decision = schedule([request(1, 4, owner=ALICE), request(2, 4), request(3, 4)], ledger([node(1)]))
    first, second = decision.placed[1][0].gpu_indices, decision.placed[2][0].gpu_indices
    assert set(first).isdisjoint(second)
    assert set(first) | set(second) == set(EIGHT)
    assert decision.waiting[3] == (
        "Waiting for 1 × g2 node with 4 free GPUs: 0 fit now; 4 GPUs in use by other users' jobs; "
        "4 GPUs in use by your jobs"
    )


def test_it_is_fifo_with_backfill_of_smaller_jobs():
    decision = schedule([request(1, 8, 2), request(2, 2)], ledger([node(1)]))
    assert 1 in decision.waiting
    assert decision.placed[2][0].node_id == 1


def test_a_waiting_jobs_reason_counts_what_jobs_behind_it_took_in_the_same_run():
    # the two-node job cannot fit; the backfilled jobs behind it take GPUs it would need, and its
    # reason (what it waits for until the next run) says so, for each owner in their own words
    queue = [request(1, 8, 2, owner=ALICE), request(2, 3, owner=BOB), request(3, 8, 2, owner=BOB), request(4, 2, owner=ALICE)]
    decision = schedule(queue, ledger([node(1), node(2)], jobs=[hold(2, range(4), 10, owner=CAROL)]))
    assert set(decision.placed) == {2, 4}
    assert decision.waiting[1] == (
        "Waiting for 2 × g2 nodes with 8 free GPUs: 0 fit now; 7 GPUs in use by other users' jobs; "
        "2 GPUs in use by your jobs"
    )
    assert decision.waiting[3] == (
        "Waiting for 2 × g2 nodes with 8 free GPUs: 0 fit now; 6 GPUs in use by other users' jobs; "
        "3 GPUs in use by your jobs"
    )


def test_the_first_job_in_line_gets_capacity_before_later_ones():
    decision = schedule([request(1, 8), request(2, 8)], ledger([node(1)]))
    assert list(decision.placed) == [1]
    assert 2 in decision.waiting


def test_best_fit_keeps_whole_nodes_free():
    decision = schedule([request(1, 2)], ledger([node(1), node(2)], jobs=[hold(2, range(6), 10)]))
    assert decision.placed[1][0].node_id == 2


def test_offline_cordoned_and_excluded_nodes_are_not_used_and_the_reason_says_so():
    book = ledger([node(1, online=False), node(2, cordoned=True), node(3)])
    decision = schedule([request(1, 1, 2, excluded_nodes=frozenset({3}))], book)
    assert decision.waiting[1] == (
        "Waiting for 2 × g2 nodes with 1 free GPU: 0 fit now; 1 node offline; 1 node cordoned; "
        "1 node excluded after this job's fault"
    )


# --- warm holds are a cache ----------------------------------------------------------------


def test_another_users_job_takes_warm_gpus_rather_than_wait():
    # alice's 1-GPU job ended on the only node; bob's 8-GPU job takes the whole node now
    book = ledger([node(1)], warm_holds=[warm(1, (0,), 10, owner=ALICE)])
    decision = schedule([request(1, 8, owner=BOB)], book)
    [assignment] = decision.placed[1]
    assert assignment.gpu_indices == EIGHT
    assert [h.job_id for h in assignment.takes_warm] == [10]


def test_free_gpus_are_used_before_another_users_warm_gpus():
    book = ledger([node(1)], warm_holds=[warm(1, (0,), 10, owner=ALICE)])
    [assignment] = schedule([request(1, 1, owner=BOB)], book).placed[1]
    assert assignment.gpu_indices == (1,) and assignment.takes_warm == ()


def test_a_node_that_needs_no_warm_hold_released_comes_first():
    book = ledger([node(1), node(2)], warm_holds=[warm(1, EIGHT, 10, owner=ALICE)])
    [assignment] = schedule([request(1, 8, owner=BOB)], book).placed[1]
    assert assignment.node_id == 2 and assignment.takes_warm == ()


def test_the_owner_prefers_their_warm_gpus_and_node():
    book = ledger([node(1), node(2)], warm_holds=[warm(2, (3,), 10, owner=ALICE)])
    [assignment] = schedule([request(1, 1, owner=ALICE, warm_nodes=frozenset({2}))], book).placed[1]
    assert assignment.node_id == 2 and assignment.gpu_indices == (3,)
    assert [h.job_id for h in assignment.takes_warm] == [10]


def test_warm_holds_never_make_a_job_wait():
    holds = [warm(1, (i,), 10 + i, owner=ALICE) for i in range(8)]
    decision = schedule([request(1, 2, owner=BOB), request(2, 6, owner=CAROL)], ledger([node(1)], warm_holds=holds))
    assert set(decision.placed) == {1, 2} and decision.waiting == {}


# --- spot and claims -----------------------------------------------------------------------


def test_an_on_demand_job_preempts_the_newest_spot_jobs_it_needs_and_claims_their_gpus():
    # the wedge seen on a shared cluster: spot A (older) and B (newer), 2 nodes × 4 GPUs each; C needs 2 × 8
    spot = [
        hold(n, range(4), 1, owner=ALICE, spot=True, started=1.0) for n in (1, 2)
    ] + [hold(n, range(4, 8), 2, owner=ALICE, spot=True, started=2.0) for n in (1, 2)]
    decision = schedule([request(3, 8, 2, owner=BOB)], ledger([node(1), node(2)], jobs=spot))
    assert decision.preempt == {2: 3, 1: 3}
    assert decision.claimed[3] == {1: frozenset(EIGHT), 2: frozenset(EIGHT)}
    assert decision.waiting[3] == "Waiting for 2 spot job(s) to release their GPUs (they were asked to stop)"


def test_only_as_many_spot_jobs_as_needed_are_preempted_newest_first():
    spot = [hold(1, range(4), 1, spot=True, started=1.0), hold(1, range(4, 8), 2, spot=True, started=2.0)]
    decision = schedule([request(3, 4)], ledger([node(1)], jobs=spot))
    assert decision.preempt == {2: 3}


def test_a_paused_spot_job_does_not_take_gpus_an_on_demand_job_claimed():
    spot = [hold(n, range(4, 8), 2, spot=True, started=2.0) for n in (1, 2)]
    # C (on-demand) claims everything; spot A, waiting to resume, fits the free half but must not take it
    decision = schedule([request(3, 8, 2), request(1, 4, 2, owner=ALICE, spot=True)], ledger([node(1), node(2)], jobs=spot))
    assert 1 not in decision.placed and 3 in decision.claimed
    assert decision.waiting[1].startswith("Waiting for 2 × g2 nodes with 4 free GPUs: 0 fit now")


def test_stopping_gpus_are_claimed_in_priority_order():
    stopping = [hold(1, EIGHT, 9, stop_requested_at=NOW - timedelta(seconds=5))]
    decision = schedule([request(1, 8), request(2, 1)], ledger([node(1)], jobs=stopping))
    assert decision.waiting[1] == "Waiting for GPUs that stopping jobs are releasing"
    assert decision.claimed[1] == {1: frozenset(EIGHT)}
    assert 2 in decision.waiting and 2 not in decision.claimed


def test_spot_jobs_never_preempt_each_other():
    spot = [hold(1, EIGHT, 1, spot=True)]
    decision = schedule([request(2, 8, spot=True)], ledger([node(1)], jobs=spot))
    assert decision.preempt == {} and 2 in decision.waiting


# --- workspaces ----------------------------------------------------------------------------


def test_reserved_nodes_serve_only_their_workspaces_jobs():
    book = ledger([node(1), node(2)], reservations=[Reservation(1, 7, "team", ALICE)])
    decision = schedule([request(1, 8, workspace_id=7), request(2, 8, 2)], book)
    assert decision.placed[1][0].node_id == 1
    assert decision.waiting[2] == (
        "Waiting for 2 × g2 nodes with 8 free GPUs: 1 fits now; 1 node reserved by Training Workspaces"
    )


def test_a_draining_node_takes_no_new_job_of_its_workspace():
    book = ledger([node(1)], reservations=[Reservation(1, 7, "team", ALICE, draining=True)])
    assert 1 in schedule([request(1, workspace_id=7)], book).waiting


# --- admission (quotas) --------------------------------------------------------------------


class OneJobEach:
    def __init__(self) -> None:
        self.admitted: set[int] = set()

    def block(self, request: JobRequest) -> str | None:
        return "quota" if request.owner_id in self.admitted else None

    def admit(self, request: JobRequest) -> None:
        self.admitted.add(request.owner_id)


def test_admission_is_asked_in_order_and_counts_what_it_admitted():
    decision = schedule([request(1, owner=ALICE), request(2, owner=ALICE), request(3, owner=BOB)], ledger([node(1)]), OneJobEach())
    assert set(decision.placed) == {1, 3}
    assert decision.waiting == {2: "quota"}


def test_master_ports_differ_between_attempts_and_stay_below_the_ephemeral_ports():
    ports = {master_port(job, attempt) for job in range(1, 5000) for attempt in range(1, 4)}
    assert min(ports) >= 20000 and max(ports) < 32768  # Linux hands out 32768-60999 to outgoing connections
    assert min(ports) < 20100 and max(ports) > 32600  # spread over the whole range
    assert master_port(7, 1) != master_port(7, 2)
