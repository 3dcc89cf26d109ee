"""The kernel's tables are declared once and read by name."""

import numpy as np
import pytest

from emu.net import kernel as K


def test_column_constants_come_from_the_declarations():
    for table in (K.LINKS, K.LINK_PARAMS, K.NODES, K.FRAMES, K.MESSAGES, K.DESTS, K.STREAMS, K.UPCALLS, K.LOG,
                  K.BINS):
        for i, name in enumerate(table.columns):
            assert getattr(K, f"{table.prefix}_{name.upper()}") == i == table.col(name)
        assert getattr(K, f"{table.prefix}_NCOLS") == table.width
    # The existing constants keep their numbers (compiled drivers index with them).
    assert (K.L_RATE, K.L_NICQ, K.F_LOCAL, K.G_LOCAL, K.M_LIVE, K.S_NEXT, K.U_FRAG) == (2, 38, 13, 12, 7, 6, 4)


def test_log_rows_read_by_field_name():
    rows = np.arange(3 * K.G_NCOLS, dtype=np.int64).reshape(3, K.G_NCOLS)
    rec = K.LOG.records(rows)
    assert rec["link"].tolist() == rows[:, K.G_LINK].tolist()
    assert rec["arr"].tolist() == rows[:, K.G_ARR].tolist()
    rec["fate"][1] = 99  # a view: no copy of the block
    assert rows[1, K.G_FATE] == 99
    with pytest.raises(KeyError, match="no field"):
        K.LOG.col("nope")
    with pytest.raises(ValueError, match="13 columns"):
        K.LOG.records(rows[:, :5])
