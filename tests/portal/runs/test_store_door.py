"""The results store has one door (issue 27 item 1): no code outside ``portal/runs/results/`` names an
interval model, its reverse accessor or its table; every read goes through a function there
(``results.read``, ``results.shards``, ``results.columns`` …). Like the layering contract, a grep over the
code (its names and strings, not its comments or docstrings), with each exception listed with its reason.
"""

import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

MODELS = {"ShardInterval", "PageInterval", "SlowTrace", "PageRollup", "ProtocolInterval"}
ACCESSORS = {"shard_intervals", "page_intervals", "slow_traces", "page_rollups", "protocol_intervals"}
TABLES = re.compile(r"runs_(shardinterval|pageinterval|slowtrace|pagerollup|protocolinterval)", re.IGNORECASE)

# The code checked: the application (the portal, the engine, the demo site); the store itself is left out.
CHECKED = ("portal", "workers", "demo")
STORE = "portal/runs/results/"
EXCEPTIONS = {
    # The models are declared with the runs app's others (their migrations are the runs app's, in migrations/runs).
    "portal/runs/models.py": "declares the interval models",
}
# Not checked: migrations/ (the tables' history), tests/ and bench/ (they seed rows and measure the tables).


def offences(source: str) -> list[str]:
    """The interval names a Python source uses as code: names, accessors (also as lookups), tables in strings."""
    found = []
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    previous = None
    for tok in tokens:
        if tok.type == tokenize.NAME:
            base = tok.string.split("__")[0]
            if tok.string in MODELS or base in ACCESSORS:
                found.append(f"{tok.start[0]}: {tok.string}")
        elif tok.type == tokenize.STRING or tok.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
            docstring = previous in (None, tokenize.INDENT, tokenize.NEWLINE, tokenize.DEDENT)
            if not docstring and (TABLES.search(tok.string) or tok.string.strip("\"'") in MODELS):
                found.append(f"{tok.start[0]}: {tok.string[:60]}")
        if tok.type not in (tokenize.COMMENT, tokenize.NL):
            previous = tok.type
    return found


def template_offences(text: str) -> list[str]:
    return [m.group(0) for m in re.finditer(r"\.(" + "|".join(ACCESSORS) + r")\b", text)]


def test_no_code_outside_the_results_store_touches_the_interval_tables():
    bad = {}
    for top in CHECKED:
        for path in sorted((ROOT / top).rglob("*")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(STORE) or rel in EXCEPTIONS or "__pycache__" in rel:
                continue
            if path.suffix == ".py":
                found = offences(path.read_text())
            elif path.suffix == ".html":
                found = template_offences(path.read_text())
            else:
                continue
            if found:
                bad[rel] = found
    assert not bad, f"read these through portal/runs/results/ (or list the exception with its reason): {bad}"


def test_the_exceptions_still_need_their_exception():
    """An exception whose file no longer names the tables is dropped, so the list stays true."""
    for rel in EXCEPTIONS:
        assert offences((ROOT / rel).read_text()), f"{rel} no longer names an interval table: drop its exception"


def test_the_check_catches_a_model_a_lookup_and_raw_sql_but_not_a_docstring():
    source = '''"""Reads ShardInterval rows (a docstring: allowed)."""
from portal.runs.models import PageRollup  # a comment naming PageInterval: allowed


def f(run, cursor):
    """The runs_pageinterval table, in a docstring: allowed."""
    Run.objects.filter(page_intervals__second=3)
    run.shard_intervals.count()
    cursor.execute(f"SELECT 1 FROM runs_shardinterval WHERE run_id = {run.id}")
    cursor.execute("SELECT * FROM runs_protocolinterval")
    apps.get_model("runs", "SlowTrace")
'''
    found = offences(source)
    assert [f.split(":")[0] for f in found] == ["2", "7", "8", "9", "10", "11"], found
    assert offences('"""runs_pagerollup and PageInterval in a module docstring."""\nx = 1\n') == []
    assert template_offences("{{ run.page_rollups.count }} {{ run.number }}") == [".page_rollups"]
