"""Rows of an equivalence report, the bounds they are held to, and the printed table.

Shared by the backbone (equiv.py), codec (equiv_codec.py) and foreign-folder (foreign.py)
checks, so none of them imports another for its report.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from codes.runtime.contract.probe import ProbeResult

# fp32 outputs must match upstream to 1e-4 max abs; lower precisions are reported (docs/DESIGN.md §bounds).
FP32_ABS_BOUND = 1e-4


@dataclass
class Row:
    check: str
    precision: str
    max_abs: float | None = None
    rel_err: float | None = None
    argmax_agree: float | None = None
    bound: str = "reported"
    passed: bool = True
    note: str = ""


def relative_error(diff: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(diff) / max(np.linalg.norm(ref), 1e-12))


def compare(check: str, precision: str, ours: np.ndarray, ref: np.ndarray, bounded: bool,
            argmax_axis: int | None = None, abs_bound: float = FP32_ABS_BOUND) -> Row:
    ours, ref = np.asarray(ours, np.float32), np.asarray(ref, np.float32)
    diff = ours - ref
    row = Row(check, precision, float(np.abs(diff).max()), relative_error(diff, ref))
    if argmax_axis is not None:
        row.argmax_agree = float((ours.argmax(argmax_axis) == ref.argmax(argmax_axis)).mean())
    if bounded:
        row.bound = f"max abs <= {abs_bound:g}"
        row.passed = row.max_abs <= abs_bound
    return row


def probe_row(result: ProbeResult, check: str = "bidirectionality probe") -> Row:
    return Row(check, "-", max_abs=result.max_change_before_last, bound="earlier positions must move",
               passed=result.bidirectional, note=result.describe())


def format_table(rows: list[Row]) -> str:
    def num(value, fmt):
        return "-" if value is None else format(value, fmt)

    header = f"{'check':<42} {'precision':<14} {'max abs':>10} {'rel err':>10} {'argmax':>8}  {'bound':<28} result"
    lines = [header, "-" * len(header)]
    for r in rows:
        argmax = "-" if r.argmax_agree is None else f"{100 * r.argmax_agree:.2f}%"
        result = "PASS" if r.passed else "FAIL"
        lines.append(f"{r.check:<42} {r.precision:<14} {num(r.max_abs, '10.3g')} {num(r.rel_err, '10.3g')} "
                     f"{argmax:>8}  {r.bound:<28} {result}")
    notes = [f"  {r.check}: {r.note}" for r in rows if r.note]
    return "\n".join(lines + notes)
