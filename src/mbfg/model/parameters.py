"""Physical parameters as an explicit vector pi, and the model's linearity in it.

In natural coordinates the mass matrix and the gravity forces of a body depend on its mass
distribution only through four numbers (:mod:`mbfg.model.inertia`): its mass m, its first
moments m c_x and m c_y (c = centre of mass in the body frame) and its polar moment I_O about
point 0.  With those as parameters

    M(pi) = sum_i pi_i M_i,        Q_g(pi) = sum_i pi_i G_i(g)

with constant M_i and G_i, so the inverse-dynamics residual M(pi) qdd - Q_g(pi) - Q is linear
in the inertial parameters: it equals Y(qdd) pi_inertial - Q, Y the *regressor*.  That is what
makes identification of these parameters a linear least-squares problem at a known motion
(Atkeson, An & Hollerbach 1986; joint parameter/state estimation, docs/identification.md).

The vector, in this order::

    pi = [m_0, m_0 c_x0, m_0 c_y0, I_O0,  m_1, ...,  g_x, g_y]

units kg, kg m, kg m, kg m^2 per body, then m/s^2.  Names follow the YAML paths:
``planar_bodies[b].mass``, ``planar_bodies[b].mass_cog_x``, ``planar_bodies[b].mass_cog_y``,
``planar_bodies[b].I0``, ``gravity[0]``, ``gravity[1]``.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from mbfg.errors import UsageError

if TYPE_CHECKING:
    from typing import Any

    from numpy.typing import ArrayLike

    from mbfg.model.mechanism import Mechanism
    from mbfg.model.spec import MechanismSpec

BODY_FIELDS = ("mass", "mass_cog_x", "mass_cog_y", "I0")
"""The four inertial parameters of each body, in the order of pi."""
PER_BODY = len(BODY_FIELDS)
_R90 = np.array([[0.0, -1.0], [1.0, 0.0]])


def parameter_names(mech: Mechanism) -> tuple[str, ...]:
    """Names of the entries of pi, (P,) with P = 4 * bodies + 2."""
    names = [f"planar_bodies[{b}].{f}" for b in range(len(mech.spec.bodies)) for f in BODY_FIELDS]
    return tuple(names + ["gravity[0]", "gravity[1]"])


def parameter_vector(mech: Mechanism) -> np.ndarray:
    """pi (P,) of a mechanism: [m, m c_x, m c_y, I_O] per body, then gravity (see module)."""
    rows = [(b.mass, b.mass * b.cog[0], b.mass * b.cog[1], b.I0) for b in mech.spec.bodies]
    return np.concatenate([np.asarray(rows, float).ravel(), np.asarray(mech.gravity, float)])


def body_mass_basis(length: float) -> np.ndarray:
    """dM_body/dpi_b, shape (4, 4, 4): the 4x4 body mass matrix on (x0, y0, x1, y1) is
    ``sum_j pi_b[j] basis[j]`` for pi_b = (m, m c_x, m c_y, I_O) [kg, kg m, kg m, kg m^2] and
    L = ``length`` [m] (:func:`mbfg.model.inertia.body_mass_matrix`)."""
    L = float(length)

    def block(a, b, c, d):
        return np.array([[a, 0.0, b, -c], [0.0, a, c, b], [b, c, d, 0.0], [-c, b, 0.0, d]])

    return np.stack([block(1.0, 0.0, 0.0, 0.0),              # m
                     block(-2.0 / L, 1.0 / L, 0.0, 0.0),     # m c_x
                     block(0.0, 0.0, 1.0 / L, 0.0),          # m c_y
                     block(1.0 / L ** 2, -1.0 / L ** 2, 0.0, 1.0 / L ** 2)])  # I_O


def body_gravity_basis(length: float, gravity: ArrayLike) -> np.ndarray:
    """dQ_g,body/dpi_b, shape (4, 4): column j is the generalized gravity force on
    (x0, y0, x1, y1) per unit of pi_b[j] (m C(c)^T g, Eq. of :mod:`mbfg.model.inertia`) [N per
    unit]; I_O does not enter."""
    L, g = float(length), np.asarray(gravity, float)
    rg = _R90 @ g  # C^T g with C = [(1 - u) I - v R90, u I + v R90] and R90^T = -R90
    return np.stack([np.concatenate([g, 0.0 * g]),
                     np.concatenate([-g / L, g / L]),
                     np.concatenate([rg / L, -rg / L]),
                     np.zeros(4)], axis=1)


def _bodies(mech):
    """Per body: (free mask (4,), coordinate indices (4,), length)."""
    out = []
    for body in mech.spec.bodies:
        idx = mech.point_coords[list(body.points[:2])].ravel()
        out.append((idx >= 0, idx, body.length))
    return out


def _split(mech, pi):
    pi = np.asarray(pi, float)
    B = len(mech.spec.bodies)
    if pi.shape != (PER_BODY * B + 2,):
        raise ValueError(f"pi must have shape ({PER_BODY * B + 2},), got {pi.shape}")
    return pi[:PER_BODY * B].reshape(B, PER_BODY), pi[PER_BODY * B:]


def mass_matrix(mech: Mechanism, pi: np.ndarray) -> np.ndarray:
    """M(pi) (n, n) [kg, kg m] = sum_i pi_i M_i."""
    inertial, _ = _split(mech, pi)
    M = np.zeros((mech.n, mech.n))
    for (free, idx, L), p in zip(_bodies(mech), inertial):
        Mb = np.einsum("j,jkl->kl", p, body_mass_basis(L))
        M[np.ix_(idx[free], idx[free])] += Mb[np.ix_(free, free)]
    return M


def gravity_forces(mech: Mechanism, pi: np.ndarray) -> np.ndarray:
    """Q_g(pi) (n,) [N] = sum_i pi_i G_i(g), g = pi[-2:]."""
    inertial, g = _split(mech, pi)
    Q = np.zeros(mech.n)
    for (free, idx, L), p in zip(_bodies(mech), inertial):
        Q[idx[free]] += (body_gravity_basis(L, g) @ p)[free]
    return Q


def inverse_dynamics_regressor(
    mech: Mechanism, qdd: ArrayLike, pi: np.ndarray | None = None
) -> np.ndarray:
    """The Jacobian Y = d(M(pi) qdd - Q_g(pi))/dpi, shape (..., n, P), for accelerations qdd
    (..., n) [m/s^2, rad/s^2].

    The inertial columns do not depend on pi (``Y[..., :-2] @ pi[:-2] = M(pi) qdd - Q_g(pi)``
    exactly, at the gravity in ``pi``); the two gravity columns are -dQ_g/dg, which depend on
    the inertial parameters of ``pi`` (default: the mechanism's own)."""
    pi = parameter_vector(mech) if pi is None else np.asarray(pi, float)
    inertial, g = _split(mech, pi)
    qdd = np.asarray(qdd, float)
    lead = qdd.shape[:-1]
    Y = np.zeros(lead + (mech.n, pi.size))
    for b, ((free, idx, L), p) in enumerate(zip(_bodies(mech), inertial)):
        a = np.zeros(lead + (4,))
        a[..., free] = qdd[..., idx[free]]
        cols = np.einsum("jkl,...l->...kj", body_mass_basis(L), a) - body_gravity_basis(L, g)
        Y[..., idx[free], PER_BODY * b:PER_BODY * (b + 1)] += cols[..., free, :]
        # d(-Q_g)/dg: Q_g is linear in g for fixed inertial parameters
        for k in range(2):
            e = np.zeros(2)
            e[k] = 1.0
            Y[..., idx[free], PER_BODY * len(inertial) + k] -= (body_gravity_basis(L, e) @ p)[free]
    return Y


def with_parameters(mech: Mechanism, pi: np.ndarray | None = None, **by_name: Any) -> Mechanism:
    """A new :class:`~mbfg.model.mechanism.Mechanism` with other physical parameters (same
    geometry, same assembled ``q0``).

    ``pi`` (P,): a whole vector in :func:`parameter_vector` order; ``by_name``: entries by
    their :func:`parameter_names` name, passed as a dict since they are not Python names:
    ``with_parameters(mech, **{"planar_bodies[1].mass": 2.5})``.  Changing only a body's mass
    keeps its first moments m c (so its centre of mass moves); to change the YAML's values
    instead (mass with the same centre of mass), use :func:`apply_overrides` or
    ``mbfg.load_mechanism(path, overrides=...)``.

    Raises :class:`~mbfg.errors.UsageError` for an unknown name or a physically inconsistent
    body (m <= 0 or I_O m < |m c|^2: negative inertia about the centre of mass)."""
    values = parameter_vector(mech) if pi is None else np.array(pi, float)
    names = parameter_names(mech)
    for name, value in by_name.items():
        if name not in names:
            raise UsageError(f"unknown parameter {name!r}; parameters are "
                             f"planar_bodies[i].{{{', '.join(BODY_FIELDS)}}} and gravity[0|1]")
        values[names.index(name)] = float(value)
    inertial, g = _split(mech, values)
    bodies = []
    for b, (body, (m, mcx, mcy, I0)) in enumerate(zip(mech.spec.bodies, inertial)):
        _check_body(b, m, mcx, mcy, I0)
        bodies.append(dataclasses.replace(body, mass=float(m), I0=float(I0),
                                          cog=(float(mcx / m), float(mcy / m))))
    spec = dataclasses.replace(mech.spec, bodies=tuple(bodies), gravity=(float(g[0]), float(g[1])))
    gravity = np.array(g, float)
    gravity.setflags(write=False)
    return dataclasses.replace(mech, spec=spec, gravity=gravity)


SPEC_FIELDS = ("mass", "I0", "cog")
"""Body values that :func:`apply_overrides` can set, as the YAML names them."""


def apply_overrides(spec: MechanismSpec, overrides: dict) -> MechanismSpec:
    """A :class:`~mbfg.model.spec.MechanismSpec` with physical values replaced by YAML path:
    ``planar_bodies[i].mass`` [kg], ``planar_bodies[i].I0`` [kg m^2], ``planar_bodies[i].cog``
    (x, y) [m], ``gravity`` (x, y) [m/s^2] or ``gravity[k]``.

    Raises :class:`~mbfg.errors.UsageError` naming the key for an unknown key, a body index
    out of range, or a value of the wrong shape or not finite (positivity and inertia
    consistency are checked when the model is built, like the YAML's own values)."""
    import re

    bodies = list(spec.bodies)
    gravity = list(spec.gravity)
    for key, value in dict(overrides).items():
        where = f"override {key!r}"
        try:
            arr = np.asarray(value, float)
        except (TypeError, ValueError):
            raise UsageError(f"{where}: expected a number or a pair of numbers, got {value!r}") from None
        if not np.all(np.isfinite(arr)):
            raise UsageError(f"{where}: expected finite values, got {value!r}")
        m = re.fullmatch(r"planar_bodies\[(\d+)\]\.(\w+)", str(key))
        g = re.fullmatch(r"gravity(?:\[([01])\])?", str(key))
        if m:
            b, field = int(m.group(1)), m.group(2)
            if b >= len(bodies):
                raise UsageError(f"{where}: body index {b} out of range 0..{len(bodies) - 1}")
            if field not in SPEC_FIELDS:
                raise UsageError(f"{where}: a body's overridable values are {', '.join(SPEC_FIELDS)}")
            shape = (2,) if field == "cog" else ()
            if arr.shape != shape:
                raise UsageError(f"{where}: expected {'a pair (x, y)' if shape else 'a number'}, "
                                 f"got {value!r}")
            new = tuple(float(x) for x in arr) if shape else float(arr)
            bodies[b] = dataclasses.replace(bodies[b], **{field: new})
        elif g:
            if g.group(1) is None:
                if arr.shape != (2,):
                    raise UsageError(f"{where}: expected a pair (gx, gy), got {value!r}")
                gravity = [float(x) for x in arr]
            else:
                if arr.shape != ():
                    raise UsageError(f"{where}: expected a number, got {value!r}")
                gravity[int(g.group(1))] = float(arr)
        else:
            raise UsageError(f"unknown {where}: expected planar_bodies[i].{{{', '.join(SPEC_FIELDS)}}}"
                             f" or gravity or gravity[0|1]")
    for b, body in enumerate(bodies):
        if body is spec.bodies[b]:
            continue
        _check_body(b, body.mass, body.mass * body.cog[0], body.mass * body.cog[1], body.I0)
    return dataclasses.replace(spec, bodies=tuple(bodies), gravity=tuple(gravity))


def _check_body(b, m, mcx, mcy, I0):
    """Physical consistency of body b's parameters: m > 0 and I_O m >= |m c|^2 (a
    non-negative moment of inertia about the centre of mass), to rounding."""
    if not (np.isfinite([m, mcx, mcy, I0]).all() and m > 0.0):
        raise UsageError(f"planar_bodies[{b}]: the mass must be positive and finite, got {m}")
    if I0 * m < (mcx * mcx + mcy * mcy) * (1.0 - 1e-12):
        raise UsageError(f"planar_bodies[{b}]: I0 = {I0} kg m^2 is less than m |c|^2 = "
                         f"{(mcx * mcx + mcy * mcy) / m} kg m^2 (negative inertia about the "
                         f"centre of mass)")


__all__ = ["BODY_FIELDS", "SPEC_FIELDS", "apply_overrides", "parameter_names", "parameter_vector", "body_mass_basis",
           "body_gravity_basis", "mass_matrix", "gravity_forces", "inverse_dynamics_regressor",
           "with_parameters"]
