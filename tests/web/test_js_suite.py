"""The JavaScript runtime's own tests (web/test/*.test.mjs, node:test): the conformance vectors of every stage, and
the modules' unit tests. Each file runs in its own Node process; the ones that need what only Python makes (the
tokenizer files every generated checkpoint ships) read the folder OMNIVOICE_TOKENIZER_DIR names."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess

import pytest
from helpers.scripts import ROOT

from codes.export.tokenizer_build import write_tokenizer_files

JS_TESTS = sorted((ROOT / "web" / "test").glob("*.test.mjs"))


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tokenizer")
    write_tokenizer_files(folder)
    vector = json.loads((ROOT / "tests" / "conformance" / "tokens.json").read_text(encoding="utf-8"))
    assert hashlib.sha256((folder / "tokenizer.json").read_bytes()).hexdigest() == vector["tokenizer_sha256"]
    return folder


def node_test(path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["node", "--test", str(path.relative_to(ROOT))], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_every_stage_of_the_contract_has_a_js_test():
    """Each tests/conformance/<stage>.json is loaded by some JS test: vector("<stage>") (web/test/vectors.mjs), or a
    test file's own helper called with the stage's name first."""
    covered = "\n".join(path.read_text(encoding="utf-8") for path in JS_TESTS)
    stages = sorted(p.stem for p in (ROOT / "tests" / "conformance").glob("*.json"))
    assert stages and [s for s in stages if not re.search(rf'\b\w+\("{s}"', covered)] == []


@pytest.mark.parametrize("path", JS_TESTS, ids=[p.name for p in JS_TESTS])
def test_the_js_file_passes(path, tokenizer_dir):
    result = node_test(path, {**os.environ, "OMNIVOICE_TOKENIZER_DIR": str(tokenizer_dir)})
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "# fail 0" in result.stdout and "# pass 0" not in result.stdout


def test_without_the_tokenizer_folder_the_prompt_test_fails_rather_than_skips():
    env = {k: v for k, v in os.environ.items() if k != "OMNIVOICE_TOKENIZER_DIR"}
    result = node_test(ROOT / "web" / "test" / "prompt.test.mjs", env)
    assert result.returncode != 0
    assert "OMNIVOICE_TOKENIZER_DIR is not set" in result.stdout + result.stderr
