"""A second suite of outside programs: built with public JAX libraries that no corpus family,
other bench or training row uses (state-space models, Gaussian processes, nested sampling,
interpolation, quadrature and Lie groups), as their users write them. As in
`bench/evaluations/outside_programs.py`, each builder returns a new function and abstract arguments
(parameters, optimizer states and keys are arguments, not captured constants);
`OUTSIDE_FAMILIES` registers one family per builder (prefix `outside_b`), its grid the
sizes measured, so measurement processes build them as they build corpus programs.

- dynamax: a batched Kalman smoother, Gaussian-HMM EM (`fit_em` inside jit), an Adam step on
  an unconstrained categorical-HMM likelihood, EKF smoothing plus UKF filtering of a pendulum.
- gpjax: an exact-GP hyperparameter fit (Adam in scan), a sparse variational GP
  classification (Bernoulli ELBO) train step, posterior prediction with a product kernel.
- tinygp: a quasiseparable (celerite-style) kernel fit on a long series, a deep-kernel
  learning train step, batched conditioning and prediction of many light curves.
- jaxns: nested-sampler root initialisation of a linear regression and of a
  sum-of-sinusoids model.
- interpax: a cubic-spline knot fit (Adam in scan), RK4 particle advection through a
  tabulated 2-D velocity field, velocity-Verlet steps in a tabulated 3-D potential.
- quadax: vmapped Gauss-Kronrod band integrals, a maximum-likelihood step whose normaliser
  is an adaptive quadrature, a vmapped 2-D adaptive cubature.
- jaxlie: an SE(3) pose-graph Gauss-Newton solve (Python-unrolled iterations), inverse
  kinematics of a serial arm (unrolled SE(3) chain, gradient descent in scan), batched IMU
  preintegration, a bundle-adjustment-style Adam step on SE(3) poses (manifold gradients).

kfac-jax (0.0.8) is left out: its graph tracer unpacks `Primitive.get_bind_params`, whose
return changed in jax 0.10, so every curvature update fails to trace.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np

from costmodel.training.corpus.registry import libraries_by_prefix, register_builders, sds

KEY = jax.ShapeDtypeStruct((2,), jnp.uint32)


def f32(*shape) -> jax.ShapeDtypeStruct:
    return sds(shape)


def i32(*shape) -> jax.ShapeDtypeStruct:
    return sds(shape, np.int32)


def _abstract(tree):
    """Abstract arguments standing in for the arrays of `tree`."""
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a)), tree)


def _dense_init(key, sizes):
    keys = jax.random.split(key, len(sizes) - 1)
    return [(jax.random.normal(k, (m, n)) / np.sqrt(m), jnp.zeros(n))
            for k, m, n in zip(keys, sizes[:-1], sizes[1:], strict=True)]


def _dense_apply(layers, x):
    for w, b in layers[:-1]:
        x = jax.nn.gelu(x @ w + b)
    w, b = layers[-1]
    return x @ w + b


def _optax_step(loss_fn, opt):
    """A train step `(params, opt_state, *batch) -> (params, opt_state, loss)` minimising `loss_fn`."""
    import optax

    def step(params, opt_state, *batch):
        loss, grads = jax.value_and_grad(loss_fn)(params, *batch)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step


def _scan_fit(loss_fn, opt, steps):
    """`steps` optimizer steps on `loss_fn` in lax.scan: `(params, *data) -> (params, losses)`."""
    step = _optax_step(loss_fn, opt)

    def fit(params, *data):
        def body(carry, _):
            params, opt_state = carry
            params, opt_state, loss = step(params, opt_state, *data)
            return (params, opt_state), loss

        (params, _), losses = jax.lax.scan(body, (params, opt.init(params)), None, length=steps)
        return params, losses

    return fit


# ----------------------------------------------------------------------------------------- dynamax


def dynamax_lgssm_smoother(state_dim: int, emission_dim: int, steps: int, batch: int):
    """Batched Kalman (RTS) smoothing and marginal likelihood of a linear-Gaussian SSM (dynamax)."""
    from dynamax.linear_gaussian_ssm import LinearGaussianSSM

    model = LinearGaussianSSM(state_dim, emission_dim)
    params = jax.eval_shape(lambda k: model.initialize(k)[0], jax.random.PRNGKey(0))

    def fn(params, emissions):
        def one(ys):
            post = model.smoother(params, ys)
            return post.smoothed_means, post.marginal_loglik

        means, lls = jax.vmap(one)(emissions)
        return means, lls.sum()

    return fn, (params, f32(batch, steps, emission_dim))


def dynamax_hmm_em(num_states: int, emission_dim: int, steps: int, batch: int, iters: int):
    """Gaussian-HMM expectation-maximisation on a batch of sequences, dynamax `fit_em` inside jit."""
    from dynamax.hidden_markov_model import GaussianHMM

    model = GaussianHMM(num_states, emission_dim)
    # props hold only flags and bijectors; the parameters themselves are arguments
    props = model.initialize(jax.random.PRNGKey(0))[1]
    params = jax.eval_shape(lambda k: model.initialize(k)[0], jax.random.PRNGKey(0))

    def fn(params, emissions):
        return model.fit_em(params, props, emissions, num_iters=iters, verbose=False)

    return fn, (params, f32(batch, steps, emission_dim))


def dynamax_hmm_sgd_step(num_states: int, num_classes: int, steps: int, batch: int):
    """Adam step on the unconstrained marginal likelihood of a categorical HMM (dynamax)."""
    import optax
    from dynamax.hidden_markov_model import CategoricalHMM
    from dynamax.parameters import from_unconstrained, to_unconstrained

    model = CategoricalHMM(num_states, emission_dim=1, num_classes=num_classes)
    params, props = model.initialize(jax.random.PRNGKey(0))
    opt = optax.adam(1e-2)

    def loss(unc_params, emissions):
        params = from_unconstrained(unc_params, props)
        lls = jax.vmap(lambda ys: model.marginal_log_prob(params, ys))(emissions)
        return -(model.log_prior(params) + lls.sum()) / emissions.size

    unc = jax.eval_shape(lambda p: to_unconstrained(p, props), _abstract(params))
    return (_optax_step(loss, opt),
            (unc, jax.eval_shape(opt.init, unc), i32(batch, steps, 1)))


def dynamax_pendulum_ekf_ukf(steps: int, batch: int):
    """EKF smoothing and UKF filtering of a noisy pendulum, vmapped over sequences (dynamax)."""
    from dynamax.nonlinear_gaussian_ssm import (
        ParamsNLGSSM,
        UKFHyperParams,
        extended_kalman_smoother,
        unscented_kalman_filter,
    )

    dt, g = 0.0125, 9.8

    def dynamics(x):
        return jnp.array([x[0] + x[1] * dt, x[1] - g * jnp.sin(x[0]) * dt])

    def emission(x):
        return jnp.array([jnp.sin(x[0]), x[1] * jnp.cos(x[0])])

    def fn(m0, p0, q, r, emissions):
        params = ParamsNLGSSM(m0, p0, dynamics, q, emission, r)

        def one(ys):
            smoothed = extended_kalman_smoother(params, ys)
            filtered = unscented_kalman_filter(params, ys, UKFHyperParams())
            return smoothed.smoothed_means, filtered.marginal_loglik

        return jax.vmap(one)(emissions)

    return fn, (f32(2), f32(2, 2), f32(2, 2), f32(2, 2), f32(batch, steps, 2))


# ------------------------------------------------------------------------------------------- gpjax


def _gpjax_dataset(x, y, **kwargs):
    import gpjax as gpx

    # gpjax warns about float32 data on every construction; the programs run in float32
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return gpx.Dataset(X=x, y=y, **kwargs)


def _split_module(module):
    """(abstract array leaves, static rest) of an equinox module; `eqx.combine` rejoins them."""
    import equinox as eqx

    arrays, static = eqx.partition(module, eqx.is_array)
    return _abstract(arrays), static


def gpjax_conjugate_fit(n: int, dims: int, steps: int):
    """Exact GP regression hyperparameter fit (ARD RBF + Matern52 kernel), Adam steps in scan (gpjax)."""
    import equinox as eqx
    import gpjax as gpx
    import optax

    kernel = gpx.kernels.RBF(lengthscale=jnp.ones(dims)) + gpx.kernels.Matern52(lengthscale=jnp.ones(dims))
    posterior = gpx.gps.Prior(mean_function=gpx.mean_functions.Constant(), kernel=kernel) \
        * gpx.likelihoods.Gaussian()
    params, static = _split_module(posterior)

    def loss(params, x, y):
        return -gpx.objectives.conjugate_mll(eqx.combine(params, static), _gpjax_dataset(x, y))

    return _scan_fit(loss, optax.adam(1e-2), steps), (params, f32(n, dims), f32(n, 1))


def gpjax_svgp_classifier_step(num_inducing: int, dims: int, batch: int, n_total: int):
    """Sparse variational GP classification train step: minibatch Bernoulli ELBO, Adam (gpjax)."""
    import equinox as eqx
    import gpjax as gpx
    import optax

    prior = gpx.gps.Prior(mean_function=gpx.mean_functions.Zero(),
                          kernel=gpx.kernels.Matern32(lengthscale=jnp.ones(dims)))
    model = prior * gpx.likelihoods.Bernoulli()
    family = gpx.variational_families.VariationalGaussian(model, jnp.zeros((num_inducing, dims)))
    params, static = _split_module(family)
    opt = optax.adam(1e-2)

    def loss(params, x, y):
        # a minibatch of a larger data set: the ELBO rescales its likelihood term by n_total
        data = _gpjax_dataset(x, y, n_total=n_total)
        return -gpx.objectives.elbo(eqx.combine(params, static), data)

    return _optax_step(loss, opt), (params, jax.eval_shape(opt.init, params), f32(batch, dims), f32(batch, 1))


def gpjax_posterior_predict(n: int, test: int):
    """Exact GP posterior predictive mean and variance with a periodic x Matern32 kernel (gpjax)."""
    import equinox as eqx
    import gpjax as gpx

    kernel = gpx.kernels.Periodic() * gpx.kernels.Matern32() + gpx.kernels.White()
    posterior = gpx.gps.Prior(mean_function=gpx.mean_functions.Zero(), kernel=kernel) \
        * gpx.likelihoods.Gaussian()
    params, static = _split_module(posterior)

    def fn(params, x, y, x_test):
        dist = eqx.combine(params, static).predict(x_test, _gpjax_dataset(x, y), covariance="diagonal")
        return dist.mean, dist.variance

    return fn, (params, f32(n, 1), f32(n, 1), f32(test, 1))


# ------------------------------------------------------------------------------------------ tinygp


def _celerite_kernel(p):
    """Two damped oscillators plus a Matern-3/2 trend, quasiseparable (O(N) solves)."""
    from tinygp.kernels import quasisep

    return (quasisep.SHO(omega=jnp.exp(p["log_w"][0]), quality=jnp.exp(p["log_q"][0]),
                         sigma=jnp.exp(p["log_s"][0]))
            + quasisep.SHO(omega=jnp.exp(p["log_w"][1]), quality=jnp.exp(p["log_q"][1]),
                           sigma=jnp.exp(p["log_s"][1]))
            + quasisep.Matern32(scale=jnp.exp(p["log_scale"]), sigma=jnp.exp(p["log_s"][2])))


def tinygp_celerite_fit(n: int, steps: int):
    """Quasiseparable (celerite-style) GP fit of a long time series, Adam steps in scan (tinygp)."""
    import optax
    from tinygp import GaussianProcess

    def loss(p, t, y, yerr):
        gp = GaussianProcess(_celerite_kernel(p), t, diag=yerr**2 + jnp.exp(p["log_jitter"]),
                             mean=p["mean"])
        return -gp.log_probability(y)

    params = {"log_w": f32(2), "log_q": f32(2), "log_s": f32(3), "log_scale": f32(),
              "log_jitter": f32(), "mean": f32()}
    return _scan_fit(loss, optax.adam(3e-2), steps), (params, f32(n), f32(n), f32(n))


def tinygp_deep_kernel_step(depth: int, width: int, n: int, dims: int):
    """Deep kernel learning train step: MLP features into an ExpSquared GP likelihood, AdamW (tinygp)."""
    import optax
    from tinygp import GaussianProcess, kernels, transforms

    opt = optax.adamw(1e-3)

    def loss(p, x, y):
        kernel = jnp.exp(p["log_amp"]) * transforms.Transform(
            lambda xi: _dense_apply(p["net"], xi), kernels.ExpSquared(scale=jnp.exp(p["log_scale"])))
        gp = GaussianProcess(kernel, x, diag=jnp.exp(p["log_noise"]))
        return -gp.log_probability(y) / x.shape[0]

    params = {"net": jax.eval_shape(lambda k: _dense_init(k, [dims] + [width] * depth + [4]),
                                    jax.random.PRNGKey(0)),
              "log_amp": f32(), "log_scale": f32(), "log_noise": f32()}
    return _optax_step(loss, opt), (params, jax.eval_shape(opt.init, params), f32(n, dims), f32(n))


def tinygp_batched_predict(curves: int, n: int, test: int):
    """Conditions a quasi-periodic GP on many light curves and predicts, vmapped (tinygp)."""
    from tinygp import GaussianProcess, kernels

    def one(p, t, y, t_test):
        kernel = jnp.exp(p[0]) * kernels.ExpSquared(jnp.exp(p[1])) \
            * kernels.ExpSineSquared(scale=jnp.exp(p[2]), gamma=jnp.exp(p[3]))
        gp = GaussianProcess(kernel, t, diag=jnp.exp(p[4]))
        _, cond = gp.condition(y, t_test)
        return cond.loc, cond.variance

    def fn(params, t, y, t_test):
        return jax.vmap(one)(params, t, y, t_test)

    return fn, (f32(curves, 5), f32(curves, n), f32(curves, n), f32(curves, test))


# ------------------------------------------------------------------------------------------- jaxns


def _jaxns():
    """jaxns modules; importing jaxns turns on jax_enable_x64 for the whole process, so the flag
    is put back (the programs run in float32 like the rest of the suite)."""
    x64 = jax.config.read("jax_enable_x64")
    import tensorflow_probability.substrates.jax as tfp
    from jaxns.core import NestedSampler
    from jaxns.model import Model
    from jaxns.priors import Prior

    jax.config.update("jax_enable_x64", x64)
    return tfp.distributions, NestedSampler, Model, Prior


def _nested_init(prior_model, max_samples):
    """`fn(key, *data)`: a jaxns nested sampler's root state for `prior_model(*data)`."""
    _, nested_sampler, model, _ = _jaxns()
    sampler = nested_sampler(model=model(prior_model=prior_model), max_samples=max_samples)

    def fn(key, *data):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # int64 / float64 requests truncated
            state = sampler.initialise(key, args=data)
        return state.samples, state.num_samples

    return fn


