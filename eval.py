#!/usr/bin/env python3
"""Check a build against upstream PyTorch.

  python eval.py --mode equiv --model_dir models/omnivoice-cpu-fp32
  python eval.py --mode equiv --model_dir some/foreign/folder      # probe only: is it bidirectional?
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from codes.errors import run_cli


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("equiv",), default="equiv")
    parser.add_argument("--model_dir", type=Path, required=True, help="a build folder from optimize.py (or a foreign one)")
    parser.add_argument("--source", help="the checkpoint the build came from (default: the one its manifest names)")
    parser.add_argument("--provider", default="cpu", choices=("cpu", "cuda"))
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from codes.equiv import run_equivalence

    rows, table = run_equivalence(args.model_dir, args.source, args.provider)
    print(table)
    failed = [r.check for r in rows if not r.passed]
    if failed:
        print(f"FAILED: {', '.join(failed)}")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
