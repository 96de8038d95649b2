"""Forward dynamics on mechanisms nobody tuned on: success rate and accuracy relative to the
trapezoidal floor, per mode, over generated mechanisms (``mbfg.testing.random_mechanisms``:
four-bars of every Grashof class, triangle couplers, offset and inclined slider-cranks,
quick-return, shaper, oscillating cylinder, five- and six-bars, open chains of 1-6 links, at
lengths 10 mm - 10 m and masses 1 g - 500 kg).

For each mechanism, released from rest under gravity for ``--t-end`` seconds at dt = 1 ms:

* reference: DOP853 at rtol = atol = 1e-12 with projection (``integrate_reference``);
* floor: the implicit trapezoidal rule at the same dt, no stabilization, no projection
  (``integrate_trapezoidal``);
* projected floor: the same rule with q and qdot projected back onto the constraints after
  every step (``integrate_trapezoidal(project=True)``), i.e. held to the constraints like
  every mode here.  On some mechanisms the unprojected floor's constraint drift happens to
  cancel part of its phase error, so that holding it on the manifold makes it 2-8x less
  accurate; the projected floor is the fair bar for a method that keeps |Phi| at rounding;
* each mode (smoother N_w = 2 and batch, dependent and independent coordinates): RMSE of the
  point coordinates against the reference divided by the floor's, and max |Phi_i| / scale_i
  (a distance to the constraint manifold relative to the mechanism's length).

The formulation was developed on the bundled mechanisms and five hand-written ones (a 57 mm
heavy four-bar, a triangle coupler, a double rocker, the slider-crank and the quick-return);
no generated mechanism and no seed of this benchmark was used for tuning.

The mechanisms x modes run as a study (``mbfg.sweep``, docs/studies.md; run kind ``simulate``
with ``reference: true``, mechanisms ``{random: {count, seed}}``): serially by default, on a
local Dask cluster with ``--workers N`` (the reference and floors of a mechanism are computed
once per worker process that runs one of its modes); ``--out FILE.csv`` keeps the tidy table
and resumes from it; ``--print-study`` prints the study YAML for ``mbfg sweep``.  ms/step is
measured inside each case: with several workers it includes their contention.

    python benchmarks/robustness.py [--count 40] [--seed 2026] [--t-end 5] [--quick]
        [--workers N] [--out results.csv] [--print-study]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import add_sweep_arguments, machine_info, run_study, sweep_summary  # noqa: E402
from mbfg.graphs import DEFAULT_INTEGRATOR, INTEGRATORS  # noqa: E402
from mbfg.testing import random_mechanisms  # noqa: E402

MODES = {  # label -> (solver, coords), in the study's grid order
    "smoother, dependent": ("smoother", "dependent"),
    "smoother, independent": ("smoother", "independent"),
    "batch, dependent": ("batch", "dependent"),
    "batch, independent": ("batch", "independent"),
}


def study(count: int, seed: int, t_end: float, dt: float,
          integrator: str = DEFAULT_INTEGRATOR) -> dict:
    """The benchmark as a study: generated mechanisms x (solver, coordinates)."""
    return {
        "study": "robustness",
        "mechanisms": {"random": {"count": int(count), "seed": int(seed)}},
        "run": {"kind": "simulate", "t_end": float(t_end), "dt": float(dt), "window": 2,
                "integrator": integrator, "reference": True},
        "vary": {"grid": {"run.solver": ["smoother", "batch"],
                          "run.coords": ["dependent", "independent"]}},
        "metrics": ["floor_rmse", "error_ratio", "error_ratio_projected", "max_phi_scaled",
                    "ms_per_step"],
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=40)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--t-end", type=float, default=5.0)
    ap.add_argument("--quick", action="store_true", help="8 mechanisms, 0.5 s")
    ap.add_argument("--integrator", default=DEFAULT_INTEGRATOR, choices=INTEGRATORS,
                    help=f"the simulation graph's rule (default: {DEFAULT_INTEGRATOR}, the "
                    "library's)")
    add_sweep_arguments(ap)
    args = ap.parse_args(argv)
    count, t_end = (8, 0.5) if args.quick else (args.count, args.t_end)
    dt = 1e-3
    spec = study(count, args.seed, t_end, dt, args.integrator)
    result = run_study(spec, args)
    if result is None:
        return
    gens = random_mechanisms(count, args.seed)
    print(f"Machine: {machine_info()}; {sweep_summary(result)}\n")
    print(f"{count} generated mechanisms (seed {args.seed}), {t_end:g} s at dt = {dt * 1e3:g} ms "
          f"from rest under g = 9.81, {args.integrator} rule\n")
    print("Cells: error / floor (error / projected floor), max |Phi_i| / scale_i, ms/step.\n")
    print("| # | mechanism | floor RMSE / length | " + " | ".join(MODES) + " |")
    print("|---|---|---|" + "---|" * len(MODES))
    results = {mode: [] for mode in MODES}
    for i, gen in enumerate(gens):
        rows = {(r["solver"], r["coords"]): r for r in result.rows if r["mechanism"] == gen.name}
        floors = [r["floor_rmse"] for r in rows.values() if r["floor_rmse"] is not None]
        floor = floors[0] / gen.length if floors else float("nan")
        cells = []
        for mode, key in MODES.items():
            r = rows[key]
            ok = r["status"] == "ok"
            results[mode].append(dict(ok=ok, ratio=r["error_ratio"],
                                      ratio_p=r["error_ratio_projected"],
                                      phi=r["max_phi_scaled"], ms=r["ms_per_step"]))
            cells.append(f"{r['error_ratio']:.3g}x ({r['error_ratio_projected']:.3g}x), "
                         f"Φ {r['max_phi_scaled']:.0e}, {r['ms_per_step']:.1f} ms" if ok
                         else "FAILED: " + r["error"][:90])
        print(f"| {i} | {gen.name} | {floor:.1e} | " + " | ".join(cells) + " |")

    print("\n| mode | success | error / floor: median | worst | ≤ 2x | error / projected floor: "
          "median | worst | ≤ 2x | max Φ / scale | median ms/step |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for mode, rs in results.items():
        ok = [r for r in rs if r["ok"]]
        ratios = np.array([r["ratio"] for r in ok]) if ok else np.array([np.nan])
        rp = np.array([r["ratio_p"] for r in ok]) if ok else np.array([np.nan])
        print(f"| {mode} | {len(ok)}/{len(rs)} | {np.median(ratios):.3g} | {np.max(ratios):.3g} "
              f"| {int(np.sum(ratios <= 2.0))}/{len(rs)} | {np.median(rp):.3g} | {np.max(rp):.3g} "
              f"| {int(np.sum(rp <= 2.0))}/{len(rs)} | "
              f"{max((r['phi'] for r in ok), default=np.nan):.1e} | "
              f"{np.median([r['ms'] for r in ok]) if ok else np.nan:.2f} |")


if __name__ == "__main__":
    main()