def jaxns_regression_init(n: int, features: int, max_samples: int):
    """Nested-sampling root initialisation for a Bayesian linear regression (jaxns)."""
    tfpd, _, _, prior = _jaxns()

    def prior_model(x, y):
        w = prior(tfpd.Normal(jnp.zeros(features), 1.0), name="w").realise()
        b = prior(tfpd.Normal(0.0, 1.0), name="b").realise()
        sigma = prior(tfpd.HalfNormal(1.0), name="sigma").realise()
        return jnp.sum(tfpd.Normal(x @ w + b, sigma).log_prob(y))

    return _nested_init(prior_model, max_samples), (KEY, f32(n, features), f32(n))


def jaxns_sinusoids_init(n: int, components: int, max_samples: int):
    """Nested-sampling root initialisation for a sum-of-sinusoids model, one prior per term (jaxns)."""
    tfpd, _, _, prior = _jaxns()

    def prior_model(t, y):
        signal = 0.0
        for k in range(components):
            amp = prior(tfpd.HalfNormal(1.0), name=f"amp{k}").realise()
            freq = prior(tfpd.Uniform(0.1 + k, 1.1 + k), name=f"freq{k}").realise()
            phase = prior(tfpd.Uniform(-jnp.pi, jnp.pi), name=f"phase{k}").realise()
            signal = signal + amp * jnp.sin(2 * jnp.pi * freq * t + phase)
        noise = prior(tfpd.HalfNormal(0.5), name="noise").realise()
        return jnp.sum(tfpd.StudentT(4.0, signal, noise).log_prob(y))

    return _nested_init(prior_model, max_samples), (KEY, f32(n), f32(n))


