# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Model your own mechanism
#
# This tutorial goes from a YAML description to a checked, simulated and animated mechanism:
#
# 1. **(a)** an *offset* slider-crank (a `fixed_slider` constraint and a relative crank
#    angle): write the YAML, load and check it, draw it, simulate it with the fixed-lag
#    smoother, plot the trajectories and the constraint residual, verify that the mechanical
#    energy is conserved, and animate it;
# 2. **(b)** a quick-return mechanism whose crank pin slides in a slotted lever (a
#    `mobile_slider` constraint): the same steps;
# 3. **(c)** what a typo in the YAML produces.
#
# The source is a plain Python script in jupytext "percent" format,
# `examples/model_your_mechanism.py` (run it with `python examples/model_your_mechanism.py`);
# `examples/model_your_mechanism.ipynb` is the same code as an executed notebook.
# Figures, the YAML files and the GIFs go to `$MBFG_FIGURES` (default `docs/figures`);
# `MBFG_QUICK=1` shortens the simulations for continuous integration.
#
# Every key of the YAML format is described in the YAML reference (`docs/yaml-reference.md`).

# %%
import os
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import mbfg
from mbfg import plot as mplot
from mbfg.model import inertia
from mbfg.drivers.forward_dynamics import simulate_smoother

# the repository is the parent of this folder (Jupyter runs a notebook in its own folder)
HERE = Path(__file__).parent if "__file__" in globals() else Path.cwd()
OUT = Path(os.environ.get("MBFG_FIGURES") or HERE.parent / "docs" / "figures")
OUT.mkdir(parents=True, exist_ok=True)
QUICK = os.environ.get("MBFG_QUICK", "") not in ("", "0")
T_END = 0.5 if QUICK else 2.0      # simulated time [s]
DT = 1e-3                          # time step [s]
print(f"output folder: {OUT}  (quick mode: {QUICK}, t_end = {T_END} s, dt = {DT} s)")

# %% [markdown]
# ## (a) An offset slider-crank
#
# The crank (points 0-1) turns about the fixed point 0; the connecting rod (points 1-2)
# drives the piston pin, point 2, along the horizontal line `y = e`, which is *below* the
# crank pivot (offset `e = -0.04 m`).  The crank angle is added as a relative coordinate
# `theta0` so that the crank angle can be read (or imposed) directly.
#
# Point positions only need to be *close* to an assembled configuration: mbfg solves the
# position problem from them.  Here point 2 is computed exactly with an expression that
# uses the coordinates of point 1 (`x1`, `y1`), which earlier points make available.

# %%
SLIDER_CRANK_YAML = """\
%YAML 1.2
---
# Offset slider-crank, crank angle as a relative coordinate.  q = [x1 y1 x2 y2 theta0].
parameters:
  r: 0.12             # crank length [m]
  l: 0.40             # connecting-rod length [m]
  e: -0.04            # slider-line offset below the crank pivot [m]
  th0: deg2rad(60)    # initial crank angle [rad]
gravity: [0, -9.81]
points:
  - { x: 0, y: 0, fixed: true }                 # 0: crank pivot
  - { x: r*cos(th0), y: r*sin(th0) }            # 1: crank pin
  - { x: x1 + sqrt(l^2 - (y1 - e)^2), y: e }    # 2: piston pin, on the line y = e
planar_bodies:
  - points: [0, 1]      # crank: uniform bar
    length: r
    mass: 0.8
    I0: (1/3)*mass*length^2
    cog: [0.5*length, 0]
  - points: [1, 2]      # connecting rod: uniform bar
    length: l
    mass: 1.5
    I0: (1/3)*mass*length^2
    cog: [0.5*length, 0]
constraints:
  - { type: fixed_slider, point: 2, line: [[0, e], [1, e]] }
relative_coordinates:
  - { type: RelativeAngleAbsoluteDOF, points: [0, 1] }
"""
slider_path = OUT / "tutorial-slider-crank.yaml"
slider_path.write_text(SLIDER_CRANK_YAML)
slider = mbfg.load_mechanism(slider_path)


# %% [markdown]
# ### Check the model
#
# The same summary as `mbfg check FILE`: the number of coordinates n, of constraint rows m,
# the degrees of freedom (n minus the rank of the constraint Jacobian at `q0`), the
# coordinate names and the assembled `q0`.  Always look at this first: a wrong DOF count
# usually means a missing or duplicated constraint.

# %%
def check_summary(mech, title):
    """Print the model summary and return the assembly residual."""
    residual = float(np.linalg.norm(mech.constraints(mech.q0)))
    print(f"--- {title}")
    print(f"n (coordinates):         {mech.n}")
    print(f"m (constraint rows):     {mech.m}")
    print(f"DOF:                     {mech.dof}")
    print(f"coordinate names:        {' '.join(mech.coordinate_names)}")
    print(f"constraint rows:         {', '.join(mech.constraint_labels)}")
    print(f"q0:                      {' '.join(f'{v:.6g}' for v in mech.q0)}")
    print(f"assembly residual |Phi|: {residual:.3e}")
    print(f"total mass:              {mech.total_mass:.6g} kg")
    return residual


check_summary(slider, "offset slider-crank")
assert slider.dof == 1

# %% [markdown]
# ### Draw it
#
# `mbfg.plot.draw_mechanism` draws bars, fixed points (triangles), slider lines (dashed)
# and point numbers at any configuration `q` (default `q0`).

# %%
ax = mplot.draw_mechanism(slider)
ax.set_title("offset slider-crank at q0")
ax.figure.savefig(OUT / "tutorial-slider-crank.png", dpi=110)

# %% [markdown]
# ### Simulate
#
# Released from rest at `q0`, the mechanism falls under gravity.  `simulate_smoother` runs
# the dependent-coordinate forward-dynamics factor graph (paper Fig. 2) with a fixed-lag
# smoother of two steps and mbfg's default integrator, the fourth-order Hermite rule
# (`integrator="trapezoidal"` gives the paper's Eq. 23).

# %%
def simulate_and_report(mech):
    """Forward dynamics from rest (fixed-lag smoother, window 2) and a short report."""
    t0 = time.perf_counter()
    res = simulate_smoother(mech, t_end=T_END, dt=DT, window=2)
    print(f"simulated {res.stats['steps']} steps in {time.perf_counter() - t0:.2f} s "
          f"({res.stats['ms_per_step']:.2f} ms/step, {res.stats['iterations']} Gauss-Newton "
          f"iterations)")
    print(f"max |Phi(q)|:        {res.position_residual.max():.3e} m")
    print(f"max |Phi_q qdot|:    {res.velocity_residual.max():.3e} m/s")
    th = res.q[:, mech.coordinate_index("theta0")]
    print(f"crank angle range:   {np.rad2deg(th.min()):.2f} .. {np.rad2deg(th.max()):.2f} deg")
    return res


run = simulate_and_report(slider)
x2 = run.q[:, slider.coordinate_index("x2")]
print(f"piston stroke used:  {x2.min():.4f} .. {x2.max():.4f} m")


# %% [markdown]
# ### Trajectories, constraint residual and energy
#
# Without friction or applied forces, kinetic plus potential energy,
# `T = 1/2 qdot^T M qdot` and `V = -sum_b m_b g . r_G,b` (`mbfg.model.inertia`), is constant.
# The integrator adds no numerical damping: the energy error oscillates (largest when
# the crank is fastest) instead of growing, and stays small at dt = 1 ms.  This is a good
# end-to-end check of a new model: the mass matrix, the gravity forces and the constraints
# all enter it.

# %%
def energy_drift(mech, res):
    """Total energy E(t) = T + V and its drift relative to the peak kinetic energy."""
    T = inertia.kinetic_energy(mech, res.qd)
    V = inertia.potential_energy(mech, res.q)
    E = T + V
    drift = np.abs(E - E[0]).max()
    return T, V, E, drift, drift / max(T.max(), 1e-300)


def plot_run(mech, res, title, path):
    T, V, E, drift, rel = energy_drift(mech, res)
    fig, ax = plt.subplots(4, 1, figsize=(8, 10), sharex=True)
    mplot.plot_trajectories(res.t, res.q, res.coords, ax=ax[0], ylabel="q [m, rad]")
    mplot.plot_trajectories(res.t, res.qd, None, ax=ax[1], ylabel="qdot [m/s, rad/s]")
    mplot.plot_constraint_residual(res, ax=ax[2])
    mplot.plot_trajectories(res.t, np.column_stack([T, V - V[0]]),
                            ["kinetic T", "potential V - V(0)"], ax=ax[3], ylabel="energy [J]")
    right = ax[3].twinx()   # the drift is orders of magnitude smaller: own axis, in mJ
    right.plot(res.t, 1e3 * (E - E[0]), color="C3", lw=1)
    right.set_ylabel("E - E(0) [mJ]", color="C3")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return drift, rel


drift, rel = plot_run(slider, run, "offset slider-crank falling from rest",
                      OUT / "tutorial-slider-crank-simulation.png")
T, V, E, _, _ = energy_drift(slider, run)
print(f"peak kinetic energy: {T.max():.6f} J")
print(f"energy drift:        max |E - E0| = {drift:.3e} J  ({rel:.2e} of the peak kinetic energy)")
assert rel < 1e-2, "energy should be conserved"

# %% [markdown]
# ### Animate
#
# `mbfg.plot.animate` writes a GIF (Pillow) or MP4 (ffmpeg) of the configurations, skipping
# frames to play in real time at the given frame rate.

# %%
fps = 10 if QUICK else 25
gif = mplot.animate(slider, run.q, OUT / "tutorial-slider-crank.gif", t=run.t, fps=fps)
print(f"animation: {gif} ({gif.stat().st_size / 1024:.0f} kB, {len(run.t[::max(1, round(1 / fps / DT))])} frames)")

# %% [markdown]
# ## (b) A quick-return mechanism: a `mobile_slider`
#
# Now the crank pin (point 1) slides in the slot of a lever (points 2-3) that pivots about
# the fixed point 2, below the crank pivot.  The slot is a `mobile_slider`: point 1 stays on
# the line through points 2 and 3, which moves with the lever.  The lever tip (point 3) is
# placed on that line by its expression; its length is `b`.

# %%
QUICK_RETURN_YAML = """\
%YAML 1.2
---
# Quick-return: crank pin 1 slides in the slot of the lever 2-3.  q = [x1 y1 x3 y3 theta0].
parameters:
  r: 0.15             # crank [m]
  h: 0.35             # crank pivot above the lever pivot [m]
  b: 0.60             # lever length [m]
  th0: deg2rad(20)
points:
  - { x: 0, y: 0, fixed: true }                       # 0: crank pivot
  - { x: r*cos(th0), y: r*sin(th0) }                  # 1: crank pin
  - { x: 0, y: -h, fixed: true }                      # 2: lever pivot
  - { x: b*x1/sqrt(x1^2 + (y1+h)^2), y: -h + b*(y1+h)/sqrt(x1^2 + (y1+h)^2) }  # 3: lever tip
planar_bodies:
  - points: [0, 1]     # crank (with a flywheel: larger inertia than a bar)
    length: r
    mass: 1.0
    I0: 0.8*mass*length^2
    cog: [0.5*length, 0]
  - points: [2, 3]     # slotted lever
    length: b
    mass: 1.2
    I0: (1/3)*mass*length^2
    cog: [0.5*length, 0]
constraints:
  - { type: mobile_slider, point: 1, line_points: [2, 3] }
relative_coordinates:
  - { type: RelativeAngleAbsoluteDOF, points: [0, 1] }
"""
qr_path = OUT / "tutorial-quick-return.yaml"
qr_path.write_text(QUICK_RETURN_YAML)
qr = mbfg.load_mechanism(qr_path)
check_summary(qr, "quick-return")
assert qr.dof == 1

ax = mplot.draw_mechanism(qr)
ax.set_title("quick-return at q0")
ax.figure.savefig(OUT / "tutorial-quick-return.png", dpi=110)

# %%
run_qr = simulate_and_report(qr)
drift_qr, rel_qr = plot_run(qr, run_qr, "quick-return falling from rest",
                            OUT / "tutorial-quick-return-simulation.png")
print(f"peak kinetic energy: {energy_drift(qr, run_qr)[0].max():.6f} J")
print(f"energy drift:        max |E - E0| = {drift_qr:.3e} J  ({rel_qr:.2e} of the peak kinetic energy)")
assert rel_qr < 1e-2, "energy should be conserved"
gif = mplot.animate(qr, run_qr.q, OUT / "tutorial-quick-return.gif", t=run_qr.t, fps=fps)
print(f"animation: {gif}")

# %% [markdown]
# ## (c) Typos are reported with file, line and YAML path
#
# Every input error is an `mbfg.MbfgError` (a `MechanismError` for YAML files) whose message
# is a single line naming the file, the line, the YAML path of the offending key, what is
# wrong and — for a misspelt name — the closest valid one.  `mbfg check` prints the same line
# and exits with code 2.

# %%
typos = {
    "misspelt key 'fixd'": SLIDER_CRANK_YAML.replace("fixed: true }                 # 0",
                                                     "fixd: true }                  # 0"),
    "misspelt constraint type": SLIDER_CRANK_YAML.replace("fixed_slider", "fixed_slidr"),
    "misspelt top-level key": SLIDER_CRANK_YAML.replace("relative_coordinates:", "relative_coordinate:"),
}
for what, text in typos.items():
    assert text != SLIDER_CRANK_YAML
    try:
        # same as writing the text to a file and calling mbfg.load_mechanism(path)
        mbfg.mechanism_from_yaml(text, source="tutorial-slider-crank.yaml")
    except mbfg.MbfgError as err:
        print(f"{what}:\n  {type(err).__name__}: {err}")
    else:
        raise AssertionError(f"{what}: expected an error")
