"""Command-line interface: ``mbfg <command> ...`` (also ``python -m mbfg``).

Every :class:`~mbfg.errors.MbfgError` (bad input, non-convergence) is printed as one line on
stderr with exit code 2; no traceback.  Any other exception (a bug) is also reported on one
line, with exit code 1, unless the environment variable ``MBFG_DEBUG`` is set.

Commands run with numpy's floating-point warnings off (absurd input shows up as a typed error
on non-finite results instead of dozens of RuntimeWarning lines); other warnings of a command
that succeeds are printed after it, one line each (``mbfg <command>: warning: ...``), and are
dropped when it fails (the error line says what went wrong).  A closed stdout (``mbfg check X
| head -1``) ends the command silently with exit code 141 (128 + SIGPIPE), as a shell tool.
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings

import numpy as np

from mbfg.errors import MbfgError


def _cmd_check(args) -> int:
    import mbfg
    from mbfg.model import constraints as C
    from mbfg.model import kinematics as K

    mech = mbfg.load_mechanism(args.mechanism)
    J = C.constraint_jacobian(mech, mech.q0)
    rank = K.numerical_rank(J)
    idx = K.choose_independent_coordinates(mech)
    residual = float(np.linalg.norm(C.position_constraints(mech, mech.q0)))
    names = mech.coordinate_names
    lines = [
        f"mechanism:               {args.mechanism}",
        f"points / bodies:         {mech.n_points} / {len(mech.spec.bodies)}",
        f"coordinates n:           {mech.n}",
        f"constraints m:           {mech.m}",
        f"rank of Phi_q:           {rank}" + (f"  ({mech.m - rank} redundant)" if rank < mech.m else ""),
        f"degrees of freedom:      {mech.n - rank}",
        f"coordinate names:        {' '.join(names)}",
        f"independent coordinates: {' '.join(names[i] for i in idx)}  (indices {', '.join(map(str, idx))})",
        f"assembly residual |Phi|: {residual:.3e}",
        f"total mass:              {mech.total_mass:.6g} kg",
        f"gravity:                 [{mech.gravity[0]:g}, {mech.gravity[1]:g}] m/s^2",
        "q0:                      " + " ".join(f"{v:.6g}" for v in mech.q0),
    ]
    branch = K.branch_point(mech, mech.q0)
    if branch:
        lines.append(f"warning:                 q0 is a branch point (the rank of Phi_q is lower "
                     f"there than around it; the motion of {', '.join(branch)} is not "
                     f"determined): simulations from q0 are refused")
    print("\n".join(lines))
    return 0


def _cmd_mechanisms(args) -> int:
    """List the bundled mechanisms (usable by name: ``mbfg simulate fourbar``)."""
    import mbfg
    from mbfg.resources import bundled_mechanisms

    for name, path in bundled_mechanisms().items():
        mech = mbfg.load_mechanism(path)
        print(f"{name:24s} n = {mech.n:2d}, DOF = {mech.dof}, {len(mech.spec.bodies)} bodies"
              + (f"   {path}" if args.paths else ""))
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors as one line on stderr and exit code 2."""

    def error(self, message):  # noqa: D401 - argparse API
        self.exit(2, f"{self.prog}: error: {' '.join(str(message).split())} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from mbfg.cli import commands
    p = _Parser(prog="mbfg", description="Planar multibody dynamics as factor graphs")
    from mbfg import __version__
    p.add_argument("--version", action="version", version=f"mbfg {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    c = sub.add_parser("check", help="load a mechanism and print its model summary")
    c.add_argument("mechanism", help=MECHANISM_HELP)
    c.set_defaults(func=_cmd_check)
    c = sub.add_parser("mechanisms", help="list the bundled mechanisms")
    c.add_argument("--paths", action="store_true", help="also print where each file is")
    c.set_defaults(func=_cmd_mechanisms)
    commands.register(sub)
    from mbfg.cli import identify as _identify
    _identify.register(sub)
    from mbfg.cli import sweep
    sweep.register(sub)
    for register in _EXTRA_COMMANDS:
        register(sub)
    return p


MECHANISM_HELP = "mechanism YAML file, or the name of a bundled one (see: mbfg mechanisms)"

_EXTRA_COMMANDS: list = []
"""Functions ``register(subparsers)`` that add more sub-commands (simulate, inverse, ...)."""


EXIT_BROKEN_PIPE = 141
"""Exit code when stdout is closed early (128 + SIGPIPE, like a tool killed by the signal)."""


def _one_line(text) -> str:
    return " ".join(str(text).split())


def _silence_stdout() -> None:
    """After a BrokenPipeError: point stdout at /dev/null so the interpreter's final flush
    does not fail again (https://docs.python.org/3/library/signal.html#note-on-sigpipe)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a real file (tests capture it): nothing is flushed at exit
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def _run(args) -> int:
    """Run the command with numpy's floating-point warnings off; print the other warnings it
    issued, one line each, only if it succeeds."""
    with np.errstate(all="ignore"), warnings.catch_warnings(record=True) as caught:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows up here, inside the handlers of main()
    seen = set()
    for w in caught:
        line = f"mbfg {args.command}: warning: {_one_line(w.message)}"
        if line not in seen:
            seen.add(line)
            print(line, file=sys.stderr)
    return code


def main(argv: list | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except MbfgError as e:
        print(f"mbfg {args.command}: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"mbfg {args.command}: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"mbfg {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug, not bad input: still one line, never a traceback
        if os.environ.get("MBFG_DEBUG"):
            raise
        print(f"mbfg {args.command}: internal error: {type(e).__name__}: "
              f"{' '.join(str(e).split())} (set MBFG_DEBUG=1 for a traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


__all__ = ["main", "build_parser", "MECHANISM_HELP", "EXIT_BROKEN_PIPE"]
