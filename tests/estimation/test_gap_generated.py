"""fg-online through a gap in the readings on generated mechanisms nobody here wrote, at a
centimetre and gram scale and at metres and hundreds of kilograms (issue 14: a gap is crossed,
and the estimate is back near its gap-free error soon after it).

The truth is the prototype simulated by DOP853 at tight tolerance; the estimator's model has
gravity 10 % weak.  Markers on every moving point and a gyroscope on body 0; no reading at
all over [2, 4] / omega_c.  Before the sliding window stopped re-solving windows without a
reading, the six-bar was 6x its gap-free error here (docs/benchmarks.md, "fg-online slides
through gaps")."""
import numpy as np
import pytest

import mbfg
from mbfg.testing import watched_mechanism

GAP = (2.0, 4.0)      # in units of 1 / omega_c
LATE = (5.0, 6.0)     # the error is compared over this span, also in 1 / omega_c


def _late_errors(family, length, mass):
    """Late RMSE of the point coordinates over the length, without and with the gap."""
    w = watched_mechanism(family, 31, length=length, mass=mass, span=LATE[1])
    late = slice(int(round(LATE[0] / (w.omega_c * w.dt))), None)
    out = []
    for readings in (w.readings, w.readings_with_gap(*GAP)):
        res = mbfg.estimate(w.model, w.sensors, readings, w.dt, len(w.truth.t),
                            method="fg-online", q0=w.proto.q0, qd0=np.zeros(w.proto.n))
        err = res.q[late, w.points] - w.truth.q[late, w.points]
        out.append(float(np.sqrt(np.mean(err ** 2))) / w.ell)
    return out


@pytest.mark.parametrize("family", ["six-bar", "five-bar", "crank-rocker"])
@pytest.mark.parametrize("length,mass", [(1e-2, 1e-3), (4.0, 200.0)])
def test_online_estimator_is_back_after_a_gap_on_generated_mechanisms(family, length, mass):
    free, gap = _late_errors(family, length, mass)
    assert gap < 1.5 * free, (free, gap)
