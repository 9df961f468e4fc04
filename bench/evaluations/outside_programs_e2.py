"""A fifth suite of outside programs, second part: built with public JAX libraries that no
corpus family, other bench or training row uses, as their users write them. As in
`bench/evaluations/outside_programs_d2.py`, each builder returns a new function and abstract
arguments (parameters, optimizer states, catalogues, images, keys and data are arguments, not
captured constants); `OUTSIDE_FAMILIES` registers one family per builder (prefix `outside_e2`),
its grid the sizes measured.

- jax-galsim: bulge + disk galaxies sheared, offset and convolved with a sheared Moffat PSF,
  rendered into noisy postage-stamp batches; a per-galaxy fit of flux, size, shear and centroid
  by Adam steps on the chi-square of rendered stamps (in a scan); autodiff metacalibration (an
  interpolated galaxy image, the interpolated PSF deconvolved, sheared, reconvolved) with the
  shear response of weighted-moment ellipticities by forward-mode differentiation.
- distreqx: a normalizing flow of user-written affine coupling bijectors, element-wise affine
  (ActNorm-like) blocks and triangular linear mixing, trained by maximum likelihood; a mixture
  density network (a mixture of diagonal Gaussians per input); a VAE with a diagonal-Gaussian
  posterior, a Bernoulli likelihood and the analytic KL to the prior.
- quax: LoRA fine-tuning of a pretrained MLP regressor and of a causal transformer language
  model written in equinox, their Linear layers wrapped by `quax.lora.loraify` and only the
  low-rank factors trained; a graph convolutional network whose normalised adjacency is a
  user-defined quax array type (weighted edges, a registered `dot_general` rule as a segment
  sum) in a semi-supervised train step.
- jaxsnn: a recurrent leaky-integrate-and-fire network (discrete time, SuperSpike surrogate
  gradients) on spatio-temporally encoded inputs, max-over-time decoded, with a firing-rate
  penalty; event-based time-to-first-spike networks trained on first-spike times, by the
  analytical gradient and by EventProp.

Networks are equinox modules where the library builds on equinox (distreqx, quax), plain
jax.numpy parameters otherwise; optax supplies optimizers. Equinox modules travel as their
abstract array leaves; the static rest (module structure, flags) is built outside the trace.
jax-galsim needs its FFT size fixed (GSParams with equal minimum and maximum FFT sizes) to be
traced, and jaxsnn's network topologies are built outside the trace (both as their users do).
jax-galsim checks shears and image bounds with Equinox runtime checks, which put host callbacks
in error branches (none with EQX_ON_ERROR=nan, as the TPU benches set).
Left out: jax-sph (every release requires Python <=3.11, which excludes 3.11.7, and pins
jax==0.4.29), sbijax 0.3.4 (its import fails on this jax: `from jax import tree_map`), cola-ml
(its `plum` fork, cola-plum-dispatch, overwrites the `plum` package of plum-dispatch that quax
needs, which breaks quax; operator addition failed with an ambiguous dispatch), jax-fem (imports
petsc4py, gmsh, basix, meshio and pyfiglet it does not declare, and its Newton solver is a Python
loop on concrete residuals, not traceable).
"""
# no `from __future__ import annotations`: quax (plum, beartype) resolves the annotations of the
# rules it registers, and a string naming a type defined inside a builder does not resolve
import functools

import jax
import jax.numpy as jnp
from _outside_common import KEY, apply_grads, f32, i32, mlp_init, shapes, train

from costmodel.training.corpus.registry import libraries_by_prefix, register_builders


def _eqx_abstract(make, *args):
    """(abstract array leaves, static rest) of the equinox module `make(*args)`, never built."""
    import equinox as eqx

    module = eqx.filter_eval_shape(make, *args)
    return eqx.partition(module, lambda x: isinstance(x, jax.ShapeDtypeStruct))


# ------------------------------------------------------------------------------------ jax-galsim


