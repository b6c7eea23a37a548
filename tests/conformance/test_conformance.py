"""The conformance vectors (docs/runtime.md): the Python runtime reproduces every file here, the one command
regenerates them byte for byte, and every stage file the contract names is here."""

from __future__ import annotations

import copy
import json
import re

import pytest

from codes.checks.conformance import STAGES, check_vector, differences, write_vectors
from helpers.scripts import ROOT

FOLDER = ROOT / "tests" / "conformance"
VECTORS = sorted(FOLDER.glob("*.json"))


def load(path):
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", VECTORS, ids=[p.stem for p in VECTORS])
def test_the_runtime_reproduces_the_vector(path):
    vector = load(path)
    assert vector["stage"] == path.stem and vector["cases"]
    assert check_vector(vector) == []


def test_a_difference_past_the_tolerance_fails():
    """The check is no formality: one token id changed, or one float moved past the stated tolerance, is found."""
    tokens, post = load(FOLDER / "tokens.json"), load(FOLDER / "postprocess.json")
    changed = copy.deepcopy(tokens)
    changed["cases"][0]["expected"]["ids"][0] += 1
    assert len(check_vector(changed)) == 1
    moved = copy.deepcopy(post)
    wav = moved["cases"][0]["expected"]["wav"]
    wav[len(wav) // 2] += 3 * post["tolerance"]
    assert len(check_vector(moved)) == 1
    within = copy.deepcopy(post)
    within["cases"][0]["expected"]["wav"][len(wav) // 2] += post["tolerance"] / 2
    assert check_vector(within) == []


def test_the_one_command_is_deterministic_and_made_the_files_here(tmp_path):
    """Two runs write the same bytes. The files here are what it writes: the same headers, cases and inputs,
    and outputs within the tolerance (another CPU's vector units may round a float32 sum differently)."""
    first, second = write_vectors(tmp_path / "first"), write_vectors(tmp_path / "second")
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]
    assert sorted(p.name for p in first) == [p.name for p in VECTORS]
    for path in first:
        made, kept = load(path), load(FOLDER / path.name)
        assert {k: v for k, v in made.items() if k != "cases"} == {k: v for k, v in kept.items() if k != "cases"}
        assert [(c["name"], c["inputs"]) for c in made["cases"]] == [(c["name"], c["inputs"]) for c in kept["cases"]]
        found = [d for m, k in zip(made["cases"], kept["cases"])
                 for d in differences(k["expected"], m["expected"], kept["tolerance"], path.stem)]
        assert found == [], "run `python tools/conformance.py` and read the diff"


def test_the_vectors_are_small_and_cover_the_contracts_stages():
    assert len(VECTORS) >= 8 and {p.stem for p in VECTORS} == {stage.name for stage in STAGES}
    assert all(p.stat().st_size < 200_000 for p in VECTORS)
    for path in VECTORS:
        vector = load(path)
        assert isinstance(vector["tolerance"], float) and vector["upstream"] and vector["runtime"], path.name


def test_every_stage_file_the_contract_names_exists_and_every_file_is_named():
    contract = (ROOT / "docs" / "runtime.md").read_text(encoding="utf-8")
    named = set(re.findall(r"tests/conformance/([\w-]+\.json)", contract))
    assert named == {p.name for p in VECTORS}
    assert "python tools/conformance.py" in contract


# docs/runtime.md's noise, written from its words alone (no numpy generator): what a second host implements.
MASK32, MASK64, MASK128 = 2**32 - 1, 2**64 - 1, 2**128 - 1
PCG_MULTIPLIER = 0x2360ED051FC65DA44385DF649FCCF645


def seed_sequence_words(seed: int, count: int) -> list[int]:
    """numpy's SeedSequence(seed).generate_state(count, uint64): a pool of 4 words mixed from the seed's 32-bit
    words (least significant first), then hashed out two 32-bit words (low, high) per 64-bit word."""
    entropy = [(seed >> shift) & MASK32 for shift in range(0, max(seed.bit_length(), 1), 32)]
    hash_const = [0x43B0D7E5]

    def hashmix(value):
        value ^= hash_const[0]
        hash_const[0] = hash_const[0] * 0x931E8875 & MASK32
        value = value * hash_const[0] & MASK32
        return value ^ value >> 16

    def mix(x, y):
        result = (0xCA01F9DD * x - 0x4973F715 * y) & MASK32
        return result ^ result >> 16

    pool = [hashmix(entropy[i] if i < len(entropy) else 0) for i in range(4)]
    for source in range(4):
        for target in range(4):
            if source != target:
                pool[target] = mix(pool[target], hashmix(pool[source]))
    for word in entropy[4:]:
        for target in range(4):
            pool[target] = mix(pool[target], hashmix(word))
    out, hash_b = [], 0x8B51F9DD
    for i in range(2 * count):
        value = pool[i % 4] ^ hash_b
        hash_b = hash_b * 0x58F38DED & MASK32
        value = value * hash_b & MASK32
        out.append(value ^ value >> 16)
    return [out[2 * i] | out[2 * i + 1] << 32 for i in range(count)]


def pcg64_seeded(seed: int) -> tuple[int, int]:
    a, b, c, d = seed_sequence_words(seed, 4)
    inc = ((c << 64 | d) << 1 | 1) & MASK128
    state = (0 * PCG_MULTIPLIER + inc) & MASK128
    state = (state + (a << 64 | b)) & MASK128
    return (state * PCG_MULTIPLIER + inc) & MASK128, inc


def pcg64_next(state: int, inc: int) -> tuple[int, int]:
    state = (state * PCG_MULTIPLIER + inc) & MASK128
    word, rotation = ((state >> 64) ^ state) & MASK64, state >> 122
    return state, (word >> rotation | word << (64 - rotation)) & MASK64


def test_the_noise_generator_as_the_contract_describes_it_gives_the_vectors_values():
    import numpy as np

    seeded = [case for case in load(FOLDER / "noise.json")["cases"] if "pcg64_state" in case["expected"]]
    assert len(seeded) >= 5 and any(int(case["inputs"]["seed"]) > 2**53 for case in seeded)
    for case in seeded:
        expected = case["expected"]
        state, inc = pcg64_seeded(int(case["inputs"]["seed"]))
        assert (f"{state:032x}", f"{inc:032x}") == (expected["pcg64_state"], expected["pcg64_inc"])
        words, uniforms = [], []
        for _ in range(len(expected["raw_uint64"])):
            state, word = pcg64_next(state, inc)
            words.append(f"{word:016x}")
            uniforms += [float(np.float32((half >> 8) * 2.0**-24)) for half in (word & MASK32, word >> 32)]
        assert words == expected["raw_uint64"]
        count = len(expected["float32"])
        assert uniforms[:count] == [float(np.float32(v)) for v in expected["float32"]]
