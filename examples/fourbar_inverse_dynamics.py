# %% [markdown]
# # Four-bar inverse dynamics (paper Sect. 7.2, Fig. 9)
#
# The crank angle of the four-bar (`fourbar-crank-angle.yaml`, q = [x1 y1 x2 y2 theta0]) must
# follow theta(t) = 1.2 (1 - cos 2t) for 10 s (2000 samples, dt = 5 ms).  The inverse-dynamics
# factor graph (Fig. 4) is solved in batch in the paper's four stages, and the crank torque is
# compared with MSC ADAMS (`InverseDynamics_4bars_MSC.tab`; ADAMS reports the torque with the
# opposite sign to the generalized force on theta0).
#
# `MBFG_QUICK=1` uses the first 400 samples; figures go to `$MBFG_FIGURES`.

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import mbfg
from mbfg.resources import reference_path
from mbfg.drivers.inverse_dynamics import solve_inverse_dynamics
from mbfg.io import read_table, read_trajectory

# the repository is the parent of this folder (Jupyter runs a notebook in its own folder)
HERE = Path(__file__).parent if "__file__" in globals() else Path.cwd()
SHARED = reference_path("README.md").parent / "ground-truth"  # reference data shipped with mbfg
FIGURES = Path(os.environ.get("MBFG_FIGURES") or HERE.parent / "docs" / "figures")
FIGURES.mkdir(parents=True, exist_ok=True)
QUICK = os.environ.get("MBFG_QUICK") == "1"

mech = mbfg.load_mechanism("fourbar-crank-angle")   # bundled: mechanisms/fourbar-crank-angle.yaml
traj_file = SHARED / "fourbars1-with-rel-angle-trajectory.txt"
if traj_file.exists():
    t, theta = read_trajectory(traj_file)
else:  # the file follows this closed form (reference-data README)
    print(f"{traj_file} not found: using theta(t) = 1.2 (1 - cos 2t)")
    t = np.arange(2000) * 5e-3
    theta = (1.2 * (1 - np.cos(2 * t)))[:, None]
adams_file = SHARED / "InverseDynamics_4bars_MSC.tab"
adams = read_table(adams_file) if adams_file.exists() else None
if QUICK:
    t, theta = t[:400], theta[:400]
    adams = None if adams is None else adams[:400]

# %% [markdown]
# ## Solve, in dependent and in independent coordinates

# %%
crank = mech.coordinate_names.index("theta0")
runs = {c: solve_inverse_dynamics(mech, t, theta, [crank], coords=c)
        for c in ("dependent", "independent")}
for c, res in runs.items():
    st = res.stats
    stages = ", ".join(f"stage {s['stage']}: {s['seconds']:.2f} s ({s['iterations']} it)"
                       for s in st["stages"])
    print(f"{c:11s}: total {st['seconds']:.2f} s (paper's C++: 5.3 s); {stages}")
    print(f"             max following error {np.degrees(st['max_following_error']):.2e} deg")
    if adams is not None:
        ref = -adams[:, 1]
        rms = np.sqrt(np.mean((res.Q[:, crank] - ref) ** 2))
        print(f"             torque RMS difference to ADAMS {rms:.4f} N m = "
              f"{100 * rms / np.abs(ref).max():.3f} % of its peak {np.abs(ref).max():.2f} N m")

# %% [markdown]
# ## Fig. 9: reference and achieved crank angle, torque, tracking error

# %%
res = runs["dependent"]
fig, ax = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
ax[0].plot(t, np.degrees(theta[:, 0]), label="reference")
ax[0].plot(t, np.degrees(res.q[:, crank]), "--", label="mbfg")
if adams is not None:
    ax[0].plot(adams[:, 0], adams[:, 2], ":", label="MSC ADAMS (actual)")
ax[0].set_ylabel("crank angle [deg]")
ax[0].legend(fontsize="small")
ax[1].plot(t, res.Q[:, crank], label="mbfg (dependent)")
ax[1].plot(t, runs["independent"].Q[:, crank], "--", label="mbfg (independent)")
if adams is not None:
    ax[1].plot(adams[:, 0], -adams[:, 1], ":", label="MSC ADAMS (sign flipped)")
ax[1].set_ylabel("crank torque [N m]")
ax[1].legend(fontsize="small")
ax[2].plot(t, np.degrees(res.q[:, crank] - theta[:, 0]), label="mbfg")
if adams is not None:
    ax[2].plot(adams[:, 0], adams[:, 2] - np.degrees(theta[:, 0]), ":", label="MSC ADAMS")
ax[2].set_ylabel("tracking error [deg]")
ax[2].set_xlabel("t [s]")
ax[2].legend(fontsize="small")
fig.tight_layout()
fig.savefig(FIGURES / "fourbar-fig9-inverse-dynamics.png", dpi=110)

# %%
if adams is not None:
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.plot(t, res.Q[:, crank] + adams[:, 1])
    ax.set_xlabel("t [s]")
    ax.set_ylabel("mbfg - ADAMS torque [N m]")
    fig.tight_layout()
    fig.savefig(FIGURES / "fourbar-inverse-torque-difference.png", dpi=110)
