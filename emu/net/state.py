"""Every table of the frame kernel and the compiled replay behind one numba struct reference.

Compiled functions take this one object (``s``) and read its tables as fields
(``s.SC``, ``s.OP``), so a call passes one reference instead of twenty or thirty arrays,
and a table can be replaced by a bigger one inside a compiled function (``s.HP = ...``).
The frame kernel's entry points (emu.net.kernel) take it; emu.net.network.Network holds
one whose replay tables are empty placeholders of the replay's types (``placeholders``),
so the kernel is compiled for one State type whichever of the two calls it.

A field is read without reference counting (the reading functions may be compiled
without numba's NRT, as the kernel's and the replay loop's are): emu.engine.state says
which functions may replace a table, and how the others read it again.
The kernel's tables are named in emu.net.kernel, the replay's in emu.engine.layout.
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

KERNEL = ("SC", "LK", "LF", "LR", "LD", "ND", "NS", "DL", "FP", "FREE", "HP", "LG", "FW", "MS", "MD", "BITS",
          "UP", "SP", "SL", "SFREE",
          "LB")     # per-link statistics bins, accumulated in the frame loop
# The replay's tables with their element type and dimensions (what emu.engine.tables builds):
# a Network's State holds an empty one of each, so both States are one numba type.
_REPLAY_TYPES = (
    ("RS", np.int64, 1), ("OP", np.int32, 2), ("OW", np.int64, 2), ("PT", np.int32, 2),
    ("SLOT", np.int32, 2), ("SW", np.int64, 2), ("NT", np.int64, 2), ("RQ", np.int64, 2),
    ("TR", np.int64, 2),
    ("MX", np.int64, 2), ("KB", np.int64, 2), ("KR", np.int64, 2), ("IDX", np.int32, 1),
    ("DF", np.int8, 1), ("GP", np.int64, 2),
    ("SIM", np.int64, 2),    # the event heap (emu.engine.layout: SIM_*)
    ("WORK", np.int64, 2),   # the work stack (WORK_*)
    ("HIST", np.int64, 2),   # directory history (HIST_*)
    ("HN", np.int32, 2),     # ... its narrow values, row for row (HN_*)
    ("ERR", np.int64, 2),    # directory errors (ERR_*)
    # reliable delivery (emu.engine.reliable): the protocol's sender tables
    ("OUT", np.int64, 2),    # per message: emu.nic.protocol's OUT_* columns
    ("OD", np.int64, 2),     # per message destination (rows as MD): emu.nic.protocol's OD_* columns
    ("RT", np.int64, 3),     # per board, per peer: emu.nic.rto's RT_* columns
    ("NKB", np.uint8, 1),    # nack payloads (missing-fragment bitmaps), bytes
)
REPLAY = tuple(name for name, _dtype, _ndim in _REPLAY_TYPES)
FIELDS = KERNEL + REPLAY


def placeholders() -> dict[str, np.ndarray]:
    """An empty table for each replay field: what a State outside a replay holds there."""
    return {name: np.zeros((0,) * ndim, dtype) for name, dtype, ndim in _REPLAY_TYPES}


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

    def tables(self, names=FIELDS) -> dict[str, np.ndarray]:
        """The tables ``names`` (all by default), by name: one compiled call for all of them."""
        every = _tables(self)
        return {name: every[FIELDS.index(name)] for name in names}


structref.define_proxy(State, StateType, list(FIELDS))


@njit(cache=True)
def _new_state(*tables):
    return State(*tables)


@njit(cache=True, _nrt=True)
def set_kernel(s, SC, LK, LF, LR, LD, ND, NS, DL, FP, FREE, HP, LG, FW, MS, MD, BITS, UP, SP, SL, SFREE, LB):
    """The kernel's tables in ``s``, as their holder has them after replacing some."""
    s.SC, s.LK, s.LF, s.LR, s.LD, s.ND, s.NS, s.DL, s.FP, s.FREE, s.HP = SC, LK, LF, LR, LD, ND, NS, DL, FP, FREE, HP
    s.LG, s.FW, s.MS, s.MD, s.BITS, s.UP, s.SP, s.SL, s.SFREE, s.LB = LG, FW, MS, MD, BITS, UP, SP, SL, SFREE, LB


@njit(cache=True, _nrt=True)
def set_wiring(s, PT, IDX, DF):
    """The replay's parts, index pool and dependency flags in ``s``: after the run, empty ones,
    so that their memory goes back while the results are read (nothing reads them then)."""
    s.PT, s.IDX, s.DF = PT, IDX, DF


@njit(cache=True)
def _tables(s):
    return (s.SC, s.LK, s.LF, s.LR, s.LD, s.ND, s.NS, s.DL, s.FP, s.FREE, s.HP, s.LG, s.FW, s.MS, s.MD,
            s.BITS, s.UP, s.SP, s.SL, s.SFREE, s.LB, s.RS, s.OP, s.OW, s.PT, s.SLOT, s.SW, s.NT, s.RQ, s.TR, s.MX, s.KB, s.KR,
            s.IDX, s.DF, s.GP, s.SIM, s.WORK, s.HIST, s.HN, s.ERR, s.OUT, s.OD, s.RT, s.NKB)
