"""What every bench/ results page shares: the machine it was measured on, named (its CPU, the instruction sets
ONNX Runtime's kernels choose among, onnxruntime), and the page written (printed, and to a file with its .json)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
from contextlib import contextmanager
from pathlib import Path

from codes.common.fileio import atomic_path
from codes.common.isa import cpuinfo, isa_names
from codes.runtime.contract.native_kernels import KEEP, SWITCH, SWITCH_VALUES

def cpu_info() -> tuple[str, list[str], list[str]]:
    """The CPU's model name, its instruction sets that matter here (ISA_FLAGS) and all its flags."""
    fields = cpuinfo()
    flags = fields.get("flags", "").split()
    return fields.get("model name", platform.processor()), isa_names(frozenset(flags)), flags


def machine() -> dict:
    """The machine as a results page records it. A VM's model name is often only "AMD EPYC": the family and
    model numbers tell its generations apart (AMD family 23 is Zen 1 and 2, 25 Zen 3 and 4, 26 Zen 5)."""
    import onnxruntime

    model, isa, _ = cpu_info()
    numbers = cpuinfo()
    return {"cpu": model, "cpu_family": numbers.get("cpu family"), "cpu_model": numbers.get("model"), "isa": isa,
            "logical_cpus": os.cpu_count(), "python": platform.python_version(), "onnxruntime": onnxruntime.__version__}


def machine_line(info: dict) -> str:
    """How a results page names its machine: the CPU (family and model where known), its cores and
    instruction sets, onnxruntime."""
    numbers = f" (family {info['cpu_family']} model {info['cpu_model']})" if info.get("cpu_family") else ""
    return (f"{info['cpu']}{numbers}, {info['logical_cpus']} cores ({', '.join(info['isa']) or 'no AVX2'}); "
            f"onnxruntime {info['onnxruntime']}")


def write_page(out: Path | None, lines: list[str], data: dict | None = None) -> None:
    """A bench script's markdown page, printed, and with `out` written there (and `data` beside it as .json)."""
    text = "\n".join(lines) + "\n"
    print(text)
    if out is not None:
        with atomic_path(out) as tmp:
            tmp.write_text(text, encoding="utf-8")
        if data is not None:
            with atomic_path(out.with_suffix(".json")) as tmp:
                tmp.write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")


def publish(out: Path | None, script: str, argv: list[str] | None, page, data: dict) -> None:
    """Write a bench/ script's page, made by page(data, machine_line, command) and naming the command that made
    it, with its data and the machine in the .json."""
    command = f"python {script} " + shlex.join(argv if argv is not None else sys.argv[1:])
    info = machine()
    write_page(out, page(data, machine_line(info), command), {**data, "machine": info})


def bench_parser(doc: str) -> argparse.ArgumentParser:
    """A bench/ entry point's argument parser: its docstring, examples included, as the help."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def add_kernel_switches(parser: argparse.ArgumentParser, what: str) -> None:
    """--kernels: the values of our kernels' switch `what` (each build, or the step) also runs at, beside our
    kernels at the widest this CPU runs; --onnx_kernels: the same as --kernels onnx."""
    meanings = "; ".join(f"{value}: {meaning}" for value, meaning in SWITCH_VALUES.items())
    parser.add_argument("--kernels", nargs="+", choices=list(SWITCH_VALUES), default=[],
                        help=f"also run {what} with {SWITCH} set to each ({meanings})")
    parser.add_argument("--onnx_kernels", action="store_true", help=f"the same as --kernels {KEEP}")


def kernel_switches(args: argparse.Namespace) -> list[str]:
    """The switch values add_kernel_switches' flags asked for, each once, in the order given."""
    return list(dict.fromkeys(args.kernels + ([KEEP] if args.onnx_kernels else [])))


@contextmanager
def environment(values: dict):
    """os.environ with `values` set (a None: unset), as it was again afterwards: a switch the runtime reads as it
    loads (our kernels', OMNIVOICE_ONNX_KERNELS), for one part of a run."""
    before = {key: os.environ.get(key) for key in values}
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
