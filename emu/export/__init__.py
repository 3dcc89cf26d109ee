"""Exports of results folders to other tools' formats (``perfetto``: Chrome trace-event JSON).

They read results folders only and import nothing of the engine."""
