"""Cost of the model against the number of bodies: N-link pendulum chains.

Each chain hangs from the fixed point 0 and starts horizontal: body k joins points k and k + 1,
length 1/N m, mass 1/N kg, I0 = mass length^2 / 3, so n = 2N coordinates and m = N distance
constraints.  The chain of 1 m grows stiffer with N (its links shorten, so its fastest
motions speed up and Newton needs more iterations at the same dt); ``--link-length L`` keeps
every link at L m and L kg instead, so that only the count changes.  Each N runs in its own
Python process (so memory peaks are separate) and reports:

* load: ``mbfg.mechanism_from_yaml`` on the YAML text (parse, build, assemble q0, choose the
  independent rows) [s], and the peak resident memory of the process after it [MB] (a
  process with mbfg imported is the baseline, printed below the table);
* one evaluation of Phi, Phi_q and sum_k lam_k Phi_qq,k at one state, and one
  ``forward_dynamics`` call [ms] (fastest of a few repeats);
* the fixed-lag smoother (window 2, dt = 1 ms): its set-up (the problem, the solve of step
  0 and of the first window, which still holds the initial priors and so is over-determined)
  [s] and the mean of the next steps [ms/step], while the run is predicted to take at
  most ``--smoother-budget`` seconds (the previous N's run scaled by the square of the size
  ratio; larger chains are skipped);
* batch forward dynamics (``simulate_batch``, dependent coordinates, dt = 1 ms, from the
  horizontal rest state): the mean of a 0.1 s run after a 0.01 s warm-up [ms/step], with
  the same budget rule (``--batch-budget``).

    python benchmarks/body_scaling.py [--max-n 400] [--sizes 10 50 100 200 400] [--link-length 0.1]
        [--integrator trapezoidal]
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_info  # noqa: E402

from mbfg.graphs import DEFAULT_INTEGRATOR, INTEGRATORS  # noqa: E402

SIZES = (10, 50, 100, 200, 400)
REPEAT = 5
"""Repeats of each kernel timing; the table shows the fastest."""
SMOOTHER_STEPS = 10
BATCH_T = 0.1
"""Length of the timed batch run [s] (100 steps of 1 ms)."""


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far [MB] (Linux reports kB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def best_ms(run, repeat: int = REPEAT) -> float:
    """Fastest of ``repeat`` calls of ``run()`` [ms]."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return 1e3 * best


