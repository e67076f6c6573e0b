"""Safe file I/O: the one rule every file cgbench writes follows, and bounded readers.

Writing (``write_text_atomic``): the text goes to a temporary file ``.NAME.XXXXXXXX.tmp`` in the
target's folder, is flushed to disk (fsync) and renamed over the target, so a reader sees the old
file or the new one, never a partial one. ``durable=False`` skips the two fsyncs (file and folder)
for a file that a later step checks anyway (a sweep's point files: ``--resume`` reruns a point
whose file is unreadable): the rename is still atomic for every reader and for a killed writer,
only a power loss may leave such a file empty. The rename replaces only a regular file (or nothing): a
directory, FIFO, socket, character or block device, or a symlink to one, is refused before any
work is done. A symlink to a regular file is followed (the link stays, its target is replaced).
The file gets mode 0666 minus the umask (0644 under the usual 022), like any file a tool creates.
Temporary files of earlier writers that died (SIGKILL, power loss) are removed on the next write
of the same name: a live writer holds a lock on its temporary file, a dead one does not.
Every failure (disk full, file too large, name too long, the working directory deleted, no
permission) is one ``ConfigError`` line naming the path, and leaves no file behind.

An output is never one of the command's own inputs: a command names the files it reads
(``declare_inputs``: a trace, a calibration table, the results it compares) before any work, and
the writer (``check_writable`` before the work, every write after it) refuses to replace any of
them, compared by device and inode (a symlink or a hard link to an input is the input). The set
is per command: ``cgbench.cli.errors.user_errors`` empties it when a command starts.

Reading (``read_text``, ``read_json``, ``load_json_text``, ``load_yaml_text``): only regular files
are read (a FIFO would block, ``/dev/zero`` never ends), at most ``MAX_FILE_BYTES``; parsed values
are at most ``MAX_DEPTH`` containers deep, integers fit in 64 bits, numbers are finite and
``NaN``/``Infinity`` are refused. Every failure is one ``ConfigError`` naming the file.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import re
import secrets
import shutil
import signal
import stat
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from cgbench.errors import ConfigError

MAX_FILE_BYTES = 256 * 1024 * 1024  # no input cgbench reads comes near this (traces: ~40 B a request)
MAX_DEPTH = 64  # containers inside containers; cgbench documents are at most ~6 deep
MAX_INT_DIGITS = 19  # an integer must fit in 64 bits (the int-from-text limit is 4,300 digits)
INT64_MAX = 2 ** 63 - 1
MAX_LINE_CHARS = 1024 * 1024  # one JSONL record or CSV row
MAX_NAME_CHARS = 100  # a config name used inside a file name
STALE_TMP_AGE_S = 2.0  # a writer locks its temporary file right after creating it

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=@,-]*")


def kind_of(mode: int) -> str:
    """What a ``st_mode`` is, in words ("a regular file", "a FIFO (named pipe)", ...)."""
    for test, words in _KINDS:
        if test(mode):
            return words
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def describe_missing(path: str | Path, expected: str = "a regular file or folder") -> str:
    """Why ``path`` is neither a regular file nor a folder, in words: "no such file or directory",
    "is a FIFO (named pipe), not a regular file or folder", ..."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "no such file or directory"
    except OSError as e:
        return f"cannot read: {_reason(e)}"
    return f"is {kind_of(mode)}, not {expected}"


def make_folder(path: str | Path, what: str = "") -> Path:
    """Create the folder ``path`` (and its parents) unless it exists as a folder; anything else at
    that path (a file, a FIFO, ...) is one ConfigError line."""
    p = Path(path)
    label = f"{what} " if what else ""
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{label}{p}: exists and is {kind_of(os.stat(p).st_mode)}, not a folder")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _os_error(f"cannot create the folder {label}".rstrip(), p, e) from None
    return p


def _where(path: str | Path, key: str) -> str:
    return f"{key}: {path}" if key else str(path)


