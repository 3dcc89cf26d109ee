"""The schemes the generator knows and the names its choice-valued options take.

Names only, importing nothing: the CLI builds its parser from them at start-up, and the
generator, the trace validator, the Python API and sweep files check against them.
"""

SCHEMES = ("mars", "ring", "zigzag", "pd", "full", "ulysses", "usp")
RING_ORDERS = ("embedding", "boards")  # --ring-order: the ring's order of boards
PD_MODES = ("bulk", "stream")  # emu trace pd --pd-mode
