"""Templates stay within the Content-Security-Policy: no inline script, handler attribute or style.

The policy (portal/settings.py, CONTENT_SECURITY_POLICY) allows scripts and styles from the
portal's own static files only; a browser silently ignores anything inline, so a page would
break without an error. This test finds it first.
"""

import re
from pathlib import Path

import pytest

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
FORBIDDEN = {
    # <script> with code in it (a src= script, or JSON data from json_script, is fine)
    "inline script": re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*type=\"application/json\")[^>]*>"),
    "handler attribute": re.compile(r"\son[a-z]+\s*=", re.I),
    "style attribute": re.compile(r"\sstyle\s*=", re.I),
    "style element": re.compile(r"<style[\s>]", re.I),
    "javascript: URL": re.compile(r"javascript:", re.I),
}


def _templates():
    return sorted(p for p in TEMPLATES.rglob("*.html"))


def test_there_are_templates_to_check():
    assert len(_templates()) > 20


@pytest.mark.parametrize("path", _templates(), ids=lambda p: str(p.relative_to(TEMPLATES)))
def test_a_template_has_no_inline_code_or_style(path):
    text = path.read_text()
    found = [f"{what}: {m.group(0)!r}" for what, rx in FORBIDDEN.items() for m in rx.finditer(text)]
    assert not found, found
