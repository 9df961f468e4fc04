"""How well does the shipped CPU model predict programs built with public JAX libraries?

The programs call the libraries' own layers, solvers and optimizers, as their users write
them: Haiku's ResNet and LSTM (unrolled in Python and as a scan), Flax Linen attention
blocks (a Python loop of layers and the lifted `nn.scan` over them), a Flax NNX CNN
training step, Optax's gradient-clipped AdamW with a warm-up cosine schedule and its
L-BFGS with a zoom line search, Diffrax's adaptive Tsit5 neural ODE (and its gradient
through checkpointed while loops), Equinox's GRU scanned over a sequence, Optimistix's
Newton root find and BFGS, a NumPyro hierarchical logistic regression's potential energy
and gradient, and BlackJAX's NUTS step. No corpus family imports these libraries; none of
the code here existed when the model was trained.

Needs the bench extra (`pip install -e ".[libs]"`, versions pinned there). How the
programs are scored: `bench/evaluations/_scoring.py`.

    python bench/evaluations/library_programs.py [--rounds 3] [--only NAME ...] [--target h100] \\
        [--json out.json]
"""

from __future__ import annotations

import importlib.metadata

import jax
import jax.numpy as jnp
import numpy as np
from _scoring import arguments, f32, i32, run, selected

LIBRARIES = ("dm-haiku", "flax", "optax", "diffrax", "equinox", "optimistix", "numpyro",
             "blackjax")




def _classifier_loss(logits, labels):
    import optax

    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def haiku_resnet(depth: int, train_step: bool, batch: int = 8, image: int = 32):
    """Haiku's ResNet (`hk.nets`) on CIFAR-sized images: inference, or an SGD-momentum
    training step with batch-norm state."""
    import haiku as hk
    import optax

    net = {18: hk.nets.ResNet18, 50: hk.nets.ResNet50}[depth]
    model = hk.transform_with_state(
        lambda x, is_training: net(num_classes=10)(x, is_training=is_training))
    x = f32(batch, image, image, 3)
    params, state = jax.eval_shape(
        lambda: model.init(jax.random.key(0), jnp.zeros(x.shape), True))
    if not train_step:
        return (lambda p, s, x: model.apply(p, s, None, x, False)[0]), (params, state, x)
    optimizer = optax.sgd(0.1, momentum=0.9)

    def step(p, s, opt_state, x, labels):
        def loss(p):
            logits, new_state = model.apply(p, s, None, x, True)
            return _classifier_loss(logits, labels), new_state

        (value, new_state), grads = jax.value_and_grad(loss, has_aux=True)(p)
        updates, opt_state = optimizer.update(grads, opt_state, p)
        return optax.apply_updates(p, updates), new_state, opt_state, value

    return step, (params, state, jax.eval_shape(optimizer.init, params), x, i32(batch))


def haiku_lstm(steps: int, static: bool, hidden: int = 128, batch: int = 8):
    """Gradient of a sequence loss through Haiku's LSTM, unrolled in Python
    (`hk.static_unroll`) or as a scan (`hk.dynamic_unroll`)."""
    import haiku as hk

    unroll = hk.static_unroll if static else hk.dynamic_unroll

    def forward(xs):
        core = hk.LSTM(hidden)
        outputs, _ = unroll(core, xs, core.initial_state(batch))
        return hk.Linear(1)(outputs)

    model = hk.without_apply_rng(hk.transform(forward))
    xs = f32(steps, batch, 16)
    params = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros(xs.shape)))
    return jax.grad(lambda p, xs: jnp.mean(model.apply(p, xs) ** 2)), (params, xs)


def flax_encoder(layers: int, scan: bool, grad: bool, d: int = 128, seq: int = 128,
                 heads: int = 4):
    """Pre-norm transformer encoder from Flax Linen layers: attention, LayerNorm, Dense;
    layers as a Python loop or lifted `nn.scan` with stacked parameters."""
    import flax.linen as nn

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x, _):
            h = nn.LayerNorm()(x)
            x = x + nn.MultiHeadDotProductAttention(num_heads=heads)(h, h)
            h = nn.Dense(4 * d)(nn.LayerNorm()(x))
            return x + nn.Dense(d)(nn.gelu(h)), None

    class Encoder(nn.Module):
        @nn.compact
        def __call__(self, x):
            if scan:
                stack = nn.scan(Block, variable_axes={"params": 0},
                                split_rngs={"params": True}, length=layers)
                x, _ = stack()(x, None)
            else:
                for _ in range(layers):
                    x, _ = Block()(x, None)
            return nn.LayerNorm()(x)

    model = Encoder()
    x = f32(4, seq, d)
    params = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros(x.shape)))
    if not grad:
        return model.apply, (params, x)
    return jax.grad(lambda p, x: jnp.mean(model.apply(p, x) ** 2)), (params, x)


