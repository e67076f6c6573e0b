"""One writer per sweep folder: an ``fcntl`` lock on ``<sweep>/sweep.lock``, held for the sweep's life.

The lock file holds the holder's PID and host (for the refusal message). The file is never removed:
removing a lock file while another process opens it would let two holders lock two different files.
The kernel drops the lock when its holder dies (even by SIGKILL), so a lock that can be taken means
no sweep is writing the folder: an index that still says ``running`` then belongs to a killed sweep.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from cgbench.config.schema import ConfigError


def host_name() -> str:
    """This machine's host name, as ``socket.gethostname`` gives it (gethostname(2) reads the kernel's
    node name, which ``uname`` reports), without importing the socket module for it."""
    return os.uname().nodename


LOCK_NAME = "sweep.lock"


class SweepLock:
    """An exclusive, non-blocking lock on a sweep folder; ``release()`` (or process exit) drops it."""

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / LOCK_NAME
        self._fd: int | None = None
        self.created = False

    def acquire(self) -> SweepLock:
        self.created = not os.path.lexists(self.path)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as e:
            raise ConfigError(f"cannot lock {self.path}: {(e.strerror or str(e)).lower()}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise ConfigError(f"{self.path.parent}: another sweep is writing this folder ({holder(self.path)}); "
                              "wait for it to end, or sweep into another folder") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {host_name()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None

    def discard(self) -> None:
        """Release after a refusal, removing the lock file if this lock created it (nothing left behind)."""
        if self._fd is not None and self.created:
            try:
                os.unlink(self.path)
            except OSError:
                pass
        self.release()

    @property
    def held(self) -> bool:
        return self._fd is not None


def holder(path: Path) -> str:
    """``PID 1234 on host`` from a lock file (what its holder wrote), or ``PID unknown``."""
    try:
        words = path.read_text(encoding="utf-8", errors="replace").split()
    except OSError:
        words = []
    if not words or not words[0].isdigit():
        return "PID unknown"
    return f"PID {words[0]}" + (f" on {words[1]}" if len(words) > 1 else "")


def is_locked(folder: Path) -> bool | None:
    """Whether a live process holds the folder's sweep lock; None when the folder has no lock file."""
    path = Path(folder) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False