def _fixed_fft(fft_size: int):
    """GSParams fixing the FFT size, so that drawing needs no concrete profile sizes."""
    import jax_galsim as galsim

    return galsim.GSParams(minimum_fft_size=fft_size, maximum_fft_size=fft_size)


def jaxgalsim_psf_convolved_stamps(galaxies: int, stamp: int, fft_size: int, scale: float = 0.2):
    """Bulge + disk galaxies sheared and convolved with a Moffat PSF, noisy stamp batches (jax-galsim)."""
    import jax_galsim as galsim

    gsp = _fixed_fft(fft_size)

    def draw(gal):
        bulge = galsim.Spergel(nu=-0.6, half_light_radius=gal["bulge_hlr"], flux=gal["bulge_flux"],
                               gsparams=gsp)
        disk = galsim.Exponential(half_light_radius=gal["disk_hlr"], flux=gal["disk_flux"], gsparams=gsp)
        profile = galsim.Add([bulge, disk], gsparams=gsp).shear(g1=gal["g"][0], g2=gal["g"][1])
        psf = galsim.Moffat(beta=2.5, fwhm=gal["psf_fwhm"], gsparams=gsp).shear(
            g1=gal["psf_g"][0], g2=gal["psf_g"][1])
        image = galsim.Convolve([profile, psf], gsparams=gsp).drawImage(
            nx=stamp, ny=stamp, scale=scale, offset=(gal["offset"][0], gal["offset"][1]))
        return image.array

    def render(catalogue, noise_sigma, key):
        clean = jax.vmap(draw)(catalogue)
        noisy = clean + noise_sigma * jax.random.normal(key, clean.shape)
        snr = jnp.sqrt(jnp.sum(clean**2, axis=(1, 2))) / noise_sigma
        return noisy, snr

    n = galaxies
    catalogue = {"bulge_flux": f32(n), "disk_flux": f32(n), "bulge_hlr": f32(n), "disk_hlr": f32(n),
                 "g": f32(n, 2), "psf_fwhm": f32(n), "psf_g": f32(n, 2), "offset": f32(n, 2)}
    return render, (catalogue, f32(), KEY)


def jaxgalsim_profile_fit(galaxies: int, stamp: int, fft_size: int, steps: int, scale: float = 0.2):
    """Adam fit of flux, size, shear, centroid of PSF-convolved exponential profiles (jax-galsim)."""
    import jax_galsim as galsim
    import optax

    gsp = _fixed_fft(fft_size)
    opt = optax.adam(2e-2)

    def model(p, psf_fwhm):
        g = 0.9 * jnp.tanh(p["shear"])
        gal = galsim.Exponential(half_light_radius=jnp.exp(p["log_hlr"]), flux=jnp.exp(p["log_flux"]),
                                 gsparams=gsp).shear(g1=g[0], g2=g[1])
        psf = galsim.Moffat(beta=3.0, fwhm=psf_fwhm, gsparams=gsp)
        return galsim.Convolve([gal, psf], gsparams=gsp).drawImage(
            nx=stamp, ny=stamp, scale=scale, offset=(p["offset"][0], p["offset"][1])).array

    def chi2(params, stamps, weights, psf_fwhm):
        rendered = jax.vmap(model)(params, psf_fwhm)
        return 0.5 * jnp.sum(weights * (rendered - stamps) ** 2) / stamps.shape[0]

    def fit(params, stamps, weights, psf_fwhm):
        def step(carry, _):
            params, opt_state = carry
            params, opt_state, loss = apply_grads(opt, chi2, params, opt_state, stamps, weights, psf_fwhm)
            return (params, opt_state), loss

        (params, _), losses = jax.lax.scan(step, (params, opt.init(params)), None, length=steps)
        return params, 0.9 * jnp.tanh(params["shear"]), losses

    n = galaxies
    params = {"log_flux": f32(n), "log_hlr": f32(n), "shear": f32(n, 2), "offset": f32(n, 2)}
    return fit, (params, f32(n, stamp, stamp), f32(n, stamp, stamp), f32(n))


