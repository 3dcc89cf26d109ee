"""Parameter sweeps: a TOML grid of replays, run on a local process pool or a Dask cluster.

``spec`` reads and checks a sweep file and expands it into points (plain dicts); ``worker``
runs one point (generate the trace, replay it, flatten the summary into a row); ``runner``
sends the points to a ``concurrent.futures`` executor (a spawned process pool, or a Dask
cluster's executor: one code path) and writes each row as it arrives; ``dataset`` is the
output folder (one Parquet part per point, a consolidated ``results.parquet``).
docs/sweeps.md describes the file format, the dataset's columns and the shipped sweeps.
"""

from .spec import Sweep, load, point_id  # noqa: F401
