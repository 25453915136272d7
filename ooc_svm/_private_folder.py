"""Private folders: a folder of this user that no other user can read, write or enter,
checked on an open descriptor (never through a symbolic link in its place).

The warm server's sockets live in one (:mod:`ooc_svm.server.server_link`), and so does
numba's cache when no home folder can hold it (:mod:`ooc_svm._numba_cache`): a leaf below
both, standard library only.
"""

from __future__ import annotations

import errno
import os
import stat

#: open a folder itself, never what a symbolic link in its place points to
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def private_folder_problem(st: os.stat_result) -> str | None:
    """Why a folder with status ``st`` is not private to this process's user, or None when
    it is: a folder owned by this uid that no other user can read, write or enter."""
    if not stat.S_ISDIR(st.st_mode):
        return "not a folder"
    if st.st_uid != os.getuid():
        return f"owned by uid {st.st_uid}, not by this user (uid {os.getuid()})"
    if st.st_mode & 0o077:
        return f"mode {stat.S_IMODE(st.st_mode):04o}: other users can use it (not 0700)"
    return None


def _open_folder(path: str | os.PathLike) -> int:
    try:
        return os.open(path, _FOLDER_FLAGS)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):  # O_NOFOLLOW on a link, or a file
            raise PermissionError(f"{path}: a symbolic link or not a folder") from None
        raise


def open_private_folder(path: str | os.PathLike) -> int:
    """A descriptor of the folder ``path`` once it is known to be private to this user: not
    a symbolic link, owned by this uid, mode 0700 (checked on the open descriptor, so the
    folder cannot be swapped between the check and its use).

    Raises
    ------
    FileNotFoundError
        There is no such folder.
    PermissionError
        It is not private (the message says why); nothing in it can be trusted.
    """
    fd = _open_folder(path)
    problem = private_folder_problem(os.fstat(fd))
    if problem:
        os.close(fd)
        raise PermissionError(f"{path}: {problem}")
    return fd


def make_private_folder(path: str | os.PathLike) -> int:
    """Create the folder ``path`` with mode 0700, or take it when it already is this user's;
    a descriptor of it. A folder of this user that others can use is made 0700, and what
    others may have put in it meanwhile is removed (symbolic links, entries of other users,
    files with other hard links: a pid file written through a planted link would overwrite
    its target); a symbolic link, a file, or a folder of another user is refused (never
    changed).

    Raises
    ------
    PermissionError
        ``path`` is another user's, a symbolic link or not a folder (the message says which).
    """
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    fd = _open_folder(path)
    st = os.fstat(fd)
    problem = private_folder_problem(st)
    if problem and (not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid()):
        os.close(fd)
        raise PermissionError(f"{path}: {problem}")
    if problem:  # ours, but open to others: closed, then cleared of what others put there
        os.fchmod(fd, 0o700)
        _remove_foreign(fd)
    return fd


def _remove_foreign(fd: int) -> None:
    """Remove the entries of the folder open as ``fd`` that this user did not make: symbolic
    links, entries owned by another uid, regular files with more than one link."""
    import shutil

    for name in os.listdir(fd):
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        mode = st.st_mode
        if not (
            stat.S_ISLNK(mode)
            or st.st_uid != os.getuid()
            or (stat.S_ISREG(mode) and st.st_nlink > 1)
        ):
            continue
        if stat.S_ISDIR(mode):
            shutil.rmtree(name, dir_fd=fd)
        else:
            os.unlink(name, dir_fd=fd)
