"""HTML pages of the demo target, as small Python string templates.

Pages have realistic sizes (5-60 KB) so that bytes, compression and transfer
time mean something in a load test. All text is generated deterministically
(seeded by the article id), so a page has the same bytes on every run and on
every machine; that lets tests compare byte counts exactly.
"""

from __future__ import annotations

import functools
import random
from html import escape

from demo.workitems import AREAS

ARTICLE_COUNT = 50
HOME_AREAS = AREAS[:12]

_WORD_TEXT = (
    "load test latency throughput queue server request response cache index "
    "database query scan table lock worker thread process memory disk network "
    "packet socket connection pool timeout retry error budget percentile "
    "median capacity headroom baseline regression tuning knob release deploy "
    "rollback monitor metric counter gauge histogram sample warm cold steady "
    "ramp spike soak stress user session token cookie form login search report "
    "page slow fast stable noisy fair honest careful measured repeated small "
    "large the a of to and in on for with under over after before while "
    "because so then"
)
_WORDS = _WORD_TEXT.split()
_TOPICS = [
    "Why the search page got slow",
    "Reading a latency histogram",
    "Ramp-up without surprises",
    "The cost of one missing index",
    "Compression: when it pays",
    "Sessions, cookies and CSRF",
    "Think time and pacing",
    "What a percentile hides",
    "Queues form before CPUs saturate",
    "Warm caches lie",
]

CSS = (
    "body{font:15px/1.5 system-ui,sans-serif;margin:0;color:#222;background:#fafafa}"
    "header,footer{background:#1d3557;color:#fff;padding:.6em 1.2em}"
    "header a,footer a{color:#fff;margin-right:1em}main{max-width:56em;margin:1em auto;"
    "padding:0 1em}.banner{background:#ffe8a3;padding:.4em 1.2em;font-size:13px}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em}"
    ".err{color:#b00020;font-weight:bold}"
)


def _sentence(rng: random.Random) -> str:
    words = rng.choices(_WORDS, k=rng.randint(8, 18))
    return " ".join(words).capitalize() + "."


def _paragraphs(rng: random.Random, target_chars: int) -> list[str]:
    paras, size = [], 0
    while size < target_chars:
        para = " ".join(_sentence(rng) for _ in range(rng.randint(3, 7)))
        paras.append(para)
        size += len(para) + 7
    return paras


def article_title(article_id: int) -> str:
    topic = _TOPICS[article_id % len(_TOPICS)]
    return f"{topic}, part {article_id // len(_TOPICS) + 1}"


@functools.lru_cache(maxsize=ARTICLE_COUNT)
def article_summary(article_id: int) -> str:
    return _sentence(random.Random(f"summary-{article_id}")) + " " + _sentence(random.Random(article_id))


@functools.lru_cache(maxsize=ARTICLE_COUNT)
def article_body(article_id: int) -> str:
    """10-30 KB of text, always the same for the same id (cached: pure function)."""
    rng = random.Random(article_id)
    target = 10_000 + (article_id * 7919) % 20_000
    return "\n".join(f"<p>{p}</p>" for p in _paragraphs(rng, target))


def layout(title: str, body: str, user: str | None = None) -> str:
    account = (
        f'<a href="/account">{escape(user)}</a><a href="/logout">Log out</a>' if user else '<a href="/login">Log in</a>'
    )
    return (
        "<!doctype html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{escape(title)} · Plimsoll demo target</title>'
        f"<style>{CSS}</style></head><body>\n"
        '<div class="banner">This is the <b>Plimsoll demo target</b>: a bundled system under test '
        "for demos and end-to-end tests. It is not part of Plimsoll.</div>\n"
        '<header><a href="/"><b>Demo Co.</b></a><a href="/articles">Articles</a>'
        f'<a href="/search">Work items</a><a href="/documents">Documents</a>{account}</header>\n'
        f"<main>\n<h1>{escape(title)}</h1>\n{body}\n</main>\n"
        "<footer>Plimsoll demo target · admin: "
        '<a href="/_demo/knobs">knobs</a><a href="/_demo/counters">counters</a>'
        '<a href="/metrics">metrics</a></footer>\n</body></html>\n'
    )


def home_page(user: str | None) -> str:
    rng = random.Random("home")
    intro = "\n".join(f"<p>{p}</p>" for p in _paragraphs(rng, 3000))
    latest = "\n".join(
        f'<li><a href="/articles/{i}">{escape(article_title(i))}</a>: {article_summary(i)}</li>'
        for i in range(ARTICLE_COUNT, ARTICLE_COUNT - 10, -1)
    )
    areas = "\n".join(f'<li><a href="/search?q={a.replace(" ", "+")}">{a}</a></li>' for a in HOME_AREAS)
    body = (
        f"{intro}\n<h2>Latest articles</h2>\n<ul>\n{latest}\n</ul>\n"
        f'<h2>Work items by area</h2>\n<ul>\n{areas}\n</ul>\n<p><a href="/search">All areas</a></p>'
    )
    return layout("Welcome to Demo Co.", body, user)


