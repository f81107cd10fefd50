"""The documentation: the site builds strictly (a broken link fails), and what it promises is true.

The README is the front page a newcomer reads; the site under docs/ (mkdocs.yml) holds the rest.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

from portal.projects.models import Plan, TestCase

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
GETTING_STARTED = DOCS / "user-guide" / "getting-started.md"
WORDS = {3: "three", 4: "four", 5: "five", 6: "six", 7: "seven"}


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


def test_the_site_builds_strictly(tmp_path):
    result = mkdocs_build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "site" / "concepts" / "statistics" / "index.html").exists()


def test_a_broken_link_or_anchor_or_a_page_left_out_of_the_nav_fails_the_build(tmp_path):
    """The strict build is the check CI runs: it must fail on each kind of mistake, not only build."""
    mistakes = {
        "a link to a missing page": "[x](user-guide/no-such-page.md)",
        "a link to a missing anchor": "[x](user-guide/getting-started.md#no-such-section)",
    }
    for what, link in mistakes.items():
        copy = tmp_path / what.replace(" ", "-")
        shutil.copytree(DOCS, copy / "docs")
        shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
        index = copy / "docs" / "index.md"
        index.write_text(index.read_text() + f"\n{link}\n")
        result = mkdocs_build(copy / "mkdocs.yml", copy / "site")
        assert result.returncode != 0, what
        assert "index.md" in result.stderr, (what, result.stderr)
    copy = tmp_path / "left-out"
    shutil.copytree(DOCS, copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    (copy / "docs" / "orphan.md").write_text("# An orphan\n")
    result = mkdocs_build(copy / "mkdocs.yml", copy / "site")
    assert result.returncode != 0 and "orphan.md" in result.stderr, result.stderr


@pytest.mark.django_db
def test_the_docs_and_the_readme_count_what_the_demo_seed_creates():
    call_command("seed_demo")
    text = " ".join(GETTING_STARTED.read_text().split())
    section = text[text.index("## What you see after `make run`") :]
    assert f"{WORDS[TestCase.objects.count()]} test cases" in section
    assert f"{WORDS[Plan.objects.count()]} plans" in section
    for plan in Plan.objects.all():
        assert f"*{plan.name}*" in section
    readme = " ".join(README.read_text().split())
    assert f"{WORDS[TestCase.objects.count()]} test cases, {WORDS[Plan.objects.count()]} plans" in readme


def test_the_readmes_relative_links_exist_in_the_repository():
    targets = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README.read_text())
    assert targets
    for target in targets:
        # Inside the repository: a clone has nothing beside it.
        assert not target.startswith("../") and (README.parent / target).exists(), target


def test_the_readme_is_the_short_front_page_with_the_two_commands():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    assert "make run    #" in text and "make test   #" in text
    assert "make docs" in text and "docs/index.md" in text
    assert (ROOT / "docs" / "img" / "run-report.png").exists()
    assert "](docs/img/run-report.png)" in text


def test_every_docs_page_of_the_readme_is_in_the_sites_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    for target in re.findall(r"\]\(docs/([^)#]+\.md)", README.read_text()):
        assert f": {target}\n" in nav, target
