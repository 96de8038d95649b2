"""The linear integrator links of mbfg.graphs.linear_blocks against closed forms: each rule's
residual on a smooth trajectory is its known local truncation error, so it vanishes on the
polynomials the rule integrates exactly and falls with the step at the rule's order."""
from __future__ import annotations

import numpy as np
import pytest

from mbfg.graphs import linear_blocks as L
from mbfg.graphs.layout import StepLayout

LAY = StepLayout((("q", 1), ("v", 1), ("a", 1), ("j", 1)))


def _states(f, derivatives, t):
    """Step vectors [q, v, a, j] of q = f(t), its derivatives given in closed form."""
    return np.stack([f(t)] + [d(t) for d in derivatives], axis=1)


def _residual(scheme, triple, X, dt):
    link = L.step_links(LAY, np.arange(X.shape[0] - 1), dt, [triple], 1.0, scheme=scheme)
    return link.residual(X)[:, 0]


def test_hermite_rule_is_exact_on_quartics_and_fifth_order_on_smooth_motion():
    rng = np.random.default_rng(7)
    c = rng.normal(size=5)
    poly = np.polynomial.Polynomial(c)
    derivs = [poly.deriv(k) for k in (1, 2, 3)]
    t = np.linspace(0.0, 2.0, 41)
    e = _residual("hermite", ("q", "v", "a"), _states(poly, derivs, t), t[1] - t[0])
    assert np.max(np.abs(e)) < 1e-13 * np.max(np.abs(c))
    # q = sin(w t): the local error is dt^5 / 720 q^(5)(t_mid) (Taylor), q^(5) = w^5 cos
    w = 3.0
    for dt in (1e-2, 5e-3):
        t = np.arange(0.0, 1.0, dt)
        X = _states(lambda s: np.sin(w * s), [lambda s: w * np.cos(w * s),
                                              lambda s: -w * w * np.sin(w * s),
                                              lambda s: -w ** 3 * np.cos(w * s)], t)
        e = _residual("hermite", ("q", "v", "a"), X, dt)
        want = dt ** 5 / 720 * w ** 5 * np.cos(w * (t[:-1] + dt / 2))
        # the next Taylor term is (dt w)^2 smaller; rounding of q ~ 1 is a few 1e-16
        np.testing.assert_allclose(e, want, rtol=2e-2 * (dt / 1e-2) ** 2, atol=2e-15)
    # the velocity rule uses the jerk slot the same way
    e = _residual("hermite", ("v", "a", "j"), X, dt)
    np.testing.assert_allclose(e, -dt ** 5 / 720 * w ** 6 * np.sin(w * (t[:-1] + dt / 2)),
                               rtol=1e-2, atol=2e-15 * w ** 3)


@pytest.mark.parametrize("scheme", ["trapezoidal", "euler"])
def test_second_and_first_order_rules_keep_their_error(scheme):
    w, dt = 2.0, 1e-3
    t = np.arange(0.0, 0.5, dt)
    X = _states(lambda s: np.exp(w * s), [lambda s: w * np.exp(w * s)] * 3, t)
    e = _residual(scheme, ("q", "v"), X, dt)
    mid = np.exp(w * (t[:-1] + dt / 2))
    want = (-dt ** 3 / 12 * w ** 3 * mid if scheme == "trapezoidal"
            else dt ** 2 / 2 * w ** 2 * mid)
    np.testing.assert_allclose(e, want, rtol=1e-2)


def test_unknown_scheme_is_refused():
    with pytest.raises(ValueError, match="hermite"):
        L.step_links(LAY, [0], 0.1, [("q", "v")], 1.0, scheme="rk4")
