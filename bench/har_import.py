"""How long a HAR import's preview takes: ``.venv/bin/python -m bench.har_import``.

The preview is computed again at every change the user makes, so it must stay quick on
long recordings. A synthetic HAR of N pages, each a JSON document of 250 items (500
candidate values for correlation) with 20 images, the next page sending one id back;
prints size, load and analysis times for three sizes.

``--linear``: the analysis of 8,000, 16,000 and 32,000 entries (``--sizes``) before and after
the fixes that made it linear (issue 30, item 4), in one run: the version before each fix is
read from git (``git show REV:portal/projects/har.py``; the package ``portal/projects/har/`` at a
revision after the split) and timed on the same entries as the working tree's. Three shapes, each
quadratic before its fix:

- ``firefox``: an HTML page and 19 images, over and over, without ``_resourceType`` (Firefox
  records none: each entry asked whether any entry was typed); before: b2182d4^.
- ``one page``: one document and all the rest its sub-requests (its resources deduplicated
  through a list); before: 56a2600.
- ``many origins``: one document, then each request on a loopback port of its own, every one an
  allowed origin (each origin asked every entry for a WebSocket session); before: 56a2600.

A time doubling with the entries is linear, quadrupling quadratic. The old version is not run
at a size its previous time predicts to exceed ``--budget`` seconds (quadratic: 4 times), and
the row says so. The best of two runs is kept for the working tree, one run for the old version.
"""

import argparse
import importlib.util
import io
import json
import pathlib
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import types
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


def one_page(entries: int) -> bytes:
    """A document, then ``entries - 1`` sub-requests of distinct paths: one page of many resources."""
    out = [_entry(f"{SITE}/", 0, "", "text/html", "<p>page</p>", accept="text/html")]
    out += [_entry(f"{SITE}/static/{k}.png", k / 1000, "", "image/png", accept="image/*") for k in range(1, entries)]
    return json.dumps({"log": {"version": "1.2", "entries": out}}).encode()


def many_origins(entries: int) -> bytes:
    """A document, then ``entries - 1`` requests each on a loopback port of its own (all allowed origins)."""
    out = [_entry(f"{SITE}/", 0, "", "text/html", "<p>page</p>", accept="text/html")]
    for k in range(1, entries):
        host = f"127.0.{k // 60_000}.{1 + k % 250}:{1024 + k % 60_000}"
        out.append(_entry(f"http://{host}/x.png", k / 1000, "", "image/png", accept="image/*"))
    return json.dumps({"log": {"version": "1.2", "entries": out}}).encode()


# shape -> (recording, the revision before the fix that made its analysis linear)
SHAPES = {
    "firefox": (firefox_recording, "b2182d4^"),
    "one page": (one_page, "56a2600"),
    "many origins": (many_origins, "56a2600"),
}


def har_at(revision: str) -> types.ModuleType:
    """The HAR import as it was at ``revision``, as a module of its own: ``portal/projects/har.py`` before the
    split into a package, the package ``portal/projects/har/`` after it (extracted and imported under its own name).
    """
    name = "har_at_" + re.sub(r"\W", "_", revision)
    single = subprocess.run(["git", "cat-file", "-e", f"{revision}:portal/projects/har.py"], capture_output=True)
    if single.returncode == 0:
        source = subprocess.run(
            ["git", "show", f"{revision}:portal/projects/har.py"], capture_output=True, text=True, check=True
        ).stdout
        module = types.ModuleType(name)
        sys.modules[module.__name__] = module  # dataclasses look their module up
        exec(compile(source, f"har.py@{revision}", "exec"), module.__dict__)  # noqa: S102 (the repository's own code)
        return module
    archive = subprocess.run(["git", "archive", revision, "portal/projects/har"], capture_output=True, check=True)
    with tempfile.TemporaryDirectory(prefix=f"{name}-") as folder:  # its modules are all imported by its __init__
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(folder, filter="data")
        package = pathlib.Path(folder) / "portal" / "projects" / "har"
        spec = importlib.util.spec_from_file_location(
            name, package / "__init__.py", submodule_search_locations=[str(package)]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # its modules import each other relatively, through this name
        spec.loader.exec_module(module)
    return module


def _analysis_seconds(module, raw: bytes, runs: int) -> float:
    entries = module.load(raw, max_bytes=1 << 30)
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        module.analyze(entries, allowed=lambda url: None)
        best = min(best, time.perf_counter() - started)
    return best


def linear(sizes=(8000, 16000, 32000), budget: float = 300.0) -> None:
    """Before and after, per shape and size: seconds of analysis, and each time's ratio to the previous size's."""
    print(f"{'shape':<13} {'entries':>7} {'before s':>9} {'x':>5} {'after s':>8} {'x':>5} {'speed-up':>9}")
    for shape, (make, revision) in SHAPES.items():
        old = har_at(revision)
        last_old: tuple[int, float] | None = None  # (entries, seconds) of the old version's last run
        last_new: float | None = None
        for n in sizes:
            raw = make(n)
            new_s = _analysis_seconds(har, raw, runs=2)
            predicted = last_old[1] * (n / last_old[0]) ** 2 if last_old else 0.0
            old_s = _analysis_seconds(old, raw, runs=1) if predicted <= budget else None
            before = f"{old_s:9.2f}" if old_s is not None else f"{'(skipped)':>9}"
            ratio_old = f"{old_s / last_old[1]:5.1f}" if old_s is not None and last_old else " " * 5
            ratio_new = f"{new_s / last_new:5.1f}" if last_new else " " * 5
            speedup = f"{old_s / new_s:8.0f}x" if old_s is not None else " " * 9
            print(f"{shape:<13} {n:>7} {before} {ratio_old} {new_s:8.2f} {ratio_new} {speedup}", flush=True)
            if old_s is None:
                print(f"{'':<21} before: {last_old[1]:.0f} s at {last_old[0]} predicts {predicted:.0f} s (--budget)")
            else:
                last_old = (n, old_s)
            last_new = new_s
        print(f"{'':<13} before = {revision}")


def recording(pages: int) -> bytes:
    entries = []
    for i in range(pages):
        doc = {"items": [{"id": 100_000 + i * 1000 + j, "name": f"item-{i}-{j}-xyz"} for j in range(250)]}
        url = f"{SITE}/api/page{i}?prev={100_000 + (i - 1) * 1000 + 5}"
        entries.append(_entry(url, i, "document", "application/json", json.dumps(doc)))
        entries += [_entry(f"{SITE}/static/{i}/{k}.png", i + 0.01, "image", "image/png") for k in range(20)]
    return json.dumps({"log": {"version": "1.2", "entries": entries}}).encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--linear", action="store_true", help="before/after the linear analysis, per shape")
    parser.add_argument("--sizes", default="8000,16000,32000", help="entries, comma-separated (--linear)")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds an old version may be predicted to take")
    args = parser.parse_args()
    if args.linear:
        linear(tuple(int(n) for n in args.sizes.split(",")), args.budget)
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