# ----------------------------------------------------------------------------------------- interpax


def interpax_spline_fit(knots: int, points: int, steps: int):
    """Fits cubic-spline knot values to noisy samples with Adam in scan, smoothness penalty (interpax)."""
    import optax
    from interpax import interp1d

    grid = jnp.linspace(0.0, 1.0, knots)

    def loss(values, x, y):
        fit = interp1d(x, grid, values, method="cubic2")
        curvature = interp1d(grid, grid, values, method="cubic2", derivative=2)
        return jnp.mean((fit - y) ** 2) + 1e-6 * jnp.mean(curvature**2)

    return _scan_fit(loss, optax.adam(1e-2), steps), (f32(knots), f32(points), f32(points))


def interpax_advection_rk4(particles: int, grid: int, steps: int):
    """RK4 advection of tracer particles through a tabulated 2-D velocity field in lax.scan (interpax)."""
    from interpax import interp2d

    axis = jnp.linspace(0.0, 1.0, grid)

    def velocity(pos, u, v):
        x, y = pos[:, 0] % 1.0, pos[:, 1] % 1.0
        return jnp.stack([interp2d(x, y, axis, axis, u, method="cubic", period=1.0),
                          interp2d(x, y, axis, axis, v, method="cubic", period=1.0)], axis=-1)

    def fn(pos, u, v, dt):
        def rk4(pos, _):
            k1 = velocity(pos, u, v)
            k2 = velocity(pos + 0.5 * dt * k1, u, v)
            k3 = velocity(pos + 0.5 * dt * k2, u, v)
            k4 = velocity(pos + dt * k3, u, v)
            pos = pos + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
            return pos, pos.mean(0)

        return jax.lax.scan(rk4, pos, None, length=steps)

    return fn, (f32(particles, 2), f32(grid, grid), f32(grid, grid), f32())


