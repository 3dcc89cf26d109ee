"""The compiled replay engine: the op DAG, compute engines, NICs and the frame kernel in one numba loop.

emu.engine.loop is the loop; emu.engine.runner runs it from a trace's tables (emu.engine.tables) and reads
them back; the other modules are its parts, each named for what it models (docs/engine.md).
"""
