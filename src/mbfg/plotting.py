"""Plots of solved trajectories (matplotlib, Agg backend so it works without a display)."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def _figure(rows):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(rows, 1, figsize=(8, 2.6 * rows), sharex=True)
    return plt, fig, np.atleast_1d(axes)


def plot_simulation(result, path, title: str = "") -> Path:
    """Positions, velocities and the constraint residual ||Phi(q_k)|| against time."""
    plt, fig, ax = _figure(3)
    for j, name in enumerate(result.coords):
        ax[0].plot(result.t, result.q[:, j], label=name)
        ax[1].plot(result.t, result.qd[:, j], label=name)
    ax[0].set_ylabel("q [m, rad]")
    ax[1].set_ylabel("qdot [m/s, rad/s]")
    ax[0].legend(ncol=min(6, len(result.coords)), fontsize="small")
    if result.position_residual is not None:
        ax[2].semilogy(result.t, np.maximum(result.position_residual, 1e-300))
    ax[2].set_ylabel("||Phi(q)||")
    ax[2].set_xlabel("t [s]")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def plot_inverse(result, path, imposed, actuated, desired=None, title: str = "") -> Path:
    """Generalized forces on the actuated coordinates, the imposed coordinates and (if
    ``desired`` is given) the following error."""
    plt, fig, ax = _figure(3 if desired is not None else 2)
    names = result.coords
    for j in actuated:
        ax[0].plot(result.t, result.Q[:, j], label=f"Q[{names[j]}]")
    ax[0].set_ylabel("generalized force [N, N m]")
    ax[0].legend(fontsize="small")
    for j in imposed:
        ax[1].plot(result.t, result.q[:, j], label=names[j])
    ax[1].set_ylabel("imposed coordinates")
    ax[1].legend(fontsize="small")
    if desired is not None:
        err = result.q[:, list(imposed)] - desired
        for c, j in enumerate(imposed):
            ax[2].plot(result.t, err[:, c], label=names[j])
        ax[2].set_ylabel("following error")
    ax[-1].set_xlabel("t [s]")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
