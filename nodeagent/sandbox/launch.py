"""The placement launcher: a small init that puts one command into its sandbox and runs it.

Run by the agent as root with the agent's own interpreter, isolated from the environment
(`python -I -S nodeagent/sandbox/launch.py`; standard library only, nothing of the agent is
imported), with the launch spec on stdin, in `marshal`'s format (plain dicts, lists, strings and
numbers from the agent itself, read without an import; its fields: Jail.launch_spec in
nodeagent/sandbox/jail.py).

What it does, in order — the outer launcher joins the cgroups, unshares the namespaces and forks
the init (`main`); the init makes the job's view of the file system (`make_view`), forks the
command as the job's user (`_exec_command`) and relays signals until it ends (`_init`) — is
written down step by step in docs/operator/security.md ("How the launcher builds the sandbox").
It stays one file, with project_view.py beside it (imported by path): every job start pays for
each module it imports (the sandbox rules' tests hold both to their lists). A failure before the
command starts is printed as one line (`sandbox: …`) and ends the launcher with EXIT_SETUP_FAILED.
"""

from __future__ import annotations

# Only modules that cost nothing to import (built in, or already loaded by the interpreter's
# start) and ctypes: every job start pays for this process. `_signal`, not `signal` (which
# builds enums), and `marshal`, not `json`. Nothing may be imported lazily either: once the
# command's user is set, the standard library (under /root here) may be closed to it.
import _signal as signal  # type: ignore[import-not-found]  # no stubs: `signal`'s names, as plain ints
import ctypes
import marshal
import os
import select
import stat
import sys

EXIT_SETUP_FAILED = 125  # as `docker run` when the container could not be made
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID = 0x00020000, 0x08000000, 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
RELAYED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # outer → init → every process of the namespace
PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
# Python ignores these; an exec keeps ignored signals ignored, so the command would inherit that
RESET_TO_DEFAULT = (*RELAYED, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD)

_libc = ctypes.CDLL(None, use_errno=True)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves this directory out
from project_view import ViewFailed, lay_project, user_namespace  # type: ignore[import-not-found]  # noqa: E402  # beside this file

SetupFailed = ViewFailed  # one failure for the whole setup, the project's copy-on-write view's included


def _call(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise SetupFailed(f"{what}: {os.strerror(number)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _call(_libc.mount(_bytes(source), _bytes(target), _bytes(fstype), ctypes.c_ulong(flags), _bytes(data)),
          f"mount {source or fstype} on {target}")


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else os.fsencode(text)


# -- the outer launcher --------------------------------------------------------------------------
_report_fd: int | None = None  # the agent's pipe: "started", or "error <why>" before the command ran


def main() -> int:
    global _report_fd
    try:
        spec = marshal.loads(sys.stdin.buffer.read())
        _report_fd = spec.get("report_fd")
        _stdin_from_devnull()
        for procs in spec.get("cgroup_procs") or []:
            with open(procs, "w") as handle:
                handle.write(str(os.getpid()))
        # signals that arrive before the init exists wait here and are relayed once it does
        signal.pthread_sigmask(signal.SIG_BLOCK, RELAYED)
        if spec.get("project"):  # the init inherits the descriptor
            spec["project"]["userns"] = user_namespace(spec["uid"], spec["gid"])
        _call(_libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC), "unshare the mount, PID and IPC namespaces")
    except (OSError, ValueError, SetupFailed) as exc:
        return _setup_failed(exc)
    reader, writer = os.pipe()
    init = os.fork()
    if init == 0:
        os.close(reader)
        os._exit(_init(spec, writer))
    os.close(writer)
    if _report_fd is not None:
        os.close(_report_fd)  # the init's to close: the agent reads until then
    for number in RELAYED:
        signal.signal(number, lambda received, _frame: _relay(init, received))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, RELAYED)
    _, status = os.waitpid(init, 0)
    with os.fdopen(reader, "rb") as pipe:
        ended = pipe.read().decode().split()
    if len(ended) == 2 and ended[0] == "signal":
        return _die_of(int(ended[1]))
    if len(ended) == 2 and ended[0] == "exit":
        return int(ended[1])
    if os.WIFSIGNALED(status):  # the init itself was killed (SIGKILL through the cgroup)
        return _die_of(os.WTERMSIG(status))
    return os.waitstatus_to_exitcode(status)


def _relay(init: int, number: int) -> None:
    try:
        os.kill(init, number)
    except ProcessLookupError:
        pass


def _die_of(number: int) -> int:
    """End this process by the signal that ended the command (a core dump is not this process's)."""
    if number not in (signal.SIGKILL, signal.SIGSTOP):  # their disposition cannot be changed
        signal.signal(number, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [number])
    os.kill(os.getpid(), number)
    return 128 + number  # a signal this process cannot die of (none that ends a command)


def _stdin_from_devnull() -> None:
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)


def _setup_failed(exc: BaseException) -> int:
    _report(f"error {exc}")
    return EXIT_SETUP_FAILED


