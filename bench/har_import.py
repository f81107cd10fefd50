"""How long a HAR import's preview takes: ``.venv/bin/python -m bench.har_import``.

The preview is computed again at every change the user makes, so it must stay quick on
long recordings. A synthetic HAR of N pages, each a JSON document of 250 items (500
candidate values for correlation) with 20 images, the next page sending one id back;
prints size, load and analysis times for three sizes.
"""

import json
import time
from datetime import UTC, datetime

from portal.projects import har

SITE = "http://127.0.0.1:8001"


def _entry(url: str, t: float, kind: str, mime: str, text: str = "") -> dict:
    return {
        "startedDateTime": datetime.fromtimestamp(1_790_000_000 + t, UTC).isoformat().replace("+00:00", "Z"),
        "time": 10,
        "request": {"method": "GET", "url": url, "headers": [{"name": "Accept", "value": "*/*"}]},
        "response": {"status": 200, "headers": [], "content": {"mimeType": mime, "text": text}, "redirectURL": ""},
        "_resourceType": kind,
    }


def recording(pages: int) -> bytes:
    entries = []
    for i in range(pages):
        doc = {"items": [{"id": 100_000 + i * 1000 + j, "name": f"item-{i}-{j}-xyz"} for j in range(250)]}
        url = f"{SITE}/api/page{i}?prev={100_000 + (i - 1) * 1000 + 5}"
        entries.append(_entry(url, i, "document", "application/json", json.dumps(doc)))
        entries += [_entry(f"{SITE}/static/{i}/{k}.png", i + 0.01, "image", "image/png") for k in range(20)]
    return json.dumps({"log": {"version": "1.2", "entries": entries}}).encode()


def main() -> None:
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
