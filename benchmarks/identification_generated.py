"""Parameter identification on generated mechanisms nobody here wrote (issue 12; the
engineering standard "correct on mechanisms nobody here wrote").

Each case is :func:`mbfg.testing.random_identification_case`: a mechanism of a family drawn by
:func:`mbfg.testing.random_mechanism`, with viscous friction at every revolute joint and a
motor on its best independent coordinate driven by three harmonics, released from rest and
simulated by DOP853 (rtol 1e-10) over 10 periods 2 pi / omega_c in ``--steps`` steps; markers
on every moving point (sigma 1e-3 ell) and a gyroscope on body 0 (sigma 1e-2 omega_c).
Identified: every body's mass and I0 and every joint's viscous coefficient, from a guess
about 25 % off (30 % for friction).  Every family and seed runs at each ``--scales`` (by
default millimetres and grams, and 5 m and 200 kg): the problem is the same in every unit
system, so its two rows must agree.

Columns: dof, parameters p, converged, LM iterations, cost per reading (about 1 when the fit
is consistent with the sensors' noise), max |z| = max |estimate - truth| / std over every
parameter (honest 95 % intervals keep it below about 2-3), the same with the sampling std (the
readings' noise alone; these recordings come from the exact model), the inertial base
parameters identified and their max |z| (``IdentificationResult.base_parameters``: the
combinations of the masses and inertias alone, friction marginalized), the parameters whose std
is below 10 % of their value ("well-determined") and their largest relative error,
identification and simulation times.

    OPENBLAS_NUM_THREADS=1 python benchmarks/identification_generated.py \\
        --families crank-rocker five-bar --seeds 21 22

``--coulomb`` adds Coulomb friction at every joint (identified too).

Seeds 11 and 12 were used while the harness was written (the excitation's gain, the
initial-state fixes); 21 and 22 are the judged ones.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_info  # noqa: E402

FAMILIES = ("crank-rocker", "double-rocker", "triangle-coupler", "slider-crank-offset",
            "slider-crank-inclined", "quick-return", "shaper", "oscillating-cylinder",
            "five-bar", "six-bar", "chain-1", "chain-2")


def run_case(family, seed, length, mass, steps, coulomb=False):
    import mbfg
    from mbfg.testing import random_identification_case
    t0 = time.perf_counter()
    case = random_identification_case(family, seed, length=length, mass=mass, steps=steps,
                                      coulomb=coulomb)
    t1 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = mbfg.identify(case.guess, case.sensors, [case.recording], list(case.names))
    t2 = time.perf_counter()
    z = np.abs(res.values - case.true_values) / res.std
    z_s = np.abs(res.values - case.true_values) / res.sampling_std
    from mbfg.model.identification import parameter_set
    ps = parameter_set(case.truth, list(case.names), case.sensors)
    b = res.base_parameters
    z_b = np.abs(b.errors(ps.linear_values(np.zeros(ps.size), scales=res.combination_scales))
                 ) / b.std[b.identifiable]
    rel = np.abs(res.values - case.true_values) / np.abs(case.true_values)
    well = res.std < 0.1 * np.abs(res.values)
    return {"family": family, "seed": seed, "length": length, "mass": mass,
            "dof": case.truth.dof, "p": len(case.names), "converged": bool(res.converged),
            "iterations": int(res.stats.iterations), "cost": float(res.costs[0]),
            "max_z": float(np.max(z)), "max_z_sampling": float(np.max(z_s)),
            "base": f"{int(b.identifiable.sum())}/{b.spectrum.size}",
            "base_max_z": float(np.max(z_b)) if z_b.size else float("nan"),
            "well": int(well.sum()),
            "max_rel_well": float(np.max(rel[well])) if well.any() else float("nan"),
            "identify_s": t2 - t1, "simulate_s": t1 - t0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", nargs="+", default=list(FAMILIES))
    ap.add_argument("--seeds", nargs="+", type=int, default=[21, 22])
    ap.add_argument("--scales", nargs="+", default=["0.01:0.001", "5:200"],
                    help="length:mass pairs [m:kg]")
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--coulomb", action="store_true", help="Coulomb friction at every joint "
                    "too, identified (its switching corrected in the integrator rows)")
    a = ap.parse_args(argv)
    scales = [tuple(float(x) for x in s.split(":")) for s in a.scales]
    print(machine_info())
    print("| family | seed | L [m] | M [kg] | dof | p | converged | iterations | cost/reading "
          "| max abs z | max abs z (sampling std) | base parameters identified | their max abs z "
          "| well-determined | max rel. error (well) | identify [s] | simulate [s] |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for family in a.families:
        for seed in a.seeds:
            for length, mass in scales:
                r = run_case(family, seed, length, mass, a.steps, a.coulomb)
                rows.append(r)
                print(f"| {family} | {seed} | {length:g} | {mass:g} | {r['dof']} | {r['p']} | "
                      f"{'yes' if r['converged'] else '**no**'} | {r['iterations']} | "
                      f"{r['cost']:.3g} | {r['max_z']:.2f} | {r['max_z_sampling']:.2f} | "
                      f"{r['base']} | {r['base_max_z']:.2f} | "
                      f"{r['well']}/{r['p']} | "
                      f"{r['max_rel_well']:.2g} | {r['identify_s']:.1f} | {r['simulate_s']:.1f} |",
                      flush=True)
    conv = [r for r in rows if r["converged"]]
    print(f"\nconverged {len(conv)}/{len(rows)}; among them max |z| "
          f"{max((r['max_z'] for r in conv), default=float('nan')):.2f} (sampling std "
          f"{max((r['max_z_sampling'] for r in conv), default=float('nan')):.2f}), cost per "
          f"reading "
          f"{min((r['cost'] for r in conv), default=float('nan')):.3f}-"
          f"{max((r['cost'] for r in conv), default=float('nan')):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
