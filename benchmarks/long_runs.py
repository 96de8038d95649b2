"""Long runs on mechanisms nobody tuned on: does ``mbfg.simulate`` (by default the fixed-lag
smoother, window 2, dependent coordinates; any mode by option; dt = 1 ms) reach the end of a
long horizon on one generated mechanism of every family, and how much energy does it drift?

For each mechanism (``mbfg.testing.random_mechanisms(count, seed)``, seed 77 by default,
never used for tuning), released from rest under gravity for ``--t-end`` seconds, in its own
process (separate memory peaks):

* status: finished, or the error and the time it stopped at;
* wall time and ms/step; peak resident memory of the process [MB];
* energy drift: max |E(t) - E(0)| divided by the peak kinetic energy (no applied forces, so
  E = T + V is conserved by the equations of motion);
* max |Phi_i| / scale_i over the run (distance to the manifold relative to the size).

    python benchmarks/long_runs.py [--t-end 100] [--count 17] [--seed 77] [--jobs 1]
        [--solver smoother|batch] [--coords dependent|independent] [--window 2]
        [--integrator hermite|trapezoidal] [--only I [I ...]]

Each mechanism's row is also printed on stderr as soon as it is done, so that a run stopped
early keeps what it measured; ``--only`` runs the mechanisms of those indices (0-based), to
finish such a run.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_info  # noqa: E402
from mbfg.graphs import DEFAULT_INTEGRATOR, INTEGRATORS  # noqa: E402

WORKER = r"""
import json, resource, sys, time
import numpy as np
import mbfg
from mbfg.errors import MbfgError
from mbfg.model import constraints as C
from mbfg.model.inertia import kinetic_energy, potential_energy
from mbfg.model.scales import constraint_scales
from mbfg.testing import random_mechanisms

count, seed, i, t_end = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
solver, coords, window, rule = sys.argv[5], sys.argv[6], int(sys.argv[7]), sys.argv[8]
gen = random_mechanisms(count, seed)[i]
mech = gen.load()
t0 = time.perf_counter()
status, res = "finished", None
try:
    res = mbfg.simulate(mech, t_end, 1e-3, solver=solver, coords=coords, window=window,
                        integrator=rule)
except MbfgError as exc:
    status = f"{type(exc).__name__} at t = {getattr(exc, 'time', float('nan')):.3g} s"
    res = getattr(exc, "partial", None)
wall = time.perf_counter() - t0
out = {"name": gen.name, "family": gen.family, "status": status, "wall": wall,
       "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
if res is not None and len(res.t) > 1:
    E = kinetic_energy(mech, res.qd) + potential_energy(mech, res.q)
    K = kinetic_energy(mech, res.qd)
    phi = np.abs(C.position_constraints(mech, res.q)) / constraint_scales(mech, res.q)
    out.update(t_reached=float(res.t[-1]), ms_per_step=1e3 * wall / (len(res.t) - 1),
               drift=float(np.max(np.abs(E - E[0])) / max(float(np.max(K)), 1e-300)),
               phi=float(np.max(phi)))
print(json.dumps(out))
"""


def run_one(args, i):
    proc = subprocess.run([sys.executable, "-c", WORKER, str(args.count), str(args.seed), str(i),
                           str(args.t_end), args.solver, args.coords, str(args.window),
                           args.integrator],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return {"name": f"#{i}", "family": "?", "status": proc.stderr.strip().splitlines()[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table_row(r: dict) -> str:
    """One mechanism's row of the table."""
    return (f"| {r['name']} | {r['status']} | {r.get('t_reached', float('nan')):.4g} | "
            f"{r.get('ms_per_step', float('nan')):.2f} | {r.get('rss', float('nan')):.0f} | "
            f"{r.get('drift', float('nan')):.1e} | {r.get('phi', float('nan')):.1e} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--t-end", type=float, default=100.0)
    ap.add_argument("--count", type=int, default=17)
    ap.add_argument("--seed", type=int, default=77)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--solver", choices=("smoother", "batch"), default="smoother")
    ap.add_argument("--coords", choices=("dependent", "independent"), default="dependent")
    ap.add_argument("--window", type=int, default=2, help="smoother window")
    ap.add_argument("--integrator", choices=INTEGRATORS, default=DEFAULT_INTEGRATOR)
    ap.add_argument("--only", type=int, nargs="+", metavar="I",
                    help="run only the mechanisms of these indices (0-based; default: all)")
    args = ap.parse_args(argv)
    indices = list(range(args.count)) if args.only is None else args.only
    if any(not 0 <= i < args.count for i in indices):
        ap.error(f"--only: indices must be in 0..{args.count - 1}")
    print(machine_info())
    print(f"mbfg.simulate ({args.solver}{f', window {args.window}' if args.solver == 'smoother' else ''}, "
          f"{args.coords}, {args.integrator}), dt = 1 ms, {args.t_end:g} s; "
          f"random_mechanisms({args.count}, seed={args.seed})\n")
    def one(i):
        r = run_one(args, i)
        print(f"#{i} {table_row(r)}", file=sys.stderr, flush=True)
        return r

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        rows = list(pool.map(one, indices))
    print("| mechanism | status | reached [s] | ms/step | peak RSS [MB] | energy drift / peak KE "
          "| max Φ / scale |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(table_row(r))
    done = sum(r["status"] == "finished" for r in rows)
    print(f"\n{done}/{len(rows)} finished")
    return 0


if __name__ == "__main__":
    sys.exit(main())