def jaxgalsim_metacal_response(galaxies: int, stamp: int, fft_size: int, scale: float = 0.2,
                               interpolant: str = "lanczos5"):
    """Metacalibration: deconvolve the PSF, shear, reconvolve, shear response by jacfwd (jax-galsim)."""
    import jax_galsim as galsim

    gsp = _fixed_fft(fft_size)

    def metacal_image(image, psf_image, reconv_fwhm, shear):
        galaxy = galsim.InterpolatedImage(galsim.ImageF(image, scale=scale), x_interpolant=interpolant,
                                          gsparams=gsp)
        psf = galsim.InterpolatedImage(galsim.ImageF(psf_image, scale=scale), x_interpolant=interpolant,
                                       gsparams=gsp)
        intrinsic = galsim.Convolve([galaxy, galsim.Deconvolve(psf, gsparams=gsp)], gsparams=gsp)
        sheared = intrinsic.shear(g1=shear[0], g2=shear[1])
        reconv = galsim.Gaussian(fwhm=reconv_fwhm, gsparams=gsp)
        return galsim.Convolve([sheared, reconv], gsparams=gsp).drawImage(
            nx=stamp, ny=stamp, scale=scale, method="no_pixel").array

    def ellipticity(image, weight_sigma):
        y, x = (jnp.mgrid[:stamp, :stamp] - (stamp - 1) / 2.0) * scale
        w = image * jnp.exp(-(x**2 + y**2) / (2.0 * weight_sigma**2))
        qxx, qyy, qxy = jnp.sum(w * x * x), jnp.sum(w * y * y), jnp.sum(w * x * y)
        return jnp.stack([qxx - qyy, 2.0 * qxy]) / (qxx + qyy)

    def one(image, psf_image, reconv_fwhm, weight_sigma):
        def measure(shear):
            e = ellipticity(metacal_image(image, psf_image, reconv_fwhm, shear), weight_sigma)
            return e, e

        response, e = jax.jacfwd(measure, has_aux=True)(jnp.zeros(2))
        return e, response

    def run(images, psf_image, reconv_fwhm, weight_sigma):
        e, response = jax.vmap(one, in_axes=(0, None, None, None))(images, psf_image, reconv_fwhm,
                                                                   weight_sigma)
        # the ensemble shear estimate: mean ellipticity through the mean response
        return e, response, jnp.linalg.solve(response.mean(0), e.mean(0))

    return run, (f32(galaxies, stamp, stamp), f32(stamp, stamp), f32(), f32())


# -------------------------------------------------------------------------------------- distreqx


def _affine_coupling():
    """An affine coupling bijector on alternate coordinates, its scale and shift from an MLP."""
    import distreqx.bijectors as dxb
    import equinox as eqx

    class AffineCoupling(dxb.AbstractForwardInverseBijector, dxb.AbstractFwdLogDetJacBijector,
                         dxb.AbstractInvLogDetJacBijector, strict=True):
        conditioner: eqx.nn.MLP
        parity: int = eqx.field(static=True)
        _is_constant_jacobian: bool = eqx.field(static=True)
        _is_constant_log_det: bool = eqx.field(static=True)

        def __init__(self, dims, hidden, parity, key):
            self.conditioner = eqx.nn.MLP(dims, 2 * dims, hidden, 2, activation=jax.nn.gelu, key=key)
            self.parity = parity
            self._is_constant_jacobian = False
            self._is_constant_log_det = False

        def _shift_log_scale(self, x):
            fixed = (jnp.arange(x.shape[-1]) % 2 == self.parity).astype(x.dtype)
            shift, log_scale = jnp.split(self.conditioner(x * fixed), 2)
            return shift * (1.0 - fixed), jnp.tanh(log_scale) * (1.0 - fixed)

        def forward_and_log_det(self, x):
            shift, log_scale = self._shift_log_scale(x)
            return x * jnp.exp(log_scale) + shift, jnp.sum(log_scale)

        def inverse_and_log_det(self, y):
            shift, log_scale = self._shift_log_scale(y)
            return (y - shift) * jnp.exp(-log_scale), -jnp.sum(log_scale)

        def same_as(self, other):
            return other is self

    return AffineCoupling


