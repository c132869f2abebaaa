"""Slurm's job completion records (jobcomp/filetxt): the exit codes and run outcomes the console trusts."""

from __future__ import annotations

from jobs.slurm import jobcomp

FAILED = ("JobId=1 UserId=nobody(65534) GroupId=nogroup(65534) Name=t1 JobState=FAILED Partition=ondemand "
          "TimeLimit=UNLIMITED StartTime=2026-11-30T19:08:32 EndTime=2026-11-30T19:08:40 NodeList=n[1-2] NodeCnt=2 "
          "ProcCnt=2 WorkDir=/tmp/slx/work ReservationName= Tres=cpu=2,mem=4000M,node=2,billing=2 Account= QOS= "
          "WcKey= Cluster=unknown SubmitTime=2026-11-30T19:08:31 EligibleTime=2026-11-30T19:08:31 "
          "DerivedExitCode=0:0 ExitCode=7:0 ")
PREEMPTED = FAILED.replace("JobId=1 ", "JobId=8 ").replace("JobState=FAILED", "JobState=PREEMPTED").replace("ExitCode=7:0", "ExitCode=0:15")
RESUMED = PREEMPTED.replace("JobState=PREEMPTED", "JobState=COMPLETED").replace("ExitCode=0:15", "ExitCode=0:0")


def test_it_reads_the_state_exit_code_nodes_and_times_of_a_record():
    record = jobcomp.parse_line(FAILED)
    assert record.job_id == 1 and record.state == "FAILED"
    assert (record.exit_code, record.exit_signal) == (7, 0)
    assert record.nodes == ("n1", "n2")
    assert (record.end - record.start).total_seconds() == 8


def test_a_requeued_job_has_one_record_per_run_in_order():
    records = jobcomp.parse([FAILED, PREEMPTED, "garbage line", RESUMED], [8])
    assert [r.state for r in records[8]] == ["PREEMPTED", "COMPLETED"]
    assert records[8][0].exit_signal == 15
    assert 1 not in records


def test_a_missing_file_means_no_records_yet(tmp_path):
    assert jobcomp.read(str(tmp_path / "absent.txt"), [1]) == {}


def test_it_reads_the_file(tmp_path):
    path = tmp_path / "jobcomp.txt"
    path.write_text(FAILED + "\n" + PREEMPTED + "\n")
    assert [r.job_id for rs in jobcomp.read(str(path), [1, 8]).values() for r in rs] == [1, 8]


def test_lines_that_are_no_records_are_ignored():
    assert jobcomp.parse_line("") is None
    assert jobcomp.parse_line("JobId=abc JobState=FAILED") is None
    assert jobcomp.parse_line("JobId=3 Name=x") is None


def test_a_growing_file_is_read_from_where_the_last_read_stopped(tmp_path):
    path = tmp_path / "jobcomp.txt"
    follower = jobcomp.Follower(str(path))
    assert follower.records_for([8]) == {}
    path.write_text(PREEMPTED + "\n" + RESUMED[:40])  # slurmctld is still writing the second line
    assert [r.state for r in follower.records_for([8])[8]] == ["PREEMPTED"]
    with open(path, "a") as file:
        file.write(RESUMED[40:] + "\n")
    assert [r.state for r in follower.records_for([8])[8]] == ["PREEMPTED", "COMPLETED"]
    assert follower.offset == path.stat().st_size


def test_a_rotated_file_is_read_from_its_start_without_repeating_records(tmp_path):
    path = tmp_path / "jobcomp.txt"
    path.write_text(PREEMPTED + "\n")
    follower = jobcomp.Follower(str(path))
    follower.records_for([8])
    path.rename(tmp_path / "jobcomp.txt.1")
    path.write_text(PREEMPTED + "\n" + FAILED + "\n")  # copied over, then new lines
    records = follower.records_for([1, 8])
    assert [r.state for r in records[8]] == ["PREEMPTED"] and [r.state for r in records[1]] == ["FAILED"]
