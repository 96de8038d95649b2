"""fg-online on generated mechanisms at two scales (issue 14: correct on mechanisms nobody here
wrote), with and without the tangent-space marginal prior.

Each mechanism of :func:`mbfg.testing.random_mechanism` (seed 31) is the prototype, at 1 cm /
1 g and at 4 m / 200 kg (:data:`SCALES`: the generator's length parameter 1e-2 m and 5 m; the
mechanisms' characteristic lengths are 6-18 mm and 2.9-8.9 m), as
:func:`mbfg.testing.watched_mechanism` makes it: released from rest, simulated by DOP853
(rtol 1e-10, atol 1e-10 of its length) for 6 / omega_c, read by a marker on every moving point
(sigma 3e-3 of its length) and a gyroscope on body 0 (sigma 1e-2 omega_c), noise seed 5, at
dt = 0.02 / omega_c.  The estimator runs the same mechanism with gravity 10 % weak.  Printed:
the point coordinates' RMSE over the mechanism's length, max |Phi_i| / scale_i of the
estimate, and ms per step; ``--compare`` also runs it without
:meth:`ObservedProblem.marginal_projector` (the prior before 2026-11-28).
``--gap``: no reading over [2, 4] / omega_c; the RMSE is then over [5, 6] / omega_c, for the
run without the gap, with the default ``hold_gaps=False`` (the window slides through the gap,
its steps leaving at their prediction) and with ``hold_gaps=True`` (the gap kept in the window
and re-solved).  ``--estimators NAME ...``: every family of :data:`mbfg.testing.FAMILIES`,
each estimator named (registered names, default all but the plain and +force variants), the
RMSE / ell over the whole run, or the error an estimator refused with.

    OPENBLAS_NUM_THREADS=1 python benchmarks/estimation_generated.py [--compare | --gap |
        --estimators [NAME ...]]
"""
from __future__ import annotations

import argparse
import functools
import sys
import warnings
from pathlib import Path

import numpy as np

import mbfg
from mbfg.graphs.estimation import ObservedProblem
from mbfg.model import constraints as C
from mbfg.model.scales import constraint_scales
from mbfg.testing import FAMILIES as ALL_FAMILIES
from mbfg.testing import watched_mechanism

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_info  # noqa: E402

FAMILIES = ("crank-rocker", "slider-crank-offset", "five-bar", "six-bar", "chain-3")
ESTIMATORS = ("fg-online", "ekf", "ekf_fe", "ukf", "dekf", "pf")
SCALES = ((1e-2, 1e-3), (5.0, 200.0))


GAP = (2.0, 4.0)
"""The readings' gap of ``--gap``, in units of 1 / omega_c."""


def run(w, projection: bool = True, gap: bool = False, late: bool = False,
        method: str = "fg-online", brief: bool = False, **options) -> str:
    """One table cell for the :class:`~mbfg.testing.WatchedMechanism` ``w``: RMSE / ell of
    the point coordinates (over [5, 6] / omega_c if ``late``), max |Phi| / scale, ms/step
    (``brief``: the RMSE only); ``gap``: no reading in :data:`GAP`; ``method`` and
    ``options`` go to ``mbfg.estimate``."""
    readings = w.readings_with_gap(*GAP) if gap else w.readings
    saved = ObservedProblem.marginal_projector
    if not projection:
        ObservedProblem.marginal_projector = None  # the smoother then keeps the full prior
    try:
        r = mbfg.estimate(w.model, w.sensors, readings, w.dt, len(w.truth.t),
                          method=method, q0=w.proto.q0, qd0=np.zeros(w.proto.n), **options)
    except mbfg.MbfgError as exc:
        return f"failed ({type(exc).__name__})"
    finally:
        ObservedProblem.marginal_projector = saved
    span = slice(int(round(5.0 / (w.omega_c * w.dt))), None) if late else slice(None)
    err = np.sqrt(np.mean((r.q[span, w.points] - w.truth.q[span, w.points]) ** 2)) / w.ell
    if brief:
        return f"{err:.2e}"
    phi = np.max(np.abs(C.position_constraints(w.model, r.q))
                 / constraint_scales(w.model, r.q))
    return f"{err:.2e} | {phi:.1e} | {r.stats['ms_per_step']:.2f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--compare", action="store_true",
                      help="also run without the tangent-space marginal prior")
    mode.add_argument("--gap", action="store_true",
                      help="a gap in the readings: without it, with it, with hold_gaps")
    mode.add_argument("--estimators", nargs="*", default=None, metavar="NAME",
                      help="every family, these estimators (default: fg-online and the filters)")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    print(f"Machine: {machine_info()}\n")
    if args.estimators is not None:
        names = args.estimators or list(ESTIMATORS)
        print("| family | length [m] | mass [kg] | dof | " + " | ".join(names) + " |")
        print("|---|---|---|---|" + "---|" * len(names))
        for length, mass in SCALES:
            for family in ALL_FAMILIES:
                w = watched_mechanism(family, 31, length=length, mass=mass)
                cells = [run(w, method=m, brief=True) for m in names]
                print(f"| {family} | {w.ell:.3g} | {mass:g} | {w.proto.dof} | "
                      + " | ".join(cells) + " |", flush=True)
        return
    head = "| family | length [m] | mass [kg] | n | RMSE / l | max Phi/scale | ms/step |"
    rule = "|---|---|---|---|---|---|---|"
    if args.compare:
        head += " without: RMSE / l | max Phi/scale | ms/step |"
        rule += "---|---|---|"
    if args.gap:
        head = head.replace("RMSE / l", "no gap: late RMSE / l") + (
            " gap, sliding (default): late RMSE / l | max Phi/scale | ms/step | gap, held: "
            "late RMSE / l | max Phi/scale | ms/step |")
        rule += "---|---|---|---|---|---|"
    print(head + "\n" + rule)
    for length, mass in SCALES:
        for family in FAMILIES:
            w = watched_mechanism(family, 31, length=length, mass=mass)
            cell = functools.partial(run, w)
            if args.gap:
                cells = [cell(late=True), cell(gap=True, late=True, hold_gaps=False),
                         cell(gap=True, late=True, hold_gaps=True)]
            else:
                cells = [cell()] + ([cell(False)] if args.compare else [])
            print(f"| {family} | {w.ell:.3g} | {mass:g} | {w.proto.n} | "
                  + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
