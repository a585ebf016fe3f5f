"""The epilogue's activations as JAX functions, and the whole epilogue by XLA.

The kernels apply a bias, an activation and a residual to their fp32 accumulator
(`jtblas.kernels.matmul.activated`); these are the same steps in jnp: the backward pass's
derivatives (`jtblas.ops`), and the epilogue where the kernel cannot apply it (an empty product,
a product sharded over K, whose bias is added once after the cross-device sum:
`jtblas.partitioning`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp


def _gelu_tanh(x: jax.Array) -> jax.Array:
    return jax.nn.gelu(x, approximate=True)


def _gelu(x: jax.Array) -> jax.Array:
    return jax.nn.gelu(x, approximate=False)


# `jtblas.config.ACTIVATIONS` as JAX functions.
ACTIVATION_FUNCTIONS = {"relu": jax.nn.relu, "gelu_tanh": _gelu_tanh, "gelu": _gelu, "silu": jax.nn.silu}


def epilogue_reference(product: jax.Array, *, bias: Any = None, activation: str = "",
                       residual: Any = None) -> jax.Array:
    """activation(product + bias) + residual in fp32 (the kernel's epilogue, by XLA): `bias`
    broadcasts against the product's last axis, `residual` has its shape."""
    out = product.astype(jnp.float32)
    if bias is not None:
        out = out + bias.astype(jnp.float32)
    if activation:
        out = ACTIVATION_FUNCTIONS[activation](out)
    if residual is not None:
        out = out + residual.astype(jnp.float32)
    return out
