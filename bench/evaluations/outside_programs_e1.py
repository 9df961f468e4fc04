"""A fifth suite of outside programs, first part: built with public JAX libraries that no
corpus family, other bench or training row uses, as their users write them. As in
`bench/evaluations/outside_programs_d1.py`, each builder returns a new function and abstract
arguments (parameters, optimizer, agent and environment states, keys and data are arguments,
not captured constants); `OUTSIDE_FAMILIES` registers one family per builder (prefix
`outside_e1`), its grid the sizes measured.

- rejax (gymnax environments): a PPO train iteration (vectorised rollout, GAE, clipped-surrogate
  epochs over shuffled minibatches, observation normalisation) on CartPole and on MinAtar
  Breakout, a double-DQN iteration with a dueling network and a replay buffer on Acrobot, whole
  SAC training runs on Pendulum (interleaved evaluations) vmapped over seeds.
- jaxwt: wavelet-shrinkage denoising of a signal batch (multilevel DWT, soft thresholds from the
  finest level's noise estimate, inverse DWT), masked-image inpainting (Adam in scan with an l1
  prior on 2D wavelet coefficients), an MLP classifier step on wavelet-packet log-energies.
- signax: a path classifier step (learned lift, time channel and basepoint, log-signature, MLP
  head), a two-sample MMD with a truncated-signature kernel and its permutation test (long paths'
  signatures by chunks folded with `signature_combine`: signax's own `num_chunks` path calls
  `jax.tree_map`, gone from jax 0.10).
- sax (the pure-JAX Filipsson-Gunnar backend): a cascaded MZI lattice filter swept over
  wavelength and vmapped over heater settings, a fit step of an add-drop ring filter bank (ring
  couplings and lengths) to target drop-port channels.
- diffopt (kdescent): fits of a population model to training data by randomised KDE and
  characteristic-function counts (the pretrained training-data statistics are arguments): a
  generator-MLP step, a Gaussian model under a soft selection cut fitted by Adam in scan, each
  step over several kernel draws.

optax supplies the optimizers outside rejax (which uses optax inside). Left out: pgmax (0.6.1,
its newest, builds every inferer through `jax.lib.xla_bridge`, gone from jax 0.10), cr-sparse
(0.4.0 fails to import for the same reason), jaxlayerlumos (turns on jax_enable_x64 for the
process on import). rejax 0.1.3 unpacks gymnax 0.0.x's five-value `env.step`; gymnax 1.0 returns
six values, so the environments are handed to rejax in a wrapper that joins terminated and
truncated (the same programs under either gymnax). sax imports klujax, which turns on
jax_enable_x64, so the flag is put back after the import; its default KLU backend solves by an
XLA custom call (CPU only), so the circuits use the pure-JAX backend.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from _outside_common import KEY, apply_grads, c64, f32, i32, mlp, mlp_init, shapes, train

from costmodel.training.corpus.registry import libraries_by_prefix, register_builders

# ----------------------------------------------------------------------------------------- rejax


class _FiveValueStep:
    """A gymnax environment whose `step` returns (obs, state, reward, done, info), as rejax unpacks
    it: gymnax 1.0 returns terminated and truncated apart (0.0.x returned their union)."""

    def __init__(self, env):
        self._env = env

    def __getattr__(self, name):
        if name.startswith("_"):  # copies are made before __init__ runs
            raise AttributeError(name)
        return getattr(self._env, name)

    def step(self, key, state, action, params=None):
        out = self._env.step(key, state, action, params)
        if len(out) == 6:
            obs, state, reward, terminated, truncated, info = out
            return obs, state, reward, jnp.logical_or(terminated, truncated), info
        return out


def _gymnax(env: str) -> dict:
    """The `env` and `env_params` settings of a rejax algorithm on gymnax environment `env`."""
    import gymnax

    environment, params = gymnax.make(env)
    return {"env": _FiveValueStep(environment), "env_params": params}


def rejax_ppo_train_iteration(env: str, num_envs: int, num_steps: int, epochs: int, minibatches: int,
                              hidden: int = 64):
    """One PPO train iteration: rollout, GAE, clipped-surrogate epochs on minibatches (rejax)."""
    from rejax import PPO

    algo = PPO.create(**_gymnax(env), num_envs=num_envs, num_steps=num_steps, num_epochs=epochs,
                      num_minibatches=minibatches, learning_rate=2.5e-4, max_grad_norm=0.5,
                      normalize_observations=True, agent_kwargs={"hidden_layer_sizes": (hidden, hidden)})

    def iteration(train_state):
        return algo.train_iteration(train_state)

    return iteration, (shapes(algo.init_state),)


def rejax_dqn_train_iteration(env: str, num_envs: int, buffer_size: int, batch_size: int, epochs: int):
    """One double-DQN iteration with a dueling network, epsilon-greedy steps and a replay buffer (rejax)."""
    from rejax import DQN

    algo = DQN.create(**_gymnax(env), agent="DuelingQNetwork", ddqn=True, num_envs=num_envs,
                      buffer_size=buffer_size, fill_buffer=4 * batch_size, batch_size=batch_size,
                      num_epochs=epochs, target_update_freq=200, learning_rate=5e-4, total_timesteps=200_000)

    def iteration(train_state):
        return algo.train_iteration(train_state)

    return iteration, (shapes(algo.init_state),)


def rejax_sac_train_seeds(seeds: int, total_timesteps: int, eval_freq: int, num_envs: int, batch_size: int):
    """Whole SAC training runs with interleaved evaluations on Pendulum, vmapped over seeds (rejax)."""
    from rejax import SAC

    algo = SAC.create(**_gymnax("Pendulum-v1"), num_envs=num_envs, total_timesteps=total_timesteps,
                      eval_freq=eval_freq, buffer_size=total_timesteps, fill_buffer=2 * batch_size,
                      batch_size=batch_size, learning_rate=1e-3, target_entropy_ratio=0.5)

    def train_runs(key):
        train_states, (lengths, returns) = jax.vmap(algo.train)(jax.random.split(key, seeds))
        return train_states.actor_ts.params, returns.mean(-1)

    return train_runs, (KEY,)

# ----------------------------------------------------------------------------------------- jaxwt


def jaxwt_wavelet_denoise_batch(batch: int, length: int, level: int, wavelet: str = "db4"):
    """Wavelet shrinkage of a signal batch: multilevel DWT, soft thresholds, inverse DWT (jaxwt)."""
    import jaxwt

    def denoise(signals):
        coeffs = jaxwt.wavedec(signals, wavelet, mode="symmetric", level=level)
        # noise level from the finest details (median absolute deviation), universal threshold
        sigma = jnp.median(jnp.abs(coeffs[-1]), axis=-1, keepdims=True) / 0.6745
        threshold = sigma * np.sqrt(2.0 * np.log(length))
        shrunk = [coeffs[0]] + [jnp.sign(c) * jnp.maximum(jnp.abs(c) - threshold, 0.0) for c in coeffs[1:]]
        clean = jaxwt.waverec(shrunk, wavelet)[..., :length]
        kept = sum(jnp.sum(c != 0, axis=-1) for c in shrunk[1:])
        return clean, sigma[..., 0], kept

    return denoise, (f32(batch, length),)


def jaxwt_wavelet_inpaint_fit(batch: int, size: int, level: int, steps: int, wavelet: str = "db2"):
    """Masked-image inpainting: Adam in scan with an l1 prior on 2D wavelet coefficients (jaxwt)."""
    import jaxwt
    import optax

    opt = optax.adam(2e-2)

    def loss_fn(images, observed, mask, weight):
        coeffs = jaxwt.wavedec2(images, wavelet, mode="reflect", level=level)
        details = [d for bands in coeffs[1:] for d in bands]
        prior = sum(jnp.sum(jnp.sqrt(d**2 + 1e-6)) for d in details)  # smoothed l1
        return jnp.sum(mask * (images - observed) ** 2) + weight * prior

    def inpaint(images, observed, mask, weight):
        def body(carry, _):
            x, state = carry
            x, state, loss = apply_grads(opt, loss_fn, x, state, observed, mask, weight)
            return (jnp.clip(x, 0.0, 1.0), state), loss

        (images, _), losses = jax.lax.scan(body, (images, opt.init(images)), None, length=steps)
        return images, losses

    return inpaint, (f32(batch, size, size), f32(batch, size, size), f32(batch, size, size), f32())


def jaxwt_packet_classifier_step(batch: int, length: int, level: int, hidden: int, classes: int = 6):
    """Train step of an MLP on log-energies of wavelet-packet nodes of raw signals (jaxwt)."""
    import jaxwt
    import optax

    def features(signals):
        packet = jaxwt.WaveletPacket(signals, "sym4", mode="reflect", max_level=level)
        energies = jnp.stack([jnp.mean(packet[node] ** 2, axis=-1) for node in packet.get_level(level)], -1)
        logs = jnp.log(energies + 1e-6)
        return (logs - logs.mean(-1, keepdims=True)) / (logs.std(-1, keepdims=True) + 1e-6)

    def loss_fn(params, signals, labels):
        logits = mlp(params, features(signals), jax.nn.relu)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    params = shapes(mlp_init, (2**level, hidden, hidden, classes))
    step, state = train(optax.adamw(1e-3, weight_decay=1e-4), loss_fn, params)
    return step, (*state, f32(batch, length), i32(batch))

# ---------------------------------------------------------------------------------------- signax


def _lead_time(paths):
    """Paths (batch, length, channels) with a leading time channel and a zero basepoint."""
    b, n, _ = paths.shape
    time = jnp.broadcast_to(jnp.linspace(0.0, 1.0, n)[None, :, None], (b, n, 1))
    lifted = jnp.concatenate([time, paths], axis=-1)
    return jnp.concatenate([jnp.zeros_like(lifted[:, :1]), lifted], axis=1)


def signax_logsig_classifier_step(batch: int, length: int, channels: int, lift: int, depth: int,
                                  hidden: int, classes: int = 4):
    """Train step of a path classifier: learned lift, time channel, log-signature, MLP head (signax)."""
    import optax
    import signax

    width = jax.eval_shape(lambda: signax.logsignature(jnp.zeros((length + 1, lift + 1)), depth)).shape[-1]

    def init(key):
        k_lift, k_head = jax.random.split(key)
        return {"lift": jax.random.normal(k_lift, (channels, lift)) / np.sqrt(channels),
                "lift_b": jnp.zeros(lift), "head": mlp_init(k_head, (width, hidden, hidden, classes))}

    def loss_fn(params, paths, labels):
        increments = jnp.diff(paths, axis=1, prepend=paths[:, :1])
        lifted = jnp.cumsum(jnp.tanh(increments @ params["lift"] + params["lift_b"]), axis=1)
        features = signax.logsignature(_lead_time(lifted), depth)
        logits = mlp(params["head"], features, jax.nn.gelu)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(optax.cosine_decay_schedule(1e-3, 5000)))
    step, state = train(opt, loss_fn, shapes(init))
    return step, (*state, f32(batch, length, channels), i32(batch))


def signax_signature_mmd_test(n: int, m: int, length: int, channels: int, depth: int, chunks: int,
                              permutations: int):
    """Two-sample MMD with a truncated-signature kernel and its permutation test (signax)."""
    import signax

    def mmd2(gram, first):
        """Unbiased MMD^2 of the pooled Gram matrix split by the boolean mask `first`."""
        a, b = first.astype(gram.dtype), (~first).astype(gram.dtype)
        off = 1.0 - jnp.eye(n + m, dtype=gram.dtype)
        kxx = a @ (gram * off) @ a / (n * (n - 1))
        kyy = b @ (gram * off) @ b / (m * (m - 1))
        return kxx + kyy - 2.0 * a @ gram @ b / (n * m)

    def chunked_signature(path):
        """Signature of a long path: its chunks' signatures folded by Chen's identity."""
        span = (path.shape[0] - 1) // chunks
        pieces = jnp.stack([path[i * span:(i + 1) * span + 1] for i in range(chunks)])
        sigs = signax.signature(pieces, depth, flatten=False)  # per level, (chunks, ...)
        total, _ = jax.lax.scan(lambda acc, sig: (signax.signature_combine(acc, sig), None),
                                [s[0] for s in sigs], [s[1:] for s in sigs])
        return jnp.concatenate([level.ravel() for level in total])

    def test(x, y, scale, key):
        paths = _lead_time(jnp.concatenate([x, y]) * scale)
        sigs = jax.vmap(chunked_signature)(paths)
        levels = np.repeat(np.arange(1, depth + 1), [(channels + 1) ** k for k in range(1, depth + 1)])
        sigs = sigs / jnp.asarray(levels, sigs.dtype)  # damp the higher levels
        gram = 1.0 + sigs @ sigs.T
        first = jnp.arange(n + m) < n
        observed = mmd2(gram, first)
        shuffled = jax.vmap(lambda k: mmd2(gram, jax.random.permutation(k, first)))(
            jax.random.split(key, permutations))
        return observed, jnp.mean(shuffled >= observed)

    return test, (f32(n, length, channels), f32(m, length, channels), f32(), KEY)

# ------------------------------------------------------------------------------------------- sax


def _sax():
    """sax, imported with jax_enable_x64 put back (its klujax import turns it on for the process)."""
    x64 = jax.config.read("jax_enable_x64")
    import sax

    jax.config.update("jax_enable_x64", x64)
    return sax


def sax_mzi_lattice_sweep(stages: int, wavelengths: int, settings: int):
    """S-parameters of a cascaded MZI lattice filter over wavelength, vmapped over heater settings (sax)."""
    sax = _sax()
    instances, connections = {}, {}
    for i in range(stages + 1):
        instances[f"dc{i}"] = "coupler"
    for i in range(stages):
        instances[f"top{i}"] = {"component": "straight", "settings": {"length": 40.0 * (i + 1)}}
        instances[f"btm{i}"] = {"component": "heater", "settings": {"length": 20.0}}
        connections |= {f"dc{i},out1": f"top{i},in0", f"top{i},out0": f"dc{i + 1},in1",
                        f"dc{i},out0": f"btm{i},in0", f"btm{i},out0": f"dc{i + 1},in0"}
    netlist = {"instances": instances, "connections": connections,
               "ports": {"in0": "dc0,in0", "in1": "dc0,in1", "out0": f"dc{stages},out0",
                         "out1": f"dc{stages},out1"}}
    lattice, _ = sax.circuit(netlist, {"coupler": sax.models.coupler_ideal, "straight": sax.models.straight,
                                       "heater": sax.models.phase_shifter}, backend="filipsson_gunnar")

    def sweep(wl, couplings, voltages):
        def one(volts):
            kwargs = {f"dc{i}": {"coupling": couplings[i]} for i in range(stages + 1)}
            kwargs |= {f"btm{i}": {"voltage": volts[i]} for i in range(stages)}
            s = lattice(wl=wl, **kwargs)
            return jnp.stack([jnp.abs(s["in0", "out0"]) ** 2, jnp.abs(s["in0", "out1"]) ** 2,
                              jnp.angle(s["in0", "out0"])])

        return jax.vmap(one)(voltages)

    return sweep, (f32(wavelengths), f32(stages + 1), f32(settings, stages))


def sax_ring_bank_fit_step(rings: int, wavelengths: int):
    """Fit step of an add-drop ring filter bank's couplings and lengths to target channels (sax)."""
    import optax

    sax = _sax()
    instances, connections, ports = {}, {}, {"in": "r0a,in0", "thru": f"r{rings - 1}a,out0"}
    for r in range(rings):
        instances |= {f"r{r}a": "coupler", f"r{r}b": "coupler", f"r{r}arc1": "straight",
                      f"r{r}arc2": "straight"}
        # bus -> coupler a (cross into the ring), half ring, coupler b (drop), half ring back to a
        connections |= {f"r{r}a,out1": f"r{r}arc1,in0", f"r{r}arc1,out0": f"r{r}b,in1",
                        f"r{r}b,out1": f"r{r}arc2,in0", f"r{r}arc2,out0": f"r{r}a,in1"}
        ports |= {f"drop{r}": f"r{r}b,out0", f"add{r}": f"r{r}b,in0"}
        if r + 1 < rings:
            instances[f"bus{r}"] = "straight"
            connections |= {f"r{r}a,out0": f"bus{r},in0", f"bus{r},out0": f"r{r + 1}a,in0"}
    netlist = {"instances": instances, "connections": connections, "ports": ports}
    bank, _ = sax.circuit(netlist, {"coupler": sax.models.coupler_ideal, "straight": sax.models.straight},
                          backend="filipsson_gunnar")
    opt = optax.adam(1e-2)

    def spectra(design, wl):
        kwargs = {}
        for r in range(rings):
            half = {"length": 25.0 * np.pi + design["delta_length"][r], "loss_dB_cm": 2.0}
            kappa = jax.nn.sigmoid(design["coupling_logit"][r])
            kwargs |= {f"r{r}arc1": half, f"r{r}arc2": half, f"r{r}a": {"coupling": kappa},
                       f"r{r}b": {"coupling": kappa}}
        s = bank(wl=wl, **kwargs)
        drops = jnp.stack([jnp.abs(s["in", f"drop{r}"]) ** 2 for r in range(rings)])
        return drops, jnp.abs(s["in", "thru"]) ** 2

    def loss_fn(design, wl, target_drops):
        drops, thru = spectra(design, wl)
        balance = jnp.mean(drops.sum(0) + thru - 1.0) ** 2  # power balance: low-loss rings
        return jnp.mean((drops - target_drops) ** 2) + 0.1 * balance

    def step(design, opt_state, wl, target_drops):
        return apply_grads(opt, loss_fn, design, opt_state, wl, target_drops)

    design = {"coupling_logit": f32(rings), "delta_length": f32(rings)}
    return step, (design, jax.eval_shape(opt.init, design), f32(wavelengths), f32(rings, wavelengths))

