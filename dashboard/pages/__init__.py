"""One module per page. Each has ``PATH``, ``NAME``, ``layout(**query)`` (Dash pages call it
with the URL's query and the last run selection as ``sel``) and ``register(app)`` for its
callbacks; ``dashboard.app`` registers them with ``dash.register_page``."""

from . import frames, links, memory, overview, sweep, timeline, whatif

PAGES = [overview, links, memory, timeline, frames, sweep, whatif]
