"""costmodel: predict XLA compile time and memory of JAX programs before compiling."""

__version__ = "0.1.0"