def _reason(e: OSError) -> str:
    if e.errno == errno.ENOSPC:
        return "no space left on the device"
    if e.errno == errno.EFBIG:
        return "file too large (a file size limit was reached)"
    if e.errno == errno.ENAMETOOLONG:
        return "file name too long"
    if e.errno == errno.EDQUOT:
        return "disk quota exceeded"
    return (e.strerror or str(e)).lower() if e.strerror else str(e)


def _cwd_gone() -> bool:
    try:
        os.getcwd()
    except FileNotFoundError:
        return True
    return False


def require_cwd() -> None:
    """ConfigError when the working directory was deleted (every relative path would fail)."""
    if _cwd_gone():
        raise ConfigError("the working directory no longer exists: cd to an existing folder")


def _os_error(what: str, path: str | Path, e: OSError) -> ConfigError:
    if not Path(path).is_absolute() and isinstance(e, FileNotFoundError) and _cwd_gone():
        return ConfigError(f"{what} {path}: the working directory no longer exists")
    return ConfigError(f"{what} {path}: {_reason(e)}")


# ------------------------------------------------------------------------------------------ names


def safe_name(value: str, key: str) -> str:
    """``value`` if it can be one component of a file name (no separators, no ``..``, no leading
    dot, at most ``MAX_NAME_CHARS``); else a ConfigError naming ``key``. Config names (model,
    workload, sweep) become parts of result paths, so ``../../x`` would write outside the results."""
    if not isinstance(value, str) or len(value) > MAX_NAME_CHARS or not _SAFE_NAME.fullmatch(value):
        raise ConfigError(f"{key}: {value!r} cannot be used in a file name: use letters, digits and "
                          f"'._+=@,-' (not starting with '.' or '-', at most {MAX_NAME_CHARS} characters)")
    return value


def inside(root: str | Path, relative: str | Path, key: str) -> Path:
    """``root / relative``, refused (ConfigError naming ``key``) when it would leave ``root``."""
    rel = Path(relative)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise ConfigError(f"{key}: {str(relative)!r} must be a plain path inside {root}")
    return Path(root) / rel


# ------------------------------------------------------------------------------------------ writing


