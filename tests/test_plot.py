"""Unit tests of mbfg.plot: mechanism drawings, plot helpers, animations and saved figures."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.text import Annotation  # noqa: E402

import mbfg  # noqa: E402
from mbfg import plot as mplot  # noqa: E402

from conftest import MECHANISMS  # noqa: E402


@lru_cache(maxsize=None)
def mech(name):
    return mbfg.load_mechanism(MECHANISMS / f"{name}.yaml")


@lru_cache(maxsize=None)
def fourbar_run():
    """5 frames of the four-bar falling from rest (t = 0 ... 0.02 s)."""
    from mbfg.drivers.forward_dynamics import simulate_batch
    return simulate_batch(mech("fourbar"), t_end=0.02, dt=0.005)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def annotations(ax):
    return [c for c in ax.get_children() if isinstance(c, Annotation)]


@pytest.mark.parametrize("name", ["pendulum3", "pick-and-place-robot"])
def test_draw_mechanism_labels_every_point(name):
    m = mech(name)
    ax = mplot.draw_mechanism(m)
    assert isinstance(ax, Axes)
    labels = annotations(ax)
    assert len(labels) == m.n_points == len(m.spec.points)
    assert sorted(int(a.get_text()) for a in labels) == list(range(m.n_points))
    # each label sits at its point
    xy = mplot.point_positions(m, m.q0)
    for a in labels:
        assert np.allclose(a.xy, xy[int(a.get_text())])


def test_draw_mechanism_without_labels_and_at_given_q():
    m = mech("pendulum3")
    q = m.q0.copy()
    ax = mplot.draw_mechanism(m, q, labels=False)
    assert annotations(ax) == []
    assert ax.get_aspect() == 1.0


def test_draw_mechanism_draws_slider_lines():
    m = mech("slider-crank")
    ax = mplot.draw_mechanism(m)
    dashed = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    assert len(dashed) == 1


def test_plot_functions_use_the_given_axes():
    run = fourbar_run()
    fig, axes = plt.subplots(4, 1)
    assert mplot.plot_trajectories(run.t, run.q, run.coords, ax=axes[0]) is axes[0]
    assert len(axes[0].get_lines()) == run.q.shape[1]
    assert mplot.plot_constraint_residual(run, ax=axes[1]) is axes[1]
    assert len(axes[1].get_lines()) == 2
    assert mplot.plot_force_comparison(run.t, run.q[:, 0], run.q[:, 0] + 1e-3,
                                       ax=axes[2]) is axes[2]
    assert len(axes[2].get_lines()) == 2
    assert mplot.draw_mechanism(mech("fourbar"), run.q[-1], ax=axes[3]) is axes[3]
    assert len(fig.axes) == 4  # nothing new was created


def test_plot_functions_make_axes_when_none_given():
    run = fourbar_run()
    ax = mplot.plot_trajectories(run.t, run.q[:, 0])
    assert isinstance(ax, Axes) and len(ax.get_lines()) == 1
    assert isinstance(mplot.plot_constraint_residual(run), Axes)


def test_animate_writes_a_gif(tmp_path):
    run = fourbar_run()
    assert len(run.t) == 5
    path = mplot.animate(mech("fourbar"), run.q, tmp_path / "fourbar.gif", t=run.t, fps=10,
                         stride=1)
    assert Path(path) == tmp_path / "fourbar.gif"
    data = path.read_bytes()
    assert data[:4] == b"GIF8" and len(data) > 1000
    from PIL import Image
    with Image.open(path) as im:
        assert im.n_frames == 5
    assert plt.get_fignums() == []  # the animation figure was closed


def test_plot_simulation_writes_png(tmp_path):
    out = mplot.plot_simulation(fourbar_run(), tmp_path / "sim.png", title="four-bar")
    assert out == tmp_path / "sim.png"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plt.get_fignums() == []
    fig = mplot.plot_simulation(fourbar_run())  # no path: the figure is returned
    assert len(fig.axes) == 3


def test_plot_inverse_writes_png(tmp_path):
    run = fourbar_run()
    desired = run.q[:, [0]] + 1e-6
    out = mplot.plot_inverse(run, tmp_path / "inv.png", imposed=(0,), actuated=(0, 1),
                             desired=desired, title="synthetic")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig = mplot.plot_inverse(run, imposed=(0,), actuated=(0,))
    assert len(fig.axes) == 2  # no following-error panel without a desired trajectory


def test_save_closes_the_figure(tmp_path):
    ax = mplot.draw_mechanism(mech("fourbar"))
    out = mplot.save(ax.figure, tmp_path / "m.png")
    assert out.stat().st_size > 0
    assert plt.get_fignums() == []