def interpax_verlet_potential(particles: int, grid: int, steps: int):
    """Velocity-Verlet steps in a tabulated 3-D potential, forces = grad of interp3d, unrolled (interpax)."""
    from interpax import Interpolator3D

    axis = jnp.linspace(-1.0, 1.0, grid)

    def fn(table, pos, vel, dt):
        potential = Interpolator3D(axis, axis, axis, table, method="cubic", extrap=True)

        def energy(pos):
            return potential(pos[:, 0], pos[:, 1], pos[:, 2]).sum()

        force = jax.grad(lambda pos: -energy(pos))

        acc = force(pos)
        for _ in range(steps):  # unrolled, as short fixed-length integrators often are
            vel = vel + 0.5 * dt * acc
            pos = jnp.clip(pos + dt * vel, -1.0, 1.0)
            acc = force(pos)
            vel = vel + 0.5 * dt * acc
        return pos, vel

    return fn, (f32(grid, grid, grid), f32(particles, 3), f32(particles, 3), f32())


# ------------------------------------------------------------------------------------------ quadax


def quadax_band_integrals(bands: int, temps: int):
    """Planck band fluxes: adaptive Gauss-Kronrod quadrature vmapped over bands x temperatures (quadax)."""
    from quadax import quadgk

    def planck(wavelength, temperature):
        return wavelength**-5 / jnp.expm1(1.4388e4 / (wavelength * temperature))

    def band_flux(lo, hi, temperature):
        value, _ = quadgk(planck, jnp.array([lo, hi]), args=(temperature,), epsrel=1e-6)
        return value

    def fn(edges, temperatures):
        per_band = jax.vmap(band_flux, in_axes=(0, 0, None))
        return jax.vmap(lambda t: per_band(edges[:, 0], edges[:, 1], t))(temperatures)

    return fn, (f32(bands, 2), f32(temps))