def _report(text: str) -> None:
    """Tell the agent whether the command started (once; then the pipe is closed)."""
    global _report_fd
    if _report_fd is None:
        print(f"sandbox: {text}", file=sys.stderr, flush=True)
        return
    try:
        os.write(_report_fd, text.encode(errors="replace"))
        os.close(_report_fd)
    except OSError:
        pass
    _report_fd = None


# -- the init (PID 1 of the namespace) -----------------------------------------------------------
def _init(spec: dict, status_pipe: int) -> int:  # type: ignore[type-arg]
    try:
        _call(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
        if _reader_gone(status_pipe):  # the outer launcher died before the line above
            return EXIT_SETUP_FAILED
        make_view(spec)
    except (OSError, SetupFailed, KeyError, TypeError, ValueError) as exc:
        return _setup_failed(exc)
    for number in RELAYED:
        signal.signal(number, _to_every_process)
    exec_reader, exec_writer = os.pipe2(os.O_CLOEXEC)  # closed by a successful exec, else the reason
    command = os.fork()
    if command == 0:
        os.close(status_pipe)
        os.close(exec_reader)
        _exec_command(spec, exec_writer)  # does not return
    os.close(exec_writer)
    failed = _read_all(exec_reader)
    _report(f"error {failed}" if failed else "started")
    # from here on a stop reaches the command itself (before, its signals waited here)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, RELAYED)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:  # cannot happen while the command lives; be safe
            status = 0
            break
        if pid == command:
            break
    if os.WIFSIGNALED(status):
        _tell(status_pipe, f"signal {os.WTERMSIG(status)}")
        return 128 + os.WTERMSIG(status)
    code = os.waitstatus_to_exitcode(status)
    _tell(status_pipe, f"exit {code}")
    return code


def _read_all(descriptor: int) -> str:
    chunks = []
    while chunk := os.read(descriptor, 4096):
        chunks.append(chunk)
    os.close(descriptor)
    return b"".join(chunks).decode(errors="replace")


def _tell(status_pipe: int, text: str) -> None:
    try:
        os.write(status_pipe, text.encode())
    except OSError:  # the outer launcher is gone: the kernel ends this namespace in a moment
        pass


def _reader_gone(pipe: int) -> bool:
    """The outer launcher (which holds the pipe's other end) has died. getppid() cannot say:
    the parent of a namespace's PID 1 lies outside it and reads as 0."""
    poller = select.poll()
    poller.register(pipe, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def _to_every_process(number: int, _frame: object) -> None:
    try:
        os.kill(-1, number)  # from PID 1: every process of the namespace but itself
    except ProcessLookupError:
        pass


def _exec_command(spec: dict, failed: int) -> None:  # type: ignore[type-arg]
    """In the init's child: become the job, then `bash -c COMMAND`; a failure is written to
    `failed` (the exec closes it on success)."""
    try:
        os.setsid()
        os.setgroups([])
        os.setresgid(spec["gid"], spec["gid"], spec["gid"])
        os.setresuid(spec["uid"], spec["uid"], spec["uid"])
        _call(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
        os.umask(0o007)
        os.chdir(spec["cwd"])
        for number in RESET_TO_DEFAULT:
            signal.signal(number, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        os.closerange(3, failed)
        os.closerange(failed + 1, 65536)
        _exec_bash(spec["command"], spec["env"])
    except BaseException as exc:  # whatever it is, this child must never return into the init's code
        try:
            os.write(failed, str(exc).encode(errors="replace") or b"unknown error")
        except BaseException:
            pass
    os._exit(EXIT_SETUP_FAILED)


def _exec_bash(command: str, env: dict) -> None:  # type: ignore[type-arg]
    """`bash -c COMMAND`, bash found on the command's PATH (os.execvpe, without its imports)."""
    error: OSError = FileNotFoundError("bash is not on the command's PATH")
    for folder in (env.get("PATH") or os.defpath).split(":"):
        try:
            os.execve(os.path.join(folder or ".", "bash"), ["bash", "-c", command], env)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:  # e.g. not executable by the job's user: try the next, say this one
            error = exc
    raise error


# -- the job's view of the file system -------------------------------------------------------------
def make_view(spec: dict) -> None:  # type: ignore[type-arg]
    uid, gid = spec["uid"], spec["gid"]
    given = [path for path in spec.get("readable") or [] if os.path.exists(path)] + list(spec.get("writable") or [])
    readable = [os.path.realpath(path) for path in spec.get("readable") or [] if os.path.exists(path)]
    writable = [os.path.realpath(path) for path in spec.get("writable") or []]
    # a symbolic link on the way (a venv's .venv → elsewhere) must still resolve in the job's view
    links = dict(link for path in given for link in links_on_the_way(path))
    share = spec.get("share")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing of what follows reaches the node
    if spec.get("project"):  # before the descriptors below: they then hold the overlay
        lay_project(spec["project"]["lower"], spec["cwd"], spec["project"]["scratch"], spec["project"]["userns"])
    needed = sorted(set(readable) | set(writable), key=_depth)
    # descriptors first: the covers below hide the paths they are opened by
    held = {path: os.open(path, os.O_PATH | os.O_CLOEXEC) for path in needed}
    share_source = os.open(share["source"], os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) if share else None
    private = [path for path in PRIVATE_DIRS if os.path.isdir(path) and not os.path.islink(path)]
    walls = {wall for path in [*needed, *links] if (wall := first_wall(path, uid, gid)) is not None}
    covers = outermost(set(private) | walls)
    for cover in sorted(covers, key=_depth):
        options = "mode=1777" if cover in private else "mode=755"
        if cover == "/dev/shm" and spec.get("shm_bytes"):
            options += f",size={int(spec['shm_bytes'])}"
        _mount("tmpfs", cover, "tmpfs", MS_NOSUID | MS_NODEV, options)
    read_only = set(readable) - set(writable)
    for path in needed:
        hidden = any(_inside(path, cover) for cover in covers)
        if hidden:
            _mount_point(path, stat.S_ISDIR(os.fstat(held[path]).st_mode))
        # a writable path inside a read-only one (a requirements overlay in the environment cache)
        # needs a mount of its own, or it is read-only with its parent's
        under_read_only = any(_inside(path, other) for other in read_only if other != path)
        if hidden or path in read_only or under_read_only:
            _mount(f"/proc/self/fd/{held[path]}", path, None, MS_BIND | MS_REC)
        if path in read_only:
            _mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    for descriptor in held.values():
        os.close(descriptor)
    for link, target in sorted(links.items(), key=lambda item: _depth(item[0])):
        if any(_inside(link, cover) for cover in covers) and not os.path.lexists(link):
            os.makedirs(os.path.dirname(link), mode=0o755, exist_ok=True)
            os.symlink(target, link)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    if share is not None and share_source is not None:
        mount_point = _open_mount_point(share["target"])
        try:
            _mount(f"/proc/self/fd/{share_source}", f"/proc/self/fd/{mount_point}", None, MS_BIND)
            _mount(None, share["target"], None, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV)
        finally:
            os.close(mount_point)
            os.close(share_source)


def first_wall(path: str, uid: int, gid: int) -> str | None:
    """The outermost directory above `path` that the user `uid` (group `gid`, no others) could
    not pass, or None when every one lets it through."""
    current = "/"
    for part in [p for p in path.split("/") if p][:-1]:
        current = os.path.join(current, part)
        try:
            found = os.stat(current)
        except OSError:
            return None  # a path that is not there: the bind below reports it
        if not _may_pass(found, uid, gid):
            return current
    return None


def _may_pass(found: os.stat_result, uid: int, gid: int) -> bool:
    if found.st_uid == uid:
        return bool(found.st_mode & stat.S_IXUSR)
    if found.st_gid == gid:
        return bool(found.st_mode & stat.S_IXGRP)
    return bool(found.st_mode & stat.S_IXOTH)


def links_on_the_way(path: str, limit: int = 40) -> list[tuple[str, str]]:
    """(link, its target) for each symbolic link met while resolving the absolute `path`, each
    link named by its directory's real path."""
    found: list[tuple[str, str]] = []
    pending = [part for part in path.split("/") if part not in ("", ".")]
    current = "/"
    while pending and len(found) < limit:
        part = pending.pop(0)
        if part == "..":
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, part)
        if os.path.islink(candidate):
            target = os.readlink(candidate)
            found.append((candidate, target))
            pending = [p for p in target.split("/") if p not in ("", ".")] + pending
            if target.startswith("/"):
                current = "/"
        else:
            current = candidate
    return found


def outermost(paths: set[str]) -> set[str]:
    """Those of `paths` that lie inside no other of them."""
    return {path for path in paths if not any(other != path and _inside(path, other) for other in paths)}


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _depth(path: str) -> int:
    return path.rstrip("/").count("/")


def _mount_point(path: str, directory: bool) -> None:
    """Make `path` (and the directories above it) on a cover's tmpfs, to bind the real one on."""
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    if directory:
        os.makedirs(path, mode=0o755, exist_ok=True)
    elif not os.path.exists(path):
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))


def _open_mount_point(path: str) -> int:
    """An O_PATH descriptor of the directory `path`, made if missing, reached one name at a time
    without following a symbolic link: the share can never land anywhere else."""
    current = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in [p for p in path.split("/") if p]:
            if part in (".", ".."):
                raise SetupFailed(f"the File Storage mount path {path} is not a plain absolute path")
            try:
                nxt = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=current)
            except FileNotFoundError:
                os.mkdir(part, 0o755, dir_fd=current)
                nxt = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=current)
            except (NotADirectoryError, OSError) as exc:
                raise SetupFailed(f"the File Storage mount path {path} passes {part!r}, which is not a directory "
                                  f"(a file or a symbolic link) on this node: {exc.strerror}") from exc
            os.close(current)
            current = nxt
        return current
    except BaseException:
        os.close(current)
        raise


if __name__ == "__main__":
    sys.exit(main())
