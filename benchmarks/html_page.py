"""Size and load time of the HTML report page (issue 31): each example file's page as
`fusionlens compile FILE --no-benchmark --html OUT.html` writes it (every target on one page),
opened `--loads` times in headless Chromium (Debian's, through playwright). Prints a table; not
a test.

The times are in ms from the navigation's start: Chrome's first contentful paint; the page's
own marks, `drawn` when the source, the plan menu and the fusion graph are drawn (page.js,
before plotly.js is parsed), `charts` when the roofline and the timeline are drawn too, after
the first paint (a page without the marks: its load event);
and `busy`, the renderer's main-thread task time to then (Chrome's Performance.getMetrics
TaskDuration): what the page costs a core, less what other processes of a loaded machine take
from it. A median over the loads of one browser (the first load of a fresh browser pays its
start-up too, and is left out).

    python benchmarks/html_page.py [--loads 5] [examples/gpt_block.py examples/train_gpt.py]
    python benchmarks/html_page.py --pages a.html b.html   # pages already written
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

from tables import table

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-sync"]
# the page's marks; a page without them (one written before issue 31) is timed to its load event
_READY = "document.readyState === 'complete' && (!window.fusionlens || !('drawnAt' in window.fusionlens) " \
    "|| window.fusionlens.chartsAt !== undefined)"
_MARKS = """() => {
  const f = window.fusionlens || {};
  const load = performance.getEntriesByType("navigation")[0].loadEventEnd;
  const paint = performance.getEntriesByName("first-contentful-paint")[0];
  return [paint ? paint.startTime : load, f.drawnAt || load, f.chartsAt || load];
}"""


def write_page(path: str, out: str) -> None:
    subprocess.run([sys.executable, "-m", "fusionlens", "compile", path, "--no-benchmark", "--html", out],
                   check=True, cwd=REPO, stdout=subprocess.DEVNULL)


def time_pages(pages: list[str], loads: int, chromium: str = CHROMIUM) -> list[list[str]]:
    from playwright.sync_api import sync_playwright

    rows = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=ARGS)
        for file in pages:
            marks = []
            for _ in range(loads + 1):
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                cdp = page.context.new_cdp_session(page)
                cdp.send("Performance.enable")
                page.goto("file://" + os.path.abspath(file), wait_until="load")
                page.wait_for_function(_READY)
                metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
                marks.append(page.evaluate(_MARKS) + [metrics["TaskDuration"] * 1e3])
                page.close()
            paint, drawn, charts, busy = (statistics.median(m[i] for m in marks[1:]) for i in range(4))
            rows.append([os.path.basename(file), f"{os.path.getsize(file) / 1e6:.2f} MB", f"{paint:.0f}",
                         f"{drawn:.0f}", f"{charts:.0f}", f"{busy:.0f}"])
        browser.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", default=["examples/gpt_block.py", "examples/train_gpt.py"])
    parser.add_argument("--pages", nargs="+", help="time these pages, written already")
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--chromium", default=CHROMIUM,
                        help="the browser to run: on a machine others load, a script that runs it under `nice -n -15`")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pages = args.pages or []
        for f in [] if args.pages else args.files:
            pages.append(os.path.join(tmp, os.path.basename(f)[:-3] + ".html"))
            write_page(f, pages[-1])
        rows = time_pages(pages, args.loads, args.chromium)
        table(rows, ["page", "size", "first paint (ms)", "drawn (ms)", "charts (ms)", "busy (ms)"])
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
