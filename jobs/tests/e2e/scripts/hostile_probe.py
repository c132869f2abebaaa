"""A hostile tenant's job: tries every way out it can think of (test_hostile_tenant.py).

Standard library only (it runs in the process runtime's Python and in a bare container image's).
Prints one line per check, `CHECK <name> REFUSED <detail>` or `CHECK <name> ESCAPED <detail>`, and
last `CHECKS DONE <count>`. Its argument is a JSON file (in the tenant's own File Storage share) of
what a curious user would know or find out on the node (paths, ports, process ids, the other
tenant's bucket and job); nothing in it is a secret.

A job runs one script: test_hostile_tenant.py uploads this file followed by
hostile_probe_network.py as one. This half holds the tally and the checks of files and processes;
that one the checks of the network (object storage, the console's services) and `main`.
"""

import contextlib
import ctypes
import fcntl
import glob
import json
import os
import signal
import sys

with open(sys.argv[1]) as targets_file:
    TARGETS = json.load(targets_file)
COUNT = 0
CONSOLE_NAMES = ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "SECRET_KEY", "FIELD_ENCRYPTION_KEY",
                 "NODEAGENT_TOKEN", "S3_ADMIN_ACCESS_KEY", "DOCKER_HOST", "POSTGRES_PASSWORD", "REDIS_PASSWORD",
                 "DJANGO_SETTINGS_MODULE", "CHANNELS_PREFIX")


def report(name, escaped, detail=""):
    global COUNT
    COUNT += 1
    detail = " ".join(str(detail).split())[:300]
    print(f"CHECK {name} {'ESCAPED' if escaped else 'REFUSED'} {detail}", flush=True)


def check(name, attempt):
    """`attempt` returns (escaped, detail); an exception it raises is a refusal (its reason)."""
    try:
        escaped, detail = attempt()
    except Exception as exc:  # the refusal is the answer: permission, missing, connection refused
        escaped, detail = False, f"{type(exc).__name__}: {exc}"
    report(name, escaped, detail)


# -- files ----------------------------------------------------------------------------------------------------
def read(path):
    with open(path, "rb") as handle:
        data = handle.read(4096)
    return True, f"read {len(data)} bytes of {path}"


def listing(path):
    names = os.listdir(path)
    return bool(names), f"{path} lists {sorted(names)[:8]}"


def write_in(directory, name="hostile-planted"):
    path = os.path.join(directory, name)
    with open(path, "w") as handle:
        handle.write("planted by another tenant\n")
    return True, f"wrote {path}"


def overwrite(path, text):
    with open(path, "w") as handle:
        handle.write(text)
    return True, f"wrote {path}"


def first_ok(*attempts):
    """Escaped when any of the attempts works; refused with every reason otherwise."""
    reasons = []
    for attempt in attempts:
        try:
            escaped, detail = attempt()
            if escaped:
                return True, detail
            reasons.append(detail)
        except Exception as exc:
            reasons.append(f"{type(exc).__name__}: {exc}")
    return False, "; ".join(reasons)


# -- processes ------------------------------------------------------------------------------------------------
def visible_pids():
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def owner_of(pid):
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("Uid:"):
                return int(line.split()[1])
    return -1


def mine(pid):
    """The number names a process of this job (in its own PID namespace), not the target."""
    try:
        return owner_of(pid) == os.getuid()
    except OSError:
        return False


def proc_of(pid, what):
    def attempt():
        if mine(pid):
            return False, f"pid {pid} here is one of this job's own processes: the target is not visible"
        if what in ("cwd", "root"):
            target = os.readlink(f"/proc/{pid}/{what}")
            names = os.listdir(f"/proc/{pid}/{what}")
            return True, f"/proc/{pid}/{what} -> {target} lists {sorted(names)[:8]}"
        return read(f"/proc/{pid}/{what}")
    return attempt


def foreign_processes():
    """Every visible process of another user: what of it can be read."""
    found = []
    for pid in visible_pids():
        try:
            if owner_of(pid) == os.getuid():
                continue
        except OSError:
            continue
        for what in ("environ", "cwd", "fd", "mem"):
            try:
                if what == "cwd":
                    os.listdir(f"/proc/{pid}/cwd")
                elif what == "fd":
                    os.listdir(f"/proc/{pid}/fd")
                else:
                    with open(f"/proc/{pid}/{what}", "rb") as handle:
                        handle.read(1)
                found.append(f"{pid}/{what}")
            except OSError:
                pass
    return bool(found), f"readable of other users' processes: {found[:10]}" if found else "none readable"


def agent_visible():
    names = []
    for pid in visible_pids():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                argv = handle.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "nodeagent/sandbox/launch.py" in argv:
            continue  # the process runtime's init of this job's own PID namespace (its spec came on stdin)
        if any(word in argv for word in ("nodeagent", "daphne", "celery", "postgres", "redis-server", "weed ")):
            names.append(f"{pid}: {argv[:80]}")
    return bool(names), f"the node's services are visible: {names[:5]}" if names else f"{len(visible_pids())} processes, none of the node's"


def signal_to(pid):
    def attempt():
        if mine(pid):
            return False, f"pid {pid} here is one of this job's own: the target is not visible"
        os.kill(pid, signal.SIGCONT)  # harmless, but a success means SIGKILL would work too
        return True, f"SIGCONT delivered to pid {pid}"
    return attempt


def signal_group(pid):
    def attempt():
        if mine(pid):
            return False, f"pid {pid} here is one of this job's own: the target is not visible"
        group = os.getpgid(pid)
        os.killpg(group, signal.SIGCONT)
        return True, f"SIGCONT delivered to process group {group}"
    return attempt


