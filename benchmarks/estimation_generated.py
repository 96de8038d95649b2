"""fg-online on generated mechanisms at two scales (issue 14: correct on mechanisms nobody here
wrote), with and without the tangent-space marginal prior.

Each mechanism of :func:`mbfg.testing.random_mechanism` (seed 31) is the prototype, at 1 cm /
1 g and at 4 m / 200 kg: released from rest, simulated by DOP853 (rtol 1e-10, atol 1e-10 of its
length) for 6 / omega_c, read by a marker on every moving point (sigma 3e-3 of its length) and
a gyroscope on body 0 (sigma 1e-2 omega_c), noise seed 5, at dt = 0.02 / omega_c.  The estimator
runs the same mechanism with gravity 10 % weak.  Printed: the point coordinates' RMSE over the
mechanism's length, max |Phi_i| / scale_i of the estimate, and ms per step; ``--compare`` also
runs it without :meth:`ObservedProblem.marginal_projector` (the prior before 2026-11-28).
``--gap``: no reading over [2, 4] / omega_c; the RMSE is then over [5, 6] / omega_c, for the
run without the gap, with the default ``hold_gaps=False`` (the window slides through the gap,
its steps leaving at their prediction) and with ``hold_gaps=True`` (the gap kept in the window
and re-solved).

    OPENBLAS_NUM_THREADS=1 python benchmarks/estimation_generated.py [--compare | --gap]
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import warnings
from pathlib import Path

import numpy as np

import mbfg
from mbfg.graphs.estimation import ObservedProblem
from mbfg.model import constraints as C
from mbfg.model.integrate import integrate_reference
from mbfg.model.scales import constraint_scales, mechanism_scales
from mbfg.model.sensors import Gyroscope, Marker, Readings, SensorSet
from mbfg.testing import random_mechanism

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_info  # noqa: E402

FAMILIES = ("crank-rocker", "slider-crank-offset", "five-bar", "six-bar", "chain-3")
SCALES = ((1e-2, 1e-3), (5.0, 200.0))


GAP = (2.0, 4.0)
"""The readings' gap of ``--gap``, in units of 1 / omega_c."""


def run(proto, projection: bool = True, gap: bool = False, late: bool = False,
        **options) -> str:
    """One table cell: RMSE / ell of the point coordinates (over [5, 6] / omega_c if
    ``late``), max |Phi| / scale, ms/step; ``gap``: no reading in :data:`GAP`; ``options``
    go to ``mbfg.estimate``."""
    ell = mechanism_scales(proto).length
    wc = float(np.sqrt(np.hypot(*proto.gravity) / ell))
    dt = 0.02 / wc
    ref = integrate_reference(proto, 6.0 / wc, dt, rtol=1e-10, atol=1e-10 * ell)
    pc = np.asarray(proto.point_coords, int)
    moving = [i for i in range(pc.shape[0]) if np.all(pc[i] >= 0)]
    sensors = SensorSet([Marker(point=p, sigma=3e-3 * ell) for p in moving]
                        + [Gyroscope(body=0, sigma=1e-2 * wc)])
    readings = sensors.synthesize(proto, ref.t, ref.q, ref.qd, ref.qdd,
                                  rng=np.random.default_rng(5))
    if gap:
        keep = [(r.steps * dt * wc < GAP[0]) | (r.steps * dt * wc >= GAP[1]) for r in readings]
        readings = [Readings(r.steps[k], r.values[k]) for r, k in zip(readings, keep)]
    model = dataclasses.replace(proto, gravity=tuple(0.9 * g for g in proto.gravity))
    saved = ObservedProblem.marginal_projector
    if not projection:
        ObservedProblem.marginal_projector = None  # the smoother then keeps the full prior
    try:
        r = mbfg.estimate(model, sensors, readings, dt, len(ref.t), method="fg-online",
                          q0=proto.q0, qd0=np.zeros(proto.n), **options)
    except mbfg.MbfgError as exc:
        return f"failed ({type(exc).__name__})"
    finally:
        ObservedProblem.marginal_projector = saved
    points = np.unique(pc[pc >= 0])
    span = slice(int(round(5.0 / (wc * dt))), None) if late else slice(None)
    err = np.sqrt(np.mean((r.q[span, points] - ref.q[span, points]) ** 2)) / ell
    phi = np.max(np.abs(C.position_constraints(model, r.q)) / constraint_scales(model, r.q))
    return f"{err:.2e} | {phi:.1e} | {r.stats['ms_per_step']:.2f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--compare", action="store_true",
                      help="also run without the tangent-space marginal prior")
    mode.add_argument("--gap", action="store_true",
                      help="a gap in the readings: without it, with it, with hold_gaps")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    print(f"Machine: {machine_info()}\n")
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
            proto = mbfg.mechanism_from_yaml(random_mechanism(family, 31, length=length,
                                                              mass=mass).yaml)
            if args.gap:
                cells = [run(proto, late=True), run(proto, gap=True, late=True, hold_gaps=False),
                         run(proto, gap=True, late=True, hold_gaps=True)]
            else:
                cells = [run(proto)] + ([run(proto, False)] if args.compare else [])
            print(f"| {family} | {mechanism_scales(proto).length:.3g} | {mass:g} | {proto.n} | "
                  + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
