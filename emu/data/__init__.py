"""The data that ship with the package: workload traces and sweep files (see ``emu.shipped``).

``traces`` and ``sweeps`` here are links to the checkout's top-level ``traces/`` and
``sweeps/`` folders; a build copies their files into the wheel as package data, so an
installed emu finds them with importlib.resources, wherever it runs.
"""
