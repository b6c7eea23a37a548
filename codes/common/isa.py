"""The host's instruction sets, as ONNX Runtime's integer kernels choose among them.

One question decides an int8 build's weights: do this CPU's u8 x s8 kernels (MLAS) sum their products
exactly? VNNI (AVX-512 VNNI, AVX-VNNI) and AMX accumulate 4 products straight into int32, and ARM's
kernels widen to int16 products (each fits) before summing into int32. x86 without VNNI multiplies in
pairs summed into int16 (vpmaddubsw), which saturates once 2 x 255 x |w| passes 32767: full-range
weights (+-127) give wrong sums there, 7-bit ones (+-63) never do (docs/DESIGN.md §outliers).
"""

from __future__ import annotations

import platform
from functools import lru_cache
from pathlib import Path

# The instruction sets ONNX Runtime's GEMMs choose among (/proc/cpuinfo's flag: the name pages use).
ISA_FLAGS = {"avx2": "AVX2", "avx512f": "AVX-512", "avx_vnni": "AVX-VNNI", "avx512_vnni": "AVX-512 VNNI",
             "avx512_bf16": "AVX-512 BF16", "amx_int8": "AMX-INT8", "amx_bf16": "AMX-BF16"}
EXACT_INT8_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
# numpy's names for the same, where /proc/cpuinfo is missing (macOS, Windows)
NUMPY_FEATURES = {"AVX2": "avx2", "AVX512F": "avx512f", "AVXVNNI": "avx_vnni", "AVX512VNNI": "avx512_vnni",
                  "AVX512BF16": "avx512_bf16"}
FULL_RANGE, SEVEN_BIT = 127, 63  # the int8 weight ranges an int8 build may carry
# What our kernels (codes/runtime/native/) run on: the attention on vpdpbusd for Q·Kᵀ and vdpbf16ps for P·V, the
# others (the row quantizers, Snake) at 16 lanes beside it or at 8 on AVX2 with FMA
NATIVE_KERNEL_FLAGS = ("avx512f", "avx512bw", "avx512_vnni", "avx512_bf16")
EIGHT_LANE_FLAGS = ("avx2", "fma")


@lru_cache(maxsize=1)
def cpuinfo() -> dict[str, str]:
    """The first core's fields of /proc/cpuinfo (every core says the same); empty where there is none."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for key, _, value in (line.partition(":") for line in text.splitlines() if ":" in line):
        fields.setdefault(key.strip(), value.strip())
    return fields


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU's flags in /proc/cpuinfo's names; from numpy's dispatch table where the kernel shows none."""
    flags = cpuinfo().get("flags", "").split()
    if flags:
        return frozenset(flags)
    try:
        import numpy as np

        features = np._core._multiarray_umath.__cpu_features__
    except (ImportError, AttributeError):
        return frozenset()
    return frozenset(flag for name, flag in NUMPY_FEATURES.items() if features.get(name))


def is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


def isa_names(flags: frozenset[str] | None = None) -> list[str]:
    """The instruction sets that matter to the kernels, named as pages name them."""
    flags = cpu_flags() if flags is None else flags
    return [name for flag, name in ISA_FLAGS.items() if flag in flags]


def exact_int8_products(flags: frozenset[str] | None = None, x86: bool | None = None) -> bool:
    """Whether full-range int8 weights give exact sums in this host's u8 x s8 kernels (module docstring)."""
    flags = cpu_flags() if flags is None else flags
    if not (is_x86() if x86 is None else x86):
        return True
    return any(flag in flags for flag in EXACT_INT8_FLAGS)


def int8_weight_levels(flags: frozenset[str] | None = None, x86: bool | None = None) -> int:
    """The widest int8 weight range whose products this host sums exactly."""
    return FULL_RANGE if exact_int8_products(flags, x86) else SEVEN_BIT


def native_kernel_lanes(flags: frozenset[str] | None = None) -> int:
    """The widest vectors our kernels run at on this CPU: 16 where the attention kernel runs too, 8 where only the
    others do (AVX2 with FMA), 0 where none (as codes/runtime/native/library.c asks the CPU itself)."""
    flags = cpu_flags() if flags is None else flags
    if all(flag in flags for flag in NATIVE_KERNEL_FLAGS):
        return 16
    return 8 if all(flag in flags for flag in EIGHT_LANE_FLAGS) else 0