# --------------------------------------------------------------------------------------- diffopt


def _kcalc(stats, eval_kernels: int, eval_fourier: int):
    """A kdescent KCalc over pretrained training-data statistics `stats` (a dict of arrays, as
    `KPretrainer.save` writes them), the array fields being traced arguments."""
    from diffopt.kdescent import KCalc, KPretrainer

    pretrainer = KPretrainer(**stats, num_eval_kernels=eval_kernels, num_eval_fourier_positions=eval_fourier,
                             num_pretrain_kernels=stats["kernel_centers"].shape[0],
                             num_pretrain_fourier_positions=stats["fourier_positions"].shape[0],
                             bandwidth_factor=1.0, fourier_range_factor=1.0, covariant_kernels=False,
                             inverse_density_weight_power=0.0, training_sum_of_weights=10_000.0, seed=0)
    return KCalc(pretrainer)


def _kdescent_stats(ndim: int, pretrain: int):
    """Abstract pretrained statistics of `pretrain` kernels and as many Fourier positions."""
    return {"kernel_centers": f32(pretrain, ndim), "fourier_positions": f32(pretrain, ndim),
            "kernelcov": f32(ndim, ndim), "kde_counts": f32(pretrain), "kde_err": f32(pretrain),
            "fourier_counts": c64(pretrain), "fourier_err": c64(pretrain)}


