"""The README's promises about the demo match what seed_demo creates, and its links resolve in a clone."""

import re
from pathlib import Path

import pytest
from django.core.management import call_command

from portal.projects.models import Plan, TestCase

README = Path(__file__).resolve().parents[2] / "README.md"
WORDS = {3: "three", 4: "four", 5: "five", 6: "six", 7: "seven"}


@pytest.mark.django_db
def test_the_readme_counts_what_the_demo_seed_creates():
    call_command("seed_demo")
    text = " ".join(README.read_text().split())
    section = text[text.index("## What you see after `make run`") :]
    assert f"{WORDS[TestCase.objects.count()]} test cases" in section
    assert f"{WORDS[Plan.objects.count()]} plans" in section
    for plan in Plan.objects.all():
        assert f"*{plan.name}*" in section


def test_the_readmes_relative_links_exist_in_the_repository():
    for target in re.findall(r"\]\(([^)#:]+)\)", README.read_text()):
        # Inside the repository: a clone has nothing beside it.
        assert not target.startswith("../") and (README.parent / target).exists(), target