def _umask() -> int:
    """The process umask, read without changing it (os.umask would, for a moment, for all threads)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_TMP_TAG = "cgbench-"  # marks a temporary file as cgbench's own (any stale one in a folder is removed)


def _tmp_prefix(name: str) -> str:
    # the temporary name must fit in NAME_MAX (255 bytes) even when the target's name nearly does
    return f".{name[:200]}.{_TMP_TAG}"


def _open_temp(target: Path) -> tuple[int, str]:
    """A new temporary file beside ``target`` (``.NAME.cgbench-XXXXXXXX.tmp``), open for writing, created
    as any new file is: mode 0o666 less the umask, applied by the kernel (``mkstemp``'s 0o600 would
    need the umask read back, which costs a read of /proc: a tenth of a sweep point's write). Its
    name from ``os.urandom``, so no random generator's state is touched."""
    prefix = os.path.join(target.parent, _tmp_prefix(target.name))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        path = f"{prefix}{os.urandom(4).hex()}.tmp"
        try:
            return os.open(path, flags, 0o666), path
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no unused temporary file name", prefix)


# (st_dev, st_ino) of each input the running command declared -> how the command names it
_inputs: dict[tuple[int, int], str] = {}


def reset_inputs() -> None:
    """Forget the declared inputs (a new command starts)."""
    _inputs.clear()


def declare_inputs(paths: dict[str, str | Path | None]) -> None:
    """Name the files the running command reads ({how the command names it: path}): the writer
    refuses to replace any of them. Missing paths and folders are skipped (nothing to lose)."""
    for key, path in paths.items():
        if path is not None and str(path) != "":
            _declare(path, f"{key} {path}" if key else str(path))


def _declare(path: str | Path, label: str) -> None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return
    if stat.S_ISREG(st.st_mode):
        _inputs.setdefault((st.st_dev, st.st_ino), label)


MAX_FOLDER_INPUTS = 100_000  # result files of an input folder declared (a sweep has one per point)


def declare_folder_inputs(folders: dict[str, str | Path | None]) -> None:
    """For each input that is a folder (a sweep), declare the JSON documents under it."""
    for key, folder in folders.items():
        if folder is None or not os.path.isdir(folder):
            continue
        n = 0
        for root, _, names in os.walk(folder, followlinks=False):
            for name in names:
                if name.endswith(".json") and n < MAX_FOLDER_INPUTS:
                    path = os.path.join(root, name)
                    _declare(path, f"{path}, in {key} {folder}")
                    n += 1


def _refuse_input(st: os.stat_result, label: str) -> None:
    source = _inputs.get((st.st_dev, st.st_ino))
    if source is not None:
        raise ConfigError(f"cannot write {label}: it is this command's input ({source}); "
                          "writing would replace it: choose another output path")


def check_not_input(path: str | Path, what: str = "") -> None:
    """ConfigError when ``path`` is one of the declared inputs (a stat, no file created)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return
    _refuse_input(st, f"{what} {path}" if what else str(path))


def _target(path: Path, what: str) -> Path:
    """The file to replace: ``path``, or a symlink's target. Refuses anything but a regular file,
    and any input the command declared."""
    try:
        st = os.stat(path)  # follows symlinks: a link to /dev/null is a character device
    except FileNotFoundError:
        return path
    except OSError as e:
        raise _os_error(f"cannot write {what}".rstrip(), path, e) from None
    label = f"{what} {path}" if what else str(path)
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"cannot write {label}: it is {kind_of(st.st_mode)}, not a regular file")
    _refuse_input(st, label)
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def check_writable(path: str | Path, what: str = "") -> Path:
    """Fail before a run, not after it, when its file could not be written; returns the file that
    will be replaced. The parent folders it had to create for the test are removed again: the
    write creates them, so a run that fails later leaves no empty folder."""
    p = Path(path)
    label = f"{what} " if what else ""
    target = _target(p, label.strip())
    _check_name_length(target, p, label)
    created = _make_parents(target, p, label)
    try:
        fd, tmp = _open_temp(target)
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        if isinstance(e, FileNotFoundError) and target.parent.is_dir():  # /proc: an existing folder, no new files
            raise ConfigError(f"cannot write {label}{p}: its folder {target.parent} takes no new files "
                              "(a pseudo file system such as /proc or /sys)") from None
        raise _os_error(f"cannot write {label}".rstrip(), p, e) from None
    finally:
        remove_folders(created)
    return target


def _check_name_length(target: Path, p: Path, label: str) -> None:
    """A file name or path longer than the file system allows, refused before any folder is made."""
    try:
        name_max = os.pathconf(_existing_parent(target), "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    parts = [part for part in target.parts if part not in ("/", "")]
    if any(len(os.fsencode(part)) > name_max for part in parts) or len(os.fsencode(str(target))) >= 4096:
        raise ConfigError(f"cannot write {label}{p}: file name too long")


def _existing_parent(path: Path) -> Path:
    d = path.parent
    while not d.exists() and d != d.parent:
        d = d.parent
    return d


def make_folders(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; returns what was created (deepest first), so a
    refusal later can undo it with ``remove_folders``. On an OSError nothing created is left."""
    missing = []
    d = folder
    while not d.exists() and d != d.parent:
        missing.append(d)
        d = d.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        remove_folders(missing)
        raise
    return missing


def _make_parents(target: Path, p: Path, label: str) -> list[Path]:
    """Create the missing parent folders of ``target`` (``make_folders``), with the writer's errors."""
    try:
        return make_folders(target.parent)
    except (FileExistsError, NotADirectoryError):
        raise ConfigError(f"cannot write {label}{p}: a parent path is not a directory") from None
    except OSError as e:
        raise _os_error(f"cannot write {label}".rstrip(), p, e) from None


def remove_folders(dirs: list[Path]) -> None:
    """Remove folders ``make_folders`` created (those still empty), deepest first."""
    for d in dirs:
        try:
            d.rmdir()
        except OSError:
            pass


def clean_stale_temps(target: Path) -> int:
    """Remove the temporary files that no live writer holds in ``target``'s folder: those of
    ``target`` (``.NAME.XXXXXXXX.tmp``, also an older cgbench's) and every cgbench one
    (``.OTHER.cgbench-XXXXXXXX.tmp``: a run killed mid-write under a name no later run reuses,
    such as a time-stamped result). Returns how many."""
    return clean_stale_temps_in(target.parent, (target.name,))


_TEMP_NAME = re.compile(r"\.(.+)\.(" + _TMP_TAG + r")?[A-Za-z0-9_]{8}\.tmp", re.DOTALL)


def clean_stale_temps_in(folder: Path, names: Iterable[str] = ()) -> int:
    """``clean_stale_temps`` for a whole folder in one scan: every stale cgbench temporary file in
    ``folder``, and the untagged ones (an older cgbench's) of the files ``names``. A writer that
    writes many files into a folder it holds (a sweep) calls this once, and each write skips its
    own scan (``clean=False``). Returns how many were removed."""
    untagged = {name[:200] for name in names}
    removed = 0
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return 0
    now = time.time()
    for entry in entries:
        m = _TEMP_NAME.fullmatch(entry.name)
        if m is None or (m.group(2) is None and m.group(1) not in untagged):
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or now - st.st_mtime < STALE_TMP_AGE_S:
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held by a live writer: OSError
            os.unlink(entry.path)
            removed += 1
        except OSError:
            continue
        finally:
            os.close(fd)
    return removed


def write_text_atomic(path: str | Path, text: str, what: str = "", *, durable: bool = True,
                      clean: bool = True) -> Path:
    """Write ``text`` (UTF-8) to ``path`` by the one rule (module docstring); returns the path
    written (a symlink's target when ``path`` is a link to a regular file). ``clean=False``: the
    caller has removed the folder's stale temporary files itself (``clean_stale_temps_in``)."""
    return write_bytes_atomic(path, text.encode("utf-8"), what, durable=durable, clean=clean)


def write_bytes_atomic(path: str | Path, data: bytes, what: str = "", *, durable: bool = True,
                       clean: bool = True) -> Path:
    """``write_text_atomic`` for bytes (figures)."""
    p = Path(path)
    label = f"{what} " if what else ""
    target = _target(p, label.strip())
    _check_name_length(target, p, label)
    created = _make_parents(target, p, label)
    if clean:
        clean_stale_temps(target)
    tmp = None
    try:
        fd, tmp = _open_temp(target)
        with os.fdopen(fd, "wb") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
            _target(target, label.strip())  # a special file (or an input) may have appeared meanwhile
            os.replace(tmp, target)
            tmp = None
        if durable:
            _fsync_dir(target.parent)
    except OSError as e:
        if tmp is not None:
            _unlink(tmp)
            tmp = None
        remove_folders(created)
        raise _os_error(f"cannot write {label}".rstrip(), p, e) from None
    finally:
        if tmp is not None:  # interrupted (Ctrl-C) or refused after the temporary file was made
            _unlink(tmp)
    return target


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """For the duration of a set's write, SIGTERM raises KeyboardInterrupt as Ctrl-C does, so the set's
    clean-up runs (a kill by ``timeout`` or a batch system left part of an export, which later exports
    refused). Only the main thread can install handlers; elsewhere, or under a handler someone else
    installed, nothing changes."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
        yield
        return

    def _raise(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _new_folder(files: Mapping[Path, str | bytes]) -> Path | None:
    """The one folder every file of the set goes into, when it does not exist yet (then the set is
    staged beside it and renamed into place); None otherwise."""
    folders = {Path(p).parent for p in files}
    if len(folders) != 1:
        return None
    folder = folders.pop()
    return None if folder.exists() or folder.is_symlink() or not folder.name else folder


def _staged(folder: Path, files: Mapping[Path, str | bytes], what: str) -> list[Path]:
    """Write the set into a temporary sibling of the new ``folder`` and rename it into place: a failure,
    a full disk or an interrupt at any step leaves no new folder (the staging one removed)."""
    for path in files:
        _target(Path(path), what)  # an input, a special file: refused by name before anything is made
    created = _make_parents(folder, folder, f"{what} " if what else "")  # its missing parents
    stage = Path(tempfile.mkdtemp(prefix=_tmp_prefix(folder.name), suffix=".tmp", dir=folder.parent))
    try:
        for path, data in files.items():
            staged = stage / Path(path).name
            if isinstance(data, bytes):
                write_bytes_atomic(staged, data, what, clean=False)
            else:
                write_text_atomic(staged, data, what, clean=False)
        os.chmod(stage, 0o777 & ~_umask())
        if folder.exists() or folder.is_symlink():
            raise ConfigError(f"cannot write {what + ' ' if what else ''}{folder}: it appeared while the set was "
                              "written")
        os.rename(stage, folder)
        _fsync_dir(folder.parent)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        remove_folders(created)
        raise
    return [folder / Path(p).name for p in files]


def write_files_atomic(files: Mapping[Path, str | bytes], what: str = "") -> list[Path]:
    """Several files written as one set (an export, a calibration table and its report), all at once
    or not at all, SIGTERM handled as Ctrl-C (``sigterm_as_interrupt``). Into a new folder: staged in
    a temporary sibling folder, renamed into place (``_staged``). Into an existing one: each by the one
    rule, in order; when one fails (or the command is interrupted), those written before it are
    put back as they were (a replaced file from a hard link of it kept, locked, until the set is
    done; a new one removed), so no reader finds a mix of the new set and the old. On a file system
    without hard links a replaced file is left as written (complete, new). Returns the paths written."""
    with sigterm_as_interrupt():
        folder = _new_folder(files)
        if folder is not None:
            return _staged(folder, files, what)
        return _in_place(files, what)


def _in_place(files: Mapping[Path, str | bytes], what: str) -> list[Path]:
    undo: list[tuple[Path, bool, str | None, int | None]] = []  # (target, existed, backup link, its fd)
    written: list[Path] = []
    try:
        for path, text in files.items():
            target = _target(Path(path), what)
            undo.append((target, target.exists(), *_backup(target)))
            written.append(write_bytes_atomic(path, text, what) if isinstance(text, bytes)
                           else write_text_atomic(path, text, what))
    except BaseException:
        for target, existed, backup, _ in reversed(undo):  # the one that failed too: Ctrl-C may come after its rename
            try:
                if not existed:
                    os.unlink(target)
                elif backup is not None:
                    os.replace(backup, target)
            except OSError:  # nothing to undo, or it cannot be: the error that stopped the set is the one to tell
                pass
        raise
    finally:
        for _, _, backup, fd in undo:
            if fd is not None:
                os.close(fd)
            if backup is not None:
                _unlink(backup)
    return written


def _backup(target: Path) -> tuple[str | None, int | None]:
    """A hard link to ``target`` under a temporary name (a stale one is cleaned up like any cgbench
    temporary file), held locked so that no other writer's clean-up takes it: (its path, the fd);
    (None, None) when there is no file or the file system makes no hard links."""
    if not target.exists():
        return None, None
    for _ in range(100):
        link = str(target.parent / f"{_tmp_prefix(target.name)}{secrets.token_hex(4)}.tmp")
        try:
            os.link(target, link)
        except FileExistsError:
            continue
        except OSError:
            return None, None
        fd = os.open(link, os.O_RDONLY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # someone else holds the file: the link still works, only a clean-up may take it
            pass
        return link, fd
    return None, None


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------------ JSON out


def first_non_finite(value: Any, path: str = "") -> str | None:
    """The dotted path of the first NaN/Infinity in a JSON-like value, else None."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        v, at = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return at or "(top level)"
        if isinstance(v, dict):
            stack.extend((x, f"{at}.{k}" if at else str(k)) for k, x in reversed(list(v.items())))
        elif isinstance(v, (list, tuple)):
            stack.extend((x, f"{at}[{i}]") for i, x in reversed(list(enumerate(v))))
    return None


def first_wide_int(value: Any, path: str = "") -> str | None:
    """The dotted path of the first integer outside 64 bits in a JSON-like value, else None."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        v, at = stack.pop()
        if isinstance(v, int) and not isinstance(v, bool) and not -INT64_MAX - 1 <= v <= INT64_MAX:
            return at or "(top level)"
        if isinstance(v, dict):
            stack.extend((x, f"{at}.{k}" if at else str(k)) for k, x in reversed(list(v.items())))
        elif isinstance(v, (list, tuple)):
            stack.extend((x, f"{at}[{i}]") for i, x in reversed(list(enumerate(v))))
    return None


# An integer past 64 bits has 19 digits or more. The text is ASCII (json.dumps escapes the rest), so
# a run of 19 ASCII digits is found by mapping every digit to one and searching for 19 of it: one C
# pass, about 15 times faster than the regular expression on a sweep point's document.
_DIGITS_AS_ZERO = str.maketrans("0123456789", "0000000000")
_LONG_RUN = "0" * 19


def _check_int64(doc: Any, text: str) -> str:
    """``text`` (``doc`` dumped) when every integer in it fits in 64 bits, as every reader of cgbench's
    documents requires (a count at 2^63-1 plus one is 2^63). The text is scanned first: the walk runs
    only where a run of 19 digits is (a long number, or digits in a string)."""
    if _LONG_RUN in text.translate(_DIGITS_AS_ZERO):
        where = first_wide_int(doc)
        if where is not None:
            raise ConfigError(f"{where}: an integer that does not fit in 64 bits; a result holds 64-bit integers "
                              "only")
    return text


def dumps_strict(doc: Any, indent: int | None = 1) -> str:
    """``json.dumps`` that refuses NaN/Infinity (strict JSON) and integers past 64 bits with a
    ConfigError naming the value. ``indent=None``: compact, on one line (Python's C encoder, several
    times faster than an indented dump, which runs the pure-Python one); the same document on reading."""
    try:
        if indent is None:  # no cycle check: a document is a tree built here (a tenth of a point's dump)
            return _check_int64(doc, json.dumps(doc, allow_nan=False, separators=(",", ":"),
                                                check_circular=False) + "\n")
        return _check_int64(doc, json.dumps(doc, indent=indent, allow_nan=False) + "\n")
    except ValueError:  # the encoder names no path: find the value (only on this rare path)
        where = first_non_finite(doc)
        if where is None:
            raise
        raise ConfigError(f"{where}: not a finite number; a result holds finite numbers only") from None


def dumps_lines(doc: dict[str, Any]) -> str:
    """``doc`` (a dict) strict, a top-level key a line and a list's items a line each, every value
    compact (``dumps_strict(indent=None)``): an index of many records written at the C encoder's speed
    (an indented dump runs the pure-Python one, five times slower) and still read line by line."""
    if not all(isinstance(k, str) for k in doc):
        return dumps_strict(doc, None)
    try:
        parts = []
        for key, value in doc.items():
            name = json.dumps(key)
            if isinstance(value, list) and value:
                items = ",\n  ".join(dumps_strict(v, None)[:-1] for v in value)
                parts.append(f"{name}: [\n  {items}\n ]")
            else:
                parts.append(f"{name}: {dumps_strict(value, None)[:-1]}")
    except ConfigError:  # a value's path within its part: the whole document's names it from the top
        dumps_strict(doc, None)
        raise
    return "{\n " + ",\n ".join(parts) + "\n}\n" if parts else "{}\n"


# how a document is laid out in its file: ``json.dumps(indent=1)``, one line, or ``dumps_lines``
LAYOUTS = ("indented", "compact", "lines")


def dumps_in(doc: Any, layout: str) -> str:
    """``doc`` strict, laid out as ``layout`` (one of ``LAYOUTS``) says."""
    if layout == "lines":
        return dumps_lines(doc)
    return dumps_strict(doc, {"indented": 1, "compact": None}[layout])


def write_json_atomic(path: str | Path, doc: Any, what: str = "", *, durable: bool = True, clean: bool = True,
                      layout: str = "indented") -> Path:
    """Strict JSON (no NaN/Infinity) written by the one rule, laid out as ``layout`` says (``LAYOUTS``):
    ``compact`` for files written by the hundred (sweep points), ``lines`` for an index of records."""
    try:
        text = dumps_in(doc, layout)
    except ConfigError as e:
        raise ConfigError(f"cannot write {what + ' ' if what else ''}{path}: {e}") from None
    return write_text_atomic(path, text, what, durable=durable, clean=clean)


# ------------------------------------------------------------------------------------------ reading


def read_bytes(path: str | Path, key: str = "", max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; anything else is a ConfigError that
    says what the path is ("is a directory", "is a FIFO (named pipe)", "no such file")."""
    where = _where(path, key)
    try:
        # O_NONBLOCK: opening a FIFO with no writer would block forever
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        if _cwd_gone() and not Path(path).is_absolute():
            raise ConfigError(f"{where}: the working directory no longer exists") from None
        raise ConfigError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{where}: is a directory, not a regular file") from None
    except OSError as e:
        raise ConfigError(f"{where}: cannot read: {_reason(e)}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{where}: is {kind_of(st.st_mode)}, not a regular file")
        if st.st_size > max_bytes:
            raise ConfigError(f"{where}: is {st.st_size:,} bytes, more than the {max_bytes:,}-byte limit")
        os.set_blocking(fd, True)
        chunks = []
        total = 0
        while True:  # bounded even when st_size lies (files under /proc report 0)
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise ConfigError(f"{where}: more than the {max_bytes:,}-byte limit")
        return b"".join(chunks)
    except OSError as e:
        raise ConfigError(f"{where}: cannot read: {_reason(e)}") from None
    finally:
        os.close(fd)


def read_text(path: str | Path, key: str = "", max_bytes: int = MAX_FILE_BYTES) -> str:
    """``read_bytes`` decoded as UTF-8 (a leading byte-order mark is dropped)."""
    data = read_bytes(path, key, max_bytes)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(f"{_where(path, key)}: cannot read: not a UTF-8 text file") from None


def parse_int64(text: str) -> int | BigInt:
    """``int(text)`` for ``json.loads(parse_int=...)``. An integer of more than 19 digits is not
    converted (a 5,000-digit one would hit the interpreter's digit limit): it becomes a ``BigInt``
    that ``check_tree`` refuses naming its key."""
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        return BigInt(text)
    return int(text)


class BigInt(str):
    """The text of an integer too long to fit in 64 bits (see ``parse_int64``)."""


def check_tree(value: Any, where: str, max_depth: int = MAX_DEPTH, finite: bool = True) -> Any:
    """Walk a parsed JSON/YAML value without recursion: at most ``max_depth`` nested containers,
    integers within 64 bits, floats finite (when ``finite``). Shared (aliased) nodes are visited
    once, so a YAML alias bomb costs no more than its text."""
    seen: set[int] = set()
    stack: list[tuple[Any, int, str]] = [(value, 0, "")]
    while stack:
        v, depth, at = stack.pop()
        label = f"{where}: {at}" if at else where
        if isinstance(v, BigInt):
            raise ConfigError(f"{label}: integer {v[:20]}... ({len(v.lstrip('-'))} digits) does not fit in 64 bits")
        if isinstance(v, bool) or v is None or isinstance(v, str):
            continue
        if isinstance(v, int):
            if not -INT64_MAX - 1 <= v <= INT64_MAX:
                raise ConfigError(f"{label}: integer does not fit in 64 bits")
            continue
        if isinstance(v, float):
            if finite and not math.isfinite(v):
                raise ConfigError(f"{label}: {v} is not a finite number (NaN and Infinity are refused)")
            continue
        if isinstance(v, (dict, list, tuple)):
            if depth >= max_depth:
                raise ConfigError(f"{label}: nested more than {max_depth} levels deep")
            if id(v) in seen:
                continue
            seen.add(id(v))
            if isinstance(v, dict):
                stack.extend((x, depth + 1, f"{at}.{k}" if at else str(k)) for k, x in v.items())
            else:
                stack.extend((x, depth + 1, f"{at}[{i}]") for i, x in enumerate(v))
    return value


def load_json_text(text: str, where: str) -> Any:
    """Strict, bounded JSON: refuses NaN/Infinity, integers beyond 64 bits, deep nesting."""
    try:
        # NaN, Infinity, 1e400 and long integers parse; check_tree then refuses them by key
        value = json.loads(text, parse_int=parse_int64)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{where}: line {e.lineno} column {e.colno}: not valid JSON: {e.msg}") from None
    except RecursionError:
        raise ConfigError(f"{where}: nested more than {MAX_DEPTH} levels deep") from None
    return check_tree(value, where)


def read_json(path: str | Path, key: str = "") -> Any:
    """A regular file of bounded size parsed by ``load_json_text``."""
    return load_json_text(read_text(path, key), _where(path, key))


# the characters that open and close YAML flow collections, and what hides them (quotes, comments)
_FLOW = re.compile(r"""[\[\]{}]|'(?:[^']|'')*'|"(?:[^"\\]|\\.)*"|(?:^|(?<=\s))#[^\n]*""", re.MULTILINE)


def _flow_too_deep(text: str) -> int | None:
    """The offset of the first ``[`` or ``{`` nested more than ``MAX_DEPTH`` deep (brackets in
    quotes and comments not counted), else None: a linear scan, before the parser."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return None
    depth = 0
    for m in _FLOW.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return m.start()
        elif c in "]}":
            depth = max(0, depth - 1)
    return None


def yaml_events(text: str, where: str, max_events: int | None = None) -> Iterator[Any]:
    """The YAML parser's events of ``text``, refused past ``MAX_DEPTH`` nested containers (one line
    naming ``where`` and the depth) as they come: PyYAML's composer and constructor take time
    quadratic in the depth (a 20,000-deep ``[[[...]]]`` of 40 KB took a minute), its parser does
    not, so this is checked before either; and past ``max_events`` events."""
    import yaml

    deep = _flow_too_deep(text)
    if deep is not None:  # PyYAML's scanner looks ahead over every open bracket: quadratic too
        raise ConfigError(f"{where}:{text.count(chr(10), 0, deep) + 1}: nested more than {MAX_DEPTH} levels deep")
    depth = 0
    for n, event in enumerate(yaml.parse(text, Loader=yaml.SafeLoader)):
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                line = f":{event.start_mark.line + 1}" if event.start_mark is not None else ""
                raise ConfigError(f"{where}{line}: nested more than {MAX_DEPTH} levels deep")
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1
        if max_events is not None and n > max_events:
            raise ConfigError(f"{where}: more than {max_events:,} YAML nodes")
        yield event


def load_yaml_text(text: str, where: str, finite: bool = True) -> Any:
    """``yaml.safe_load`` with the same bounds as JSON, and duplicate mapping keys refused."""
    import yaml

    class _Loader(yaml.SafeLoader):
        pass

    def _mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict:
        keys = set()
        for k, _ in node.value:
            key = loader.construct_object(k, deep=True)
            try:
                duplicate = key in keys
            except TypeError:
                raise yaml.constructor.ConstructorError(None, None, "a mapping key must be a plain value",
                                                        k.start_mark) from None
            if duplicate:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", k.start_mark)
            keys.add(key)
        return loader.construct_mapping(node, deep=True)

    _Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
    try:
        for _ in yaml_events(text, where):  # the depth, before the composer's quadratic cost
            pass
    except yaml.YAMLError:
        pass  # the load below names the problem with its line
    try:
        value = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{where}{line}: invalid YAML: {getattr(e, 'problem', None) or e}") from None
    except RecursionError:
        raise ConfigError(f"{where}: nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as e:  # int('9' * 5000) in the int resolver
        raise ConfigError(f"{where}: invalid value: {str(e)[:120]}") from None
    return check_tree(value, where, finite=finite)
