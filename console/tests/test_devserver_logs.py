"""`make run` keeps its final box on screen: the processes' output (daphne's access log, Celery's
and the agents' lines, warnings) goes to one file each under .run/logs/, which the box names;
a process that dies has the end of its file printed."""

from __future__ import annotations

import sys

from console import devserver
from console.banner import ready_banner

NOISY = "import sys; print('GET /jobs/ 200'); print('WARNING garbage collection paused', file=sys.stderr); sys.exit(3)"


def test_a_processs_output_goes_to_its_log_file_not_the_terminal(tmp_path, capfd):
    sup = devserver.Supervisor(grace=5, log_dir=tmp_path / "logs")
    sup.start("daphne", [sys.executable, "-c", NOISY], {"PATH": "/usr/bin"})
    sup.children[0].process.wait()
    log = (tmp_path / "logs" / "daphne.log").read_text()
    assert "GET /jobs/ 200" in log and "WARNING garbage collection paused" in log
    terminal = capfd.readouterr()
    assert "GET /jobs/" not in terminal.out + terminal.err


def test_a_process_that_dies_stops_everything_and_its_last_lines_are_printed(tmp_path, capfd):
    sup = devserver.Supervisor(grace=5, log_dir=tmp_path / "logs")
    sup.start("celery-worker", [sys.executable, "-c", NOISY], {"PATH": "/usr/bin"})
    assert sup.wait() == 1
    out = capfd.readouterr().out
    assert "celery-worker exited with code 3; stopping everything." in out
    assert f"The last lines of {tmp_path / 'logs' / 'celery-worker.log'}:" in out
    assert "  WARNING garbage collection paused" in out


def test_the_box_says_where_the_logs_are():
    text = ready_banner("http://127.0.0.1:8000/", "Created administrator 'admin'", {}, storage_is_local=False,
                        log_dir=".run/logs")
    assert "Logs          .run/logs/  (one file a process: daphne, celery-*, local-node-*)" in text
    assert "tail -f .run/logs/*.log" in text


def test_make_run_sends_its_processes_output_to_run_logs():
    assert devserver.LOG_DIR == devserver.RUN_DIR / "logs"
    assert devserver._shown(devserver.LOG_DIR) == ".run/logs"