def distreqx_coupling_flow_step(dims: int, layers: int, hidden: int, batch: int):
    """Maximum-likelihood Adam step of a coupling + ActNorm + triangular-linear flow (distreqx)."""
    import distreqx.bijectors as dxb
    import distreqx.distributions as dxd
    import equinox as eqx
    import optax

    coupling = _affine_coupling()

    def make(key):
        bijectors = []
        for i, k in enumerate(jax.random.split(key, layers)):
            bijectors += [coupling(dims, hidden, i % 2, k),
                          dxb.Block(dxb.ScalarAffine(jnp.zeros(dims), log_scale=jnp.zeros(dims)), ndims=1),
                          dxb.TriangularLinear(jnp.eye(dims), is_lower=i % 2 == 0)]
        return dxb.Chain(bijectors)

    params, static = _eqx_abstract(make, jax.random.PRNGKey(0))

    def neg_log_likelihood(params, x):
        base = dxd.MultivariateNormalDiag(jnp.zeros(dims), jnp.ones(dims))
        flow = dxd.Transformed(base, eqx.combine(params, static))
        return -jnp.mean(jax.vmap(flow.log_prob)(x))

    update, state = train(optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3)),
                          neg_log_likelihood, params)
    return update, (*state, f32(batch, dims))


def distreqx_mixture_density_step(inputs: int, outputs: int, components: int, hidden: int, batch: int):
    """Mixture density network: an MLP to a mixture of diagonal Gaussians, NLL Adam step (distreqx)."""
    import distreqx.distributions as dxd
    import equinox as eqx
    import optax

    k, d = components, outputs
    params, static = _eqx_abstract(
        lambda key: eqx.nn.MLP(inputs, k + 2 * k * d, hidden, 3, activation=jax.nn.silu, key=key),
        jax.random.PRNGKey(0))

    def conditional(net, x):
        out = net(x)
        logits, loc, raw_scale = out[:k], out[k:k + k * d].reshape(k, d), out[k + k * d:].reshape(k, d)
        gaussians = eqx.filter_vmap(dxd.MultivariateNormalDiag)(loc, jax.nn.softplus(raw_scale) + 1e-3)
        return dxd.MixtureSameFamily(dxd.Categorical(logits=logits), gaussians)

    def nll(params, x, y):
        net = eqx.combine(params, static)
        return -jnp.mean(jax.vmap(lambda xi, yi: conditional(net, xi).log_prob(yi))(x, y))

    opt = optax.adamw(1e-3, weight_decay=1e-4)

    def step(params, opt_state, x, y, x_test, key):
        params, opt_state, loss = apply_grads(opt, nll, params, opt_state, x, y)
        net = eqx.combine(params, static)
        draws = jax.vmap(lambda xi, ki: conditional(net, xi).sample(ki))(
            x_test, jax.random.split(key, x_test.shape[0]))
        return params, opt_state, loss, draws

    return step, (params, jax.eval_shape(opt.init, params), f32(batch, inputs), f32(batch, outputs),
                  f32(batch, inputs), KEY)


