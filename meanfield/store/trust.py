"""A run file is untrusted input: the checks :func:`meanfield.store.open_run` makes before it
reads any data (``docs/format.md``, "Reading a file from someone else").

* :func:`walk` visits every link and object of an open file once with HDF5's low-level API,
  dereferencing no link, and refuses what would make HDF5 read another file or more memory
  than the file holds: a soft, external or user-defined link, a dataset with external raw
  storage or a virtual dataset, a dataset of other than numbers or fixed-length strings, a
  filter other than deflate, shuffle and Fletcher-32, and a dataset or attribute that
  declares more bytes than the whole file has.
* :func:`check_shapes` refuses a dataset whose shape disagrees with the file's own
  parameters (``n``, ``d``, ``n_particles``, ``chains``).
* :func:`vet_attributes` reads the attributes of variable-length type (every string attribute
  of files written before fixed-length strings, and of other writers) in a child process with
  a deadline first: a damaged global heap makes HDF5 loop forever reading them, deaf to
  signals, and only another process can be stopped then.
* :func:`read_rows` turns a failed filter (a Fletcher-32 checksum that does not match) into
  one line naming the dataset.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field

import h5py
import numpy as np

from meanfield.errors import RunFileError

#: The filters a run file's datasets may use: Fletcher-32 (written since checksums were
#: stored), and deflate and shuffle of a file repacked by ``h5repack``. Any other filter is
#: refused: HDF5 would look for it in plugin libraries.
FILTERS = {1: "deflate", 2: "shuffle", 3: "fletcher32"}
FLETCHER32 = 3
#: Seconds the child process may take to read a file's variable-length attributes
#: (:func:`vet_attributes`); it normally takes a fraction of a second.
ATTRIBUTE_DEADLINE = 10.0
#: Where to read more, appended to every refusal of this module.
SEE = "docs/format.md, 'Reading a file from someone else'"


@dataclass
class Walk:
    """What :func:`walk` found in a file.

    Attributes
    ----------
    size : int
        The file's size in bytes.
    datasets : dict
        Path (no leading ``/``) -> ``(shape, dtype)`` of every dataset.
    varlen : list of bytes
        Paths (``b"."`` for the root) of the objects with an attribute of variable-length
        (or other non-plain) type, for :func:`vet_attributes`.
    """

    size: int
    datasets: dict = field(default_factory=dict)
    varlen: list = field(default_factory=list)


def file_size(f, src: str) -> int:
    """Size in bytes of the open HDF5 file ``f`` (of its path if the driver has no
    descriptor)."""
    try:
        if f.driver == "sec2":
            return os.fstat(f.id.get_vfd_handle()).st_size
    except (OSError, TypeError, ValueError, RuntimeError):
        pass
    return os.path.getsize(src)


def _bytes(n: int) -> str:
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= k:
            return f"{n / k:.3g} {unit}"
    return f"{n} bytes"


def _name(raw: bytes) -> str:
    return raw.decode("utf-8", "backslashreplace").lstrip("/")


def _plain(t) -> bool:
    """Whether HDF5 type ``t`` is read without the global heap: a number, a bit field, an
    enumeration or a fixed-length string."""
    cls = t.get_class()
    if cls in (h5py.h5t.INTEGER, h5py.h5t.FLOAT, h5py.h5t.BITFIELD, h5py.h5t.ENUM):
        return True
    return cls == h5py.h5t.STRING and not t.is_variable_str()


def _class_name(t) -> str:
    cls = t.get_class()
    if cls == h5py.h5t.STRING:
        return "variable-length string"
    names = {h5py.h5t.VLEN: "variable-length", h5py.h5t.COMPOUND: "compound",
             h5py.h5t.ARRAY: "array", h5py.h5t.REFERENCE: "reference",
             h5py.h5t.OPAQUE: "opaque", h5py.h5t.TIME: "time"}
    return names.get(cls, f"class {cls}")


def _elements(shape) -> int:
    return math.prod(int(s) for s in shape)


def _refuse(src, where, reason, kind=RunFileError):
    raise kind(src, where, f"{reason}; refused ({SEE})")


def walk(f, src: str) -> Walk:
    """Visit every link and object of the open file ``f`` once; refuse what must not be read.

    Links are listed with ``H5Lvisit``, which follows none (a soft or external link is seen as
    the link itself); objects are opened by the paths of hard links only, after every link was
    seen to be one.

    Raises
    ------
    RunFileError
        A soft, external or user-defined link; a dataset with external raw storage, a virtual
        dataset, of a type other than numbers and fixed-length strings, or with an unknown
        filter; a dataset, a dataset's chunk or an attribute declaring more bytes than the
        file holds.
    """
    out = Walk(size=file_size(f, src))
    links = []

    def seen(name, info):
        links.append((name, info.type))

    try:
        f.id.links.visit(seen, info=True)
    except SystemError as exc:
        # a signal handler's exception (SIGTERM, Ctrl-C) raised inside the callback reaches
        # here wrapped by h5py's lock: raise it as it is, so it ends the command as a signal
        inner = exc.__cause__ or exc.__context__
        if inner is not None and not isinstance(inner, Exception):
            raise inner from None
        raise
    for name, kind in links:
        if kind == h5py.h5l.TYPE_HARD:
            continue
        where = _name(name)
        if kind == h5py.h5l.TYPE_EXTERNAL:
            target, obj = f.id.links.get_val(name)
            target = target.decode("utf-8", "backslashreplace") or "?"
            _refuse(src, where, f"an external link (to {target}:/{_name(obj)}): a run file "
                                "holds its objects itself")
        if kind == h5py.h5l.TYPE_SOFT:
            _refuse(src, where, f"a soft link (to {_name(f.id.links.get_val(name))}): a run "
                                "file has hard links only")
        _refuse(src, where, f"a user-defined link (type {kind}): a run file has hard links only")
    for name in [b"."] + [name for name, _ in links]:
        obj = h5py.h5o.open(f.id, name)
        where = "" if name == b"." else _name(name)
        for i in range(h5py.h5a.get_num_attrs(obj)):
            a = h5py.h5a.open(obj, index=i)
            t = a.get_type()
            declared = _elements(a.shape) * t.get_size()
            aname = f"{where}.{_name(a.name)}" if where else _name(a.name)
            if declared > out.size:
                _refuse(src, aname, f"attribute of shape {a.shape} declares {_bytes(declared)}, "
                                    f"more than the whole file ({_bytes(out.size)}) holds")
            if not _plain(t) and (not out.varlen or out.varlen[-1] != name):
                out.varlen.append(name)
        if not isinstance(obj, h5py.h5d.DatasetID):
            continue
        t = obj.get_type()
        if not _plain(t):
            # its fill value may lie in the global heap: HDF5 reads it with the creation
            # properties, and loops forever on a damaged heap
            _refuse(src, where, f"a dataset of {_class_name(t)} type: a run file stores "
                                "numbers")
        dcpl = obj.get_create_plist()
        if dcpl.get_layout() == h5py.h5d.VIRTUAL:
            _refuse(src, where, "a virtual dataset (its values would come from other "
                                "datasets or files, and read as fill values where those are "
                                "missing): a run file stores its data itself")
        if dcpl.get_external_count():
            ext = dcpl.get_external(0)[0].decode("utf-8", "backslashreplace")
            _refuse(src, where, f"a dataset stored in an external file ({ext}): a run file "
                                "stores its data itself")
        filters = [dcpl.get_filter(k)[0] for k in range(dcpl.get_nfilters())]
        for code in filters:
            if code not in FILTERS:
                _refuse(src, where, f"filter {code}, not one a run file uses "
                                    f"({', '.join(FILTERS.values())})")
        shape, dtype = tuple(int(s) for s in obj.shape), obj.dtype
        declared = _elements(shape) * t.get_size()
        if declared > out.size:
            _refuse(src, where, f"shape {shape} declares {_bytes(declared)}, more than the "
                                f"whole file ({_bytes(out.size)}) holds")
        if dcpl.get_layout() == h5py.h5d.CHUNKED:
            chunk = _elements(dcpl.get_chunk()) * t.get_size()
            if chunk > out.size:
                _refuse(src, where, f"chunks of {_bytes(chunk)}, more than the whole file "
                                    f"({_bytes(out.size)}) holds")
        out.datasets[where] = (shape, dtype)
    return out


def _int_attr(obj, name):
    """Integer attribute ``name`` of ``obj``, or ``None`` when absent or not a plain
    integer (the shape checks then go without it; the readers name it)."""
    if name not in obj.attrs:
        return None
    a = h5py.h5a.open(obj.id, name.encode())
    if a.get_type().get_class() != h5py.h5t.INTEGER or a.shape not in ((), (1,)):
        return None
    return int(np.asarray(obj.attrs[name]).reshape(-1)[0])


#: The row dimension of a time-dependent element in :func:`expected_shapes`: any length (the
#: commit counters are checked against it).
ROWS = "rows"


def expected_shapes(n, d, N, chains, observables, per_point) -> dict:
    """Path -> the shape each dataset of a run file must have: :data:`ROWS` for its row
    count, ``None`` for a parameter the file does not give (``n``, ``d``, ``N`` may be
    ``None``)."""
    want = {"data/X": (n, d), "data/y": (n,)}
    p = None if d is None else d + 2
    for k in range(max(1, chains)):
        root = "" if k == 0 else f"chains/{k}/"
        for el in ("position", "temperature", "stage", "step_in_stage"):
            for part in ("step", "time"):
                want[f"{root}particles/neurons/{el}/{part}"] = (ROWS,)
            want[f"{root}particles/neurons/{el}/value"] = \
                (ROWS, N, p) if el == "position" else (ROWS,)
        for name in observables:
            for part in ("step", "time"):
                want[f"{root}observables/{name}/{part}"] = (ROWS,)
            want[f"{root}observables/{name}/value"] = \
                (ROWS, n) if name in per_point else (ROWS,)
    return want


def check_shapes(f, found: Walk, src: str, observables, per_point) -> None:
    """Refuse a dataset whose shape or type disagrees with the file's own parameters
    (``/parameters`` attributes ``n``, ``d``, ``n_particles``, ``chains``).

    Raises
    ------
    RunFileError
        Naming the dataset, its shape and the shape the parameters give.
    """
    p = f["parameters"]
    n, d, N = (_int_attr(p, k) for k in ("n", "d", "n_particles"))
    chains = _int_attr(p, "chains")
    chains = 1 if chains is None else chains
    if not 1 <= chains <= len(found.datasets):
        _refuse(src, "parameters.chains", f"{chains} chains, but the file holds "
                                          f"{len(found.datasets)} datasets")
    given = ", ".join(f"{k} = {v}" for k, v in (("n", n), ("d", d), ("n_particles", N))
                      if v is not None)
    for where, pattern in expected_shapes(n, d, N, chains, observables, per_point).items():
        if where not in found.datasets:
            continue                 # a missing object is named by the reader
        shape, dtype = found.datasets[where]
        if dtype.kind not in "iuf":
            _refuse(src, where, f"data type {dtype}, expected numbers")
        if len(shape) == len(pattern) and all(w in (ROWS, None) or s == w
                                              for s, w in zip(shape, pattern)):
            continue
        want = ", ".join("?" if w is None else str(w) for w in pattern)
        want = f"({want},)" if len(pattern) == 1 else f"({want})"
        _refuse(src, where, f"shape {shape} disagrees with the file's parameters ({given}: "
                            f"expected {want})")


# ------------------------------------------------------------------ variable-length attributes

#: The child of :func:`vet_attributes`: reads every attribute of the objects named on its
#: standard input (hex, one a line), announcing each on stdout before it reads it, so that
#: the parent can name the one it did not finish. ``alarm`` (default action: the kernel ends
#: the process, even inside libhdf5) and ``PR_SET_PDEATHSIG`` end it should the parent not.
_CHILD = r"""
import signal, sys
signal.signal(signal.SIGALRM, signal.SIG_DFL)
signal.alarm(int(sys.argv[2]))
try:
    import ctypes
    ctypes.CDLL(None).prctl(1, 9)