def quadax_normalised_mle_step(terms: int, batch: int):
    """Maximum-likelihood Adam step of an unnormalised density whose normaliser is quadts (quadax)."""
    import optax
    from quadax import quadts

    opt = optax.adam(1e-2)

    def log_density(theta, x):
        k = jnp.arange(1, terms + 1)
        return -0.5 * x**2 + jnp.sum(theta[:terms] * jnp.cos(k * x) + theta[terms:] * jnp.sin(k * x))

    def density(t, theta):
        return jnp.exp(log_density(theta, t))

    def loss(theta, x):
        log_z = jnp.log(quadts(density, jnp.array([-jnp.inf, jnp.inf]), args=(theta,))[0])
        return log_z - jax.vmap(lambda xi: log_density(theta, xi))(x).mean()

    theta = f32(2 * terms)
    return _optax_step(loss, opt), (theta, jax.eval_shape(opt.init, theta), f32(batch))


def quadax_cubature_2d(batch: int):
    """Adaptive 2-D cubature (Genz-Malik) of an anisotropic Gaussian bump, vmapped over shapes (quadax)."""
    from quadax import cubegm

    def bump(xy, centre, widths):
        return jnp.exp(-jnp.sum(((xy - centre) / widths) ** 2, axis=-1)) * (1 + xy[..., 0] * xy[..., 1])

    def one(centre, widths):
        value, _ = cubegm(bump, [jnp.array([0.0, 1.0]), jnp.array([0.0, 1.0])], args=(centre, widths),
                          epsrel=1e-5)
        return value

    def fn(centres, widths):
        return jax.vmap(one)(centres, widths)

    return fn, (f32(batch, 2), f32(batch, 2))