def measure(links: int, smoother: bool, batch: bool = True, link_length: float | None = None,
            integrator: str | None = None) -> dict:
    """All measurements for one chain, in this process (``integrator``: the forward-dynamics
    rule, default mbfg's)."""
    import numpy as np

    import mbfg
    from mbfg.model import constraints as C
    from mbfg.model.dynamics import forward_dynamics

    from mbfg.graphs import DEFAULT_INTEGRATOR
    from mbfg.testing import pendulum_chain_yaml

    integrator = integrator or DEFAULT_INTEGRATOR

    text = (pendulum_chain_yaml(links) if link_length is None
            else pendulum_chain_yaml(links, links * link_length, links * link_length))
    base = peak_rss_mb()
    t0 = time.perf_counter()
    mech = mbfg.mechanism_from_yaml(text, source=f"chain{links}")
    out = {"n": mech.n, "m": mech.m, "load_s": time.perf_counter() - t0,
           "load_rss_mb": peak_rss_mb(), "base_rss_mb": base}
    rng = np.random.default_rng(0)
    q = mech.q0 + 1e-3 * rng.normal(size=mech.n)
    qd = rng.normal(size=mech.n)
    lam = rng.normal(size=mech.m)
    out["phi_ms"] = best_ms(lambda: C.position_constraints(mech, q))
    out["jac_ms"] = best_ms(lambda: C.constraint_jacobian(mech, q))
    out["hws_ms"] = best_ms(lambda: C.hessian_weighted_sum(mech, q, lam))
    out["fd_ms"] = best_ms(lambda: forward_dynamics(mech, q, qd), repeat=2)
    if smoother:
        try:
            from mbfg.drivers.forward_dynamics import make_problem
            from mbfg.solvers.smoother import FixedLagSmoother
            t0 = time.perf_counter()
            problem = make_problem(mech, 1e-3, "dependent", integrator, None, mech.q0)
            sm = FixedLagSmoother(problem, 2, relative_tolerance=0.0, absolute_tolerance=0.0)
            sm.initialize(mech.q0, np.zeros(mech.n))
            sm.advance()  # its window still holds the initial priors (over-determined)
            out["setup_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            for _ in range(SMOOTHER_STEPS):
                sm.advance()
            out["smoother_s"] = time.perf_counter() - t0
        except Exception as exc:  # report, do not fail
            out["smoother_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:120]
    if batch:
        try:
            from mbfg.drivers.forward_dynamics import simulate_batch
            simulate_batch(mech, 0.01, integrator=integrator)
            t0 = time.perf_counter()
            res = simulate_batch(mech, BATCH_T, integrator=integrator)
            out["batch_s"] = time.perf_counter() - t0
            out["batch_steps"] = res.q.shape[0] - 1
            out["batch_iterations"] = res.stats.iterations
        except Exception as exc:  # report, do not fail
            out["batch_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:120]
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def within_budget(what: str, last: tuple | None, links: int, budget: float,
                  notes: list) -> bool:
    """Whether the ``what`` run of a ``links`` chain is predicted (the previous run ``last``
    = (links, seconds), scaled by the square of the size ratio) to take at most ``budget``
    seconds; if not, a note says from which N on it is skipped."""
    predicted = 0.0 if last is None else last[1] * (links / last[0]) ** 2
    if predicted <= budget:
        return True
    notes.append(f"{what} skipped from N = {links} on (predicted {predicted:.0f} s > "
                 f"{budget:g} s)")
    return False


def run_child(links: int, smoother: bool, batch: bool = True,
              link_length: float | None = None, integrator: str | None = None) -> dict:
    cmd = [sys.executable, __file__, "--child", str(links)]
    if integrator is not None:
        cmd += ["--integrator", integrator]
    if link_length is not None:
        cmd += ["--link-length", repr(link_length)]
    if not smoother:
        cmd.append("--no-smoother")
    if not batch:
        cmd.append("--no-batch")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode < 0:
        return {"error": f"killed by signal {-proc.returncode} (out of memory?)"}
    if proc.returncode != 0:
        return {"error": f"exit code {proc.returncode}: "
                         f"{(proc.stderr.strip().splitlines() or [''])[-1][:120]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="numbers of links")
    ap.add_argument("--max-n", type=int, default=None, help="skip chains with more links")
    ap.add_argument("--smoother-budget", type=float, default=60.0,
                    help="skip the smoother for chains predicted to take longer than this [s]")
    ap.add_argument("--no-smoother", action="store_true", help="do not time the smoother")
    ap.add_argument("--batch-budget", type=float, default=60.0,
                    help="skip the batch run for chains predicted to take longer than this [s]")
    ap.add_argument("--no-batch", action="store_true", help="do not time the batch solver")
    ap.add_argument("--link-length", type=float, default=None,
                    help="links of this length [m] and mass [kg] each (default: a 1 m, 1 kg "
                         "chain)")
    ap.add_argument("--integrator", choices=INTEGRATORS, default=None,
                    help=f"integration rule of the smoother and batch runs (default "
                         f"{DEFAULT_INTEGRATOR})")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        print(json.dumps(measure(args.child, not args.no_smoother, not args.no_batch,
                                 args.link_length, args.integrator)))
        return

    sizes = [s for s in args.sizes if args.max_n is None or s <= args.max_n]
    print(f"Machine: {machine_info()}\n")
    chain = ("1 m, 1 kg" if args.link_length is None
             else f"links of {args.link_length:g} m and {args.link_length:g} kg")
    print(f"N-link pendulum chains ({chain}; n = 2N coordinates, m = N constraints), "
          f"{args.integrator or DEFAULT_INTEGRATOR} rule, one process per N; "
          f"kernel times are the fastest of {REPEAT} (forward dynamics: of 2); smoother: "
          f"window 2, dt = 1 ms: set-up (problem, steps 0 and 1) and the mean of "
          f"{SMOOTHER_STEPS} steps after it; batch: {BATCH_T:g} s at 1 ms after a 0.01 s "
          f"warm-up, with its Newton iterations in parentheses.\n")
    print("| N | n | m | load [s] | peak RSS after load [MB] | Φ [ms] | Φ_q [ms] | "
          "Σ λ_k Φ_qq,k [ms] | forward dynamics [ms] | smoother set-up [s] | smoother [ms/step] | "
          "batch [ms/step] | peak RSS [MB] |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    smoother, batch = not args.no_smoother, not args.no_batch
    notes, base, last = [], None, None  # last: (links, seconds) of the latest smoother run
    last_batch = None  # (links, seconds) of the latest batch run
    for links in sizes:
        timed = smoother and within_budget("smoother", last, links, args.smoother_budget, notes)
        smoother = timed
        batch_timed = batch and within_budget("batch", last_batch, links, args.batch_budget,
                                              notes)
        batch = batch_timed
        r = run_child(links, timed, batch_timed, args.link_length, args.integrator)
        if "error" in r:
            print(f"| {links} | {2 * links} | {links} | failed: {r['error']} | | | | | | | | | |",
                  flush=True)
            continue
        base = r["base_rss_mb"]
        setup = ""
        if "smoother_s" in r:
            sm = f"{1e3 * r['smoother_s'] / SMOOTHER_STEPS:.1f}"
            setup = f"{r['setup_s']:.2f}"
            last = (links, r["setup_s"] + r["smoother_s"])
        elif "smoother_error" in r:
            sm = "failed (see note)"
            notes.append(f"smoother failed at N = {links}: {r['smoother_error']}")
            smoother = False
        else:
            sm = "skipped"
        if "batch_s" in r:
            bt = f"{1e3 * r['batch_s'] / r['batch_steps']:.2f} ({r['batch_iterations']})"
            last_batch = (links, r["batch_s"])
        elif "batch_error" in r:
            bt = "failed (see note)"
            notes.append(f"batch failed at N = {links}: {r['batch_error']}")
            batch = False
        else:
            bt = "skipped"
        print(f"| {links} | {r['n']} | {r['m']} | {r['load_s']:.3f} | {r['load_rss_mb']:.0f} | "
              f"{r['phi_ms']:.3f} | {r['jac_ms']:.3f} | {r['hws_ms']:.3f} | {r['fd_ms']:.1f} | "
              f"{setup} | {sm} | {bt} | {r['peak_rss_mb']:.0f} |", flush=True)
    if base is not None:
        print(f"\nBaseline RSS of a process with mbfg imported: {base:.0f} MB.")
    for note in notes:
        print(f"- {note}")


if __name__ == "__main__":
    main()
