"""Verification helpers shared by the test suite (and useful for users' own factors).

:func:`numerical_jacobian` and :func:`check_jacobian` are the single finite-difference
machinery of the project: every analytic Jacobian of the model kernels and of the factors is
compared with central differences through them.
"""
from __future__ import annotations

import numpy as np

FD_RTOL = 1e-6
"""Default relative tolerance.  Central differences with h = eps^(1/3) * max(1, |x|) have
truncation error O(h^2 |f'''|) ~ 4e-11 and round-off O(eps |f| / h) ~ 4e-11 relative to the
function scale, so a correct Jacobian agrees to ~1e-9; a wrong term shows up at O(1)."""


def numerical_jacobian(f, x, h: float | None = None) -> np.ndarray:
    """Central-difference Jacobian of ``f`` at ``x``.

    Parameters
    ----------
    f : callable
        Maps a 1-D array (k,) to an array of any shape S.
    x : (k,) array
    h : float, optional
        Absolute step; by default eps^(1/3) * max(1, |x_i|) per component.

    Returns
    -------
    J : array of shape S + (k,)
    """
    x = np.asarray(x, dtype=float)
    cols = []
    for i in range(x.size):
        hi = h if h is not None else np.cbrt(np.finfo(float).eps) * max(1.0, abs(x[i]))
        xp, xm = x.copy(), x.copy()
        xp[i] += hi
        xm[i] -= hi
        cols.append((np.asarray(f(xp), float) - np.asarray(f(xm), float)) / (2.0 * hi))
    return np.stack(cols, axis=-1) if cols else np.zeros(np.shape(f(x)) + (0,))


def jacobian_error(analytic, numeric) -> float:
    """Max-norm difference relative to max(1, max |numeric|, max |analytic|)."""
    analytic = np.asarray(analytic, float)
    numeric = np.asarray(numeric, float)
    if analytic.shape != numeric.shape:
        raise AssertionError(f"Jacobian shape {analytic.shape} != finite-difference shape "
                             f"{numeric.shape}")
    if analytic.size == 0:
        return 0.0
    scale = max(1.0, float(np.max(np.abs(numeric))), float(np.max(np.abs(analytic))))
    return float(np.max(np.abs(analytic - numeric))) / scale


def check_jacobian(f, x, analytic, *, rtol: float = FD_RTOL, name: str = "Jacobian",
                   h: float | None = None) -> float:
    """Assert that ``analytic`` matches the central-difference Jacobian of ``f`` at ``x``.

    Returns the relative error; raises AssertionError (with the worst entry) otherwise."""
    numeric = numerical_jacobian(f, x, h)
    err = jacobian_error(analytic, numeric)
    if not err <= rtol:
        diff = np.abs(np.asarray(analytic, float) - numeric)
        worst = np.unravel_index(np.argmax(diff), diff.shape)
        raise AssertionError(
            f"{name}: relative error {err:.3e} > {rtol:.1e}; worst entry {worst}: analytic "
            f"{np.asarray(analytic)[worst]:.9g}, finite differences {numeric[worst]:.9g}")
    return err


def random_assembled_state(mech, rng, *, spread: float = 0.5, angle: float | None = None,
                           speed: float = 1.0):
    """A random assembled state (q, qd, qdd) of ``mech``, all constraint levels satisfied.

    The independent coordinates are moved by up to ``spread`` (relative) from q0 and solved
    by finite displacement; velocities and accelerations are random in the tangent space.
    ``angle`` sets the first relative angle (if any) to that value instead.
    Falls back to smaller moves when a random target cannot be assembled.
    """
    from mbfg.errors import ConvergenceError
    from mbfg.model import kinematics as K
    idx = K.choose_independent_coordinates(mech)
    a = int(mech.angle_coords[0]) if (angle is not None and mech.angle_coords.size) else None
    attempts = [(1.0, a)] if a is not None and a in idx else []
    attempts += [(s, None) for s in (1.0, 0.5, 0.25, 0.1, 0.03, 0.0)]
    q = None
    for shrink, angle_index in attempts:
        z0 = mech.q0[list(idx)]
        z = z0 * (1 + shrink * spread * rng.uniform(-1, 1, len(idx))) \
            + shrink * spread * rng.uniform(-0.2, 0.2, len(idx))
        if angle_index is not None:
            z[list(idx).index(angle_index)] = angle
        try:  # continuation from q0 keeps the assembly branch
            q = mech.q0.copy()
            for s in np.linspace(0.1, 1.0, 10):
                q = K.solve_finite_displacement(mech, q, idx, z0 + s * (z - z0))
            break
        except ConvergenceError:
            q = None
    if q is None:
        raise RuntimeError("could not assemble a random state")
    idx = K.choose_independent_coordinates(mech, q)
    # a random direction of the tangent space, scaled to |qd| = speed * sqrt(n): velocities of
    # the independent coordinates alone can blow up where those coordinates are ill-suited
    qd = K.solve_velocity(mech, q, idx, rng.normal(size=len(idx)))
    qd *= speed * np.sqrt(mech.n) / max(np.linalg.norm(qd), 1e-300)
    qdd = K.solve_acceleration(mech, q, qd, idx, rng.normal(size=len(idx)))
    return q, qd, qdd
