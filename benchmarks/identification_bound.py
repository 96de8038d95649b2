"""What the identification benchmark's recordings can tell at best: the Cramér-Rao bound.

For the recordings of ``benchmarks/identification.py`` (same mechanism, true parameters,
excitations, payload and sensors), the Fisher information of the parameters is built from the
output sensitivities of the exact model: every physical parameter is moved up and down by
``--step`` of its value in turn and the true motion integrated again with DOP853 (one
``solve_ivp`` call per recording, rtol 1e-10, :func:`identification.integrate_once`), the
crank encoder's angle and the coupler gyroscope's rate central-differenced (the one-sided
differences against the unperturbed motion give the nonlinearity column).  The readings are
weighted with the sigmas the identification uses (one count / sqrt(12) for the quantized
encoder, the gyroscope's sigma), and the same weak prior (100 % of each value; the gyroscope
bias 0.05 rad/s) keeps the directions a one-degree-of-freedom loop cannot see finite.

This bound is independent of the identification graph (none of its code runs) and
*optimistic*: the model has no process noise and no discretization error, and the initial
state (rest at the assembled ``q0``) is taken as known.  No unbiased estimator can have a
smaller standard deviation on these recordings; one whose standard deviation is several times
the bound loses information in its own noise model.

Beside it the script runs ``mbfg.identify`` on the same recordings (the benchmark's noise seeds
3 seed, 3 seed + 1) and prints its posterior and sampling standard deviations and errors (the
sampling one is this estimator's own spread under the readings' noise, the figure to hold
against the bound).

    python benchmarks/identification_bound.py [--seeds 2] [--first-seed 0]
        [--excitation random|fixed] [--jobs 2] [--cache DIR]
"""
from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import identification as B  # noqa: E402
from _machine import machine_info  # noqa: E402
import mbfg  # noqa: E402
from mbfg.model.parameters import parameter_vector  # noqa: E402

PHYSICAL = {"v0": "friction[0].viscous", "mu": "friction[0].coulomb",
            "v1": "friction[1].viscous", "v2": "friction[2].viscous",
            "v3": "friction[3].viscous", "K": "motors[0].gain"}
"""The benchmark's physical parameters reported here, by their key in ``B.TRUE``."""
BIAS_PRIOR = 0.05
"""Prior standard deviation of the gyroscope bias [rad/s] (the other priors: 100 %)."""


SENSORS = B.benchmark_setup().sensors


def mechanism(values: dict, recording: str):
    """The benchmark mechanism with ``values`` (keys of ``B.TRUE``), loaded with the payload
    for the payload recording."""
    mech = mbfg.mechanism_from_yaml(B.yaml_of(values), "bound")
    if recording == "payload":
        mech = mech.with_parameters(parameter_vector(mech) + B.payload_vector(mech, B.PAYLOAD))
    return mech


def readings(values: dict, recording: str, phases, t_end: float, dt: float) -> np.ndarray:
    """The noise-free readings of one recording, (2, steps): the crank angle [rad] and the
    coupler gyroscope's rate [rad/s] (its constant bias included)."""
    mech = mechanism(values, recording)
    tr, _ = B.integrate_once(mech, t_end, dt, B.excitation(phases))
    return SENSORS.measure(mech, tr.q, tr.qd).T


def perturbed(key: str | None, step: float) -> tuple[dict, float]:
    """``B.TRUE`` with ``key`` moved by ``step`` times max(|value|, 0.05) (``step`` may be
    negative; None: unmoved), and that move."""
    values = dict(B.TRUE)
    if key is None:
        return values, 0.0
    h = step * max(abs(values[key]), 0.05)
    values[key] += h
    return values, h


def _run(job):
    key, recording, phases, t_end, dt, step = job
    values, h = perturbed(key, step)
    return key, recording, step, h, readings(values, recording, phases, t_end, dt)


