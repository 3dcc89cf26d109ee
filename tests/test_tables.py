"""The kernel's tables are declared once and read by name."""

from pathlib import Path

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


def test_the_kernels_source_holds_its_column_constants_as_rendered(tmp_path):
    """Written out (grep, an IDE and pyflakes see them) and equal to what the Tables render;
    a Table changed without re-rendering fails here."""
    from emu.net import tables

    src = Path(K.__file__).read_text()
    for var, table in vars(K).items():
        if isinstance(table, tables.Table):
            assert src.count(tables.rendered(var, table)) == 1, f"run python -m emu.net.render_tables ({var})"
    # the renderer rewrites a stale block in place
    copy = tmp_path / "kernel.py"
    copy.write_text(src.replace("L_NCOLS = 41", "L_NCOLS = 40"))
    assert tables.render_file(str(copy), K) and copy.read_text() == src


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
