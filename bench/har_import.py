"""How long a HAR import's preview takes: ``.venv/bin/python -m bench.har_import``.

The preview is computed again at every change the user makes, so it must stay quick on
long recordings. A synthetic HAR of N pages, each a JSON document of 250 items (500
candidate values for correlation) with 20 images, the next page sending one id back;
prints size, load and analysis times for three sizes.

Then Firefox-style recordings (no ``_resourceType``: a document is an HTML answer to a
request that accepted HTML) of 8,000 and 16,000 entries: their analysis time and the ratio
of the two, which is about 2 when the analysis is linear in the entries and about 4 when it
is quadratic (issue 30: it was, 3 s and 18 s).
"""

import json
import sys
import time
from datetime import UTC, datetime

from portal.projects import har

SITE = "http://127.0.0.1:8001"


def _entry(url: str, t: float, kind: str, mime: str, text: str = "", accept: str = "*/*") -> dict:
    entry = {
        "startedDateTime": datetime.fromtimestamp(1_790_000_000 + t, UTC).isoformat().replace("+00:00", "Z"),
        "time": 10,
        "request": {"method": "GET", "url": url, "headers": [{"name": "Accept", "value": accept}]},
        "response": {"status": 200, "headers": [], "content": {"mimeType": mime, "text": text}, "redirectURL": ""},
    }
    if kind:
        entry["_resourceType"] = kind
    return entry


def firefox_recording(entries: int) -> bytes:
    """``entries`` requests without _resourceType: an HTML page, then 19 images, over and over."""
    out = []
    for n in range(entries):
        page, k = divmod(n, 20)
        if k == 0:
            html = "text/html,application/xhtml+xml,*/*;q=0.8"
            out.append(_entry(f"{SITE}/page/{page}", n / 100, "", "text/html", "<p>page</p>", accept=html))
        else:
            out.append(_entry(f"{SITE}/static/{page}/{k}.png", n / 100, "", "image/png", accept="image/*"))
    return json.dumps({"log": {"version": "1.2", "entries": out}}).encode()


def untyped(sizes=(8000, 16000)) -> dict[int, float]:
    """Seconds to analyse a Firefox-style recording of each size (the best of two)."""
    seconds = {}
    for n in sizes:
        entries = har.load(firefox_recording(n), max_bytes=1 << 30)
        best = float("inf")
        for _ in range(2):
            started = time.perf_counter()
            har.analyze(entries, allowed=lambda url: None)
            best = min(best, time.perf_counter() - started)
        seconds[n] = best
    return seconds


def recording(pages: int) -> bytes:
    entries = []
    for i in range(pages):
        doc = {"items": [{"id": 100_000 + i * 1000 + j, "name": f"item-{i}-{j}-xyz"} for j in range(250)]}
        url = f"{SITE}/api/page{i}?prev={100_000 + (i - 1) * 1000 + 5}"
        entries.append(_entry(url, i, "document", "application/json", json.dumps(doc)))
        entries += [_entry(f"{SITE}/static/{i}/{k}.png", i + 0.01, "image", "image/png") for k in range(20)]
    return json.dumps({"log": {"version": "1.2", "entries": entries}}).encode()


def main() -> None:
    if "--untyped" in sys.argv:
        seconds = untyped()
        for n, s in seconds.items():
            print(f"untyped {n:>6} entries: analysis {s:.3f} s")
        print(f"ratio 16000/8000: {seconds[16000] / seconds[8000]:.2f} (linear ~2, quadratic ~4)")
        return
    print(f"{'pages':>6} {'MB':>6} {'load s':>7} {'preview s':>9} {'steps':>6} {'correlations':>12}")
    for pages in (50, 200, 400):
        raw = recording(pages)
        started = time.perf_counter()
        entries = har.load(raw)
        loaded = time.perf_counter()
        preview = har.analyze(entries, allowed=lambda url: None)
        done = time.perf_counter()
        print(
            f"{pages:>6} {len(raw) / 1e6:>6.1f} {loaded - started:>7.2f} {done - loaded:>9.2f} "
            f"{len(preview.steps):>6} {len(preview.correlations):>12}"
        )


if __name__ == "__main__":
    main()
