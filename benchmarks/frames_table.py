"""The Frames page's table of 100 rows in a real browser: time from a click on "next" to the
new page of rows drawn, and the server's side of it (the ``frames_view`` callback building
the table), median of ``--repeats`` pages.

    emu replay traces/mars.json --out /tmp/res/mars --capture cap.pcapng   # once
    python benchmarks/frames_table.py /tmp/res/mars [--repeats 10]

Needs Debian's chromium (/usr/bin/chromium) and Playwright, as the browser tests do.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dashboard.app import Config, create_app, make_server  # noqa: E402

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a results folder with a capture")
    ap.add_argument("--repeats", type=int, default=10)
    a = ap.parse_args()
    from playwright.sync_api import sync_playwright

    from dashboard.pages import frames

    spent: list[float] = []
    table = frames.frames_table

    def timed(*args, **kw):  # the table's share of the callback: building the components
        t0 = time.perf_counter()
        out = table(*args, **kw)
        spent.append(time.perf_counter() - t0)
        return out
    frames.frames_table = timed
    with tempfile.TemporaryDirectory() as tmp:
        app, st = create_app(Config(results=[str(a.run)], whatif_dir=f"{tmp}/w", cache_dir=f"{tmp}/c"))
        server = make_server(app, "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_port}"
        try:
            with sync_playwright() as p:
                b = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
                pg = b.new_page(viewport={"width": 1440, "height": 1000})
                pg.goto(f"{base}/frames?runs={a.run.name}")
                pg.wait_for_selector("div.frames table tbody tr", timeout=120000)
                shown = []
                for i in range(a.repeats):
                    first = pg.text_content("div.frames tbody tr td")
                    t0 = time.perf_counter()
                    pg.click("#fr-next")
                    pg.wait_for_function("(f) => { const c = document.querySelector('div.frames tbody tr td');"
                                         " return c && c.textContent !== f; }", arg=first)
                    shown.append(time.perf_counter() - t0)
                b.close()
        finally:
            server.shutdown()
            st.close()
    build = spent[-a.repeats:]
    print(f"click to 100 rows drawn: median {statistics.median(shown) * 1e3:.0f} ms "
          f"(min {min(shown) * 1e3:.0f}, max {max(shown) * 1e3:.0f}) over {len(shown)} pages")
    print(f"table built on the server: median {statistics.median(build) * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