def diffopt_kdescent_generator_step(samples: int, latent: int, ndim: int, hidden: int, pretrain: int,
                                    draws: int = 4):
    """Adam step of a generator MLP on randomised KDE and Fourier counts against training data (diffopt)."""
    import optax

    opt = optax.adam(3e-3)

    def step(params, opt_state, stats, z, key):
        kcalc = _kcalc(stats, 20 * ndim, 20 * ndim)

        def loss_fn(p):
            x = mlp(p, z, jax.nn.softplus)
            return jnp.mean(jax.vmap(lambda k: kcalc.reduced_chisq_loss(k, x))(jax.random.split(key, draws)))

        return apply_grads(opt, loss_fn, params, opt_state)

    params = shapes(mlp_init, (latent, hidden, hidden, ndim))
    return step, (params, jax.eval_shape(opt.init, params), _kdescent_stats(ndim, pretrain),
                  f32(samples, latent), KEY)


def diffopt_kdescent_selection_fit(samples: int, ndim: int, pretrain: int, steps: int, draws: int = 2):
    """Gaussian population under a soft selection cut, fitted by Adam in scan on kdescent counts (diffopt)."""
    import optax

    opt = optax.adam(optax.exponential_decay(5e-2, steps, 0.1))
    tril = np.tril_indices(ndim)

    def fit(model, stats, z, cut, key):
        kcalc = _kcalc(stats, 10 * ndim, 10 * ndim)

        def population(p):
            chol = jnp.zeros((ndim, ndim)).at[tril].set(p["chol"])
            chol = chol - jnp.diag(jnp.diag(chol)) + jnp.diag(jnp.exp(jnp.diag(chol)))
            x = p["mean"] + z @ chol.T
            return x, jax.nn.sigmoid((x[:, 0] - cut) / 0.1)  # differentiable selection weights

        def loss_fn(p, k):
            x, w = population(p)

            def one(kk):
                k1, k2 = jax.random.split(kk)
                model_k, truth_k, err_k = kcalc.compare_kde_counts(k1, x, weights=w, return_err=True)
                model_f, truth_f, err_f = kcalc.compare_fourier_counts(k2, x, weights=w, return_err=True)
                scale = kcalc.training_sum_of_weights / w.sum()
                chi_k = (scale * model_k - truth_k) / err_k
                chi_f = jnp.abs((scale * model_f - truth_f) / (jnp.abs(err_f) + 1e-6))
                return jnp.mean(chi_k**2) + jnp.mean(chi_f**2)

            return jnp.mean(jax.vmap(one)(jax.random.split(k, draws)))

        def body(carry, k):
            p, state = carry
            p, state, loss = apply_grads(opt, loss_fn, p, state, k)
            return (p, state), loss

        (model, _), losses = jax.lax.scan(body, (model, opt.init(model)), jax.random.split(key, steps))
        return model, losses

    model = {"mean": f32(ndim), "chol": f32(len(tril[0]))}
    return fit, (model, _kdescent_stats(ndim, pretrain), f32(samples, ndim), f32(), KEY)


