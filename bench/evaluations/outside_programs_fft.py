"""FFT programs as users write them, outside every corpus family: a check of the TPU model on
FFTs after the `spectral` family joined its rows (that family's programs are FFT
convolutions, spectral PDE steps and Poisson solves; these are not). Each builder returns a
new function and abstract arguments; `OUTSIDE_FAMILIES` registers one family per builder
(prefix `outside_fft`), its grid the sizes measured.

- fno: a 2-D Fourier neural operator's Adam step (lift, four spectral layers keeping the
  lowest modes, project), as neural-operator code writes it with `jnp.fft.rfft2`.
- scipy: a learned FIR denoiser's SGD step through `jax.scipy.signal.fftconvolve` (whose
  transform length is the full convolution's, rarely a power of two).
- stft: an audio classifier's step on `jax.scipy.signal.stft` magnitudes (log, mean over
  time, an MLP).
- mri: unrolled k-space reconstruction, gradient steps on an image under a masked 2-D FFT
  with a total-variation term, in a `fori_loop`.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from costmodel.training.corpus.registry import libraries_by_prefix, register_builders, sds


def _adam(params, grads, state, step, lr=1e-3):
    m, v = state
    m = jax.tree.map(lambda a, g: 0.9 * a + 0.1 * g, m, grads)
    v = jax.tree.map(lambda a, g: 0.999 * a + 0.001 * g * g, v, grads)
    scale = lr * jnp.sqrt(1 - 0.999 ** step) / (1 - 0.9 ** step)
    params = jax.tree.map(lambda p, a, b: p - scale * a / (jnp.sqrt(b) + 1e-8), params, m, v)
    return params, (m, v)


def fno_train_step(grid: int, width: int, modes: int, batch: int = 8, layers: int = 4):
    """A 2-D Fourier neural operator's Adam step (lift, spectral layers, project)."""
    def spectral(x, w):  # x: (batch, grid, grid, width); w: (2, modes, modes, width, width)
        xh = jnp.fft.rfft2(x, axes=(1, 2))
        kept = xh[:, :modes, :modes, :]
        weights = w[0] + 1j * w[1]
        out = jnp.zeros(xh.shape, xh.dtype).at[:, :modes, :modes, :].set(
            jnp.einsum("bxyi,xyio->bxyo", kept, weights))
        return jnp.fft.irfft2(out, s=(grid, grid), axes=(1, 2))

    def forward(params, a):
        x = a[..., None] * params["lift"]
        for w, pointwise in zip(params["spectral"], params["pointwise"]):
            x = jax.nn.gelu(spectral(x, w) + x @ pointwise)
        return (x @ params["project"])[..., 0]

    def step(params, state, a, u, count):
        loss, grads = jax.value_and_grad(lambda p: jnp.mean((forward(p, a) - u) ** 2))(params)
        params, state = _adam(params, grads, state, count)
        return params, state, loss

    params = {"lift": sds((width,)), "project": sds((width, 1)),
              "spectral": tuple(sds((2, modes, modes, width, width)) for _ in range(layers)),
              "pointwise": tuple(sds((width, width)) for _ in range(layers))}
    return step, (params, (params, params), sds((batch, grid, grid)),
                  sds((batch, grid, grid)), sds(()))


def scipy_fft_denoiser_step(samples: int, taps: int, batch: int = 16):
    """A learned FIR denoiser's SGD step through `jax.scipy.signal.fftconvolve`."""
    from jax.scipy.signal import fftconvolve

    def loss(h, noisy, clean):
        out = jax.vmap(lambda x: fftconvolve(x, h, mode="same"))(noisy)
        return jnp.mean((out - clean) ** 2) + 1e-4 * jnp.sum(h ** 2)

    def step(h, noisy, clean):
        value, grad = jax.value_and_grad(loss)(h, noisy, clean)
        return h - 0.01 * grad, value
    return step, (sds((taps,)), sds((batch, samples)), sds((batch, samples)))


def stft_audio_classifier_step(samples: int, nperseg: int, batch: int = 8, classes: int = 10):
    """An audio classifier's SGD step on log STFT magnitudes averaged over time."""
    from jax.scipy.signal import stft

    def forward(params, audio):
        _, _, z = stft(audio, nperseg=nperseg)
        feats = jnp.log1p(jnp.abs(z)).mean(axis=-1)
        hidden = jnp.tanh(feats @ params["w1"] + params["b1"])
        return hidden @ params["w2"]

    def step(params, audio, labels):
        def loss(p):
            logits = forward(p, audio)
            return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], 1))
        value, grads = jax.value_and_grad(loss)(params)
        return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), value
    bins = nperseg // 2 + 1
    params = {"w1": sds((bins, 128)), "b1": sds((128,)), "w2": sds((128, classes))}
    return step, (params, sds((batch, samples)), sds((batch,), np.int32))


def mri_unrolled_recon(size: int, iterations: int, coils: int = 4):
    """Unrolled k-space reconstruction: gradient steps under masked 2-D FFTs and a TV term."""
    def recon(kspace_re, kspace_im, maps_re, maps_im, mask, step_size):
        kspace, maps = kspace_re + 1j * kspace_im, maps_re + 1j * maps_im

        def forward(image):
            return mask * jnp.fft.fft2(maps * image[None], norm="ortho")

        def tv_grad(image):
            def tv(img):
                dx = jnp.diff(img, axis=0)
                dy = jnp.diff(img, axis=1)
                return jnp.sum(jnp.sqrt(jnp.abs(dx[:, :-1]) ** 2 + jnp.abs(dy[:-1]) ** 2 + 1e-6))
            return jax.grad(lambda r, i: tv(r + 1j * i), argnums=(0, 1))(image.real, image.imag)

        def body(_, image):
            residual = forward(image) - kspace
            data = jnp.sum(jnp.conj(maps) * jnp.fft.ifft2(mask * residual, norm="ortho"), 0)
            gr, gi = tv_grad(image)
            return image - step_size * (data + 0.01 * (gr + 1j * gi))
        start = jnp.sum(jnp.conj(maps) * jnp.fft.ifft2(kspace, norm="ortho"), 0)
        return jnp.abs(jax.lax.fori_loop(0, iterations, body, start))
    shape = (coils, size, size)
    return recon, (sds(shape), sds(shape), sds(shape), sds(shape), sds((size, size)), sds(()))


PROGRAMS = (
    (fno_train_step, {"grid": 64, "width": 32, "modes": 12}),
    (fno_train_step, {"grid": 128, "width": 32, "modes": 16}),
    (scipy_fft_denoiser_step, {"samples": 4000, "taps": 129}),
    (scipy_fft_denoiser_step, {"samples": 22050, "taps": 513}),
    (stft_audio_classifier_step, {"samples": 16000, "nperseg": 256}),
    (stft_audio_classifier_step, {"samples": 48000, "nperseg": 1024}),
    (mri_unrolled_recon, {"size": 128, "iterations": 10}),
    (mri_unrolled_recon, {"size": 320, "iterations": 10}),
)
LIBRARIES = {"fno": "jax.numpy.fft", "scipy": "jax.scipy.signal", "stft": "jax.scipy.signal",
             "mri": "jax.numpy.fft"}
OUTSIDE_FAMILIES = register_builders(PROGRAMS, "outside", libraries_by_prefix(PROGRAMS, LIBRARIES),
                                     prefix="outside_fft")
