"""bench/roofline.py's command line and page: measures the kernels and the steps, writes the table."""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

from codes.checks import roofline
from codes.checks.results_page import (add_kernel_switches, environment, kernel_switches, machine, machine_line,
                                      write_page)
from codes.checks.workloads import WORKLOADS, Case
from codes.common.errors import UserError, run_cli
from codes.runtime.contract.native_kernels import SWITCH
from codes.runtime.contract.manifest import read_manifest
from codes.runtime.contract.specs import BACKBONE

# The step's two headline cases: the benchmark's 10 s utterance and the voice assistant's 2 s reply.
CASES = (WORKLOADS["10s"][0], Case("2 s reply", ("Turning on the kitchen lights.",), (2.1,)))
SQUARE = 2048


def model_dims(model_dir: Path) -> dict:
    return read_manifest(model_dir, verify=False).data["model"]


def projection_shapes(dims: dict, intermediate: int) -> list[tuple[int, int]]:
    """(K, N) of the backbone's projections: fused q/k/v, q alone, k or v, o, gate or up, fused
    gate/up, down."""
    hidden, head = dims["hidden_size"], dims["head_dim"]
    q, kv = dims["num_attention_heads"] * head, dims["num_key_value_heads"] * head
    return [(hidden, q + 2 * kv), (hidden, q), (hidden, kv), (q, hidden), (hidden, intermediate),
            (hidden, 2 * intermediate), (intermediate, hidden)]


def intermediate_size(model_dir: Path, ops: list[roofline.OpRun]) -> int:
    """The MLP's width, read off the step's down projection (K of the GEMM whose N is the hidden size
    and whose K is largest)."""
    hidden = model_dims(model_dir)["hidden_size"]
    widths = [roofline.gemm_dims(op.input_shapes, op.output_shapes[0])[1] for op in ops
              if op.is_gemm and op.output_shapes[0][-1] == hidden]
    return max(widths) if widths else 4 * hidden


def step_gemm_shapes(step_ops) -> set[tuple[int, int, int]]:
    """(M, K, N) of every GEMM the measured steps ran (the heads' and the embeddings' too)."""
    return {roofline.gemm_dims(op.input_shapes, op.output_shapes[0]) for ops in step_ops for op in ops
            if op.is_gemm}


def parse(parser: argparse.ArgumentParser, argv=None) -> argparse.Namespace:
    parser.add_argument("--model_dir", type=Path, required=True, help="the build whose step is measured")
    parser.add_argument("--compare", type=Path, nargs="*", default=[], help="other builds' steps, side by side")
    add_kernel_switches(parser, "--model_dir's step")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--m", type=int, nargs="+", default=[70, 100, 250, 300, 600],
                        help="GEMM rows (tokens) to measure the kernels at, besides the step's own")
    parser.add_argument("--seq", type=int, nargs="+", default=[70, 100, 250, 300, 600],
                        help="attention lengths to measure the kernels at, besides the step's own")
    parser.add_argument("--seconds", type=float, default=0.4, help="least time spent timing each kernel")
    parser.add_argument("--steps", type=int, default=3, help="profiled steps per case; each op counts at its fastest")
    parser.add_argument("--out", type=Path, help="write the page there (and its .json beside it)")
    return parser.parse_args(argv)


