"""Run a command as another user, from root, with the paths it needs reachable where they are.

Run as ``python -I as_user.py UID NEEDED_JSON -- COMMAND...`` by root. Why: a test that drops
root's privileges (to uid 65534) must not depend on where the checkout, the virtualenv or the
interpreter sit. A clone under ``mktemp -d`` (mode 0700), a home directory (0750 on current
Ubuntu) or a pyenv under ``/root`` (0700) cannot be entered by that user, so the command could not
even open its script. This script enters a mount namespace of its own, covers each directory on
the way to a needed path that the user may not enter with an empty tmpfs (mode 0755), binds what
lies on the way back into it (the needed path itself, at its own path), then becomes UID (gid
UID, no supplementary groups) and execs COMMAND. Nothing is copied, the host's directories keep
their modes, and the mounts end with the namespace. A needed file that the user may not read by
its own mode (a checkout made under umask 077) stays unreadable: then nothing runs, and the exit
status is `CANNOT` with the files named on stderr.

NEEDED_JSON is a list of paths (files or directories; for a file, its directory is made
reachable, and for a symlink also its target's). With ``[]`` the command runs as UID with
nothing made reachable: what plain ``setpriv`` would do.
"""

from __future__ import annotations

import ctypes
import json
import os
import stat
import sys

MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18
CLONE_NEWNS = 0x00020000
CANNOT = 77
"""Exit status when a needed file's own mode keeps the user out (nothing ran); stderr says which."""


def _may(st: os.stat_result, uid: int, gid: int, bits: int) -> bool:
    """Whether uid (with only gid as its group) gets `bits` (4 read, 1 search) on this inode."""
    shift = 6 if st.st_uid == uid else 3 if st.st_gid == gid else 0
    return (st.st_mode >> shift) & bits == bits


def needed_dirs(paths: list[str]) -> list[str]:
    """The directories to make reachable: each path's own (resolved), and a symlink's target's."""
    out = set()
    for path in paths:
        path = os.path.abspath(path)
        if not os.path.exists(path):
            continue
        for candidate in (path, os.path.realpath(path)):
            out.add(os.path.realpath(candidate if os.path.isdir(candidate) else os.path.dirname(candidate)))
    return sorted(out)


def plan(dirs: list[str], uid: int, gid: int) -> tuple[list[str], list[str]]:
    """``(blocked, keep)``: the directories on the way to `dirs` that uid may not enter (or, a needed
    one, read), shallowest first; and what to bind back into them once covered: the next step
    toward each needed directory, or all of a blocked needed directory's entries."""
    blocked: list[str] = []
    keep: set[str] = set()
    for target in dirs:
        parts = [p for p in target.split("/") if p]
        for i in range(1, len(parts) + 1):
            path = "/" + "/".join(parts[:i])
            st = os.stat(path)
            if _may(st, uid, gid, 5 if path == target else 1):
                continue
            if path not in blocked:
                blocked.append(path)
            if path == target:
                keep.update(os.path.join(path, name) for name in os.listdir(path))
            else:
                keep.add(path + "/" + parts[i])
    blocked.sort(key=lambda p: p.count("/"))
    return blocked, sorted(k for k in keep if k not in blocked)


def _enc(value: str | None) -> bytes | None:
    return None if value is None else value.encode()


def _mount(libc: ctypes.CDLL, src: str | None, dst: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    if libc.mount(_enc(src), _enc(dst), _enc(fstype), ctypes.c_ulong(flags), _enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {dst}: {os.strerror(err)}")


def make_reachable(dirs: list[str], uid: int, gid: int) -> None:
    """In a new mount namespace (private): cover what uid may not enter, bind the way back."""
    blocked, keep = plan(dirs, uid, gid)
    if not blocked:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    # Opened in this namespace (a bind mount takes no source from another one) and before any mount:
    # once a directory is covered, its entries have no path left.
    opened = {}
    for path in keep:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            opened[path] = ("link", os.readlink(path))
        elif stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode):
            opened[path] = ("dir" if stat.S_ISDIR(st.st_mode) else "file", os.open(path, os.O_PATH))
    os.umask(0o022)
    for path in blocked:  # shallowest first: a deeper one may lie in what a shallower one bound back
        os.makedirs(path, exist_ok=True)
        _mount(libc, "tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=755")
        for entry in (k for k in keep if os.path.dirname(k) == path):
            kind, what = opened.get(entry, (None, None))
            if kind == "link":
                os.symlink(what, entry)
            elif kind is not None:
                if kind == "dir":
                    os.mkdir(entry)
                else:
                    open(entry, "w").close()
                _mount(libc, f"/proc/self/fd/{what}", entry, None, MS_BIND | MS_REC)


def unreadable(paths: list[str], uid: int, gid: int) -> list[str]:
    """The needed files that uid may not read by their own mode (made under umask 077): no mount helps."""
    out = []
    for path in paths:
        for candidate in {os.path.abspath(path), os.path.realpath(path)}:
            if os.path.isfile(candidate) and not _may(os.stat(candidate), uid, gid, 4):
                out.append(f"{candidate} (mode {os.stat(candidate).st_mode & 0o7777:04o}, "
                           f"owner uid {os.stat(candidate).st_uid})")
    return out


def main(argv: list[str]) -> None:
    uid, needed, sep, command = int(argv[1]), json.loads(argv[2]), argv[3], argv[4:]
    if sep != "--" or not command:
        sys.exit("usage: as_user.py UID NEEDED_JSON -- COMMAND...")
    denied = unreadable(needed, uid, uid)
    if denied:
        sys.stderr.write(f"as_user: cannot be arranged: uid {uid} may not read {', '.join(denied)}\n")
        sys.exit(CANNOT)
    make_reachable(needed_dirs(needed), uid, uid)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv)