# (builder, sizes) of each program measured
PROGRAMS = (
    (rejax_ppo_train_iteration, dict(env="CartPole-v1", num_envs=16, num_steps=64, epochs=4, minibatches=8)),
    (rejax_ppo_train_iteration, dict(env="Breakout-MinAtar", num_envs=64, num_steps=128, epochs=4,
                                     minibatches=8, hidden=256)),
    (rejax_dqn_train_iteration, dict(env="Acrobot-v1", num_envs=8, buffer_size=50_000, batch_size=128,
                                     epochs=2)),
    (rejax_sac_train_seeds, dict(seeds=4, total_timesteps=8192, eval_freq=2048, num_envs=4, batch_size=128)),
    (jaxwt_wavelet_denoise_batch, dict(batch=32, length=1024, level=5)),
    (jaxwt_wavelet_inpaint_fit, dict(batch=4, size=128, level=3, steps=100)),
    (jaxwt_packet_classifier_step, dict(batch=64, length=2048, level=5, hidden=128)),
    (signax_logsig_classifier_step, dict(batch=32, length=64, channels=3, lift=4, depth=3, hidden=64)),
    (signax_logsig_classifier_step, dict(batch=64, length=256, channels=8, lift=6, depth=4, hidden=128)),
    (signax_signature_mmd_test, dict(n=64, m=64, length=200, channels=3, depth=4, chunks=8,
                                     permutations=500)),
    (sax_mzi_lattice_sweep, dict(stages=6, wavelengths=501, settings=16)),
    (sax_ring_bank_fit_step, dict(rings=2, wavelengths=801)),
    (diffopt_kdescent_generator_step, dict(samples=4096, latent=4, ndim=3, hidden=64, pretrain=6000)),
    (diffopt_kdescent_selection_fit, dict(samples=8192, ndim=4, pretrain=8000, steps=200)),
)
# the pip package of each builder name's prefix
LIBRARIES = {"rejax": "rejax", "jaxwt": "jaxwt", "signax": "signax", "sax": "sax", "diffopt": "diffopt"}

OUTSIDE_FAMILIES = register_builders(PROGRAMS, "outside", libraries_by_prefix(PROGRAMS, LIBRARIES),
                                     prefix="outside_e1")
