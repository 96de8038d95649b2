"""Cost of one linearization of each factor type (issue 3).

For each factor: microseconds per ``factor.linearize(values)`` (median of repeated timings)
and the fraction of it spent in mbfg's Python residual (``spec.evaluate``: numpy kernels,
checks); the rest is gtsam (C++, callback dispatch, whitening).  Native linear factors
have no Python part.

    python benchmarks/factor_linearization.py [--repeat 2000]
"""
from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path

import gtsam
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mbfg  # noqa: E402
from _machine import machine_info  # noqa: E402
from mbfg import factors as F  # noqa: E402
from mbfg.factors import keys as K  # noqa: E402
from mbfg.model.kinematics import choose_independent_coordinates  # noqa: E402
from mbfg.testing import random_assembled_state  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def factories(m, idx):
    return {
        "f_prior": lambda: F.prior_factor(K.q(0), np.zeros(m.n), 1e-3),
        "f_ei": lambda: F.euler_integrator_factor(K.q(0), K.q(1), K.v(0), 1e-3, m.n, 1e-3),
        "f_ti": lambda: F.trapezoidal_integrator_factor(K.q(0), K.q(1), K.v(0), K.v(1), 1e-3, m.n, 1e-3),
        "f_pc^d": lambda: F.position_constraint_factor(m, K.q(0)),
        "f_vc^d": lambda: F.velocity_constraint_factor(m, K.q(0), K.v(0)),
        "f_ac^d": lambda: F.acceleration_constraint_factor(m, K.q(0), K.v(0), K.a(0)),
        "f_dyn^d": lambda: F.forward_dynamics_factor(m, K.q(0), K.v(0), K.a(0)),
        "f_idyn^d": lambda: F.inverse_dynamics_factor(m, K.q(0), K.v(0), K.a(0), K.Q(0)),
        "f_pc^i": lambda: F.independent_position_factor(m, K.q(0), K.z(0), idx),
        "f_vc^i": lambda: F.independent_velocity_factor(m, K.q(0), K.v(0), K.zd(0), idx),
        "f_ac^i": lambda: F.independent_acceleration_factor(m, K.q(0), K.v(0), K.a(0), K.zdd(0), idx),
        "f_dyn^i": lambda: F.independent_forward_dynamics_factor(m, K.q(0), K.v(0), K.zdd(0), idx),
        "f_idyn^i": lambda: F.independent_inverse_dynamics_factor(m, K.q(0), K.v(0), K.zdd(0), K.Q(0), idx),
    }


def median_us(fn, repeat):
    number = max(1, repeat // 20)
    times = timeit.repeat(fn, number=number, repeat=20)
    return 1e6 * float(np.median(times)) / number


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2000)
    args = ap.parse_args(argv)
    print(f"# factor linearization cost\n{machine_info()}\n")
    print(f"| mechanism | factor | µs / linearize | µs in mbfg Python | Python share |")
    print(f"|---|---|---:|---:|---:|")
    for name in ("fourbar", "pick-and-place-robot"):
        m = mbfg.load_mechanism(ROOT / "mechanisms" / f"{name}.yaml")
        q, qd, qdd = random_assembled_state(m, np.random.default_rng(0))
        idx = choose_independent_coordinates(m, q)
        values = gtsam.Values()
        for key, x in [(K.q(0), q), (K.q(1), q), (K.v(0), qd), (K.v(1), qd), (K.a(0), qdd),
                       (K.Q(0), np.zeros(m.n)), (K.z(0), q[list(idx)]), (K.zd(0), qd[list(idx)]),
                       (K.zdd(0), qdd[list(idx)])]:
            values.insert(key, x)
        for fname, make in factories(m, idx).items():
            f = make()
            total = median_us(lambda: f.linearize(values), args.repeat)
            spec = getattr(f, "spec", None)
            if spec is not None:
                xs = [values.atVector(k) for k in spec.keys]
                py = median_us(lambda: spec.evaluate(xs, True), args.repeat)
                print(f"| {name} (n={m.n}) | {fname} | {total:.1f} | {py:.1f} | {py / total:.0%} |")
            else:
                print(f"| {name} (n={m.n}) | {fname} | {total:.1f} | native | 0% |")


if __name__ == "__main__":
    main()
