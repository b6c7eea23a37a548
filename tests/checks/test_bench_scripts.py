"""Every bench/ entry point starts and answers --help: a script that no test runs end to end still imports the
library as it is now (two had been left importing names that had moved)."""

from __future__ import annotations

import pytest
from helpers.scripts import ROOT, run_script

SCRIPTS = sorted(path.name for path in (ROOT / "bench").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_bench_script_answers_help(script):
    result = run_script(f"bench/{script}", "--help")
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout
