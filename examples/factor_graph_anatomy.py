# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Anatomy of the multibody factor graphs
#
# The drivers of mbfg (`simulate_batch`, `simulate_smoother`, `solve_inverse_dynamics`)
# assemble their factor graphs internally.  This example builds the three graphs of the
# paper (Blanco-Claraco, Leanza & Reina, 2021) **by hand**, factor by factor, from the
# public gtsam factors of `mbfg.factors`, for the four-bar linkage with a crank angle
# (`mechanisms/fourbar-crank-angle.yaml`) over 3 time steps:
#
# * Fig. 2: forward dynamics in dependent coordinates;
# * Fig. 3: forward dynamics in independent coordinates;
# * Fig. 4: inverse dynamics in dependent coordinates.
#
# Each graph is drawn with matplotlib (variables as circles on a grid whose columns are time
# steps and rows quantities; factors as small squares joined to the variables returned by
# `factor.keys()`), and its size is printed.  Finally the dependent graph is linearized and
# the sparsity pattern of its Jacobian is drawn, and the hand-built graph is solved and
# compared with `mbfg.drivers.forward_dynamics.simulate_batch`.
#
# Run with `python examples/factor_graph_anatomy.py`; figures go to `$MBFG_FIGURES`
# (default `docs/figures`).

# %%
import os
import re
from collections import Counter
from pathlib import Path

import gtsam
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D

import mbfg
from mbfg import factors as F
from mbfg.factors import keys as K
from mbfg.graphs.forward import LeastSquaresSettings
from mbfg.graphs.inverse import InverseSettings
from mbfg.model import dynamics, kinematics
from mbfg.drivers.forward_dynamics import explicit_guess, simulate_batch

# the repository is the parent of this folder (Jupyter runs a notebook in its own folder)
HERE = Path(__file__).parent if "__file__" in globals() else Path.cwd()
OUT = Path(os.environ.get("MBFG_FIGURES") or HERE.parent / "docs" / "figures")
OUT.mkdir(parents=True, exist_ok=True)

mech = mbfg.load_mechanism("fourbar-crank-angle")   # bundled: mechanisms/fourbar-crank-angle.yaml
n, m = mech.n, mech.m
STEPS = 3                  # time steps k = 0, 1, 2
DT = 0.01                  # [s]
fs = LeastSquaresSettings(dt=DT)   # the sigmas of the paper's over-determined graph
print(f"mechanism: four-bar with crank angle, q = [{' '.join(mech.coordinate_names)}], "
      f"n = {n}, m = {m}, DOF = {mech.dof}")
print(f"{STEPS} time steps, dt = {DT} s")

# %% [markdown]
# ## Building and drawing a graph
#
# A graph is kept as a list of `(type, factor)` pairs so the drawing can name each factor;
# the factors themselves go into an ordinary `gtsam.NonlinearFactorGraph`.  The nonlinear
# factors are `MultibodyFactor`s (gtsam `CustomFactor`s with exact Jacobians) and carry their
# type in `factor.spec.name`; priors, integrators and equalities are native linear gtsam
# factors.

# %%
SIGMA_LINEAR = {"f_prior": None, "f_ti": fs.sigma_integrator, "f_eq": fs.sigma_equality}
TEX = {"f_prior": r"$f_{prior}$", "f_ti": r"$f_{ti}$", "f_eq": r"$f_{eq}$"}


def tex(kind):
    """'f_pc^d' -> '$f_{pc}^{d}$' for labels."""
    if kind in TEX:
        return TEX[kind]
    m_ = re.fullmatch(r"f_(\w+)\^(\w)", kind)
    return rf"$f_{{{m_[1]}}}^{{{m_[2]}}}$" if m_ else kind


class Graph:
    def __init__(self, title):
        self.title = title
        self.entries = []          # (type, factor)
        self.graph = gtsam.NonlinearFactorGraph()

    def add(self, factor, kind=None):
        kind = kind or factor.spec.name
        self.entries.append((kind, factor))
        self.graph.add(factor)

    def variables(self):
        seen = {}
        for _, f in self.entries:
            for k in f.keys():
                seen.setdefault(int(k), None)
        return list(seen)

    def summary(self, dims):
        keys = self.variables()
        by_var = Counter(quantity(k) for k in keys)
        by_type = Counter(kind for kind, _ in self.entries)
        n_rows = sum(rows(f) for _, f in self.entries)
        unknowns = sum(dims[quantity(k)] for k in keys)
        print(f"--- {self.title}")
        print(f"variables: {len(keys)}  ("
              + ", ".join(f"{c} x {q} [dim {dims[q]}]" for q, c in by_var.items()) + ")")
        print(f"factors:   {len(self.entries)}  ("
              + ", ".join(f"{c} x {t}" for t, c in by_type.items()) + ")")
        print(f"total dimension: {unknowns} unknowns, {n_rows} residual rows")
        return dict(variables=len(keys), factors=len(self.entries), unknowns=unknowns,
                    rows=n_rows, by_type=dict(by_type))


def rows(factor):
    """Number of residual rows of a factor.  (For the native linear factors the count is read
    from their JacobianFactor: gtsam's ``LinearContainerFactor.dim()`` dereferences the noise
    model, which the 4-key integrators, converted from a HessianFactor, do not have.)"""
    if isinstance(factor, gtsam.LinearContainerFactor):
        return factor.toJacobian().rows()
    return factor.dim()


def quantity(key):
    """'zdd2' -> 'zdd'."""
    return K.key_name(key).rstrip("0123456789")


def draw_graph(g, rows, path, dx=4.0, dy=2.0, shift=None, unary_side=None):
    """Variables on a (time step, quantity) grid, factors as squares joined to their keys.

    rows: quantity -> row; shift: quantity -> horizontal offset inside a time step's column
    (the independent quantities sit in a second sub-column); unary_side: quantity -> side
    (-1 left, +1 right) of unary factors (priors, f_pc^d)."""
    shift, unary_side = shift or {}, unary_side or {}
    pos = {k: (K.key_step(k) * dx + shift.get(quantity(k), 0.0), -rows[quantity(k)] * dy)
           for k in g.variables()}
    kinds = list(dict.fromkeys(kind for kind, _ in g.entries))
    color = {kind: f"C{i % 10}" for i, kind in enumerate(kinds)}
    taken = list(pos.values())
    fpos = []
    for kind, f in g.entries:
        pts = np.array([pos[int(k)] for k in f.keys()])
        base = pts.mean(0)
        if len(pts) == 1:                      # unary: beside its variable
            base = base + (1.1 * unary_side.get(quantity(f.keys()[0]), -1), 0.0)
        elif np.ptp(pts[:, 0]) == 0:           # all in one column: to its right
            base = base + (1.1, 0.0)
        elif np.ptp(pts[:, 1]) == 0:           # all in one row (f_eq): above it
            base = base + (0.0, 0.9)
        # first free spot near the base position
        for off in [(0, 0), (0, 0.7), (0, -0.7), (0.55, 0), (-0.55, 0), (0, 1.2), (0, -1.2),
                    (0.55, 0.55), (0.55, -0.55), (-0.55, 0.55), (-0.55, -0.55), (1.1, 0),
                    (0, 1.6), (0, -1.6), (1.1, 0.8), (1.1, -0.8)]:
            p = base + off
            if all(np.hypot(*(p - np.array(t))) > 0.5 for t in taken):
                break
        taken.append(tuple(p))
        fpos.append(p)

    xs = np.array(taken)
    fig, ax = plt.subplots(figsize=(2.0 + 0.9 * np.ptp(xs[:, 0]), 1.0 + 0.75 * np.ptp(xs[:, 1])))
    for (kind, f), p in zip(g.entries, fpos):
        for k in f.keys():
            ax.plot([p[0], pos[int(k)][0]], [p[1], pos[int(k)][1]], "-", color=color[kind],
                    lw=0.9, alpha=0.7, zorder=1)
    for (kind, f), p in zip(g.entries, fpos):
        ax.add_patch(plt.Rectangle((p[0] - 0.14, p[1] - 0.14), 0.28, 0.28, color=color[kind],
                                   zorder=3))
        ax.annotate(tex(kind), p, xytext=(0, -11), textcoords="offset points", ha="center",
                    va="top", fontsize=7, zorder=4)
    for k, (x, y) in pos.items():
        ax.add_patch(plt.Circle((x, y), 0.42, fc="white", ec="k", lw=1.2, zorder=5))
        name = K.key_name(k)
        q_, i = name.rstrip("0123456789"), name[len(name.rstrip("0123456789")):]
        label = {"zd": r"\dot z", "zdd": r"\ddot z", "v": r"\dot q", "a": r"\ddot q"}.get(q_, q_)
        ax.text(x, y, rf"${label}_{{{i}}}$", ha="center", va="center", fontsize=10, zorder=6)
    ax.legend([Line2D([], [], marker="s", ls="", color=color[k]) for k in kinds],
              [tex(k) for k in kinds], loc="upper left", bbox_to_anchor=(1.0, 1.0),
              fontsize=8, frameon=False)
    ax.set_aspect("equal")
    ax.set_xlim(xs[:, 0].min() - 0.8, xs[:, 0].max() + 0.8)
    ax.set_ylim(xs[:, 1].min() - 0.8, xs[:, 1].max() + 0.8)
    col = {}
    for k, (x, _) in pos.items():
        col.setdefault(K.key_step(k), []).append(x)
    ax.set_xticks([np.mean(col[k]) for k in sorted(col)], [f"step {k}" for k in sorted(col)])
    ax.set_yticks([])
    for s in ax.spines.values():
        s.set_visible(False)
    ax.set_title(g.title)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    print(f"figure: {path}")


# %% [markdown]
# ## Fig. 2: forward dynamics in dependent coordinates
#
# Unknowns per step: positions `q_k`, velocities `qdot_k`, accelerations `qddot_k` (each of
# dimension n = 5).  Factors: priors on `q_0` and `qdot_0` (the initial state), and per step
# the position constraints `f_pc^d(q_k)`, velocity constraints `f_vc^d(q_k, qdot_k)` and the
# equation of motion `f_dyn^d(q_k, qdot_k, qddot_k)` (gravity is the only force; known forces
# are parameters of the factor, not variables).  Two trapezoidal integrators `f_ti` join
# consecutive steps: `q <-> qdot` and `qdot <-> qddot`.

# %%
q0 = mech.q0
v0 = np.zeros(n)
a0 = dynamics.forward_dynamics(mech, q0, v0)

dep = Graph("Fig. 2: forward dynamics, dependent coordinates")
dep.add(F.prior_factor(K.q(0), q0, fs.sigma_prior), "f_prior")
dep.add(F.prior_factor(K.v(0), v0, fs.sigma_prior), "f_prior")
for k in range(STEPS):
    dep.add(F.position_constraint_factor(mech, K.q(k), fs.sigma_constraints))
    dep.add(F.velocity_constraint_factor(mech, K.q(k), K.v(k), fs.sigma_constraints))
    dep.add(F.forward_dynamics_factor(mech, K.q(k), K.v(k), K.a(k), fs.sigma_dynamics))
    if k + 1 < STEPS:
        dep.add(F.trapezoidal_integrator_factor(K.q(k), K.q(k + 1), K.v(k), K.v(k + 1), DT, n,
                                                fs.sigma_integrator), "f_ti")
        dep.add(F.trapezoidal_integrator_factor(K.v(k), K.v(k + 1), K.a(k), K.a(k + 1), DT, n,
                                                fs.sigma_integrator), "f_ti")
stats_dep = dep.summary({"q": n, "v": n, "a": n})
draw_graph(dep, {"q": 0, "v": 1, "a": 2}, OUT / "graph-forward-dependent.png")

# %% [markdown]
# ## Fig. 3: forward dynamics in independent coordinates
#
# The dynamics now acts on the independent coordinates `z = q[idx]` (here the crank angle
# `theta0`, chosen by `kinematics.choose_independent_coordinates`), with unknowns `z_k`,
# `zdot_k`, `zddot_k` (dimension d = 1) besides the dependent `q_k`, `qdot_k`, `qddot_k`.
# Priors fix `z_0`, `zdot_0`, and only *approximately* `q_0` (sigma 1 m: it only selects
# the assembly branch).  Per step, `f_pc^i`, `f_vc^i`, `f_ac^i` tie the dependent
# quantities to the independent ones and to the constraint manifold, and `f_dyn^i` is the
# equation of motion projected on z.  The integrators act on z only; a weak equality
# `f_eq(q_k, q_{k+1})` keeps consecutive configurations on the same branch.

# %%
idx = list(kinematics.choose_independent_coordinates(mech, q0))
d = len(idx)
print(f"independent coordinates: {[mech.coordinate_names[i] for i in idx]} (indices {idx})")

ind = Graph("Fig. 3: forward dynamics, independent coordinates")
ind.add(F.prior_factor(K.z(0), q0[idx], fs.sigma_prior), "f_prior")
ind.add(F.prior_factor(K.zd(0), v0[idx], fs.sigma_prior), "f_prior")
ind.add(F.prior_factor(K.q(0), q0, fs.sigma_prior_q_approx), "f_prior")
for k in range(STEPS):
    ind.add(F.independent_position_factor(mech, K.q(k), K.z(k), idx, fs.sigma_constraints))
    ind.add(F.independent_velocity_factor(mech, K.q(k), K.v(k), K.zd(k), idx,
                                          fs.sigma_constraints))
    ind.add(F.independent_acceleration_factor(mech, K.q(k), K.v(k), K.a(k), K.zdd(k), idx,
                                              fs.sigma_constraints))
    ind.add(F.independent_forward_dynamics_factor(mech, K.q(k), K.v(k), K.zdd(k), idx,
                                                  fs.sigma_dynamics))
    if k + 1 < STEPS:
        ind.add(F.trapezoidal_integrator_factor(K.z(k), K.z(k + 1), K.zd(k), K.zd(k + 1), DT, d,
                                                fs.sigma_integrator), "f_ti")
        ind.add(F.trapezoidal_integrator_factor(K.zd(k), K.zd(k + 1), K.zdd(k), K.zdd(k + 1), DT,
                                                d, fs.sigma_integrator), "f_ti")
        ind.add(F.equality_factor(K.q(k), K.q(k + 1), n, fs.sigma_equality), "f_eq")
stats_ind = ind.summary({"q": n, "v": n, "a": n, "z": d, "zd": d, "zdd": d})
draw_graph(ind, {"q": 0, "v": 1, "a": 2, "z": 0, "zd": 1, "zdd": 2},
           OUT / "graph-forward-independent.png", dx=5.0,
           shift={"z": 2.2, "zd": 2.2, "zdd": 2.2}, unary_side={"z": 1, "zd": 1})

# %% [markdown]
# ## Fig. 4: inverse dynamics in dependent coordinates
#
# Now the motion of the imposed coordinate (the crank angle `theta0`) is given at every step
# and the generalized forces `Q_k` are unknowns.  Priors with zero precision on all other
# components impose `theta0` only; `f_pc^d` and the weak `f_eq` give the rest of `q_k`
# (stage 1 of the paper's Sect. 7.2), the integrators and `f_vc^d` give `qdot_k` and `qddot_k`
# (stages 2-3), and `f_idyn^d(q_k, qdot_k, qddot_k, Q_k)` with zero priors on the
# non-actuated components of `Q_k` gives the crank torque (stage 4).  (mbfg's
# `solve_inverse_dynamics` also adds acceleration constraints at stage 3 and keeps only the
# actuated components of Q as unknowns; the optimum is the same.)

# %%
ins = InverseSettings(dt=DT)
th = mech.coordinate_index("theta0")
t = np.arange(STEPS) * DT
theta_desired = q0[th] + 0.5 * t ** 2          # a prescribed crank motion [rad]
imposed_precision = np.zeros(n)
imposed_precision[th] = 1.0 / ins.sigma_desired ** 2

inv = Graph("Fig. 4: inverse dynamics, dependent coordinates")
for k in range(STEPS):
    desired = np.zeros(n)
    desired[th] = theta_desired[k]
    inv.add(F.prior_factor(K.q(k), desired, precisions=imposed_precision), "f_prior")
    inv.add(F.position_constraint_factor(mech, K.q(k), ins.sigma_constraints))
    inv.add(F.velocity_constraint_factor(mech, K.q(k), K.v(k), ins.sigma_constraints))
    inv.add(F.inverse_dynamics_factor(mech, K.q(k), K.v(k), K.a(k), K.Q(k), ins.sigma_dynamics))
    inv.add(F.unactuated_force_prior(mech, K.Q(k), [th], ins.sigma_constraints), "f_prior")
    if k + 1 < STEPS:
        inv.add(F.equality_factor(K.q(k), K.q(k + 1), n, ins.sigma_equality), "f_eq")
        inv.add(F.trapezoidal_integrator_factor(K.q(k), K.q(k + 1), K.v(k), K.v(k + 1), DT, n,
                                                ins.sigma_integrator), "f_ti")
        inv.add(F.trapezoidal_integrator_factor(K.v(k), K.v(k + 1), K.a(k), K.a(k + 1), DT, n,
                                                ins.sigma_integrator), "f_ti")
stats_inv = inv.summary({"q": n, "v": n, "a": n, "Q": n})
draw_graph(inv, {"q": 0, "v": 1, "a": 2, "Q": 3}, OUT / "graph-inverse.png")

# %% [markdown]
# ## The linearized dependent graph: Jacobian sparsity
#
# Gauss-Newton solves, at each iteration, the linear least-squares problem `min ||A dx - b||`
# of the graph linearized at the current estimate.  Here it is linearized at a consistent
# initial estimate: `q_0`, zero initial velocity and the model's accelerations
# (`dynamics.forward_dynamics`), propagated over the 3 steps and projected on the constraints
# by `mbfg.drivers.forward_dynamics.explicit_guess` (the batch driver's own initial estimate).  With the
# variables ordered by time step (`q_k, qdot_k, qddot_k`), `A` is block-banded: a time step
# couples only with its neighbours, through the integrators, which is why a batch solve of
# N steps costs O(N).

# %%
q_init, v_init, a_init = explicit_guess(mech, q0, v0, DT, STEPS - 1)
assert np.allclose(a_init[0], a0)
values = gtsam.Values()
for k in range(STEPS):
    values.insert(K.q(k), q_init[k])
    values.insert(K.v(k), v_init[k])
    values.insert(K.a(k), a_init[k])
print(f"graph error at the initial estimate: {dep.graph.error(values):.3e}")

ordering = gtsam.Ordering()
for k in range(STEPS):
    for key in (K.q(k), K.v(k), K.a(k)):
        ordering.push_back(key)
lin = dep.graph.linearize(values)
A, b = lin.jacobian(ordering)
nnz = int(np.count_nonzero(A))
print(f"Jacobian A: {A.shape[0]} rows x {A.shape[1]} columns, {nnz} non-zeros "
      f"({100 * nnz / A.size:.1f} % dense), |b| = {np.linalg.norm(b):.3e}")

fig, ax = plt.subplots(figsize=(7.5, 8.5))
ax.spy(A, markersize=3, aspect="auto")
col_names = [K.key_name(ordering.at(i)) for i in range(ordering.size())]
ax.set_xticks(np.arange(len(col_names)) * n + (n - 1) / 2, col_names)
for i in range(1, len(col_names)):
    ax.axvline(i * n - 0.5, color="0.8", lw=0.6)
row_start, row_labels = 0, []
for kind, f in dep.entries:
    r = rows(f)
    row_labels.append((row_start + (r - 1) / 2,
                       f"{tex(kind)} " + ",".join(K.key_name(k) for k in f.keys())))
    row_start += r
    ax.axhline(row_start - 0.5, color="0.85", lw=0.5)
ax.set_yticks([r for r, _ in row_labels], [s for _, s in row_labels], fontsize=7)
ax.set_title("Jacobian of the linearized dependent graph (3 steps)")
fig.tight_layout()
fig.savefig(OUT / "graph-jacobian-sparsity.png", dpi=130)
print(f"figure: {OUT / 'graph-jacobian-sparsity.png'}")

# %% [markdown]
# ## The hand-built graph beside the simulator's graph
#
# A few Gauss-Newton iterations on the Fig. 2 graph (linearize, eliminate by sparse QR,
# retract; mbfg's solvers do the same on their own step vectors) give the paper's motion.
# `simulate_batch` solves the square, energy-consistent variant of this graph (the
# integrators act on the independent coordinates of each step and a discrete energy balance
# replaces the least-squares compromise; docs/theory.md).  With the paper's trapezoidal rule
# (`integrator="trapezoidal"`; mbfg's default is the fourth-order Hermite rule) both are
# second-order accurate, so over two 10 ms steps they agree to a small fraction of a
# millimetre, not to rounding.

# %%
sol = values
for it in range(1, 21):
    delta = dep.graph.linearize(sol).optimize(gtsam.EliminateQR)
    sol = sol.retract(delta)
    step = max(np.abs(delta.at(key)).max() for key in dep.variables())
    print(f"Gauss-Newton iteration {it}: error {dep.graph.error(sol):.3e}, max |step| {step:.2e}")
    if step < 1e-12:
        break
q_graph = np.array([sol.atVector(K.q(k)) for k in range(STEPS)])
ref = simulate_batch(mech, t_end=(STEPS - 1) * DT, dt=DT, integrator="trapezoidal")
diff = np.abs(q_graph - ref.q).max()
print(f"q_{STEPS - 1} (hand-built graph): {np.array2string(q_graph[-1], precision=8)}")
print(f"q_{STEPS - 1} (simulate_batch):   {np.array2string(ref.q[-1], precision=8)}")
print(f"max |q difference| over all steps: {diff:.2e}")
assert diff < 1e-4
