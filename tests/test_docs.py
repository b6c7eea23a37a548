"""The documentation covers what the scripts take: every flag of every script is in docs/, and the README links
every page there."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ["optimize.py", "inference.py", "eval.py", "higgs_inference.py", "serve.py", "corpus.py"]
FLAG = re.compile(r"(?<![\w-])--[a-zA-Z][\w-]*")


def _documented(flag: str, text: str) -> bool:
    return re.search(re.escape(flag) + r"(?![\w-])", text) is not None


def _options(script: str) -> list[list[str]]:
    """Each option's spellings, from its --help (one line each: a wide terminal keeps them unwrapped)."""
    shown = subprocess.run([sys.executable, str(ROOT / script), "--help"], cwd=ROOT, capture_output=True, text=True,
                           env={**os.environ, "COLUMNS": "2000"}, check=True).stdout
    options = []
    for line in shown.splitlines():
        if line.startswith("  -"):
            head = re.split(r"\s{2,}", line.strip())[0]  # the spellings, before the help text
            spellings = [f for f in FLAG.findall(head) if f != "--help"]
            if spellings:
                options.append(spellings)
    return options


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_flag_is_in_the_docs(script):
    docs = "\n".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md")))
    options = _options(script)
    assert len(options) >= 5
    missing = [spellings[0] for spellings in options if not any(_documented(f, docs) for f in spellings)]
    assert missing == [], f"{script}: flags no page in docs/ documents"


def test_the_readme_fits_on_a_page_and_links_every_docs_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 130
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    linked = set(re.findall(r"\(docs/([\w.-]+\.md)", readme))
    assert pages - linked == set()
    for page in pages:
        assert "../README.md" in (ROOT / "docs" / page).read_text(encoding="utf-8") or page == "DESIGN.md"


# A file of the checkout named in prose: a path under one of its folders, ending in a file's suffix.
NAMED_PATH = re.compile(r"(?<![\w./-])((?:codes|tests|bench|docs|integrations)/[\w/.-]*\w\.(?:py|md|json|sh|js|html))")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _sources() -> list[Path]:
    """Where the project's prose lives: its code's docstrings and comments, its docs, and its Makefile. The
    results pages under bench/ are left out: each records the checkout it was measured on."""
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / name for name in tracked if (name.endswith((".py", ".md", ".sh")) or name == "Makefile")
            and not (name.startswith("bench/") and name.endswith(".md")) and (ROOT / name).is_file()]


def test_every_file_the_code_and_docs_name_exists():
    """A module moved or renamed leaves no pointer to where it was (issue 42: jobs.py still sent readers to the
    outputs module's place before the runtime had a folder of its own)."""
    missing = sorted({f"{source.relative_to(ROOT)}: {named}" for source in _sources()
                      for named in NAMED_PATH.findall(source.read_text(encoding="utf-8"))
                      if not (ROOT / named).exists()})
    assert missing == []


def test_every_relative_link_of_the_readme_and_docs_resolves():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(ROOT.glob("integrations/*/README.md"))]
    broken = [f"{page.relative_to(ROOT)}: {target}" for page in pages
              for target in LINK.findall(page.read_text(encoding="utf-8"))
              if not re.match(r"[a-z]+:|#", target) and not (page.parent / target.split("#")[0]).exists()]
    assert broken == []