except Exception:
    pass
import h5py
path = sys.argv[1]
try:
    f = h5py.File(path, "r")
except OSError as exc:
    if "already open for write" not in str(exc):
        raise
    f = h5py.File(path, "r", libver="latest", swmr=True)
out = sys.stdout
for line in sys.stdin.read().split():
    name = bytes.fromhex(line)
    obj = h5py.h5o.open(f.id, name)
    for i in range(h5py.h5a.get_num_attrs(obj)):
        a = h5py.h5a.open(obj, index=i)
        out.write("read " + name.hex() + " " + a.name.hex() + "\n")
        out.flush()
        try:
            h5py.AttributeManager(h5py.Group(obj) if isinstance(obj, h5py.h5g.GroupID)
                                  else h5py.Dataset(obj) if isinstance(obj, h5py.h5d.DatasetID)
                                  else h5py.Datatype(obj))[a.name.decode("utf-8", "surrogateescape")]
        except Exception:
            pass        # an error is no hang: the reader meets it again and names it
out.write("done\n")
"""

#: Files whose variable-length attributes a child has read, by identity (device, inode, size,
#: modification and change times): opened again, they need no second child...
_VETTED: set = set()
#: ... and those refused, with the refusal (a command that opens a file twice waits once).
_REFUSED: dict = {}


def _identity(src):
    try:
        st = os.stat(src)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def vet_attributes(src: str, found: Walk, deadline: float | None = None) -> None:
    """Read the variable-length attributes of ``found.varlen`` in a child process that must
    finish within ``deadline`` seconds (:data:`ATTRIBUTE_DEADLINE`); the caller then reads them
    itself, knowing that HDF5 returns (an attribute that fails to read fails there again and
    is named by the reader).

    Nothing is started for a file without such attributes (every file written since
    fixed-length strings), nor for one vetted before and unchanged since.

    Raises
    ------
    RunFileError
        The child did not finish in time (HDF5 loops: a damaged global heap), crashed, or
        could not open the file.
    """
    if not found.varlen:
        return
    ident = _identity(src)
    if ident is not None and ident in _VETTED:
        return
    if ident is not None and ident in _REFUSED:
        raise RunFileError(src, *_REFUSED[ident])
    try:
        _vet(src, found, deadline)
    except _Refused as exc:
        if ident is not None:
            _REFUSED[ident] = (exc.field, exc.reason)
        raise
    if ident is not None:
        if len(_VETTED) > 4096:
            _VETTED.clear()
        _VETTED.add(ident)


class _Refused(RunFileError):
    """A refusal of :func:`_vet` that holds for the file as long as it does not change."""


def _vet(src: str, found: Walk, deadline: float | None) -> None:
    deadline = ATTRIBUTE_DEADLINE if deadline is None else float(deadline)
    todo = "".join(name.hex() + "\n" for name in found.varlen)
    try:
        proc = subprocess.Popen([sys.executable, "-c", _CHILD, src, str(int(deadline) + 5)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=dict(os.environ, PYTHONSAFEPATH="1"))
    except OSError as exc:
        raise RunFileError(src, "", f"cannot start the process that checks its attributes "
                                    f"({exc.strerror or exc})") from None
    try:
        try:
            out, err = proc.communicate(todo.encode(), timeout=deadline)
            late = False
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            late = True
    finally:
        if proc.poll() is None:       # interrupted (SIGINT, SIGTERM) while waiting
            proc.kill()
            proc.wait()
    lines = out.decode("ascii", "replace").split("\n")
    last = ""
    for line in lines:
        parts = line.split()
        if len(parts) == 3 and parts[0] == "read":
            obj, attr = (_name(bytes.fromhex(p)) for p in parts[1:])
            last = f"{obj}.{attr}" if obj and obj != "." else attr
    if late:
        _refuse(src, last, f"HDF5 did not finish reading this attribute in {deadline:g} s (a "
                           "damaged file: a damaged global heap makes HDF5 loop forever "
                           "reading a variable-length string)", kind=_Refused)
    if proc.returncode < 0:
        sig = signal.Signals(-proc.returncode).name
        _refuse(src, last, f"reading this attribute crashes HDF5 ({sig}); the file is damaged",
                kind=_Refused)
    if proc.returncode != 0 or "done" not in lines:
        tail = err.decode("utf-8", "replace").strip().splitlines()
        raise RunFileError(src, last, "damaged run file, cannot check its attributes ("
                                      + (tail[-1] if tail else f"exit {proc.returncode}") + ")")


# --------------------------------------------------------------------------------- data reads

def read_rows(ds, rows, src: str, where: str | None = None):
    """``ds[:rows]`` (all of ``ds`` for ``rows=None``) as an array; a filter that fails (a
    Fletcher-32 checksum that does not match the stored data) is one line naming the dataset.

    Raises
    ------
    RunFileError
        The stored data of ``ds`` fails its checksum or cannot be decompressed.
    """
    try:
        return np.asarray(ds[()] if rows is None else ds[:rows])
    except OSError as exc:
        raise RunFileError(src, where or ds.name.lstrip("/"), failed_read(ds, exc)) from None


def failed_read(ds, exc) -> str:
    """The reason of a failed read of dataset ``ds``: a checksum that does not match, or what
    HDF5 said."""
    if "filter returned failure" in str(exc) or "fletcher" in str(exc).lower():
        try:
            dcpl = ds.id.get_create_plist()
            codes = [dcpl.get_filter(k)[0] for k in range(dcpl.get_nfilters())]
        except (OSError, RuntimeError, ValueError):
            codes = []
        if FLETCHER32 in codes:
            return ("checksum mismatch (Fletcher-32): the stored data was changed after it "
                    "was written; the file is damaged")
        return "its compressed data cannot be decoded; the file is damaged"
    from meanfield.store.reader import _h5_reason
    return f"damaged run file, cannot read ({_h5_reason(exc)})"


def check_dataset(f, name: str, src: str) -> None:
    """The checks of :func:`walk` for one dataset of a file opened again later (a frame read by
    :meth:`meanfield.store.Run.frame`): every link on its path a hard link, the dataset
    neither stored in an external file nor virtual. A missing object passes (the reader names
    it)."""
    parts = name.strip("/").split("/")
    for k in range(1, len(parts) + 1):
        path = "/".join(parts[:k])
        link = f.get(path, getlink=True)
        if link is None:
            return
        if not isinstance(link, h5py.HardLink):
            kind = ("an external link" if isinstance(link, h5py.ExternalLink) else
                    "a soft link" if isinstance(link, h5py.SoftLink) else "a user-defined link")
            _refuse(src, path, f"{kind}, where a run file has a hard link")
    obj = h5py.h5o.open(f.id, name.encode())
    if not isinstance(obj, h5py.h5d.DatasetID):
        return
    if not _plain(obj.get_type()):
        _refuse(src, name, f"a dataset of {_class_name(obj.get_type())} type: a run file "
                           "stores numbers")
    dcpl = obj.get_create_plist()
    if dcpl.get_layout() == h5py.h5d.VIRTUAL or dcpl.get_external_count():
        _refuse(src, name, "a virtual dataset or one stored in an external file: a run file "
                           "stores its data itself")