# ------------------------------------------------------------------------------------------ jaxlie


def jaxlie_pose_graph_gauss_newton(poses: int, iters: int):
    """SE(3) pose-graph optimisation: Gauss-Newton on odometry + loop closures, Python-unrolled (jaxlie)."""
    import jaxlie

    def retract(base, deltas):
        # the base estimates perturbed on the manifold by tangent `deltas` (batched SE(3))
        return (jaxlie.SE3(base) @ jaxlie.SE3.exp(deltas)).wxyz_xyz

    def residuals(deltas, base, edges_ij, edges_meas):
        pose = retract(base, deltas)
        t_i, t_j = jaxlie.SE3(pose[edges_ij[:, 0]]), jaxlie.SE3(pose[edges_ij[:, 1]])
        err = (jaxlie.SE3(edges_meas).inverse() @ t_i.inverse() @ t_j).log()
        prior = (jaxlie.SE3(pose[0]).inverse() @ jaxlie.SE3(base[0])).log()
        return jnp.concatenate([err.reshape(-1), 10.0 * prior])

    def fn(base, edges_ij, edges_meas):
        for _ in range(iters):
            deltas = jnp.zeros((poses, 6))
            r = residuals(deltas, base, edges_ij, edges_meas)
            jac = jax.jacfwd(residuals)(deltas, base, edges_ij, edges_meas).reshape(r.shape[0], -1)
            hessian = jac.T @ jac + 1e-4 * jnp.eye(jac.shape[1])
            step = -jax.scipy.linalg.solve(hessian, jac.T @ r, assume_a="pos").reshape(poses, 6)
            base = retract(base, step)
        return base

    edges = poses + poses // 4  # odometry chain plus loop closures
    return fn, (f32(poses, 7), i32(edges, 2), f32(edges, 7))