def measure(args: argparse.Namespace, log=print) -> dict:
    builds = [args.model_dir, *args.compare]
    for folder in builds:
        if not (Path(folder) / "omnivoice_manifest.json").is_file():
            raise UserError(f"{folder} has no omnivoice_manifest.json; pass a folder optimize.py built")
    dims = model_dims(args.model_dir)
    runs = [(folder, str(folder), {}) for folder in builds]
    for value in kernel_switches(args):  # the same build on other kernels: a row name of its own
        runs.append((args.model_dir, f"{args.model_dir} ({SWITCH}={value})", {SWITCH: value}))
    steps = {}
    for folder, name, env in runs:
        for case in CASES:
            log(f"step: {name} {case.name}")
            with environment(env):
                steps[(name, case.name)] = roofline.step_ops(folder, case, args.threads, args.steps)
    ops = next(iter(steps.values()))
    inter = intermediate_size(args.model_dir, ops)
    listed = [(m, k, n) for m in args.m for k, n in projection_shapes(dims, inter)]
    shapes = sorted(set(listed) | step_gemm_shapes(steps.values())) + [(SQUARE, SQUARE, SQUARE)]
    log("GEMM kernels")
    gemm = roofline.gemm_rates(shapes, args.threads, args.seconds, log=log)
    # attention's products as integer GEMMs of their shapes: the yardstick's rate for them
    heads, head_dim = dims["num_attention_heads"], dims["head_dim"]
    attention_shapes = sorted({(m, k, n) for ops_ in steps.values() for op in ops_ if op.cls == "attention"
                               for _, m, k, n in roofline.attention_gemms(op, heads, head_dim)} - set(shapes))
    log("attention's products as integer GEMMs")
    gemm += roofline.gemm_rates(attention_shapes, args.threads, args.seconds, kernels=roofline.INTEGER_KERNELS, log=log)
    log("attention kernels")
    lengths = sorted(set(args.seq) | {op.input_shapes[0][1] for ops_ in steps.values() for op in ops_
                                      if op.cls == "attention"})
    attention = roofline.attention_rates(lengths, dims["num_attention_heads"], dims["num_key_value_heads"],
                                         dims["head_dim"], args.threads, args.seconds, log=log)
    bandwidth = roofline.bandwidth_gbs(args.threads)
    log(f"bandwidth {bandwidth:.1f} GB/s")
    peaks = roofline.Peaks(gemm, attention, bandwidth)
    tables = {f"{folder}|{case}": {
        "build": folder, "case": case,
        "classes": roofline.class_table(ops_, peaks, dims["num_attention_heads"], dims["head_dim"]),
        "isa": roofline.isa_table(ops_, peaks, dims, inter, BACKBONE.key),
        "tokens": roofline.step_tokens(ops_)}
        for (folder, case), ops_ in steps.items()}
    return {"machine": machine(), "threads": args.threads, "date": datetime.date.today().isoformat(),
            "gemm": gemm, "attention": attention, "bandwidth_gbs": bandwidth, "steps": tables,
            "square": SQUARE}


