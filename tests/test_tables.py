"""The tables of the kernel, the compiled replay and the NIC protocol are declared once and read by name."""

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

from emu.net import kernel as K
from emu.net import render_tables, tables


def test_column_constants_come_from_the_declarations():
    for table in (K.LINKS, K.LINK_PARAMS, K.NODES, K.FRAMES, K.MESSAGES, K.DESTS, K.STREAMS, K.UPCALLS, K.LOG,
                  K.BINS):
        for i, name in enumerate(table.columns):
            assert getattr(K, f"{table.prefix}_{name.upper()}") == i == table.col(name)
        assert getattr(K, f"{table.prefix}_NCOLS") == table.width
    # The existing constants keep their numbers (compiled drivers index with them).
    assert (K.L_RATE, K.L_NICQ, K.F_LOCAL, K.G_LOCAL, K.M_LIVE, K.S_NEXT, K.U_FRAG) == (2, 38, 13, 12, 7, 6, 4)


def _declaring_modules():
    return [importlib.import_module(path.removesuffix(".py").replace("/", ".")) for path in render_tables.MODULES]


def _tables():
    return [(m, var, t) for m in _declaring_modules() for var, t in vars(m).items() if isinstance(t, tables.Table)]


@pytest.mark.parametrize("path", render_tables.MODULES)
def test_each_declaring_source_holds_its_column_constants_as_rendered(path, tmp_path):
    """Written out (grep, an IDE and pyflakes see them) and equal to what the Tables render;
    a Table changed without re-rendering fails here."""
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    src = Path(module.__file__).read_text()
    found = [(var, t) for var, t in vars(module).items() if isinstance(t, tables.Table)]
    assert found
    for var, table in found:
        assert src.count(tables.rendered(var, table)) == 1, f"run python -m emu.net.render_tables ({var})"
        for name, value in table.constants().items():
            assert getattr(module, name) == value, name
    # the renderer rewrites a stale block in place
    var, table = found[-1]
    ncols = f"{table.prefix}_NCOLS = {table.width}\n"
    copy = tmp_path / Path(path).name
    copy.write_text(src.replace(ncols, f"{table.prefix}_NCOLS = {table.width + 1}\n"))
    assert tables.render_file(str(copy), module) and copy.read_text() == src


def _module_constants():
    """Every upper-case name assigned at the top of a module of emu/: name -> {module: source line}."""
    import ast

    root = Path(K.__file__).parents[1]
    out = {}
    for path in sorted(root.rglob("*.py")):
        module = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        for node in ast.parse(path.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            for t in targets:
                for n in t.elts if isinstance(t, ast.Tuple) else [t]:
                    if isinstance(n, ast.Name) and n.id.isupper():
                        out.setdefault(n.id, {})[module] = ast.unparse(node)
    return out


def test_one_prefix_per_table_and_each_column_constant_defined_once_in_emu():
    """No two tables share a prefix; a table's constants are assigned in its own module and nowhere
    else in emu/, and no other module assigns a name with a table's prefix (D_NODE was the
    kernel's MD column and the protocol's OD column, both 0)."""
    found = _tables()
    prefixes = [t.prefix for _m, _v, t in found]
    assert len(prefixes) == len(set(prefixes)) and {"L", "OPS", "NT", "RS", "OUT", "OD", "SIM", "ERR"} <= set(prefixes)
    defined = _module_constants()
    for module, var, table in found:
        for name in table.constants():
            assert set(defined[name]) == {module.__name__}, f"{name} ({var}) is also assigned in {defined[name]}"
    # a longer prefix owns its names (LF_P is LINK_PARAMS's, not LINKS's)
    owner = {}
    for name, where in defined.items():
        best = max((t for _m, _v, t in found if name.startswith(t.prefix + "_")), key=lambda t: len(t.prefix),
                   default=None)
        if best is not None:
            home = next(m.__name__ for m, _v, t in found if t is best)
            owner[name] = (best, set(where) - {home})
    strays = {name: others for name, (_t, others) in owner.items() if others}
    assert not strays, f"names with another module's table prefix: {strays}"


def test_the_duplicate_check_sees_a_stray_column_constant(monkeypatch):
    """The check above fails where it should: a module of emu/ assigning D_NODE again."""
    defined = _module_constants()
    defined["D_NODE"]["emu.nic.protocol"] = "D_NODE = 0"
    monkeypatch.setattr(sys.modules[__name__], "_module_constants", lambda: defined)
    with pytest.raises(AssertionError, match="D_NODE"):
        test_one_prefix_per_table_and_each_column_constant_defined_once_in_emu()


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