def nnx_cnn_step(batch: int = 32):
    """Flax NNX's MNIST CNN (conv, batch norm, dropout, pooling) and one AdamW step
    through `nnx.Optimizer`, split into a pure function of the graph state."""
    import optax
    from flax import nnx

    class CNN(nnx.Module):
        def __init__(self, rngs):
            self.conv1 = nnx.Conv(1, 32, kernel_size=(3, 3), rngs=rngs)
            self.bn1 = nnx.BatchNorm(32, rngs=rngs)
            self.conv2 = nnx.Conv(32, 64, kernel_size=(3, 3), rngs=rngs)
            self.bn2 = nnx.BatchNorm(64, rngs=rngs)
            self.dropout = nnx.Dropout(0.1, rngs=rngs)
            self.linear1 = nnx.Linear(7 * 7 * 64, 256, rngs=rngs)
            self.linear2 = nnx.Linear(256, 10, rngs=rngs)

        def __call__(self, x):
            x = nnx.avg_pool(nnx.relu(self.bn1(self.conv1(x))), (2, 2), (2, 2))
            x = nnx.avg_pool(nnx.relu(self.bn2(self.conv2(x))), (2, 2), (2, 2))
            x = self.dropout(nnx.relu(self.linear1(x.reshape(x.shape[0], -1))))
            return self.linear2(x)

    model = CNN(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
    graphdef, state = nnx.split((model, optimizer))

    def step(state, x, labels):
        model, optimizer = nnx.merge(graphdef, state)
        loss, grads = nnx.value_and_grad(lambda m: _classifier_loss(m(x), labels))(model)
        optimizer.update(model, grads)
        return loss, nnx.state((model, optimizer))

    return step, (state, f32(batch, 28, 28, 1), i32(batch))


def _transformer_shaped_params(layers: int = 12, d: int = 256):
    shapes = {"embed": (1000, d), "final_norm": (d,)}
    for i in range(layers):
        shapes |= {f"layer{i}/{name}": shape for name, shape in (
            ("qkv", (d, 3 * d)), ("out", (d, d)), ("up", (d, 4 * d)), ("down", (4 * d, d)),
            ("norm1", (d,)), ("norm2", (d,)))}
    return {name: f32(*shape) for name, shape in shapes.items()}


def optax_adamw_step():
    """Optax's usual recipe on a 12-layer transformer's parameters (74 leaves): clip by
    global norm, AdamW with a warm-up cosine schedule and a weight-decay mask."""
    import optax

    schedule = optax.warmup_cosine_decay_schedule(0.0, 3e-4, 1000, 100_000)
    optimizer = optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.adamw(schedule, weight_decay=0.1,
                    mask=lambda p: jax.tree.map(lambda leaf: leaf.ndim > 1, p)))
    params = _transformer_shaped_params()

    def step(params, opt_state, grads):
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    return step, (params, jax.eval_shape(optimizer.init, params), params)


def _rosenbrock(x):
    return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def optax_lbfgs(iterations: int = 20, dim: int = 32):
    """Optax's L-BFGS with its zoom line search (nested while loops), run for a fixed
    number of steps in a `fori_loop` as its documentation shows."""
    import optax

    optimizer = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(_rosenbrock)

    def minimize(x):
        def body(_, carry):
            x, state = carry
            value, grad = value_and_grad(x, state=state)
            updates, state = optimizer.update(grad, state, x, value=value, grad=grad,
                                              value_fn=_rosenbrock)
            return optax.apply_updates(x, updates), state

        return jax.lax.fori_loop(0, iterations, body, (x, optimizer.init(x)))[0]

    return minimize, (f32(dim),)


def diffrax_neural_ode(grad: bool, width: int = 64):
    """A neural ODE in Diffrax: an Equinox MLP vector field, adaptive Tsit5 with a PID
    step-size controller, 20 saved times; the gradient goes through Diffrax's default
    recursive-checkpoint adjoint."""
    import diffrax
    import equinox as eqx

    mlp = eqx.nn.MLP(4, 4, width, 2, activation=jnp.tanh, key=jax.random.key(0))
    params, static = eqx.partition(mlp, eqx.is_array)

    def solve(params, y0):
        field = eqx.combine(params, static)
        solution = diffrax.diffeqsolve(
            diffrax.ODETerm(lambda t, y, args: field(y)), diffrax.Tsit5(), t0=0.0, t1=1.0,
            dt0=0.05, y0=y0, saveat=diffrax.SaveAt(ts=jnp.linspace(0.0, 1.0, 20)),
            stepsize_controller=diffrax.PIDController(rtol=1e-4, atol=1e-6))
        return solution.ys

    if not grad:
        return solve, (params, f32(4))
    return jax.grad(lambda p, y0: jnp.sum(solve(p, y0) ** 2)), (params, f32(4))


def equinox_gru_grad(steps: int = 100, hidden: int = 128):
    """Gradient of a sequence loss through Equinox's `GRUCell` scanned over time."""
    import equinox as eqx

    cell = eqx.nn.GRUCell(32, hidden, key=jax.random.key(0))
    head = eqx.nn.Linear(hidden, 1, key=jax.random.key(1))
    model = (cell, head)
    params, static = eqx.partition(model, eqx.is_array)

    def loss(params, xs, targets):
        cell, head = eqx.combine(params, static)

        def step(h, x):
            h = cell(x, h)
            return h, head(h)[0]

        _, outputs = jax.lax.scan(step, jnp.zeros(hidden), xs)
        return jnp.mean((outputs - targets) ** 2)

    return jax.grad(loss), (params, f32(steps, 32), f32(steps))


