"""Writing a file into a user's folder, the one way every writer of the library does it.

Cards (``README.md``, ``curves.png``), videos and their index, exports, datasets, a population's
state file and the small files of a checkpoint all go through :func:`replacing`:

* what is at the target is replaced only when it is the library's own (the writer says how to tell,
  ``ours``) or the caller passed ``overwrite=True``; anything else (a user's ``README.md``, a
  symbolic link, a directory) is refused, named, with what to do instead;
* the bytes go to a new temporary file in the same folder, created with ``O_CREAT | O_EXCL |
  O_NOFOLLOW`` under a random name (``tempfile.mkstemp``), so a link planted at a temporary name is
  never followed; the temporary file is renamed over the target once complete, and a rename replaces
  a link itself, never the file it points to. A failed write removes the temporary file and leaves
  the target as it was;
* the file gets the modes a plain ``open`` would have given it (``mkstemp`` makes ``0600``).

This module reads nothing of the library; every other module may import it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from collections.abc import Callable, Iterator

__all__ = ["check_folder", "check_replaceable", "follow_umask", "replacing", "umask", "write_text"]

Ours = Callable[[str], bool]
"""Whether an existing regular file (never a link: those are refused before) is the writer's own."""


def umask() -> int:
    """The process umask, read without changing it (``os.umask`` would, for every thread)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


_UMASK_LOCK = threading.Lock()


def follow_umask(path: str) -> None:
    """Give ``path`` (and what is in it) the modes a plain ``open``/``mkdir`` would have given:
    ``mkdtemp``/``mkstemp`` (and so every file written through them) create 0700/0600."""
    mask = umask()
    if os.path.isdir(path):
        os.chmod(path, 0o777 & ~mask)
        for name in os.listdir(path):
            os.chmod(os.path.join(path, name), 0o666 & ~mask)
    else:
        os.chmod(path, 0o666 & ~mask)


def check_replaceable(path: str, ours: Ours | None, *, overwrite: bool = False, owner: str, kind: str) -> None:
    """Raise what writing ``path`` would: ``IsADirectoryError`` for a directory there (never
    replaced), ``FileExistsError`` for a link or a file that is not ``kind`` (``ours`` says) unless
    ``overwrite``. ``ours=None``: the caller named this very file, any regular file may go."""
    if not os.path.lexists(path):
        return
    if os.path.isdir(path) and not os.path.islink(path):
        raise IsADirectoryError(f"{path}: is a directory; {owner} writes a file there. Choose another path")
    if overwrite:
        return
    if os.path.islink(path):
        what = "a symbolic link"
    elif not os.path.isfile(path):
        what = "not a regular file"
    elif ours is None or ours(path):
        return
    else:
        what = f"a file that is not {kind}"
    raise FileExistsError(
        f"{path}: exists and is {what}; {owner} replaces only {kind}. Move it or choose another folder, "
        "or pass overwrite=True to replace it"
    )


def check_folder(path: str | os.PathLike[str], *, owner: str, argument: str) -> None:
    """Raise ``NotADirectoryError`` now when the folder ``path`` (to be created and written in later)
    is a file, or lies below one: found when the run starts, not when its first file is due."""
    path = os.fspath(path)
    probe = os.path.abspath(path)
    while not os.path.lexists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        where = "is a file" if probe == os.path.abspath(path) else f"lies below {probe}, a file"
        raise NotADirectoryError(
            f"{owner} got {argument}={path!r}, which {where}, not a folder: name a folder (it is created when needed)"
        )


@contextlib.contextmanager
def replacing(
    path: str | os.PathLike[str],
    *,
    owner: str,
    kind: str = "a file it wrote",
    ours: Ours | None = None,
    overwrite: bool = False,
) -> Iterator[str]:
    """Yield the name of a new, empty temporary file beside ``path``; when the block ends without
    an error it is renamed over ``path`` (checked by :func:`check_replaceable` first), else removed.

    ``owner`` names the writer in errors (``"session.card()"``), ``kind`` what it may replace (``"a
    model card written by rl-workbench"``). The temporary name keeps ``path``'s suffix, for writers
    that choose a format by it (``np.savez``, ffmpeg)."""
    path = os.fspath(path)
    check_replaceable(path, ours, overwrite=overwrite, owner=owner, kind=kind)
    folder, base = os.path.split(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    # mkstemp opens with O_CREAT | O_EXCL | O_NOFOLLOW: a name that exists (a planted link) is skipped.
    fd, tmp = tempfile.mkstemp(prefix=f".{base}.tmp-", suffix=os.path.splitext(base)[1], dir=folder)
    os.close(fd)
    try:
        yield tmp
        if os.path.islink(tmp) or not os.path.isfile(tmp):  # the writer (or someone) swapped it
            raise FileExistsError(f"{tmp}: the temporary file of {path} was replaced while {owner} wrote it")
        follow_umask(tmp)
        os.replace(tmp, path)  # replaces a link at path itself, never what it points to
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_text(
    path: str | os.PathLike[str],
    text: str,
    *,
    owner: str,
    kind: str = "a file it wrote",
    ours: Ours | None = None,
    overwrite: bool = False,
) -> str:
    """Write ``text`` (UTF-8) to ``path`` through :func:`replacing`; returns the path."""
    path = os.fspath(path)
    with replacing(path, owner=owner, kind=kind, ours=ours, overwrite=overwrite) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))
    return path
