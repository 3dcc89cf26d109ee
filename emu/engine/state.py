"""The compiled replay's state: every table, kernel and replay, behind one numba struct reference.

Compiled functions take this one object (``s``) and read its tables as fields
(``s.OP``, ``s.SC``), so a call passes one reference instead of thirty arrays, and a
table can be replaced by a bigger one inside the loop (``more_hist(s, n)``).

The loop's functions are compiled without numba's reference counting (``compiled``,
as the frame kernel is): with it, every ``s.X`` read and every array argument was an
atomic increment and decrement, about a sixth of the loop's time. They never
allocate and only read tables through ``s``; the few functions that replace a
table by a bigger one (``more_*`` here and in emu.engine.reliable, the kernel
buffers' in emu.engine.loop) keep reference counting, so the old table is freed. A
table that can be replaced (SIM, WORK, HIST, ERR; the kernel's FP, FREE, UP, HP, LB;
with reliable delivery also MS, MD, MX, OUT, OD, BITS, SP, SFREE, SL, NKB) is read from
``s`` again after any call that may replace it, never through a local name taken
before. Python replaces kernel tables only between two calls of ``drive`` (a timeline
change, emu.engine.runner).
The kernel's tables are emu.net.network.Network's (the names of emu.net.kernel);
the replay's are named in emu.engine.layout.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.core import cgutils, imputils, types
from numba.core.datamodel import models
from numba.core.extending import infer_getattr, lower_getattr_generic, lower_setattr_generic
from numba.core.datamodel.registry import default_manager
from numba.core.runtime.nrtdynmod import _meminfo_struct_type
from numba.core.typing.templates import AttributeTemplate
from numba.experimental import structref

from .. import compiled_cache  # noqa: F401  (before any compiled function: their cache stamp)

# The loop's functions: no reference counting (they borrow every table from ``s``).
compiled = njit(cache=True, _nrt=False)
compiled_inline = njit(cache=True, inline="always", _nrt=False)
# The functions that allocate a table, with reference counting: said explicitly, since a
# function compiled without an ``_nrt`` of its own takes its first caller's.
allocating = njit(cache=True, _nrt=True)

KERNEL = ("SC", "LK", "LF", "LR", "LD", "ND", "NS", "DL", "FP", "FREE", "HP", "LG", "FW", "MS", "MD", "BITS",
          "UP", "SP", "SL", "SFREE",
          "LB")     # per-link statistics bins, accumulated in the frame loop
# The replay's tables; those with columns are declared in emu.engine.layout (OP: OPS_*,
# the others by their own name: OW_*, PT_*, ..., SIM_*, WORK_*, HIST_*, ERR_*); RQ, IDX, DF and
# NKB are flat.
REPLAY = ("RS", "OP", "OW", "PT", "SLOT", "NT", "RQ", "TR", "MX", "KB", "KR", "IDX", "DF", "GP",
          "SIM",    # the event heap
          "WORK",   # the work stack
          "HIST",   # directory history
          "ERR",    # directory errors
          # reliable delivery (emu.engine.reliable): the protocol's sender tables
          "OUT",    # per message: emu.nic.protocol's OUT_* columns
          "OD",     # per message destination (rows as MD): emu.nic.protocol's OD_* columns
          "RT",     # per board, per peer: emu.nic.rto's RT_* columns
          "NKB")    # nack payloads (missing-fragment bitmaps), bytes
FIELDS = KERNEL + REPLAY


class StateType(types.StructRef):
    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


# What structref.register does, with a field read that also compiles without reference
# counting: numba's asks the NRT for the payload's address, which such a function refuses;
# the address is a plain load from the MemInfo (as NRT_MemInfo_data_fast does).
default_manager.register(StateType, models.StructRefModel)


def _payload(context, builder, typ, val):
    meminfo = cgutils.create_struct_proxy(typ)(context, builder, value=val).meminfo
    mi = builder.bitcast(meminfo, _meminfo_struct_type.as_pointer())
    data = builder.load(cgutils.gep(builder, mi, 0, 3))
    model = context.data_model_manager[typ.get_data_type()]
    data = builder.bitcast(data, model.get_value_type().as_pointer())
    return cgutils.create_struct_proxy(typ.get_data_type())(context, builder, ref=data)


@infer_getattr
class _StateAttribute(AttributeTemplate):
    key = StateType

    def generic_resolve(self, typ, attr):
        return typ.field_dict.get(attr)


@lower_getattr_generic(StateType)
def _get(context, builder, typ, val, attr):
    value = getattr(_payload(context, builder, typ, val), attr)
    return imputils.impl_ret_borrowed(context, builder, typ.field_dict[attr], value)


@lower_setattr_generic(StateType)
def _set(context, builder, sig, args, attr):
    typ, vtyp = sig.args
    inst, val = args
    data = _payload(context, builder, typ, inst)
    ftyp = typ.field_dict[attr]
    new = context.cast(builder, val, vtyp, ftyp)
    old = getattr(data, attr)
    context.nrt.incref(builder, ftyp, new)
    context.nrt.decref(builder, ftyp, old)  # last: the new value may be the old one
    setattr(data, attr, new)


class State(structref.StructRefProxy):
    """Build with ``State(**tables)``; read a table back with ``state.table(name)``."""

    def __new__(cls, **tables):
        # numba's own constructor is compiled anew in every process (about a second); this one is cached
        return _new_state(*(tables[f] for f in FIELDS))

    def table(self, name: str) -> np.ndarray:
        return _tables(self)[FIELDS.index(name)]


structref.define_proxy(State, StateType, list(FIELDS))


@njit(cache=True)
def _new_state(*tables):
    return State(*tables)


@njit(cache=True)
def _tables(s):
    return (s.SC, s.LK, s.LF, s.LR, s.LD, s.ND, s.NS, s.DL, s.FP, s.FREE, s.HP, s.LG, s.FW, s.MS, s.MD,
            s.BITS, s.UP, s.SP, s.SL, s.SFREE, s.LB, s.RS, s.OP, s.OW, s.PT, s.SLOT, s.NT, s.RQ, s.TR, s.MX, s.KB, s.KR,
            s.IDX, s.DF, s.GP, s.SIM, s.WORK, s.HIST, s.ERR, s.OUT, s.OD, s.RT, s.NKB)


@allocating
def grown(a, need):
    """``a`` with at least ``need`` rows (doubling), zero-filled beyond its rows."""
    if need <= a.shape[0]:
        return a
    b = np.zeros((max(need, 2 * a.shape[0]),) + a.shape[1:], a.dtype)
    b[: a.shape[0]] = a
    return b


@allocating
def doubled_pool(table, free, nfree):
    """A pool table of twice the rows and its free stack: the ``nfree`` free rows, then the new
    ones, lowest on top (emu.net.network._grow_pool's order). The caller adds the new rows to
    its free count."""
    n = table.shape[0]
    stack = np.empty(2 * n, np.int64)
    stack[:nfree] = free[:nfree]
    stack[nfree: nfree + n] = np.arange(2 * n - 1, n - 1, -1)
    return grown(table, 2 * n), stack


# Replacing a table: called by the loop only when a table is full.
@allocating
def more_heap(s):
    s.HP = grown(s.HP, 2 * s.HP.shape[0])


@allocating
def more_sim(s, need):
    s.SIM = grown(s.SIM, need)


@allocating
def more_work(s, need):
    s.WORK = grown(s.WORK, need)


@allocating
def more_hist(s, need):
    s.HIST = grown(s.HIST, need)


@allocating
def more_err(s, need):
    s.ERR = grown(s.ERR, need)
