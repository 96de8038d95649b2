# %% [markdown]
# # State estimation of a four-bar from noisy sensors
#
# The benchmark of the Kalman-filter review (Sanjurjo et al., 2017, Sect. 12), in the
# review's "three simulations" set-up:
#
# 1. a **prototype** (`mechanisms/fourbar-review.yaml`, g = -9.81) is simulated accurately
#    and produces noisy readings (fixed seed);
# 2. the **estimators** run a model with errors: gravity -8.81 m/s^2 and an initial crank
#    angle off by pi/16;
# 3. estimates are compared with the prototype's true motion.
#
# Three single-sensor setups: a crank encoder (sigma 1 deg), a gyroscope on the coupler, a
# gyroscope on the crank (sigma 9.839e-4 rad/s).  Estimators: the factor-graph fixed-lag
# smoother (online, causal estimate), the same with an unknown slowly varying force on the
# point coordinates that learns the wrong gravity (with its +/-2 sigma band from the
# covariance), the batch smoother (offline), and the review's errorEKF_FE and UKF baselines.  Then the particle
# filter of the 2015 paper infers the assembly branch of another four-bar from a gyroscope.
#
# `MBFG_QUICK=1` runs 2.5 s instead of 10 s (and skips the UKF); figures go to `$MBFG_FIGURES`.

# %%
import os
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import mbfg
from mbfg.benchmarking.estimation_review import (metrics, review_fourbar,
                                                 sensor_setups, simulate_prototype)
from mbfg.estimation.particle import branch_sign, mirror_branch
from mbfg.model.integrate import integrate_reference
from mbfg.model.sensors import Gyroscope, SensorSet

# the repository is the parent of this folder (Jupyter runs a notebook in its own folder)
HERE = Path(__file__).parent if "__file__" in globals() else Path.cwd()
FIGURES = Path(os.environ.get("MBFG_FIGURES") or HERE.parent / "docs" / "figures")
FIGURES.mkdir(parents=True, exist_ok=True)
QUICK = os.environ.get("MBFG_QUICK") == "1"
T_END, DT = (2.5 if QUICK else 10.0), 5e-3
warnings.simplefilter("ignore", RuntimeWarning)

proto, model, q0_model = review_fourbar()
truth = simulate_prototype(proto, T_END, DT)
t = truth[0]
k = model.coordinate_index("theta0")
print(f"prototype g = {proto.gravity[1]}, model g = {model.gravity[1]}; initial crank angle "
      f"{proto.q0[k]:.4f} (true) vs {q0_model[k]:.4f} rad (model)")

# %% [markdown]
# ## The review's benchmark: three sensor setups

# %%
# estimators by their registered names (mbfg.estimation.ESTIMATORS), with their options;
# "fg-online+force" also estimates an unknown, slowly varying force on every point
# coordinate: it can learn the model's wrong gravity (a constant generalized force in
# natural coordinates)
METHODS = {"fg-online": dict(covariance=True), "fg-online+force": dict(covariance=True),
           "fg-batch": {}, "ekf_fe": {}, "ukf": {}}
if QUICK:
    del METHODS["ukf"]
setups = sensor_setups()
fig, axes = plt.subplots(len(setups), 1, figsize=(9, 3.2 * len(setups)), sharex=True)
print("| setup | estimator | crank angle RMSE [rad] | after 2 s | ms/step |")
print("|---|---|---:|---:|---:|")
for ax, (name, sensors) in zip(axes, setups.items()):
    readings = sensors.synthesize(proto, *truth, rng=np.random.default_rng(0))
    results = {name: mbfg.estimate(model, sensors, readings, DT, t.size, method=name,
                                   q0=q0_model, **options) for name, options in METHODS.items()}
    for label, res in results.items():
        m = metrics(res, truth, k, DT)
        print(f"| {name} | {label} | {m['pos_rmse']:.5f} | {m['pos_rmse_after']:.5f} | "
              f"{res.stats['ms_per_step']:.2f} |")
    ax.plot(t, results["fg-online"].q[:, k] - truth[1][:, k], label="fg-online (causal)")
    online = results["fg-online+force"]
    ax.plot(t, online.q[:, k] - truth[1][:, k], label="fg-online+force (causal)")
    ax.fill_between(t, -2 * online.z_std[:, 0], 2 * online.z_std[:, 0], alpha=0.25,
                    label="+/- 2 sigma (fg-online+force)")
    ax.plot(t, results["fg-batch"].q[:, k] - truth[1][:, k], label="fg-batch")
    ax.plot(t, results["ekf_fe"].q[:, k] - truth[1][:, k], ":", label="errorEKF_FE")
    ax.set_ylim(-0.05, 0.05)
    ax.set_ylabel("crank angle error [rad]")
    ax.set_title(f"{name}")
    ax.legend(fontsize="x-small", ncol=4)
axes[-1].set_xlabel("t [s]")
fig.tight_layout()
fig.savefig(FIGURES / "estimation-review-fourbar.png", dpi=110)

# %% [markdown]
# ## Particle filter with branch inference (2015 paper)
#
# A small four-bar (ground 0.59 m, crank 0.125 m, coupler 0.27 m, rocker 0.54 m) is released
# on its *lower* assembly branch; a gyroscope on the rocker (sigma 0.3 deg/s) is the only
# sensor.  The particles start with a uniform crank angle (a full turn), a rate of at most
# 0.5 rad/s and either branch; the filter's process noise comes from the mechanism's own
# scales (no tuning).  It starts with 1000 hypotheses and keeps 200 once the branch is
# decided (docs/benchmarks.md).

# %%
pf_mech = mbfg.load_mechanism("fourbar-pf2015")
q_lower = mirror_branch(pf_mech, pf_mech.q0)
ref = integrate_reference(pf_mech, 1.5, DT, q0=q_lower)
gyro = SensorSet([Gyroscope(body=2, sigma=np.radians(0.3))])
pf_readings = gyro.synthesize(pf_mech, ref.t, ref.q, ref.qd, ref.qdd, rng=np.random.default_rng(3))
true_branch = int(branch_sign(pf_mech, ref.q[0]))
pf = mbfg.estimate(pf_mech, gyro, pf_readings, DT, ref.t.size, method="pf", seed=3,
                   init="uniform", zd_max=0.5, n_particles=200, initial_particles=1000,
                   true_branch=true_branch)
p = pf.stats["branch_probability"]
first = int(np.argmax(p > 0.99)) if np.any(p > 0.99) else None
after = ref.t >= 0.5
err = np.degrees(np.arctan2(np.sin(pf.q[:, 4] - ref.q[:, 4]), np.cos(pf.q[:, 4] - ref.q[:, 4])))
print(f"particle filter: P(true branch) > 0.99 after {first} readings (paper: about 6); "
      f"crank angle RMSE after 0.5 s {np.sqrt(np.mean(err[after] ** 2)):.2f} deg (paper: about 0.3); "
      f"{pf.stats['ms_per_step']:.1f} ms/step")
fig, ax = plt.subplots(1, 2, figsize=(11, 3.2))
ax[0].plot(ref.t, p)
ax[0].set_xlim(0, 0.3)
ax[0].set_xlabel("t [s]")
ax[0].set_ylabel("P(true branch)")
ax[1].plot(ref.t, err)
ax[1].set_xlabel("t [s]")
ax[1].set_ylabel("crank angle error [deg]")
fig.tight_layout()
fig.savefig(FIGURES / "estimation-particle-filter.png", dpi=110)
