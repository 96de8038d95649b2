"""Plots, mechanism drawings and animations (matplotlib).

Every function takes ``ax=None`` (a new figure is made) and returns the axes or figure; none
calls ``plt.show()``.  The module selects no backend: scripts and the CLI use Agg through
:func:`save` / the ``path`` arguments.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from typing import Any

    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from numpy.typing import ArrayLike

    from mbfg.model.mechanism import Mechanism
    from mbfg.results import TrajectoryResult


def _plt():
    import matplotlib.pyplot as plt
    return plt


def _ax(ax, figsize=(8, 3)):
    if ax is None:
        _, ax = _plt().subplots(figsize=figsize)
    return ax


def save(fig: Figure, path: str | Path, dpi: int = 110) -> Path:
    """Save and close a figure."""
    fig.savefig(path, dpi=dpi)
    _plt().close(fig)
    return Path(path)


def plot_trajectories(
    t: ArrayLike,
    y: ArrayLike,
    labels: list | tuple | None = None,
    ax: Axes | None = None,
    ylabel: str = "",
    **style: Any,
) -> Axes:
    """Columns of ``y`` (T, k) against ``t``."""
    ax = _ax(ax)
    y = np.asarray(y).reshape(len(t), -1)
    for j in range(y.shape[1]):
        ax.plot(t, y[:, j], label=None if labels is None else labels[j], **style)
    ax.set_xlabel("t [s]")
    ax.set_ylabel(ylabel)
    if labels is not None:
        ax.legend(ncol=min(6, len(labels)), fontsize="small")
    return ax


def plot_constraint_residual(result: TrajectoryResult, ax: Axes | None = None) -> Axes:
    """||Phi(q_k)|| (and ||Phi_q qdot_k||) on a log scale."""
    ax = _ax(ax)
    tiny = 1e-300
    if result.position_residual is not None:
        ax.semilogy(result.t, np.maximum(result.position_residual, tiny), label="||Phi(q)||")
    if result.velocity_residual is not None:
        ax.semilogy(result.t, np.maximum(result.velocity_residual, tiny), label="||Phi_q qdot||")
    ax.set_xlabel("t [s]")
    ax.set_ylabel("constraint residual")
    ax.legend(fontsize="small")
    return ax


def plot_force_comparison(
    t: ArrayLike,
    ours: np.ndarray,
    reference: ArrayLike | None = None,
    t_reference: float | None = None,
    label: str = "mbfg",
    reference_label: str = "reference",
    ax: Axes | None = None,
    ylabel: str = "force [N, N m]",
) -> Axes:
    """A generalized-force series against a reference (e.g. MSC ADAMS)."""
    ax = _ax(ax)
    ax.plot(t, ours, label=label)
    if reference is not None:
        ax.plot(t if t_reference is None else t_reference, reference, "--", label=reference_label)
    ax.set_xlabel("t [s]")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize="small")
    return ax


def point_positions(mech: Mechanism, q: ArrayLike) -> np.ndarray:
    """(P, 2) positions of every point (fixed ones included) at configuration q."""
    q = np.asarray(q, float)
    xy = np.array(mech.point_fixed_xy, float)
    free = mech.point_coords[:, 0] >= 0
    xy[free, 0] = q[mech.point_coords[free, 0]]
    xy[free, 1] = q[mech.point_coords[free, 1]]
    return xy


def draw_mechanism(
    mech: Mechanism,
    q: ArrayLike | None = None,
    ax: Axes | None = None,
    labels: bool = True,
    color: str = "C0",
    alpha: float = 1.0,
) -> Axes:
    """Draw bodies (bars, or filled polygons for 3+ points), fixed points as ground symbols,
    sliders as dashed lines, and point numbers.  Returns the axes."""
    from matplotlib.patches import Polygon
    ax = _ax(ax, figsize=(6, 6))
    xy = point_positions(mech, mech.q0 if q is None else q)
    artists = []
    for body in mech.spec.bodies:
        p = xy[list(body.points)]
        if len(body.points) == 2:
            artists += ax.plot(p[:, 0], p[:, 1], "-", color=color, lw=3, alpha=alpha,
                               solid_capstyle="round")
        else:
            order = np.argsort(np.arctan2(*(p - p.mean(0)).T[::-1]))
            poly = Polygon(p[order], closed=True, fc=color, ec=color, alpha=0.35 * alpha)
            ax.add_patch(poly)
            artists.append(poly)
    for con in mech.spec.constraints:
        if hasattr(con, "line"):
            (xa, ya), (xb, yb) = con.line
            d = np.array([xb - xa, yb - ya])
            d = d / np.linalg.norm(d)
            span = np.ptp(xy, axis=0).max() or 1.0
            ax.plot([xa - span * d[0], xa + span * d[0]], [ya - span * d[1], ya + span * d[1]],
                    "k--", lw=0.8, alpha=0.6)
    fixed = np.array([pt.fixed for pt in mech.spec.points])
    artists += ax.plot(xy[~fixed, 0], xy[~fixed, 1], "o", color="k", ms=4, alpha=alpha)
    ax.plot(xy[fixed, 0], xy[fixed, 1], "^", color="k", ms=10, mfc="w")
    if labels:
        for i, (x, y) in enumerate(xy):
            ax.annotate(str(i), (x, y), textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.set_aspect("equal")
    ax.set_xlabel("x [m]")
    ax.set_ylabel("y [m]")
    return ax


def animate(
    mech: Mechanism,
    q: ArrayLike,
    path: Path,
    t: ArrayLike | None = None,
    fps: int = 25,
    stride: int | None = None,
    labels: bool = False,
) -> Path:
    """Write an animation of configurations ``q`` (T, n) to ``path`` (.gif with Pillow,
    .mp4 with ffmpeg).  ``stride`` frames are skipped to reach ``fps`` in real time when ``t``
    is given.  Returns the path."""
    from matplotlib import animation
    plt = _plt()
    q = np.asarray(q)
    if stride is None:
        stride = max(1, int(round((1.0 / fps) / (t[1] - t[0])))) if t is not None and len(t) > 1 else 1
    frames = q[::stride]
    allxy = np.concatenate([point_positions(mech, qk) for qk in frames[:: max(1, len(frames) // 50)]])
    lo, hi = allxy.min(0), allxy.max(0)
    pad = 0.1 * max(np.ptp(allxy, axis=0).max(), 1e-3)
    fig, ax = plt.subplots(figsize=(5, 5))

    def draw(k):
        ax.clear()
        draw_mechanism(mech, frames[k], ax=ax, labels=labels)
        ax.set_xlim(lo[0] - pad, hi[0] + pad)
        ax.set_ylim(lo[1] - pad, hi[1] + pad)
        if t is not None:
            ax.set_title(f"t = {t[::stride][k]:.2f} s")
        return []

    anim = animation.FuncAnimation(fig, draw, frames=len(frames), blit=False)
    path = Path(path)
    writer = animation.PillowWriter(fps=fps) if path.suffix.lower() == ".gif" else animation.FFMpegWriter(fps=fps)
    anim.save(path, writer=writer)
    plt.close(fig)
    return path


def plot_simulation(
    result: TrajectoryResult, path: str | Path | None = None, title: str = ""
) -> Figure | Path:
    """Positions, velocities and the constraint residual; saved to ``path`` if given."""
    plt = _plt()
    fig, ax = plt.subplots(3, 1, figsize=(8, 7.8), sharex=True)
    plot_trajectories(result.t, result.q, result.coords, ax=ax[0], ylabel="q [m, rad]")
    plot_trajectories(result.t, result.qd, None, ax=ax[1], ylabel="qdot [m/s, rad/s]")
    plot_constraint_residual(result, ax=ax[2])
    fig.suptitle(title)
    fig.tight_layout()
    return save(fig, path) if path else fig


def plot_inverse(
    result: TrajectoryResult,
    path: str | Path | None = None,
    imposed: tuple = (),
    actuated: tuple = (),
    desired: ArrayLike | None = None,
    title: str = "",
) -> Figure | Path:
    """Forces on the actuated coordinates, the imposed coordinates and the following error."""
    plt = _plt()
    rows = 3 if desired is not None else 2
    fig, ax = plt.subplots(rows, 1, figsize=(8, 2.6 * rows), sharex=True)
    names = result.coords
    plot_trajectories(result.t, result.Q[:, list(actuated)], [f"Q[{names[j]}]" for j in actuated],
                      ax=ax[0], ylabel="generalized force [N, N m]")
    plot_trajectories(result.t, result.q[:, list(imposed)], [names[j] for j in imposed], ax=ax[1],
                      ylabel="imposed coordinates")
    if desired is not None:
        plot_trajectories(result.t, result.q[:, list(imposed)] - desired,
                          [names[j] for j in imposed], ax=ax[2], ylabel="following error")
    fig.suptitle(title)
    fig.tight_layout()
    return save(fig, path) if path else fig


__all__ = [
    "save", "plot_trajectories", "plot_constraint_residual", "plot_force_comparison",
    "point_positions", "draw_mechanism", "animate", "plot_simulation", "plot_inverse"
]