def jaxlie_arm_inverse_kinematics(joints: int, steps: int):
    """Inverse kinematics of a serial arm: SE(3) forward kinematics, gradient descent in lax.scan (jaxlie)."""
    import jaxlie

    def end_effector(angles, axes, links):
        pose = jaxlie.SE3.identity()
        for j in range(joints):  # the chain is unrolled: one transform per joint
            rotation = jaxlie.SO3.exp(axes[j] * angles[j])
            pose = pose @ jaxlie.SE3.from_rotation_and_translation(rotation, links[j])
        return pose

    def loss(angles, axes, links, target):
        err = (jaxlie.SE3(target).inverse() @ end_effector(angles, axes, links)).log()
        return jnp.sum(err[:3] ** 2) + 0.1 * jnp.sum(err[3:] ** 2) + 1e-3 * jnp.sum(angles**2)

    def fn(angles, axes, links, target, lr):
        def step(angles, _):
            value, grad = jax.value_and_grad(loss)(angles, axes, links, target)
            return angles - lr * grad, value

        return jax.lax.scan(step, angles, None, length=steps)

    return fn, (f32(joints), f32(joints, 3), f32(joints, 3), f32(7), f32())


def jaxlie_imu_preintegration(steps: int, batch: int):
    """IMU preintegration: SO(3) exp updates of attitude, velocity and position in scan, vmapped (jaxlie)."""
    import jaxlie

    def integrate(rotation, gyro, accel, bias_g, bias_a, dt):
        def step(carry, meas):
            rot, vel, pos = carry
            w, a = meas
            world_acc = jaxlie.SO3(rot).apply(a - bias_a) + jnp.array([0.0, 0.0, -9.81])
            pos = pos + vel * dt + 0.5 * world_acc * dt**2
            vel = vel + world_acc * dt
            rot = (jaxlie.SO3(rot) @ jaxlie.SO3.exp((w - bias_g) * dt)).normalize().wxyz
            return (rot, vel, pos), pos

        (rot, vel, pos), track = jax.lax.scan(step, (rotation, jnp.zeros(3), jnp.zeros(3)), (gyro, accel))
        return jaxlie.SE3.from_rotation_and_translation(jaxlie.SO3(rot), pos).log(), vel, track

    def fn(rotations, gyro, accel, bias_g, bias_a, dt):
        return jax.vmap(integrate, in_axes=(0, 0, 0, 0, 0, None))(rotations, gyro, accel, bias_g, bias_a, dt)

    imu = f32(batch, steps, 3)
    return fn, (f32(batch, 4), imu, imu, f32(batch, 3), f32(batch, 3), f32())


