"""Physical parameters as unknowns: an unconstrained, unit-free chart and the exact derivatives
of the dynamics in it (docs/identification.md).

A :class:`ParameterSet` is the set of physical parameters chosen by name (YAML paths):

==============================  =====================================  ====================
name                            physical value                         chart coordinate
==============================  =====================================  ====================
``planar_bodies[i].mass``       m [kg]                                 ln(m / m_0)
``planar_bodies[i].cog[0]``     c_x [m] (body frame, as the YAML)      (c_x - c_x0) / L_i
``planar_bodies[i].cog[1]``     c_y [m]                                (c_y - c_y0) / L_i
``planar_bodies[i].I0``         I_O [kg m^2] (about point 0)           ln(I_G / I_G0)
``friction[k].viscous``         viscous coefficient                    ln(c / c_0)
``friction[k].coulomb``         Coulomb force or torque                ln(mu / mu_0)
``motors[j].gain``              K                                      ln(K / K_0)
``gravity``                     |g| [m/s^2] (direction kept)           ln(|g| / |g_0|)
``sensors[s].bias``             gyroscope bias [rad/s]                 (b - b_0) / omega_c
==============================  =====================================  ====================

``planar_bodies[i].cog`` stands for both centre coordinates, ``planar_bodies[i]`` for all four
of a body, ``friction[k]`` for both coefficients.  The subscript 0 marks the YAML value (the
initial guess), L_i the body's length, omega_c = sqrt(|g| / ell) the mechanism's
characteristic rate, I_G = I_O - m |c|^2 the body's moment of inertia about its centre of
mass.

**Physical consistency without bounds.**  Per body the chart (ln m, c / L, ln I_G) maps all of
R^4 onto the physically consistent set m > 0, I_O m >= |m c|^2 (I_G > 0): it is the planar
analogue of the log-Cholesky chart of the pseudo-inertia (Rucker & Wensing 2022), with the
Cholesky factor of the 1x1 central inertia written as exp(gamma / 2).  Unselected chart
coordinates of a selected body stay at their YAML values; choosing only a body's mass
therefore keeps its centre of mass and its *central* inertia I_G (I_O = I_G + m |c|^2 moves
with m).  A body whose YAML central inertia is zero (point masses) takes the central inertia
of a slender bar, m L^2 / 12, as its reference I_G0 when its ``I0`` is identified.
Coefficients with a zero initial value use a linear chart with a scale derived from the
mechanism (joints: viscous m ell^2 omega_c, Coulomb m |g| ell; sliders: m omega_c and m |g|,
m the mean body mass); a motor gain or gravity of zero cannot be scaled and is refused.

Every chart coordinate is dimensionless and zero at the YAML values, so the weak prior
theta ~ N(0, sigma_p^2 I) (sigma_p = 1 by default: a factor e on a mass, a body length on a
centre) has no units and the parameter information matrix in theta is unit-free (its SVD gives
the identifiable combinations).

**Exact derivatives.**  The pi vector of :mod:`mbfg.model.parameters` enters M(pi) and
Q_g(pi) linearly (the inverse-dynamics regressor Y), friction enters linearly in its
coefficients and the motors in their gains.  With the forward dynamics qddot(q, qdot, Q)
(Eqs. 5-6) and its exact force derivative d qddot / dQ (the KKT inverse,
:func:`mbfg.model.dynamics.forward_dynamics_jacobians`), implicit differentiation of
M qddot + Phi_q^T lambda = Q(pi), Phi_q qddot = c gives

    d qddot / d theta = (d qddot / dQ) [dQ/d theta - Y(qddot) d pi / d theta]

with dQ/d theta the friction (-s g, -tanh(s / eps) g per element) and motor (u e_coord) columns
chained with the chart's derivatives.  The regressor is affine in qddot, so its product with
d pi / d theta is one matrix product with the n + 1 regressors at qddot = 0 and the unit
vectors.

**Kernels of the identification graph.**  :func:`friction_terms` gives the friction forces
and their derivatives with the revolute joints' rate-map derivatives in closed form (the
complex step of :mod:`mbfg.model.nonconservative` only for sliders), and
:func:`dynamics_rows` the forward dynamics and its Jacobians of
:func:`mbfg.model.dynamics.forward_dynamics_jacobians` from one batched inverse of the KKT
matrix; both are checked against central differences and against those functions.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mbfg.errors import UsageError
from mbfg.model.nonconservative import friction_elements
from mbfg.model.parameters import PER_BODY, inverse_dynamics_regressor, parameter_vector, with_parameters
from mbfg.model.scales import characteristic_length

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from mbfg.model.mechanism import Mechanism

__all__ = ["ParameterSet", "ParameterDerivatives", "parameter_set", "expand_names", "initial_states",
           "initial_states_many", "dynamics_parameter_jacobian", "friction_terms",
           "FrictionTerms", "dynamics_rows", "DynamicsRows", "characteristic_rate", "NAME_HELP"]

NAME_HELP = ("planar_bodies[i], planar_bodies[i].mass, planar_bodies[i].cog, "
             "planar_bodies[i].cog[0|1], planar_bodies[i].I0, friction[k], friction[k].viscous, "
             "friction[k].coulomb, motors[j].gain, gravity, sensors[s].bias")
"""The parameter names :func:`parameter_set` accepts."""

_BODY_ORDER = ("mass", "cog[0]", "cog[1]", "I0")


def characteristic_rate(mech: Mechanism) -> float:
    """omega_c = sqrt(|g| / ell) [1/s] (ell: :func:`mbfg.model.scales.characteristic_length`);
    nan without gravity."""
    g = float(np.hypot(*mech.gravity))
    return float(np.sqrt(g / characteristic_length(mech))) if g > 0 else float("nan")


def expand_names(names: ArrayLike | str, n_bodies: int, n_friction: int) -> tuple[str, ...]:
    """Canonical names of the chart coordinates for the user's ``names`` (a sequence, or one
    comma-separated string): group names expanded, duplicates dropped, order kept."""
    if isinstance(names, str):
        names = [s for s in (x.strip() for x in names.split(",")) if s]
    out = []
    for raw in names:
        name = str(raw).strip().replace(" ", "")
        m = re.fullmatch(r"planar_bodies\[(\d+)\](?:\.(mass|I0|cog)(?:\[([01])\])?)?", name)
        f = re.fullmatch(r"friction\[(\d+)\](?:\.(viscous|coulomb))?", name)
        if m:
            b = int(m.group(1))
            if b >= n_bodies:
                raise UsageError(f"parameter {raw!r}: body index {b} out of range "
                                 f"0..{n_bodies - 1}")
            field, comp = m.group(2), m.group(3)
            if comp is not None and field != "cog":
                raise UsageError(f"parameter {raw!r}: only cog has components [0] and [1]")
            if field is None:
                fields = _BODY_ORDER
            elif field == "cog":
                fields = ("cog[0]", "cog[1]") if comp is None else (f"cog[{comp}]",)
            else:
                fields = (field,)
            new = [f"planar_bodies[{b}].{x}" for x in fields]
        elif f:
            k = int(f.group(1))
            if k >= n_friction:
                raise UsageError(f"parameter {raw!r}: friction index {k} out of range "
                                 + (f"0..{n_friction - 1}" if n_friction else
                                    "(the mechanism has no 'friction:' list)"))
            new = [f"friction[{k}].{x}" for x in ((f.group(2),) if f.group(2) else
                                                   ("viscous", "coulomb"))]
        elif re.fullmatch(r"motors\[(\d+)\]\.gain|gravity|sensors\[(\d+)\]\.bias", name):
            new = [name]
        else:
            raise UsageError(f"unknown parameter {raw!r}; expected one of {NAME_HELP}")
        out += [x for x in new if x not in out]
    if not out:
        raise UsageError(f"no parameters chosen; expected names such as {NAME_HELP}")
    return tuple(out)


@dataclass(frozen=True)
class ParameterDerivatives:
    """Derivatives of the physical values with respect to the chart theta (p,) at one theta.

    pi : (P, p)  d pi / d theta (inertial parameters and gravity, :mod:`mbfg.model.parameters`)
    viscous, coulomb : (E, p)  per friction element
    gain : (k, p)  per motor
    bias : (S, p)  per sensor (rows of sensors without a selected bias are zero)
    """
    pi: np.ndarray
    viscous: np.ndarray
    coulomb: np.ndarray
    gain: np.ndarray
    bias: np.ndarray


@dataclass(frozen=True)
class ParameterSet:
    """The chosen parameters of a mechanism (and its sensors) and their chart (see module).

    Attributes
    ----------
    mech : Mechanism
        The nominal mechanism (YAML values; friction widths made explicit so that they do not
        follow an identified gravity).
    sensors : tuple of Sensor
    names : tuple of str
        Canonical names, one per chart coordinate (p,).
    units : tuple of str
        Units of each physical value.
    """
    mech: Mechanism
    sensors: tuple
    names: tuple
    units: tuple
    _kind: tuple        # per coordinate: (kind, index, field)
    _ref: np.ndarray    # reference values (log charts) or offsets (linear charts)
    _scale: np.ndarray  # linear-chart scales (nan for log charts)

    @property
    def size(self) -> int:
        return len(self.names)

    @property
    def nominal(self) -> np.ndarray:
        """The physical values at theta = 0 (p,)."""
        return self.values(np.zeros(self.size))

    # ---------------------------------------------------------------- body charts
    def _bodies(self, theta):
        """Per body (m, c (2,), I_G, dm, dc (2, p), dIG) at theta (derivatives (p,) rows)."""
        p = self.size
        out = []
        for b, body in enumerate(self.mech.spec.bodies):
            m, c = body.mass, np.array(body.cog, float)
            IG = body.I0 - m * (c @ c)
            dm, dc, dIG = np.zeros(p), np.zeros((2, p)), np.zeros(p)
            out.append([m, c, IG, dm, dc, dIG])
        for j, (kind, b, field) in enumerate(self._kind):
            if kind != "body":
                continue
            rec = out[b]
            if field == "mass":
                rec[0] = self._ref[j] * np.exp(theta[j])
            elif field == "I0":
                rec[2] = self._ref[j] * np.exp(theta[j])
            else:
                rec[1] = rec[1].copy()
                rec[1][int(field[4])] = self._ref[j] + self._scale[j] * theta[j]
        for j, (kind, b, field) in enumerate(self._kind):
            if kind != "body":
                continue
            rec = out[b]
            if field == "mass":
                rec[3][j] = rec[0]
            elif field == "I0":
                rec[5][j] = rec[2]
            else:
                rec[4][int(field[4]), j] = self._scale[j]
        return out

    def _coefficient(self, j, theta):
        """Value and derivative of a non-body coordinate j."""
        if np.isnan(self._scale[j]):
            v = self._ref[j] * np.exp(theta[j])
            return v, v
        return self._ref[j] + self._scale[j] * theta[j], self._scale[j]

    def values(self, theta: ArrayLike) -> np.ndarray:
        """The physical value of every named parameter (p,) at theta (units: :attr:`units`)."""
        return self._values_and_jacobian(theta)[0]

    def value_jacobian(self, theta: ArrayLike) -> np.ndarray:
        """d values / d theta (p, p) (for the delta-method standard deviations)."""
        return self._values_and_jacobian(theta)[1]

    def _values_and_jacobian(self, theta, first_moments=False):
        """Values (p,) and d values / d theta (p, p) at theta: the physical values, or with
        ``first_moments`` the centre-of-mass entries as m c (the coordinates the model is
        linear in)."""
        theta = self._check(theta)
        p = self.size
        bodies = self._bodies(theta)
        vals, J = np.zeros(p), np.zeros((p, p))
        for j, (kind, i, field) in enumerate(self._kind):
            if kind == "body":
                m, c, IG, dm, dc, dIG = bodies[i]
                if field == "mass":
                    vals[j], J[j] = m, dm
                elif field == "I0":  # I_O = I_G + m |c|^2
                    vals[j], J[j] = IG + m * (c @ c), dIG + dm * (c @ c) + 2.0 * m * (c @ dc)
                elif first_moments:
                    k = int(field[4])
                    vals[j], J[j] = m * c[k], dm * c[k] + m * dc[k]
                else:
                    k = int(field[4])
                    vals[j], J[j] = c[k], dc[k]
            else:
                vals[j], J[j, j] = self._coefficient(j, theta)
        return vals, J

    def _check(self, theta):
        theta = np.asarray(theta, float)
        if theta.shape != (self.size,):
            raise ValueError(f"theta must have shape ({self.size},), got {theta.shape}")
        return theta

    # ---------------------------------------------------------------- the model at theta
    def apply(self, theta: ArrayLike) -> tuple:
        """(Mechanism, sensors tuple) with the physical values at theta.

        Raises FloatingPointError when a value overflows or a mass or central inertia
        underflows to zero (a chart coordinate beyond about 700: an optimizer's trial point
        far outside any physical range, which it rejects)."""
        theta = self._check(theta)
        mech = self.mech
        with np.errstate(over="raise", invalid="raise"):
            bodies = self._bodies(theta)
            pi = parameter_vector(mech)
            for b, (m, c, IG, *_rest) in enumerate(bodies):
                pi[PER_BODY * b:PER_BODY * (b + 1)] = (m, m * c[0], m * c[1], IG + m * (c @ c))
            coefficients = [None if kind == "body" else self._coefficient(j, theta)[0]
                            for j, (kind, _, _) in enumerate(self._kind)]
        # the chart's exponentials only (a body's YAML central inertia may be zero when its
        # I0 is not identified)
        if not all(bodies[b][0 if field == "mass" else 2] > 0.0
                   for kind, b, field in self._kind if kind == "body" and field in ("mass", "I0")):
            raise FloatingPointError("a mass or central inertia of the chart point underflows "
                                     "to zero")
        friction = list(mech.spec.friction)
        motors = list(mech.spec.motors)
        sensors = list(self.sensors)
        for j, (kind, i, field) in enumerate(self._kind):
            if kind == "body":
                continue
            v = coefficients[j]
            if kind == "friction":
                friction[i] = dataclasses.replace(friction[i], **{field: float(v)})
            elif kind == "motor":
                motors[i] = dataclasses.replace(motors[i], gain=float(v))
            elif kind == "gravity":
                g = np.asarray(mech.gravity, float)
                pi[-2:] = g * (v / np.hypot(*g))
            elif kind == "bias":
                sensors[i] = dataclasses.replace(sensors[i], bias=float(v))
        new = with_parameters(mech, pi)
        if friction != list(mech.spec.friction) or motors != list(mech.spec.motors):
            spec = dataclasses.replace(new.spec, friction=tuple(friction), motors=tuple(motors))
            new = dataclasses.replace(new, spec=spec)
        return new, tuple(sensors)

    def derivatives(self, theta: ArrayLike) -> ParameterDerivatives:
        """:class:`ParameterDerivatives` at theta."""
        theta = self._check(theta)
        mech, p = self.mech, self.size
        B = len(mech.spec.bodies)
        dpi = np.zeros((PER_BODY * B + 2, p))
        for b, (m, c, IG, dm, dc, dIG) in enumerate(self._bodies(theta)):
            r = PER_BODY * b
            dpi[r] = dm
            dpi[r + 1] = dm * c[0] + m * dc[0]
            dpi[r + 2] = dm * c[1] + m * dc[1]
            dpi[r + 3] = dIG + dm * (c @ c) + 2.0 * m * (c @ dc)
        E, k, S = len(mech.spec.friction), len(mech.spec.motors), len(self.sensors)
        visc, coul, gain, bias = (np.zeros((E, p)), np.zeros((E, p)), np.zeros((k, p)),
                                  np.zeros((S, p)))
        for j, (kind, i, field) in enumerate(self._kind):
            if kind == "body":
                continue
            v, dv = self._coefficient(j, theta)
            if kind == "friction":
                (visc if field == "viscous" else coul)[i, j] = dv
            elif kind == "motor":
                gain[i, j] = dv
            elif kind == "gravity":
                g = np.asarray(mech.gravity, float)
                dpi[-2:, j] = g / np.hypot(*g) * dv
            elif kind == "bias":
                bias[i, j] = dv
        return ParameterDerivatives(dpi, visc, coul, gain, bias)

    # ------------------------------------------------------- coordinates the model is linear in
    def linear_values(self, theta: ArrayLike, scales: ArrayLike | None = None) -> np.ndarray:
        """phi (p,): per chosen parameter the quantity the dynamics is linear in (a body's
        m, m c_x, m c_y, I_O for its mass, cog[0], cog[1], I0; the value itself otherwise),
        divided by :meth:`linear_scales`: dimensionless, and the identifiable combinations of
        the inertial parameters are linear subspaces in it.  ``scales``: divided by these
        instead (e.g. a result's ``combination_scales``, to compare a ground truth with it)."""
        if scales is not None:
            vals = self._values_and_jacobian(theta, first_moments=True)[0]
            return vals / np.asarray(scales, float)
        return self._linear(theta)[0]

    def linear_jacobian(self, theta: ArrayLike) -> np.ndarray:
        """d phi / d theta (p, p) (invertible: the chart is a diffeomorphism)."""
        return self._linear(theta)[1]

    def linear_scales(self) -> np.ndarray:
        """Scales (p,) of phi from the YAML values: m_0, m_0 L, m_0 L^2 for a body's mass,
        first moments and I_O; the chart's reference value or scale otherwise."""
        out = np.zeros(self.size)
        for j, (kind, i, field) in enumerate(self._kind):
            if kind == "body":
                body = self.mech.spec.bodies[i]
                out[j] = body.mass * {"mass": 1.0, "I0": body.length ** 2}.get(field, body.length)
            else:
                out[j] = abs(self._ref[j]) if np.isnan(self._scale[j]) else self._scale[j]
        return out

    def linear_inertial(self) -> np.ndarray:
        """(p,) bool: which coordinates of phi are inertial (a body's m, m c_x, m c_y, I_O)."""
        return np.array([kind == "body" for kind, _, _ in self._kind], bool)

    def linear_labels(self) -> tuple:
        """Labels of phi: ``m[1]``, ``m*c_x[1]``, ``I_O[1]`` or the parameter name."""
        out = []
        for name, (kind, i, field) in zip(self.names, self._kind):
            if kind == "body":
                out.append({"mass": f"m[{i}]", "I0": f"I_O[{i}]"}.get(
                    field, f"m*c_{'xy'[int(field[4]) if field.startswith('cog') else 0]}[{i}]"))
            else:
                out.append(name)
        return tuple(out)

    def _linear(self, theta):
        vals, J = self._values_and_jacobian(theta, first_moments=True)
        s = self.linear_scales()
        return vals / s, J / s[:, None]

    def theta_of(self, mech: Mechanism, sensors: ArrayLike = ()) -> np.ndarray:
        """The chart coordinates (p,) at which :meth:`apply` gives the chosen parameters of
        ``mech`` (same geometry) and ``sensors`` (e.g. a ground truth); nan where a log chart
        cannot reach the value (a sign change or zero)."""
        sensors = tuple(sensors) or self.sensors
        theta = np.zeros(self.size)
        with np.errstate(divide="ignore", invalid="ignore"):
            for j, (kind, i, field) in enumerate(self._kind):
                if kind == "body":
                    body = mech.spec.bodies[i]
                    c = np.array(body.cog, float)
                    if field == "mass":
                        v = body.mass
                    elif field == "I0":
                        v = body.I0 - body.mass * (c @ c)
                    else:
                        theta[j] = (c[int(field[4])] - self._ref[j]) / self._scale[j]
                        continue
                elif kind == "friction":
                    v = float(getattr(mech.spec.friction[i], field))
                elif kind == "motor":
                    v = float(mech.spec.motors[i].gain)
                elif kind == "gravity":
                    v = float(np.hypot(*mech.gravity))
                else:
                    v = float(sensors[i].bias)
                theta[j] = (np.log(v / self._ref[j]) if np.isnan(self._scale[j])
                            else (v - self._ref[j]) / self._scale[j])
        return theta

    def describe(self) -> str:
        return ", ".join(f"{n} = {v:.6g} {u}" for n, v, u in zip(self.names, self.nominal,
                                                                 self.units))


def _unit_of(mech, kind, i, field):
    if kind == "body":
        return {"mass": "kg", "I0": "kg m^2"}.get(field, "m")
    if kind == "friction":
        joint = hasattr(mech.spec.friction[i], "bodies")
        if field == "viscous":
            return "N m s/rad" if joint else "N s/m"
        return "N m" if joint else "N"
    if kind == "motor":
        coord = mech.spec.motors[i].coordinate
        return ("N m" if coord.startswith("theta") else "N") + " per input unit"
    if kind == "gravity":
        return "m/s^2"
    return "rad/s"


def parameter_set(mech: Mechanism, names: ArrayLike | str, sensors: ArrayLike = ()) -> ParameterSet:
    """The :class:`ParameterSet` of ``names`` (see the module table) for ``mech`` and its
    ``sensors`` (a gyroscope bias is ``sensors[s].bias``, s its index in the sensor list).

    Raises :class:`~mbfg.errors.UsageError` naming the parameter for an unknown name or index,
    a bias of a sensor that has none, or a motor gain or gravity of zero."""
    sensors = tuple(sensors)
    spec = mech.spec
    canonical = expand_names(names, len(spec.bodies), len(spec.friction))
    # explicit friction widths: the default width follows |g|, which may be identified
    if spec.friction:
        els = friction_elements(mech)
        fr = tuple(dataclasses.replace(f, width=float(e.width)) for f, e in zip(spec.friction, els))
        mech = dataclasses.replace(mech, spec=dataclasses.replace(spec, friction=fr))
        spec = mech.spec
    ell = characteristic_length(mech)
    g = float(np.hypot(*mech.gravity))
    omega = characteristic_rate(mech)
    m_mean = float(np.mean([b.mass for b in spec.bodies])) if spec.bodies else 1.0
    kinds, ref, scale, units = [], [], [], []
    for name in canonical:
        nan = float("nan")
        mb = re.fullmatch(r"planar_bodies\[(\d+)\]\.(.+)", name)
        if mb:
            b, field = int(mb.group(1)), mb.group(2)
            body = spec.bodies[b]
            c = np.array(body.cog, float)
            if field == "mass":
                r, s = body.mass, nan
            elif field == "I0":
                IG = body.I0 - body.mass * (c @ c)
                r = IG if IG > 1e-12 * body.mass * body.length ** 2 else body.mass * body.length ** 2 / 12.0
                s = nan
            else:
                r, s = c[int(field[4])], body.length
            key = ("body", b, field)
        elif name.startswith("friction"):
            k, field = int(name[9:name.index("]")]), name.rsplit(".", 1)[1]
            f = spec.friction[k]
            v = float(getattr(f, field))
            if v > 0:
                r, s = v, nan
            else:
                if not g > 0:
                    raise UsageError(f"parameter {name!r}: its initial value is 0 and without "
                                     f"gravity no scale can be derived; give a positive guess "
                                     f"in the YAML")
                joint = hasattr(f, "bodies")
                if field == "viscous":
                    s = m_mean * ell * ell * omega if joint else m_mean * omega
                else:
                    s = m_mean * g * ell if joint else m_mean * g
                r = 0.0
            key = ("friction", k, field)
        elif name.startswith("motors"):
            j = int(name[7:name.index("]")])
            if j >= len(spec.motors):
                raise UsageError(f"parameter {name!r}: motor index {j} out of range"
                                 + (f" 0..{len(spec.motors) - 1}" if spec.motors else
                                    " (the mechanism has no 'motors:' list)"))
            r = float(spec.motors[j].gain)
            if r == 0:
                raise UsageError(f"parameter {name!r}: a gain of 0 cannot be identified in its "
                                 f"log chart; give a nonzero guess in the YAML")
            s = nan
            key = ("motor", j, "gain")
        elif name == "gravity":
            if not g > 0:
                raise UsageError("parameter 'gravity': the YAML gravity is zero; give a "
                                 "nonzero guess of its direction and magnitude")
            r, s, key = g, nan, ("gravity", 0, "")
        else:
            i = int(name[8:name.index("]")])
            if i >= len(sensors):
                raise UsageError(f"parameter {name!r}: sensor index {i} out of range"
                                 + (f" 0..{len(sensors) - 1}" if sensors else " (no sensors)"))
            if not hasattr(sensors[i], "bias"):
                raise UsageError(f"parameter {name!r}: {sensors[i].label} has no bias; only "
                                 f"gyroscopes have one")
            r = float(sensors[i].bias)
            s = omega if np.isfinite(omega) else 100.0 * sensors[i].sigma
            key = ("bias", i, "bias")
        if key[0] == "body" and key[2] in ("mass", "I0") and not r > 0:
            raise UsageError(f"parameter {name!r}: the YAML mass must be positive")
        kinds.append(key)
        ref.append(r)
        scale.append(s)
        units.append(_unit_of(mech, *key))
    return ParameterSet(mech, sensors, canonical, tuple(units), tuple(kinds),
                        np.array(ref, float), np.array(scale, float))


@dataclass(frozen=True)
class FrictionTerms:
    """The friction forces of a batch of states and their exact derivatives
    (:func:`friction_terms`).

    Q : (T, n)  Q_f(q, qdot)
    d_q, d_qd : (T, n, n)  dQ_f/dq, dQ_f/dqdot (None without ``jacobians``)
    rates : tuple of (g (T, n), s (T,))  per friction element its velocity map g_e(q) and
        sliding rate s_e = g_e . qdot
    """
    Q: np.ndarray
    d_q: np.ndarray | None
    d_qd: np.ndarray | None
    rates: tuple


def _body_rate_map(mech, body):
    """(D (2, n), d0 (2,)): a body's points[0] -> points[1] is d = D q + d0."""
    p0, p1 = mech.spec.bodies[body].points[:2]
    S, c = mech.point_selection, mech.point_fixed_xy
    return S[p1] - S[p0], c[p1] - c[p0]


def _angular_rate_terms(D, d0, q, qd):
    """A body's angular rate map g = w(d) D, w = (-d_y, d_x) / |d|^2 (the gyroscope's rate,
    d = D q + d0), for states q, qd (T, n): ``(g (T, n), dw (T, 4), Gv (T, n))`` with
    G = dg/dq = sum_kl dw_kl D_k^T D_l (dw = dw/dd flattened row-major) and Gv = G^T qdot."""
    d = q @ D.T + d0
    dx, dy = d[:, 0], d[:, 1]
    r2 = dx * dx + dy * dy
    inv = 1.0 / r2
    g = (np.stack([-dy, dx], axis=1) * inv[:, None]) @ D
    # dw/dd = (1 / r2) [[2 dx dy / r2, 2 dy^2 / r2 - 1], [1 - 2 dx^2 / r2, -2 dx dy / r2]]
    a, b = 2.0 * dx * dy * inv * inv, 2.0 * inv * inv
    dw = np.stack([a, b * dy * dy - inv, inv - b * dx * dx, -a], axis=1)
    ddot = qd @ D.T                                                # D qdot (T, 2)
    # G^T qdot = D^T dw^T D qdot
    Gv = np.stack([dw[:, 0] * ddot[:, 0] + dw[:, 2] * ddot[:, 1],
                   dw[:, 1] * ddot[:, 0] + dw[:, 3] * ddot[:, 1]], axis=1) @ D
    return g, dw, Gv


def friction_terms(mech: Mechanism, q: ArrayLike, qd: ArrayLike,
                   jacobians: bool = True) -> FrictionTerms:
    """Q_f(q, qdot) of :mod:`mbfg.model.nonconservative` for states q, qd (T, n), its exact
    derivatives and every element's rate map, in one pass.

    The same forces and derivatives as
    :func:`mbfg.model.nonconservative.friction_force_jacobians`, with the rate maps' derivative
    G_e = dg_e/dq of revolute joints in closed form (g = w(d_b) D_b - w(d_a) D_a: dw/dd of
    w = (-d_y, d_x) / |d|^2); sliders' G_e by the complex step of their (complex-safe) rate
    map, as there:

        dQ_f/dqdot = sum_e f_e'(s_e) g_e g_e^T,
        dQ_f/dq = sum_e f_e'(s_e) g_e (G_e^T qdot)^T + f_e(s_e) G_e.

    Every joint's f_e G_e is a combination of the constant outer products D_k^T D_l of its
    bodies, so their sum is one product; the outer products over elements are two batched
    products (T, n, E) (T, E, n)."""
    from mbfg.model.scales import coordinate_scales
    from mbfg.model.spec import JointFrictionSpec
    q, qd = np.asarray(q, float), np.asarray(qd, float)
    T, n = q.shape
    els = mech.friction_elements
    E = len(els)
    Q = np.zeros((T, n))
    bodies = {}   # body -> (g, dw, Gv, D): shared by the joints of a body
    gs, ss, fs, dfs, Gvs = [], [], [], [], []
    weights, outer = [], []   # f_e dw (T, 4) and the outer products (4, n * n) of each term
    dq = np.zeros((T, n, n)) if jacobians else None
    for spec, el in zip(mech.spec.friction, els):
        if isinstance(spec, JointFrictionSpec):
            g, Gv, terms = np.zeros((T, n)), np.zeros((T, n)), []
            for sign, b in zip((-1.0, 1.0), spec.bodies):
                if b < 0:
                    continue
                if b not in bodies:
                    D, d0 = _body_rate_map(mech, b)
                    bodies[b] = (*_angular_rate_terms(D, d0, q, qd), D)
                gb, dw, Gvb, D = bodies[b]
                g += sign * gb
                Gv += sign * Gvb
                terms.append((sign, dw, D))
        else:
            g = np.asarray(el.rate(q), float)
            terms = None
            if jacobians:
                h = 1e-30 * coordinate_scales(mech)
                G = np.swapaxes(el.rate(q[:, None, :] + 1j * np.diag(h)).imag / h[:, None], -1, -2)
                Gv = np.matmul(qd[:, None, :], G)[:, 0, :]
        s = np.einsum("tn,tn->t", g, qd)
        th = np.tanh(s / el.width)
        f = -(el.viscous * s + el.coulomb * th)
        Q += f[:, None] * g
        gs.append(g)
        ss.append(s)
        if jacobians:
            fs.append(f)
            dfs.append(-(el.viscous + (el.coulomb / el.width) * (1.0 - th * th)))
            Gvs.append(Gv)
            if terms is None:
                dq += f[:, None, None] * G
            else:
                for sign, dw, D in terms:
                    weights.append((sign * f)[:, None] * dw)
                    outer.append(np.einsum("ki,lj->klij", D, D).reshape(4, n * n))
    if not jacobians:
        return FrictionTerms(Q, None, None, tuple(zip(gs, ss)))
    if not E:
        return FrictionTerms(Q, dq, np.zeros((T, n, n)), ())
    if weights:
        dq += (np.concatenate(weights, axis=1) @ np.concatenate(outer, axis=0)).reshape(T, n, n)
    Gm = np.stack(gs, axis=2)                                       # (T, n, E)
    dG = Gm * np.stack(dfs, axis=1)[:, None, :]                     # f_e' g_e
    dq += np.matmul(dG, np.stack(Gvs, axis=1))
    dqd = np.matmul(dG, Gm.transpose(0, 2, 1))
    return FrictionTerms(Q, dq, dqd, tuple(zip(gs, ss)))


@dataclass(frozen=True)
class DynamicsRows:
    """qddot and its exact derivatives at a batch of states (:func:`dynamics_rows`), shapes
    (T, n) and (T, n, n)."""
    qdd: np.ndarray
    d_q: np.ndarray
    d_qd: np.ndarray
    d_Q: np.ndarray


def dynamics_rows(mech: Mechanism, q: ArrayLike, qd: ArrayLike, Q: ArrayLike | None = None, *,
                  friction: FrictionTerms | None = None, J: ArrayLike | None = None,
                  Jdot: ArrayLike | None = None) -> DynamicsRows:
    """qddot(q, qdot, Q) and its exact Jacobians d/dq, d/dqdot, d/dQ for states (T, n): the
    equations and derivatives of :func:`mbfg.model.dynamics.forward_dynamics_jacobians`
    (without Baumgarte terms) with one batched solve of the KKT matrix K for the state and
    K^-1's first n rows, since every derivative is K^-1 times a right-hand side:

        [qddot; lambda] = K^-1 [Q_g + Q + Q_f; c],
        d qddot/dx = (K^-1)[:n] (d rhs/dx - dK/dx [qddot; lambda]).

    ``friction``: :func:`friction_terms` at (q, qd) (computed when not given; it is the
    friction of ``mech``).  ``J``, ``Jdot``: Phi_q(q) and dPhi_q/dt(q, qd) of every row when
    already computed."""
    from mbfg.model import constraints as C
    q, qd = np.asarray(q, float), np.asarray(qd, float)
    T, n = q.shape
    Jall = C.constraint_jacobian(mech, q) if J is None else np.asarray(J, float)
    Jdot_all = C.constraint_jacobian_dot(mech, q, qd) if Jdot is None else np.asarray(Jdot, float)
    rows = C.independent_rows(mech, q, Jall)
    Jr = C.take_rows(Jall, rows, 1)
    Jdot_r = C.take_rows(Jdot_all, rows, 1)
    mr = Jr.shape[-2]
    if friction is None:
        friction = friction_terms(mech, q, qd)
    K = np.zeros((T, n + mr, n + mr))
    K[:, :n, :n] = mech.mass_matrix()
    K[:, :n, n:] = Jr.transpose(0, 2, 1)
    K[:, n:, :n] = Jr
    # one batched solve for [qddot; lambda] and K^-1's first n columns, which (K symmetric)
    # are its first n rows transposed: the rows every derivative needs
    B = np.zeros((T, n + mr, n + 1))
    B[:, :n, :n] = np.eye(n)
    B[:, :n, n] = mech.gravity_forces() + friction.Q
    if Q is not None:
        B[:, :n, n] += Q
    B[:, n:, n] = -np.matmul(Jdot_r, qd[:, :, None])[:, :, 0]        # c = -Jdot qdot
    Z = np.linalg.solve(K, B)
    sol = Z[:, :, n]
    qdd = sol[:, :n]
    lam = np.zeros((T, mech.m))
    np.put_along_axis(lam, np.broadcast_to(rows, (T, mr)), sol[:, n:], axis=-1)
    R = np.zeros((T, n + mr, 2 * n))
    R[:, :n, :n] = friction.d_q - C.hessian_weighted_sum(mech, q, lam)
    R[:, n:, :n] = -C.take_rows(C.acceleration_constraints_jacobian(mech, q, qd, qdd, Jall),
                                rows, 1)
    R[:, :n, n:] = friction.d_qd
    R[:, n:, n:] = -2.0 * Jdot_r
    top = Z[:, :, :n].transpose(0, 2, 1)                            # (K^-1)[:n]
    X = np.matmul(top, R)
    return DynamicsRows(qdd=qdd, d_q=X[:, :, :n], d_qd=X[:, :, n:], d_Q=top[:, :, :n])


def dynamics_parameter_jacobian(
    mech: Mechanism,
    deriv: ParameterDerivatives,
    q: ArrayLike,
    qd: ArrayLike,
    qdd: ArrayLike,
    d_Q: ArrayLike,
    u: ArrayLike | None = None,
    friction: tuple | None = None,
) -> np.ndarray:
    """d qddot / d theta (T, n, p) of the forward dynamics (module docstring, implicit
    differentiation of Eqs. 5-6).

    Parameters
    ----------
    mech : Mechanism
        The mechanism at theta (:meth:`ParameterSet.apply`).
    deriv : ParameterDerivatives
        The chart's derivatives at theta.
    q, qd, qdd : (T, n)
        States and the forward-dynamics accelerations at them.
    d_Q : (T, n, n)
        d qddot / dQ at those states (:func:`mbfg.model.dynamics.forward_dynamics_jacobians`).
    u : (T, k), optional
        Motor inputs.
    friction : tuple of (g (T, n), s (T,)), optional
        Every friction element's rate map and sliding rate at the states
        (:attr:`FrictionTerms.rates`), when already computed.
    """
    q, qd, qdd = (np.asarray(x, float) for x in (q, qd, qdd))
    T, n = qdd.shape
    p = deriv.pi.shape[1]
    # the regressor is affine in qddot: Y(qdd) = Y(0) + sum_l qdd_l (Y(e_l) - Y(0)), so
    # Y(qdd) dpi/dtheta is one product with the n + 1 regressors at 0 and the unit vectors
    Yb = inverse_dynamics_regressor(mech, np.vstack([np.zeros(n), np.eye(n)]),
                                    parameter_vector(mech)) @ deriv.pi    # (n + 1, n, p)
    Y0 = Yb[0]
    dQ = -(qdd @ (Yb[1:] - Y0).reshape(n, n * p)).reshape(T, n, p) - Y0
    if friction is None:
        friction = [(np.asarray(el.rate(q), float), None) for el in mech.friction_elements]
    for el, (g, s), dv, dc in zip(mech.friction_elements, friction, deriv.viscous, deriv.coulomb):
        cols_v, cols_c = np.flatnonzero(dv), np.flatnonzero(dc)
        if not (cols_v.size or cols_c.size):
            continue
        if s is None:
            s = np.einsum("tn,tn->t", g, qd)
        for j in cols_v:
            dQ[:, :, j] -= (s * dv[j])[:, None] * g
        if cols_c.size:
            th = np.tanh(s / el.width)
            for j in cols_c:
                dQ[:, :, j] -= (th * dc[j])[:, None] * g
    if u is not None and deriv.gain.any():
        u = np.asarray(u, float)
        for k, motor in enumerate(mech.spec.motors):        # d(B u)/dK_k = e_coord u_k
            i = mech.coordinate_index(motor.coordinate)
            for j in np.flatnonzero(deriv.gain[k]):
                dQ[:, i, j] += u[:, k] * deriv.gain[k, j]
    return np.matmul(np.asarray(d_Q, float), dQ)


def _positions(mech: Mechanism, guess: np.ndarray, measured: list, values: np.ndarray
               ) -> np.ndarray:
    """Configurations (T, n) from guesses (T, n) whose ``measured`` coordinates read
    ``values`` (T, k): holding them when they are as many as the degrees of freedom
    (:func:`mbfg.model.kinematics.solve_positions_batch`), else the best least-squares match
    on the constraint manifold (:func:`mbfg.model.kinematics.fit_positions_batch`; markers
    on every moving point over-determine the configuration)."""
    from mbfg.model.kinematics import fit_positions_batch, solve_positions_batch
    if len(measured) <= mech.dof:
        return solve_positions_batch(mech, guess, measured, values)[0]
    return fit_positions_batch(mech, guess, measured, values)[0]


def _filled(z: np.ndarray, has: np.ndarray) -> np.ndarray:
    """Readings (N, k) with the steps without a reading linearly interpolated."""
    idx = np.flatnonzero(has)
    if idx.size == z.shape[0]:
        return z
    steps = np.arange(z.shape[0])
    return np.stack([np.interp(steps, idx, z[idx, j]) for j in range(z.shape[1])], axis=1)


def _lowpass(x: np.ndarray, cutoff: float) -> np.ndarray:
    """Zero-phase 4th-order Butterworth low-pass along axis 0 (scipy.signal.filtfilt);
    ``cutoff`` as a fraction of the Nyquist frequency; unfiltered when too short."""
    from scipy.signal import butter, filtfilt
    if not 0.0 < cutoff < 1.0:
        return x
    b, a = butter(4, cutoff)
    if x.shape[0] <= 3 * max(len(a), len(b)):
        return x
    return filtfilt(b, a, x, axis=0)


def initial_states(
    mech: Mechanism,
    sensors: ArrayLike,
    grid: list,
    dt: float,
    cutoff: float = 0.05,
) -> tuple | None:
    """Initial estimate (q, qd, qdd), each (N, n), of a recording from its readings alone.

    The readings of coordinate encoders (q[k]) and of markers on free points (x, y) fix
    those coordinates: missing steps are interpolated, angles unwrapped, and every signal is
    low-pass filtered without phase lag (4th-order Butterworth, ``filtfilt``, cut-off
    ``cutoff`` x Nyquist).  The other coordinates follow from the position problem
    Phi(q) = 0 (:func:`mbfg.model.kinematics.solve_positions_batch`), solved by continuation
    in chunks along which the fixed coordinates move by less than a fifth of their scale
    (starting from ``mech.q0`` and walking to the first reading the same way), so that every
    step stays on the assembly branch of ``mech.q0``.  When the readings measure more
    coordinates than the mechanism has degrees of freedom (markers on every moving point),
    each state is the configuration that matches them best in least squares
    (:func:`_positions`): holding all of them over-determines the position problem.
    Velocities and
    accelerations are central differences (projected onto Phi_q qd = 0).

    ``grid``: :func:`mbfg.model.sensors.readings_on_grid` of the recording.  Returns None
    when those readings do not fix every degree of freedom (the caller then needs another
    initialization)."""
    return initial_states_many(mech, sensors, [grid], [dt], cutoff)[0]


def initial_states_many(
    mech: Mechanism,
    sensors: ArrayLike,
    grids: list,
    dts: list,
    cutoff: float = 0.05,
) -> list:
    """:func:`initial_states` of several recordings (``grids``, ``dts``: one per recording):
    the same results, with the continuations of the recordings advancing together, so that
    one position solve serves the k-th chunk of every recording (the solves are per state:
    batching them changes nothing but the number of calls)."""
    from mbfg.model.kinematics import project_velocities_batch
    from mbfg.model.scales import coordinate_scales
    from mbfg.model.sensors import AngleEncoder, Marker
    runs = []   # per recording: (fixed, Z, q, guess, chunks) or None
    for grid in grids:
        fixed, cols = [], []
        for s, (z, has) in zip(sensors, grid):
            if not has.any():
                continue
            if isinstance(s, AngleEncoder) and s.coordinate is not None:
                k = mech.coordinate_index(s.coordinate)
                if k not in fixed:
                    fixed.append(k)
                    cols.append(np.unwrap(_filled(z, has)[:, 0]))
            elif isinstance(s, Marker):
                pc = mech.point_coords[s.point]
                zz = _filled(z, has)
                for j in range(2):
                    if pc[j] >= 0 and int(pc[j]) not in fixed:
                        fixed.append(int(pc[j]))
                        cols.append(zz[:, j])
        if len(fixed) < mech.dof:
            runs.append(None)
            continue
        Z = _lowpass(np.stack(cols, axis=1), cutoff)
        N = Z.shape[0]
        scale = coordinate_scales(mech)[fixed]
        guess = np.array(mech.q0, float)
        # the encoder's angle is known modulo 2 pi: start near the model's q0
        for j, k in enumerate(fixed):
            if k in tuple(mech.angle_coords):
                shift = 2 * np.pi * np.round((guess[k] - Z[0, j]) / (2 * np.pi))
                Z[:, j] += shift
        # from the model's q0 to the first reading in small steps (the same assembly branch)
        start = guess[fixed].copy()
        hops = int(np.ceil(np.max(np.abs(Z[0] - start) / scale) / 0.2)) if N else 0
        for h in range(1, hops + 1):
            guess = _positions(mech, guess[None], fixed,
                               (start + (Z[0] - start) * (h / hops))[None])[0]
        chunks, i = [], 0
        while i < N:
            moved = np.max(np.abs(Z[i:] - Z[i]) / scale, axis=1)
            j = i + max(1, int(np.argmax(moved > 0.2)) if np.any(moved > 0.2) else N - i)
            chunks.append((i, j))
            i = j
        runs.append([fixed, Z, np.empty((N, mech.n)), guess, chunks])
    # the k-th chunk of every recording (with the same held coordinates) in one solve; each
    # chunk starts from the solution at the end of the previous one
    live = [r for r in runs if r is not None]
    for c in range(max((len(r[4]) for r in live), default=0)):
        groups = {}
        for r in live:
            if c < len(r[4]):
                groups.setdefault(tuple(r[0]), []).append(r)
        for fixed, members in groups.items():
            guesses, values = [], []
            for r in members:
                i, j = r[4][c]
                g = r[3].copy()
                if len(fixed) <= mech.dof:
                    g[list(fixed)] = r[1][i]
                guesses.append(np.broadcast_to(g, (j - i, mech.n)))
                values.append(r[1][i:j])
            qs = _positions(mech, np.concatenate(guesses), list(fixed), np.concatenate(values))
            off = 0
            for r in members:
                i, j = r[4][c]
                r[2][i:j] = qs[off:off + j - i]
                r[3] = qs[off + j - i - 1].copy()
                off += j - i
    out = []
    for r, dt in zip(runs, dts):
        if r is None:
            out.append(None)
            continue
        q = r[2]
        N = q.shape[0]
        qd = (project_velocities_batch(mech, q, np.gradient(q, dt, axis=0),
                                       coordinate_scales(mech)) if N > 1
              else np.zeros_like(q))
        qdd = np.gradient(qd, dt, axis=0) if N > 1 else np.zeros_like(q)
        out.append((q, qd, qdd))
    return out