def optimistix_newton(dim: int = 32):
    """Optimistix's Newton root find of a nonlinear system (Lineax solves inside a while
    loop)."""
    import optimistix as optx

    def residual(y, a):
        return a @ jnp.tanh(y) + y ** 3 - 1.0

    solver = optx.Newton(rtol=1e-6, atol=1e-6)
    return (lambda y0, a: optx.root_find(residual, solver, y0, a, throw=False).value,
            (f32(dim), f32(dim, dim)))


def optimistix_bfgs(dim: int = 32):
    """Optimistix's BFGS on the Rosenbrock function."""
    import optimistix as optx

    solver = optx.BFGS(rtol=1e-6, atol=1e-6)
    return (lambda y0: optx.minimise(lambda y, _: _rosenbrock(y), solver, y0,
                                     throw=False, max_steps=500).value, (f32(dim),))


def _logistic_model(x, y=None):
    import numpyro
    import numpyro.distributions as dist

    groups, features = 8, x.shape[-1]
    scale = numpyro.sample("scale", dist.HalfCauchy(1.0))
    mean = numpyro.sample("mean", dist.Normal(0.0, 1.0).expand([features]).to_event(1))
    with numpyro.plate("groups", groups):
        w = numpyro.sample("w", dist.Normal(mean, scale).to_event(1))
    bias = numpyro.sample("bias", dist.Normal(0.0, 5.0))
    logits = jnp.einsum("gnf,gf->gn", x, w) + bias
    numpyro.sample("y", dist.Bernoulli(logits=logits).to_event(2), obs=y)


def _logistic_data():
    x = jnp.asarray(np.random.default_rng(0).normal(size=(8, 64, 16)), jnp.float32)
    return x, (x[..., 0] > 0).astype(jnp.float32)


def numpyro_potential_grad():
    """A NumPyro hierarchical logistic regression (plates, constrained half-Cauchy scale):
    potential energy and its gradient in the unconstrained space NUTS samples."""
    from numpyro.infer.util import initialize_model

    x, y = _logistic_data()
    init = initialize_model(jax.random.key(0), _logistic_model, model_args=(x, y))
    return jax.value_and_grad(init.potential_fn), (init.param_info.z,)


def blackjax_nuts_step():
    """One BlackJAX NUTS transition (trajectory doubling in while loops) on the same
    NumPyro model's potential."""
    import blackjax
    from numpyro.infer.util import initialize_model

    x, y = _logistic_data()
    init = initialize_model(jax.random.key(0), _logistic_model, model_args=(x, y))
    z = init.param_info.z
    dim = sum(np.size(leaf) for leaf in jax.tree.leaves(z))
    nuts = blackjax.nuts(lambda z: -init.potential_fn(z), step_size=0.1,
                         inverse_mass_matrix=jnp.ones(dim))
    return nuts.step, (jax.random.key(1), nuts.init(z))


PROGRAMS = {
    "haiku resnet18": lambda: haiku_resnet(18, False),
    "haiku resnet18 train step": lambda: haiku_resnet(18, True),
    "haiku resnet50 train step": lambda: haiku_resnet(50, True),
    "haiku lstm static_unroll 64 grad": lambda: haiku_lstm(64, static=True),
    "haiku lstm dynamic_unroll 64 grad": lambda: haiku_lstm(64, static=False),
    "flax encoder 4 layers": lambda: flax_encoder(4, scan=False, grad=False),
    "flax encoder 4 layers grad": lambda: flax_encoder(4, scan=False, grad=True),
    "flax encoder 12 layers grad": lambda: flax_encoder(12, scan=False, grad=True),
    "flax encoder nn.scan 12 layers grad": lambda: flax_encoder(12, scan=True, grad=True),
    "nnx cnn adamw step": nnx_cnn_step,
    "optax adamw step": optax_adamw_step,
    "optax lbfgs 20 steps": optax_lbfgs,
    "diffrax neural ode": lambda: diffrax_neural_ode(False),
    "diffrax neural ode grad": lambda: diffrax_neural_ode(True),
    "equinox gru grad": equinox_gru_grad,
    "optimistix newton": optimistix_newton,
    "optimistix bfgs": optimistix_bfgs,
    "numpyro potential grad": numpyro_potential_grad,
    "blackjax nuts step": blackjax_nuts_step,
}


def main() -> None:
    args = arguments(__doc__.splitlines()[0])
    versions = {name: importlib.metadata.version(name) for name in LIBRARIES}
    print(", ".join(f"{name} {version}" for name, version in versions.items()))
    run(selected(PROGRAMS, args.only), args, {"libraries": versions})


if __name__ == "__main__":
    main()
