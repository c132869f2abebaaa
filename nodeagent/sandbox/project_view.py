"""A job's project as a copy-on-write view: the node's cached tree laid under the job's working
directory with overlayfs, inside the job's own mount namespace (nodeagent/sandbox/launch.py).

    lowerdir   the cached tree (nodeagent.projects; the agent's files, root's), through an
               idmapped mount that shows root's files as the job user's: the job owns its project
               as it owned a copy (it writes, chmods, renames and deletes what it likes)
    upperdir   the job's real working directory (what the agent handed over: HOME, OUTPUT_DIR, a
               downloaded script): a name there wins over the project's, and everything the job
               writes lands there, never in the cache
    workdir    overlayfs's own scratch directory, beside the working directory (the agent's)

So a job starts on a project of any size without a per-job copy. The idmapped mount is detached
as soon as the overlay holds it (overlayfs keeps private clones of its layers): the job can reach
the cache only through the overlay, where every write is copied up into its own directory.

Needs a kernel with idmapped mounts under overlayfs (5.19+); the agent probes once (`probe`)
and copies the tree instead where it cannot. Standard library and ctypes only: the launcher
imports it by path, as root, before anything is dropped.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys

SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR = 428, 429, 442  # x86_64 and aarch64 (the common table)
OPEN_TREE_CLONE, AT_RECURSIVE, AT_EMPTY_PATH, AT_FDCWD = 1, 0x8000, 0x1000, -100
MOVE_MOUNT_F_EMPTY_PATH, MOUNT_ATTR_IDMAP, MNT_DETACH = 4, 0x00100000, 2
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x4000, 0x40000

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class ViewFailed(Exception):
    pass


def _check(result: int, what: str) -> int:
    if result < 0:
        raise ViewFailed(f"{what}: {os.strerror(ctypes.get_errno())}")
    return result


def user_namespace(uid: int, gid: int) -> int:
    """A descriptor of a user namespace whose id 0 is `uid`/`gid` on the node (what the
    idmapped mount maps root's files to). A child enters it and waits until it is read. Made
    before a new PID namespace (its /proc/<pid> must name the child)."""
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(writer)
        code = 0 if _libc.unshare(CLONE_NEWUSER) == 0 else 1
        os.read(reader, 1)  # until the parent has taken the namespace
        os._exit(code)
    os.close(reader)
    try:
        mine = os.readlink("/proc/self/ns/user")
        for _ in range(100_000):  # until the child has unshared (microseconds)
            if os.readlink(f"/proc/{child}/ns/user") != mine:
                break
        else:
            raise ViewFailed("the helper process did not enter a user namespace")
        for name, value in (("uid_map", uid), ("gid_map", gid)):
            with open(f"/proc/{child}/{name}", "w") as handle:
                handle.write(f"0 {value} 1")
        return os.open(f"/proc/{child}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise ViewFailed(f"a user namespace for the idmapped project: {exc}") from exc
    finally:
        os.close(writer)
        os.waitpid(child, 0)


def lay_project(lower: str, upper: str, scratch: str, namespace: int) -> None:
    """Mount the overlay of `lower` (shown as the job's: `namespace` from user_namespace) under
    `upper`, at `upper`, in the calling process's mount namespace (which must be private:
    nothing may propagate to the node)."""
    for path in (lower, upper, scratch):
        if any(char in path for char in ",:\\\n") or not path.startswith("/"):
            raise ViewFailed(f"{path!r} cannot be named in overlayfs options")
    tree = _check(_libc.syscall(SYS_OPEN_TREE, AT_FDCWD, os.fsencode(lower),
                                OPEN_TREE_CLONE | os.O_CLOEXEC | AT_RECURSIVE), f"open_tree {lower}")
    try:
        attr = struct.pack("QQQQ", MOUNT_ATTR_IDMAP, 0, 0, namespace)
        _check(_libc.syscall(SYS_MOUNT_SETATTR, tree, b"", AT_EMPTY_PATH | AT_RECURSIVE, attr, len(attr)),
               "an idmapped mount of the project")
        # attached over the cache's own path, in this namespace only, for overlayfs to name it
        _check(_libc.syscall(SYS_MOVE_MOUNT, tree, b"", AT_FDCWD, os.fsencode(lower), MOVE_MOUNT_F_EMPTY_PATH),
               "move_mount")
    finally:
        os.close(tree)
    try:
        # redirect_dir: a directory of the project can be renamed (else EXDEV, as across file systems)
        options = f"lowerdir={lower},upperdir={upper},workdir={scratch},redirect_dir=on"
        _check(_libc.mount(b"overlay", os.fsencode(upper), b"overlay", ctypes.c_ulong(MS_NOSUID | MS_NODEV),
                           options.encode()), f"mount the project's overlay on {upper}")
    finally:
        _check(_libc.umount2(os.fsencode(lower), MNT_DETACH), f"detach the idmapped {lower}")


def probe(base: str) -> str:
    """Whether this node can lay a project (as root): "" when it can, else why not. Lays a
    one-file project in a mount namespace of a child process, under `base` (the agent's)."""
    lower, upper, scratch = (os.path.join(base, name) for name in ("lower", "upper", "work"))
    for path in (lower, upper, scratch):
        os.makedirs(path, mode=0o700, exist_ok=True)
    with open(os.path.join(lower, "probe"), "w") as handle:
        handle.write("cache")
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(reader)
        why = ""
        try:
            _check(_libc.unshare(CLONE_NEWNS), "unshare a mount namespace")
            _check(_libc.mount(None, b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None), "make / private")
            lay_project(lower, upper, scratch, user_namespace(65534, 65534))
            if os.stat(os.path.join(upper, "probe")).st_uid != 65534:
                why = "the idmapped project is not shown as the job's"
            with open(os.path.join(upper, "probe"), "a") as handle:
                handle.write(" job")
        except (OSError, ViewFailed) as exc:
            why = str(exc) or type(exc).__name__
        os.write(writer, why.encode(errors="replace"))
        os._exit(0)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        why = pipe.read().decode()
    os.waitpid(child, 0)
    with open(os.path.join(lower, "probe")) as handle:
        if not why and handle.read() != "cache":
            why = "a write through the overlay reached the cached tree"
    return why


if __name__ == "__main__":  # python -I -S project_view.py --probe DIR (the agent, as root)
    if len(sys.argv) == 3 and sys.argv[1] == "--probe":
        print(probe(sys.argv[2]) or "ok")
    else:
        sys.exit("usage: project_view.py --probe DIR")
