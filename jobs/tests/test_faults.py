"""Every row of the fault classification table (jobs.recovery.faults): plain data, no database."""

import pytest

from jobs.recovery.faults import ExitEvidence, HardwareEvent, Verdict, classify, recheck


def xid(number: int, gpu: int = 3) -> HardwareEvent:
    return HardwareEvent("xid", gpu_index=gpu, xid=number)


def test_an_image_problem_is_imagepullbackoff_before_anything_else():
    decision = classify(ExitEvidence(exit_code=1, image_error=True, image_message="authentication failed for r:5055/a:1", hardware=(xid(79),)))
    assert decision.verdict is Verdict.IMAGE
    assert decision.reason == "authentication failed for r:5055/a:1"


@pytest.mark.parametrize("event", [
    HardwareEvent("gpu_lost", gpu_index=2), xid(79), HardwareEvent("gpu_missing", detail="7 of 8 GPUs visible"),
])
def test_a_lost_gpu_is_hardware(event):
    assert classify(ExitEvidence(exit_code=1, hardware=(event,))).verdict is Verdict.HARDWARE


@pytest.mark.parametrize("number", [46, 48, 62, 64, 74, 95, 119, 120, 136, 140, 143, 144, 150, 155, 156, 158])
def test_fatal_xids_are_hardware(number):
    decision = classify(ExitEvidence(signal=6, hardware=(xid(number),)))
    assert decision.verdict is Verdict.HARDWARE
    assert f"XID {number} on GPU 3" in decision.reason


@pytest.mark.parametrize("kind", ["ecc_uncorrected", "row_remap_pending", "row_remap_failure", "nvlink", "recovery_action"])
def test_memory_link_and_driver_evidence_is_hardware(kind):
    assert classify(ExitEvidence(exit_code=1, hardware=(HardwareEvent(kind, gpu_index=0),))).verdict is Verdict.HARDWARE


ECC_LINE = "RuntimeError: CUDA error: uncorrectable ECC error encountered"


def test_an_ecc_error_in_the_jobs_own_output_only_asks_for_a_second_look():
    """Any user can print this line: on its own it must not cordon a shared node."""
    decision = classify(ExitEvidence(exit_code=1, log_tail=(ECC_LINE,)))
    assert decision.verdict is Verdict.AMBIGUOUS
    assert recheck(decision, (), True, "gpu-01").verdict is Verdict.USER


def test_the_agents_evidence_confirms_what_the_output_suggested():
    decision = classify(ExitEvidence(exit_code=1, log_tail=(ECC_LINE,)))
    later = (HardwareEvent("ecc_uncorrected", gpu_index=2),)
    assert recheck(decision, later, True, "gpu-01").verdict is Verdict.HARDWARE


def test_a_job_that_prints_the_ecc_line_and_succeeds_succeeded():
    assert classify(ExitEvidence(exit_code=0, log_tail=(ECC_LINE,))).verdict is Verdict.SUCCESS


def test_xid_94_alone_is_a_contained_hardware_fault_that_counts():
    assert classify(ExitEvidence(exit_code=1, hardware=(xid(94),))).verdict is Verdict.HARDWARE


@pytest.mark.parametrize("number", [63, 92])
def test_degrading_xids_do_not_fail_a_job_over(number):
    assert classify(ExitEvidence(exit_code=1, hardware=(xid(number),))).verdict is Verdict.USER


def test_a_lost_node_is_infrastructure():
    decision = classify(ExitEvidence(node_lost=True, node_name="gpu-07"))
    assert decision.verdict is Verdict.INFRA
    assert decision.reason == "node gpu-07 stopped sending heartbeats"


@pytest.mark.parametrize(("evidence", "words"), [
    (ExitEvidence(exit_code=1, log_tail=("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB",)), "CUDA out of memory"),
    (ExitEvidence(exit_code=127, log_tail=("bash: line 1: torchrun: command not found",)), "command not found"),
    (ExitEvidence(exit_code=127), "command not found"),
    (ExitEvidence(exit_code=1, log_tail=("Traceback (most recent call last):", "ValueError: bad")), "a Python exception"),
    (ExitEvidence(exit_code=2), "the command exited with code 2"),
    (ExitEvidence(exit_code=1, hardware=(xid(13), xid(31))), "application XIDs only: XID 13 on GPU 3, XID 31 on GPU 3"),
])
def test_user_and_config_errors_are_internalerror(evidence, words):
    decision = classify(evidence)
    assert decision.verdict is Verdict.USER
    # in plain words, what the user's command did: not "no hardware fault signal: ..."
    assert decision.reason.startswith("the command ")
    assert words in decision.reason


def test_a_clean_exit_is_success():
    assert classify(ExitEvidence(exit_code=0)).verdict is Verdict.SUCCESS


def test_a_kill_without_evidence_is_looked_at_again():
    first = classify(ExitEvidence(signal=9))
    assert first.verdict is Verdict.AMBIGUOUS
    assert first.reason == "killed by SIGKILL without hardware evidence"
    again = recheck(first, (), node_alive=True, node_name="n")
    assert again.verdict is Verdict.USER
    assert again.reason == "killed by SIGKILL without hardware evidence; a second look found no hardware fault"
    assert recheck(first, (xid(79),), node_alive=True, node_name="n").verdict is Verdict.HARDWARE
    gone = recheck(first, (), node_alive=False, node_name="gpu-02")
    assert gone.verdict is Verdict.INFRA and "gpu-02 is gone" in gone.reason


def test_a_rank_whose_peer_node_is_down_is_infrastructure():
    decision = classify(ExitEvidence(exit_code=1, log_tail=("Traceback (most recent call last):",), peers_down=("gpu-04",)))
    assert decision.verdict is Verdict.INFRA
    assert decision.reason == "node gpu-04 of this job stopped answering"


def test_a_lost_peer_connection_is_looked_at_again():
    first = classify(ExitEvidence(exit_code=1, log_tail=("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer",)))
    assert first.verdict is Verdict.AMBIGUOUS
    assert recheck(first, (), node_alive=True, node_name="a", peers_down=("gpu-04",)).verdict is Verdict.INFRA
    assert recheck(first, (), node_alive=True, node_name="a").verdict is Verdict.USER