def _f(value, digits=1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def int8_over_fp32(gemm: list[dict]) -> float:
    def best(cls):
        return max((r["gmacs"] for r in gemm if r["class"] == cls and r["gmacs"]), default=float("nan"))
    return best("int8 GEMM") / best("fp32 GEMM")


def markdown(report: dict) -> list[str]:
    info = report["machine"]
    lines = ["# The decoding step against this CPU's roofline", "",
             f"Machine: {machine_line(info)}; {report['threads']} threads; {report['date']}. "
             "Made by `bench/roofline.py`. Ceilings are the best rate a kernel of this onnxruntime reaches "
             "here, each timed alone (fastest run); the step is ONNX Runtime's profiler over its kernels, each op at "
             "its fastest of the profiled steps.", "",
             f"Memory bandwidth (threaded Add, read + write): **{report['bandwidth_gbs']:.1f} GB/s**. "
             f"Best int8 GEMM against best fp32 GEMM: **{int8_over_fp32(report['gemm']):.2f}×** (the ISA's lane "
             "ratio where both kernels reach its limit).", ""]
    kernels = sorted({r["kernel"] for r in report["gemm"]}, key=[r["kernel"] for r in report["gemm"]].index)
    square = report["square"]
    lines += ["## GEMM kernels, GMAC/s", "",
              "| M | K x N | " + " | ".join(kernels) + " |", "|---|---|" + "---|" * len(kernels)]
    keyed = {(r["kernel"], r["m"], r["k"], r["n"]): r["gmacs"] for r in report["gemm"]}
    for m, k, n in sorted({(r["m"], r["k"], r["n"]) for r in report["gemm"]}, key=lambda s: (s[0] == square, s)):
        lines.append(f"| {m} | {k} x {n} | " + " | ".join(_f(keyed.get((kn, m, k, n))) for kn in kernels) + " |")
    att = sorted({r["kernel"] for r in report["attention"]}, key=[r["kernel"] for r in report["attention"]].index)
    keyed = {(r["kernel"], r["seq"]): r["gmacs"] for r in report["attention"]}
    lines += ["", "## Attention kernels (one sequence, all heads), GMAC/s", "",
              "| S | " + " | ".join(att) + " |", "|---|" + "---|" * len(att)]
    for seq in sorted({r["seq"] for r in report["attention"]}):
        lines.append(f"| {seq} | " + " | ".join(_f(keyed.get((a, seq))) for a in att) + " |")
    lines += ["", "## One decoding step against the ceilings", "",
              "Per step. Work: GMAC for GEMMs and attention, GB moved for the rest. Ceiling: the work at the "
              "best measured kernel for each op's shape (GEMMs of an integer class held to the best integer "
              "kernel), or at the measured bandwidth.", "",
              "| build | case | tokens | class | s | work | achieved | ceiling rate | s at ceiling | × from ceiling |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for table in report["steps"].values():
        total = sum(c["seconds"] for c in table["classes"])
        floor = sum(c["floor_seconds"] for c in table["classes"])
        build = Path(table["build"]).name
        for c in table["classes"]:
            unit = "GMAC/s" if c["unit"] == "GMAC" else "GB/s"
            lines.append(f"| {build} | {table['case']} | {table['tokens']} | {c['class']} | {c['seconds']:.3f} | "
                         f"{c['work']:.2f} {c['unit']} | {_f(c['achieved'])} {unit} | {_f(c['peak'])} {unit} | "
                         f"{c['floor_seconds']:.3f} | {_f(c['seconds'] / c['floor_seconds'] if c['floor_seconds'] else None, 2)} |")
        lines.append(f"| {build} | {table['case']} | {table['tokens']} | **step** | **{total:.3f}** | | | | "
                     f"**{floor:.3f}** | **{total / floor:.2f}** |")
    lines += ["", "## One decoding step against the ISA", "",
              "The yardstick: every multiply-add of the backbone that is a GEMM (its linear layers, outlier channels "
              "included, and attention's Q·Kᵀ and P·V as GEMMs of their shapes) at the best integer rate measured "
              "at its shape, the heads at the best fp32 rate, and memory at the measured bandwidth for the weights "
              "once plus one write and one read of each activation the layer's maths needs (its input, q/k/v, "
              "attention's output, the MLP's intermediate, its output), charged to the rest. The table above holds "
              "each op to our own kernels; this one holds it to what the ISA runs.", "",
              "| build | case | class | s | share | s at the ISA's yardstick | × from it |", "|---|---|---|---|---|---|---|"]
    for table in report["steps"].values():
        rows = table.get("isa", [])
        total, floor = sum(r["seconds"] for r in rows), sum(r["isa_seconds"] for r in rows)
        build = Path(table["build"]).name
        for r in rows:
            distance = r["seconds"] / r["isa_seconds"] if r["isa_seconds"] else None
            lines.append(f"| {build} | {table['case']} | {r['class']} | {r['seconds']:.3f} | "
                         f"{r['seconds'] / total:.0%} | {r['isa_seconds']:.3f} | {_f(distance, 2)} |")
        if rows:
            lines.append(f"| {build} | {table['case']} | **step** | **{total:.3f}** | 100% | **{floor:.3f}** | "
                         f"**{total / floor:.2f}** |")
    unmeasured = [f"{Path(t['build']).name} {t['case']} {c['class']}{' (ISA yardstick)' * (key == 'isa')}: "
                  f"{c['unmeasured']} op(s)"
                  for t in report["steps"].values() for key in ("classes", "isa") for c in t.get(key, [])
                  if c["unmeasured"]]
    kernels_missing = sorted({r["kernel"] for r in report["gemm"] + report["attention"] if r["gmacs"] is None})
    lines += ["", "Not measured: " + ("; ".join(
        ([f"kernels this onnxruntime could not run here: {', '.join(kernels_missing)}"] if kernels_missing else [])
        + ([f"ops with no kernel measured at their shape (left out of the ceiling): {'; '.join(unmeasured)}"]
           if unmeasured else [])
        + ["the ISA's nominal peak (clock × lanes): a virtual machine does not show its clock, so the ceiling "
           "is the best kernel measured"]))]
    return lines


def main(parser: argparse.ArgumentParser, argv=None) -> int:
    def run() -> None:
        args = parse(parser, argv)
        report = measure(args)
        write_page(args.out, markdown(report), report)

    return run_cli(run)
