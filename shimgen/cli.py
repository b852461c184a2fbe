"""The `shimgen` command line. Every failure is one line on stderr and a non-zero exit."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import __version__
from .errors import ShimgenError


def _cmd_build(args: argparse.Namespace) -> int:
    from .build import build
    from .exports import default_driver, read_driver
    from .model import build_model, default_output_root

    driver_path = Path(args.driver) if args.driver else default_driver()
    driver = read_driver(driver_path)
    argv = ["shimgen", "build", "--driver", str(driver.path)]
    if args.out:
        argv += ["--out", str(args.out)]
    model = build_model(driver, argv)
    result = build(model, Path(args.out) if args.out else default_output_root())
    data = ", ".join(d.name for d in driver.data) or "none"
    lines = [
        f"driver     {driver.real_path}",
        f"version    {driver.version}   build-id {driver.build_id or 'none'}",
        f"forwarded  {len(model.functions)} functions ({len(model.hooked)} with hooks: "
        f"{', '.join(f.name for f in model.hooked)})",
        f"data       {len(driver.data)} exported objects left in the real library "
        f"(variables cannot be forwarded by code): {data}",
        f"shim       {result.library}",
        f"time       {result.seconds:.2f} s",
    ]
    print("\n".join(lines))
    return 0


def _cmd_exports(args: argparse.Namespace) -> int:
    from .exports import default_driver, read_driver

    driver = read_driver(Path(args.driver) if args.driver else default_driver())
    for f in driver.functions:
        print(f.name)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="shimgen",
        description="Generate and build a complete forwarding shim for libcuda.",
    )
    p.add_argument("--version", action="version", version=f"shimgen {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    b = sub.add_parser("build", help="build libcudashim.so for a driver")
    b.add_argument("--driver", help="real libcuda (default: the one ldconfig would pick)")
    b.add_argument("--out", help="output root (default: ./build)")
    b.set_defaults(func=_cmd_build)

    e = sub.add_parser("exports", help="list the functions a driver exports")
    e.add_argument("--driver", help="real libcuda (default: the one ldconfig would pick)")
    e.set_defaults(func=_cmd_exports)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except ShimgenError as e:
        print(f"shimgen: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("shimgen: interrupted; nothing was installed", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