def distreqx_vae_step(pixels: int, latent: int, hidden: int, batch: int):
    """VAE: Gaussian posterior, Bernoulli likelihood, analytic KL to the prior, ELBO Adam step (distreqx)."""
    import distreqx.distributions as dxd
    import equinox as eqx
    import optax

    def make(key):
        k1, k2 = jax.random.split(key)
        return (eqx.nn.MLP(pixels, 2 * latent, hidden, 2, activation=jax.nn.relu, key=k1),
                eqx.nn.MLP(latent, pixels, hidden, 2, activation=jax.nn.relu, key=k2))

    params, static = _eqx_abstract(make, jax.random.PRNGKey(0))

    def neg_elbo(params, x, key):
        encoder, decoder = eqx.combine(params, static)
        prior = dxd.MultivariateNormalDiag(jnp.zeros(latent), jnp.ones(latent))

        def one(xi, ki):
            h = encoder(xi)
            posterior = dxd.MultivariateNormalDiag(h[:latent], jax.nn.softplus(h[latent:]) + 1e-4)
            z = posterior.sample(ki)
            likelihood = dxd.Independent(dxd.Bernoulli(logits=decoder(z)))
            return likelihood.log_prob(xi) - posterior.kl_divergence(prior)

        return -jnp.mean(jax.vmap(one)(x, jax.random.split(key, x.shape[0])))

    update, state = train(optax.adam(1e-3), neg_elbo, params)
    return update, (*state, f32(batch, pixels), KEY)


# ------------------------------------------------------------------------------------------ quax


def _lm(vocab: int, dim: int, heads: int, layers: int, seq: int):
    """A pre-norm causal transformer language model in equinox (its constructor)."""
    import equinox as eqx

    class Block(eqx.Module):
        norm1: eqx.nn.LayerNorm
        attention: eqx.nn.MultiheadAttention
        norm2: eqx.nn.LayerNorm
        up: eqx.nn.Linear
        down: eqx.nn.Linear

        def __init__(self, key):
            k1, k2, k3 = jax.random.split(key, 3)
            self.norm1, self.norm2 = eqx.nn.LayerNorm(dim), eqx.nn.LayerNorm(dim)
            self.attention = eqx.nn.MultiheadAttention(heads, dim, key=k1)
            self.up, self.down = eqx.nn.Linear(dim, 4 * dim, key=k2), eqx.nn.Linear(4 * dim, dim, key=k3)

        def __call__(self, x, mask):
            h = jax.vmap(self.norm1)(x)
            x = x + self.attention(h, h, h, mask=mask)
            h = jax.vmap(self.norm2)(x)
            return x + jax.vmap(lambda v: self.down(jax.nn.gelu(self.up(v))))(h)

    class LanguageModel(eqx.Module):
        embedding: eqx.nn.Embedding
        positions: jax.Array
        blocks: list
        norm: eqx.nn.LayerNorm
        unembed: eqx.nn.Linear

        def __init__(self, key):
            keys = jax.random.split(key, layers + 3)
            self.embedding = eqx.nn.Embedding(vocab, dim, key=keys[0])
            self.positions = 0.02 * jax.random.normal(keys[1], (seq, dim))
            self.blocks = [Block(k) for k in keys[3:]]
            self.norm = eqx.nn.LayerNorm(dim)
            self.unembed = eqx.nn.Linear(dim, vocab, use_bias=False, key=keys[2])

        def __call__(self, tokens):
            x = jax.vmap(self.embedding)(tokens) + self.positions[: tokens.shape[0]]
            causal = jnp.tril(jnp.ones((tokens.shape[0], tokens.shape[0]), bool))
            for block in self.blocks:
                x = block(x, causal)
            return jax.vmap(lambda v: self.unembed(self.norm(v)))(x)

    return LanguageModel


def _lora_factors(arrays):
    """(low-rank factors of every LoraArray, every other array leaf) of a loraified model."""
    import equinox as eqx
    from quax.examples.lora import LoraArray

    def is_lora(x):
        return isinstance(x, LoraArray)

    def factors_only(x):
        if not is_lora(x):
            return False
        return eqx.tree_at(lambda m: (m.a, m.b), jax.tree.map(lambda _: False, x), (True, True))

    return eqx.partition(arrays, jax.tree.map(factors_only, arrays, is_leaf=is_lora))