def host_mount_path():
    """The job's mount path is a directory of the node (/root): the job must find its tenant's
    share there, nothing of the node's."""
    names = set(os.listdir(TARGETS["mount_path"]))
    foreign = sorted(names - set(TARGETS["share_names"]))
    return bool(foreign), f"{TARGETS['mount_path']} holds {sorted(names)}"


def cgroup_escape():
    """Moving itself to the node's root cgroup would leave its limits and a stop's kill behind."""
    return first_ok(*(lambda p=p: overwrite(p, str(os.getpid()))
                      for p in ("/sys/fs/cgroup/cgroup.procs", "/sys/fs/cgroup/memory/cgroup.procs",
                                "/sys/fs/cgroup/pids/cgroup.procs", "/sys/fs/cgroup/unified/cgroup.procs")))


def cgroup_own_limits():
    """Its own cgroup's limits and membership are the agent's to set: raising them, or making a
    child group of its own, would undo the accounting and a stop's kill."""
    with open("/proc/self/cgroup") as handle:
        lines = handle.read().split()
    attempts = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        base = "/sys/fs/cgroup" + ("" if not controllers else f"/{controllers.split(',')[0]}")
        if not os.path.isdir(base + path):
            base = "/sys/fs/cgroup"
        for name in ("memory.max", "memory.limit_in_bytes", "pids.max", "cpu.max", "cgroup.subtree_control"):
            target = os.path.join(base + path, name)
            attempts.append(lambda t=target: overwrite(t, "max"))
        attempts.append(lambda d=base + path: (os.mkdir(os.path.join(d, "hostile")), (True, f"made a child of {d}"))[1])
    return first_ok(*attempts)


def raw_devices():
    candidates = ["/dev/mem", "/dev/kmem", "/dev/port", "/dev/kmsg"] + sorted(glob.glob("/dev/[sv]d?") + glob.glob("/dev/nvme?n?"))
    def open_one(path):
        os.close(os.open(path, os.O_RDONLY))
        return True, f"opened {path}"
    return first_ok(*(lambda p=p: open_one(p) for p in candidates))


def inherited_fds():
    """Descriptors beyond stdin, stdout and stderr came from whoever started the job (the agent,
    the launcher, the engine): a socket of the agent's or a file of its state would be a way in."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        if int(name) <= 2:
            continue
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # the directory listing's own descriptor, closed meanwhile
        if not target.startswith("/proc/") or not target.endswith("/fd"):
            found.append(f"{name} -> {target}")
    return bool(found), f"inherited {found}" if found else "only stdin, stdout and stderr"


def leave_daemon(marker):
    """A process that outlives the job (double fork, its own session, no descriptor of the job's):
    the test looks for it once the job has ended. Its uid goes to another placement next."""
    child = os.fork()
    if child == 0:
        os.setsid()
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(300)", marker])
        os._exit(0)
    os.waitpid(child, 0)


def plant_output_links():
    """Links in OUTPUT_DIR to the node's secrets: the agent uploads OUTPUT_DIR as root, in the
    node's view; the test looks for what they point at in the job's results."""
    output, made = os.environ["OUTPUT_DIR"], []
    with open(os.path.join(output, "result.txt"), "w") as handle:
        handle.write("bob's result\n")  # a file of its own: the test sees the upload happened
    for name, target in (("token", TARGETS["token_file"]), ("victim-secret", os.path.join(TARGETS["victim_workdir"], "secret.txt")),
                         ("victim-dir", TARGETS["victim_workdir"]), ("agent-work", TARGETS["agent_work_dir"]),
                         ("victim-share", TARGETS["victim_share"]), ("shadow", "/etc/shadow")):
        os.symlink(target, os.path.join(output, name))
        made.append(name)
    try:
        os.link(TARGETS["token_file"], os.path.join(output, "token-hardlink"))
        made.append("token-hardlink")
    except OSError:
        pass
    return made


def ptrace(pid):
    def attempt():
        if mine(pid):
            return False, f"pid {pid} here is one of this job's own: the target is not visible"
        libc = ctypes.CDLL(None, use_errno=True)
        libc.ptrace.restype = ctypes.c_long
        if libc.ptrace(16, pid, None, None) == 0:  # PTRACE_ATTACH
            libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
            return True, f"attached to pid {pid}"
        return False, f"ptrace: {os.strerror(ctypes.get_errno())}"
    return attempt


def agent_tree(work, own_job):
    """The agent's work dir as the job sees it: at most the way to its own working directory
    (the process runtime binds it back under a tmpfs); the spool, markers, warm pool and other
    jobs are what must not show."""
    found = set()
    for path, expected in ((work, {"jobs"}), (os.path.join(work, "jobs"), {str(own_job)}),
                           (os.path.join(work, "jobs", str(own_job)), {"attempt-1"}),
                           (os.path.join(work, "jobs", str(own_job), "attempt-1"), {"master"})):
        with contextlib.suppress(OSError):
            found |= {os.path.join(path, name) for name in set(os.listdir(path)) - expected}
    return bool(found), f"shows {sorted(found)[:8]}" if found else "shows at most the way to its own directory"


def steal_uid_lock():
    directory = TARGETS["uid_lock_dir"]
    names = os.listdir(directory)
    for name in names:
        fd = os.open(os.path.join(directory, name), os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True, f"locked {name}: its uid could be handed to another placement"
        except BlockingIOError:
            return True, f"opened {name} read-write (held)"
        finally:
            os.close(fd)
    return write_in(directory, "4000000.lock")