def fisher_information(phases: dict, t_end: float, dt: float, step: float, jobs: int):
    """Fisher information (p, p) of ``list(B.TRUE) + ['bias']`` from both training
    recordings' central-difference output sensitivities, weighted by the sensor sigmas, and
    per parameter (p - 1,) the nonlinearity over the step, |S+ - S-| / |S+ + S-| of the
    one-sided differences.  Well below 1: the readings depend linearly on the parameter over
    the step, and the bound is what it says.  Near 1 or above: they do not, typically a
    rotating crank whose phase drifts with the parameter; the local bound is then far below
    anything an estimator can reach from a guess that is not already that close."""
    keys = list(B.TRUE)
    work = [(k, rec, phases[rec], t_end, dt, sgn * step) for rec in ("train", "payload")
            for k in keys for sgn in (1.0, -1.0)]
    work += [(None, rec, phases[rec], t_end, dt, 0.0) for rec in ("train", "payload")]
    with ProcessPoolExecutor(jobs) as pool:
        out = {(k, rec, np.sign(st)): (h, y) for k, rec, st, h, y in pool.map(_run, work)}
    sig = np.array([s.sigma for s in SENSORS])[:, None]
    F = np.zeros((len(keys) + 1, len(keys) + 1))
    curved, slope = np.zeros(len(keys)), np.zeros(len(keys))
    for rec in ("train", "payload"):
        y0 = out[(None, rec, 0.0)][1]
        cols = []
        for i, k in enumerate(keys):
            (hp, yp), (_, ym) = out[(k, rec, 1.0)], out[(k, rec, -1.0)]
            forward, backward = (yp - y0) / hp / sig, (y0 - ym) / hp / sig
            cols.append((0.5 * (forward + backward)).ravel())
            curved[i] += np.sum((forward - backward) ** 2)
            slope[i] += np.sum((forward + backward) ** 2)
        cols.append((np.array([[0.0], [1.0]]) * np.ones_like(y0) / sig).ravel())  # bias
        S = np.stack(cols, axis=1)
        F += S.T @ S
    return F, np.sqrt(curved / np.maximum(slope, np.finfo(float).tiny))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--excitation", choices=("random", "fixed"), default="random")
    ap.add_argument("--t-end", type=float, default=30.0)
    ap.add_argument("--dt", type=float, default=1e-3)
    ap.add_argument("--step", type=float, default=1e-4,
                    help="central-difference step relative to max(|value|, 0.05)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--cache", default=None, help="as in identification.py")
    args = ap.parse_args(argv)

    setup = B.benchmark_setup()
    truth, guess, loaded = setup.truth, setup.guess, setup.loaded
    sensors, guess_sensors = setup.sensors, setup.guess_sensors
    keys = list(B.TRUE)
    values = np.array([B.TRUE[k] for k in keys] + [B.BIAS])
    prior = np.diag(1.0 / np.r_[np.maximum(np.abs(values[:-1]), 0.05), BIAS_PRIOR] ** 2)
    report = list(PHYSICAL) + ["bias"]
    names = [PHYSICAL.get(k, "sensors[1].bias") for k in report]
    rows = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        phases = B.recording_phases(seed, args.excitation)
        runs = B.truth_runs(truth, loaded, phases, args.t_end, args.dt, args.cache,
                            once=args.excitation == "random")
        t0 = time.perf_counter()
        F, nonlinear = fisher_information(phases, args.t_end, args.dt, args.step, args.jobs)
        bound = np.sqrt(np.diag(np.linalg.inv(F + prior)))
        seconds = time.perf_counter() - t0
        recs = [B.synthesize(truth, sensors, *runs["train"], 3 * seed, args.dt),
                B.synthesize(loaded, sensors, *runs["payload"], 3 * seed + 1, args.dt,
                             B.PAYLOAD)]
        res = mbfg.identify(guess, guess_sensors, recs, B.NAMES)
        turns = [np.ptp(runs[r][0].q[:, 4]) / (2 * np.pi) for r in ("train", "payload")]
        print(f"\nseed {seed} ({args.excitation} excitation; crank turns {turns[0]:.1f} and "
              f"{turns[1]:.1f}; bound from {2 * (2 * len(keys) + 1)} integrations in "
              f"{seconds:.0f} s)\n")
        print("| parameter | true | Cramér-Rao std | nonlinearity over the step | identify std "
              "| identify sampling std | identify error | std / bound | sampling std / bound |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for k, n in zip(report, names):
            i = keys.index(k) if k in keys else len(keys)
            j = res.names.index(n)
            true = values[i]
            row = dict(seed=seed, name=n, bound=bound[i] / abs(true), std=res.std[j] / abs(true),
                       sampling=res.sampling_std[j] / abs(true),
                       error=(res.values[j] - true) / abs(true))
            rows.append(row)
            bent = f"{nonlinear[i]:.2g}" if i < len(nonlinear) else "0 (exact)"
            print(f"| {n} | {true:g} | {100 * row['bound']:.3g} % | {bent} | "
                  f"{100 * row['std']:.3g} % | {100 * row['sampling']:.3g} % | "
                  f"{100 * row['error']:+.3g} % | {row['std'] / row['bound']:.1f} | "
                  f"{row['sampling'] / row['bound']:.1f} |", flush=True)
    print()
    print(machine_info())
    if len(rows) > len(report):
        print("\nmedian over seeds: parameter, bound, identify std, sampling std, their ratios "
              "to the bound")
        for n in names:
            r = [x for x in rows if x["name"] == n]
            b = np.median([x["bound"] for x in r])
            s = np.median([x["std"] for x in r])
            ss = np.median([x["sampling"] for x in r])
            print(f"- {n}: {100 * b:.3g} %, {100 * s:.3g} %, {100 * ss:.3g} %, "
                  f"{np.median([x['std'] / x['bound'] for x in r]):.1f}, "
                  f"{np.median([x['sampling'] / x['bound'] for x in r]):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