def articles_page(user: str | None) -> str:
    items = "\n".join(
        f'<li><a href="/articles/{i}">{escape(article_title(i))}</a> '
        f"<small>2024-{1 + i % 12:02d}-{1 + i % 28:02d}</small><br>{article_summary(i)}</li>"
        for i in range(1, ARTICLE_COUNT + 1)
    )
    return layout("Articles", f"<ul>\n{items}\n</ul>", user)


def article_page(article_id: int, user: str | None) -> str:
    nav = []
    if article_id > 1:
        nav.append(f'<a href="/articles/{article_id - 1}">Previous</a>')
    if article_id < ARTICLE_COUNT:
        nav.append(f'<a href="/articles/{article_id + 1}">Next</a>')
    body = f"{article_body(article_id)}\n<p>{' · '.join(nav)} · <a href='/articles'>All articles</a></p>"
    return layout(article_title(article_id), body, user)


def work_item_page(item_id: int, user: str | None) -> str:
    rng = random.Random(item_id)
    body = f"<p>Work item {item_id} · area <code>Area {item_id % 1000:03d}</code></p>\n" + "\n".join(
        f"<p>{p}</p>" for p in _paragraphs(rng, 1200)
    )
    return layout(f"Work item {item_id}", body, user)


def search_page(query: str, total: int | None, rows: list[tuple], user: str | None) -> str:
    form = (
        '<form action="/search" method="get"><label>Area <input name="q" '
        f'value="{escape(query)}"></label> <button>Search</button></form>'
    )
    if total is None:
        links = "\n".join(f'<li><a href="/search?q={a.replace(" ", "+")}">{a}</a></li>' for a in AREAS)
        return layout("Work items", f"{form}\n<h2>Areas</h2>\n<ul>\n{links}\n</ul>", user)
    trs = "\n".join(
        f"<tr><td>{i}</td><td>{escape(title)}</td><td>{state}</td><td>{escape(who) or '-'}</td></tr>"
        for i, title, state, who in rows
    )
    body = (
        f"{form}\n<p>{total} work items in area <b>{escape(query)}</b>"
        f"{f'; the first {len(rows)} by id' if total > len(rows) else ''}.</p>\n"
        f"<table><tr><th>Id</th><th>Title</th><th>State</th><th>Assigned to</th></tr>\n{trs}\n</table>"
    )
    return layout(f"Work items: {query}", body, user)


def documents_page(docs: list, storage: str, user: str | None) -> str:
    """The document library: one link per document (``docs``: ``demo.documents.DocumentInfo``)."""
    trs = "\n".join(
        f'<tr><td>{d.id}</td><td><a href="/documents/{d.id}">{escape(d.name)}</a></td>'
        f"<td>{d.size / 1024:,.0f} KB</td><td>{d.storage}</td></tr>"
        for d in docs
    )
    body = (
        f"<p>{len(docs)} documents. New uploads go to <b>{storage}</b> storage.</p>\n"
        "<table><tr><th>Id</th><th>Name</th><th>Size</th><th>Stored in</th></tr>\n"
        f"{trs}\n</table>\n"
        '<h2>Upload</h2>\n<form action="/documents" method="post" enctype="multipart/form-data">'
        '<input type="file" name="file"> <button>Upload</button></form>\n'
        "<p>Up to 10 MB. Or <code>curl --data-binary @file 'http://HOST/documents?name=file'</code>.</p>"
    )
    return layout("Documents", body, user)


def login_page(csrf_token: str, error: str = "", username: str = "") -> str:
    err = f'<p class="err">{escape(error)}</p>' if error else ""
    body = (
        f"{err}<form action='/login' method='post'>"
        f'<input type="hidden" name="csrfmiddlewaretoken" value="{csrf_token}">'
        f'<p><label>User name <input name="username" value="{escape(username)}"></label></p>'
        '<p><label>Password <input name="password" type="password"></label></p>'
        "<p><button>Log in</button></p></form>"
        "<p>Demo users: demo/demo, alice/alice, bob/bob.</p>"
    )
    return layout("Log in", body)


def account_page(user: str) -> str:
    rng = random.Random(f"account-{user}")
    body = f"<p>Welcome, {escape(user)}!</p>\n" + "\n".join(f"<p>{p}</p>" for p in _paragraphs(rng, 3000))
    return layout("Your account", body, user)


def error_page(status: int, message: str, user: str | None = None) -> str:
    return layout(f"{status}: {message}", f'<p class="err">{escape(message)}</p><p><a href="/">Home</a></p>', user)