def jaxlie_bundle_adjust_step(cameras: int, points: int):
    """Bundle-adjustment-style Adam step: SE(3) camera poses by manifold grads, reprojection loss (jaxlie)."""
    import jaxlie
    import optax

    opt = optax.adam(1e-3)

    def reprojection_loss(params, pixels, focal):
        cams, landmarks = params

        def project(cam):
            p = cam.inverse().apply(landmarks)
            return focal * p[:, :2] / jnp.maximum(p[:, 2:], 1e-2)

        uv = jax.vmap(project)(cams)
        return jnp.mean(optax.huber_loss(uv, pixels, delta=2.0))

    def step(cams, landmarks, opt_state, pixels, focal):
        params = (jaxlie.SE3(cams), landmarks)
        loss, (g_cams, g_points) = jaxlie.manifold.value_and_grad(reprojection_loss)(params, pixels, focal)
        updates, opt_state = opt.update((g_cams, g_points), opt_state)
        cams = jaxlie.manifold.rplus(params[0], updates[0]).wxyz_xyz
        return cams, landmarks + updates[1], opt_state, loss

    tangents = (f32(cameras, 6), f32(points, 3))
    return step, (f32(cameras, 7), f32(points, 3), jax.eval_shape(opt.init, tangents),
                  f32(cameras, points, 2), f32())


# (builder, sizes) of each program measured
PROGRAMS = (
    (dynamax_lgssm_smoother, dict(state_dim=4, emission_dim=2, steps=200, batch=16)),  # ~0.5 s
    (dynamax_hmm_em, dict(num_states=5, emission_dim=3, steps=200, batch=8, iters=20)),  # ~1 s
    (dynamax_hmm_sgd_step, dict(num_states=8, num_classes=12, steps=100, batch=32)),  # ~1 s
    (dynamax_pendulum_ekf_ukf, dict(steps=400, batch=8)),  # ~0.7 s
    (gpjax_conjugate_fit, dict(n=200, dims=3, steps=100)),  # ~0.9 s
    (gpjax_svgp_classifier_step, dict(num_inducing=64, dims=4, batch=256, n_total=10000)),  # ~2 s
    (gpjax_posterior_predict, dict(n=300, test=500)),  # ~0.3 s
    (tinygp_celerite_fit, dict(n=2000, steps=50)),  # ~3 s
    (tinygp_deep_kernel_step, dict(depth=24, width=128, n=256, dims=8)),  # ~1 s
    (tinygp_batched_predict, dict(curves=32, n=100, test=200)),  # ~0.4 s
    (jaxns_regression_init, dict(n=100, features=4, max_samples=5000)),  # ~0.9 s
    (jaxns_sinusoids_init, dict(n=200, components=12, max_samples=5000)),  # ~1.2 s
    (interpax_spline_fit, dict(knots=32, points=512, steps=100)),  # ~0.7 s
    (interpax_advection_rk4, dict(particles=1024, grid=64, steps=100)),  # ~2 s
    (interpax_verlet_potential, dict(particles=256, grid=32, steps=10)),  # ~3 s
    (interpax_verlet_potential, dict(particles=256, grid=32, steps=60)),  # ~19 s
    (quadax_band_integrals, dict(bands=8, temps=16)),  # ~3 s
    (quadax_normalised_mle_step, dict(terms=4, batch=512)),  # ~1.6 s
    (quadax_cubature_2d, dict(batch=8)),  # ~3 s
    (jaxlie_pose_graph_gauss_newton, dict(poses=32, iters=25)),  # ~12 s
    (jaxlie_pose_graph_gauss_newton, dict(poses=32, iters=60)),  # ~45 s
    (jaxlie_arm_inverse_kinematics, dict(joints=7, steps=50)),  # ~2 s
    (jaxlie_arm_inverse_kinematics, dict(joints=120, steps=50)),  # ~27 s
    (jaxlie_imu_preintegration, dict(steps=200, batch=16)),  # ~0.6 s
    (jaxlie_bundle_adjust_step, dict(cameras=8, points=256)),  # ~1.3 s
)
# the pip package of each builder name's prefix
LIBRARIES = {"dynamax": "dynamax", "gpjax": "gpjax", "tinygp": "tinygp", "jaxns": "jaxns",
             "interpax": "interpax", "quadax": "quadax", "jaxlie": "jaxlie"}

OUTSIDE_FAMILIES = register_builders(PROGRAMS, "outside", libraries_by_prefix(PROGRAMS, LIBRARIES),
                                     prefix="outside_b")