def quax_lora_mlp_step(inputs: int, width: int, depth: int, outputs: int, rank: int, batch: int):
    """LoRA fine-tuning step of a pretrained equinox MLP regressor, low-rank factors trained (quax)."""
    import equinox as eqx
    import optax
    import quax

    def make(key):
        k1, k2 = jax.random.split(key)
        mlp = eqx.nn.MLP(inputs, outputs, width, depth, activation=jax.nn.softplus, key=k1)
        return quax.lora.loraify(mlp, rank=rank, key=k2)

    arrays, static = _eqx_abstract(make, jax.random.PRNGKey(0))
    lora, frozen = _lora_factors(arrays)

    def loss(lora, frozen, x, y):
        model = quax.quaxify(eqx.combine(lora, frozen, static))
        return jnp.mean((jax.vmap(model)(x) - y) ** 2)

    update, state = train(optax.adam(1e-3), loss, lora)
    return update, (*state, frozen, f32(batch, inputs), f32(batch, outputs))


def quax_lora_transformer_step(vocab: int, dim: int, heads: int, layers: int, seq: int, batch: int,
                               rank: int):
    """LoRA fine-tuning step of a causal transformer LM, Linear weights as LoraArrays, quaxified (quax)."""
    import equinox as eqx
    import optax
    import quax

    model_cls = _lm(vocab, dim, heads, layers, seq)

    def make(key):
        k1, k2 = jax.random.split(key)
        return quax.lora.loraify(model_cls(k1), rank=rank, key=k2)

    arrays, static = _eqx_abstract(make, jax.random.PRNGKey(0))
    # the low-rank factors train; the pretrained weights, norms and embeddings stay frozen
    lora, frozen = _lora_factors(arrays)
    opt = optax.adamw(optax.warmup_cosine_decay_schedule(0.0, 3e-4, 100, 10_000), weight_decay=0.01)

    def loss(lora, frozen, tokens):
        model = quax.quaxify(eqx.combine(lora, frozen, static))
        logits = jax.vmap(model)(tokens[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    def step(lora, opt_state, frozen, tokens):
        return apply_grads(opt, loss, lora, opt_state, frozen, tokens)

    return step, (lora, jax.eval_shape(opt.init, lora), frozen, i32(batch, seq + 1))


@functools.cache
def _edge_adjacency():
    """A quax array type: a (nodes x nodes) matrix held as weighted edges, with a
    `dot_general` rule (matrix @ dense) as a gather and a segment sum."""
    import equinox as eqx
    import quax
    from jaxtyping import ArrayLike

    class EdgeAdjacency(quax.ArrayValue):
        weights: jax.Array
        senders: jax.Array
        receivers: jax.Array
        nodes: int = eqx.field(static=True)

        def aval(self):
            return jax.core.ShapedArray((self.nodes, self.nodes), self.weights.dtype)

        def materialise(self):
            raise RuntimeError("EdgeAdjacency is never materialised")

    @quax.register(jax.lax.dot_general_p)
    def _(lhs: EdgeAdjacency, rhs: ArrayLike, *, dimension_numbers, **params):
        (contract_lhs, contract_rhs), batch = dimension_numbers
        if tuple(contract_lhs) != (1,) or tuple(contract_rhs) != (0,) or batch != ((), ()):
            raise NotImplementedError("only adjacency @ features")
        messages = lhs.weights[:, None] * rhs[lhs.senders]
        return jax.ops.segment_sum(messages, lhs.receivers, num_segments=lhs.nodes)

    return EdgeAdjacency


def quax_sparse_gcn_step(nodes: int, edges: int, features: int, hidden: int, classes: int, layers: int):
    """Semi-supervised GCN Adam step, normalised adjacency as a user-defined sparse quax array (quax)."""
    import optax
    import quax

    adjacency_type = _edge_adjacency()

    def normalised_adjacency(senders, receivers):
        # symmetric normalisation with self loops: D^-1/2 (A + I) D^-1/2
        loops = jnp.arange(nodes)
        senders, receivers = jnp.concatenate([senders, loops]), jnp.concatenate([receivers, loops])
        degree = jax.ops.segment_sum(jnp.ones_like(receivers, jnp.float32), receivers, num_segments=nodes)
        weights = jax.lax.rsqrt(degree[senders] * degree[receivers])
        return adjacency_type(weights, senders, receivers, nodes)

    def gcn(params, adjacency, x):
        for layer in params[:-1]:
            x = jax.nn.relu(adjacency @ (x @ layer["w"]) + layer["b"])
        return adjacency @ (x @ params[-1]["w"]) + params[-1]["b"]

    def loss(params, senders, receivers, x, labels, train_mask):
        adjacency = normalised_adjacency(senders, receivers)
        logits = quax.quaxify(gcn)(params, adjacency, x)
        per_node = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
        l2 = sum(jnp.sum(layer["w"] ** 2) for layer in params)
        return jnp.sum(per_node * train_mask) / jnp.maximum(train_mask.sum(), 1.0) + 5e-4 * l2

    params = shapes(mlp_init, (features, *(hidden,) * (layers - 1), classes))
    update, state = train(optax.adam(1e-2), loss, params)
    return update, (*state, i32(edges), i32(edges), f32(nodes, features), i32(nodes), f32(nodes))


# ---------------------------------------------------------------------------------------- jaxsnn


def jaxsnn_recurrent_lif_step(inputs: int, hidden: int, classes: int, time_steps: int, batch: int):
    """Recurrent LIF network, SuperSpike surrogate gradients, encoded inputs, Adam step (jaxsnn)."""
    import optax
    from jaxsnn.discrete.decode import max_over_time_decode
    from jaxsnn.discrete.encode import spatio_temporal_encode
    from jaxsnn.discrete.functional import LIFParameters, LIParameters
    from jaxsnn.discrete.loss import nll_loss
    from jaxsnn.discrete.modules import LI, LIF, Input, Linear
    from jaxsnn.discrete.topology import Topology

    dt, tau_syn, tau_mem = 5e-4, 5e-3, 1e-2
    network = Topology(dt=dt)
    network.add({"in": Input(inputs),
                 "hidden": LIF(hidden, LIFParameters(tau_syn=tau_syn, tau_mem=tau_mem, v_th=0.6)),
                 "readout": LI(classes, LIParameters(tau_syn=tau_syn, tau_mem=tau_mem)),
                 "w_in": Linear(mean=0.0, std=0.7), "w_rec": Linear(mean=0.0, std=0.2),
                 "w_out": Linear(mean=0.0, std=0.2)})
    network.connect([("in", "w_in"), ("w_in", "hidden"), ("hidden", "w_rec"), ("w_rec", "hidden"),
                     ("hidden", "w_out"), ("w_out", "readout")])
    init, apply = network.done()
    t_late = time_steps * dt / 2.0

    def loss(params, x, labels):
        spikes = jax.vmap(spatio_temporal_encode, in_axes=(0, None, None, None))(x, time_steps, t_late, dt)
        _, outputs = jax.vmap(apply, in_axes=(0, None))({"in": spikes}, params)
        log_probs = jax.vmap(max_over_time_decode)(outputs["readout"])
        rates = outputs["hidden"].sum(1).mean(0)
        return nll_loss(log_probs, labels) + 1e-4 * jnp.sum((rates - 2.0) ** 2)

    update, state = train(optax.adam(optax.exponential_decay(1e-3, 100, 0.98)), loss, shapes(init))
    return update, (*state, f32(batch, inputs), i32(batch))


def jaxsnn_ttfs_step(inputs: int, hidden: int, classes: int, hidden_spikes: int, batch: int,
                     backprop: str = "analytical"):
    """Event-based LIF network trained on first-spike times (analytical or EventProp grads) (jaxsnn)."""
    import optax
    from jaxsnn.event.encode import spatio_temporal_encode, target_temporal_encode
    from jaxsnn.event.loss import first_spike, mse_loss
    from jaxsnn.event.modules import LIF, LIFParameters, Linear, Source
    from jaxsnn.event.topology import Topology

    tau_syn, tau_mem = 5e-3, 1e-2
    # a very low reset: each neuron spikes at most once
    neuron = LIFParameters(v_reset=-1000.0, v_th=1.0, tau_syn=tau_syn, tau_mem=tau_mem)
    network = Topology(t_max=4.0 * tau_syn, backprop_method=backprop)
    network.add({"in": Source(inputs), "hidden": LIF(hidden, hidden_spikes, neuron),
                 "out": LIF(classes, classes, neuron),
                 "w1": Linear(mean=3.0, std=1.6), "w2": Linear(mean=0.5, std=0.8)})
    network.connect([("in", "w1"), ("w1", "hidden"), ("hidden", "w2"), ("w2", "out")])
    init, apply = network.done()

    def loss(params, x, labels):
        encode = jax.vmap(spatio_temporal_encode, in_axes=(0, None, None, None))
        spikes = encode(x, 2.0 * tau_syn, None, False)
        targets = jax.vmap(target_temporal_encode, in_axes=(0, None, None, None))(
            labels, 0.5 * tau_mem, 1.5 * tau_mem, classes)
        events = apply({"in": spikes}, params)
        first = jax.vmap(first_spike, in_axes=(0, None))(events["out"], classes)
        return jnp.mean(jax.vmap(mse_loss, in_axes=(0, 0, None))(first, targets, tau_mem))

    opt = optax.chain(optax.scale(1.0 / tau_syn), optax.clip(0.01), optax.adam(3e-3))
    update, state = train(opt, loss, shapes(init))
    return update, (*state, f32(batch, inputs), i32(batch))


# (builder, sizes) of each program measured
PROGRAMS = (
    (jaxgalsim_psf_convolved_stamps, dict(galaxies=16, stamp=32, fft_size=64)),
    (jaxgalsim_psf_convolved_stamps, dict(galaxies=64, stamp=64, fft_size=256)),
    (jaxgalsim_profile_fit, dict(galaxies=16, stamp=32, fft_size=128, steps=50)),
    (jaxgalsim_metacal_response, dict(galaxies=8, stamp=32, fft_size=128)),
    (distreqx_coupling_flow_step, dict(dims=8, layers=4, hidden=64, batch=256)),
    (distreqx_coupling_flow_step, dict(dims=64, layers=32, hidden=512, batch=512)),
    (distreqx_mixture_density_step, dict(inputs=4, outputs=2, components=8, hidden=64, batch=256)),
    (distreqx_vae_step, dict(pixels=784, latent=16, hidden=512, batch=128)),
    (quax_lora_mlp_step, dict(inputs=16, width=256, depth=3, outputs=4, rank=8, batch=128)),
    (quax_lora_transformer_step, dict(vocab=8192, dim=256, heads=8, layers=16, seq=128, batch=8, rank=16)),
    (quax_sparse_gcn_step, dict(nodes=2708, edges=10556, features=1433, hidden=64, classes=7, layers=2)),
    (jaxsnn_recurrent_lif_step, dict(inputs=5, hidden=120, classes=3, time_steps=100, batch=64)),
    (jaxsnn_ttfs_step, dict(inputs=5, hidden=60, classes=3, hidden_spikes=20, batch=32)),
    (jaxsnn_ttfs_step, dict(inputs=16, hidden=200, classes=10, hidden_spikes=60, batch=64,
                            backprop="eventprop")),
)
# the pip package of each builder name's prefix
LIBRARIES = {"jaxgalsim": "jax-galsim", "distreqx": "distreqx", "quax": "quax", "jaxsnn": "jaxsnn"}

OUTSIDE_FAMILIES = register_builders(PROGRAMS, "outside", libraries_by_prefix(PROGRAMS, LIBRARIES),
                                     prefix="outside_e2")
