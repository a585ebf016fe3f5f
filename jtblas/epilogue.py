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


def activated(product: jax.Array, activation: str = "", gated: bool = False) -> jax.Array:
    """The activation of `product` ("" leaves it); `gated`: the last axis holds a gate's N/2
    columns then an up projection's N/2, and the result is activation(gate) · up, N/2 wide."""
    if gated:
        gate, up = jnp.split(product, 2, axis=-1)
        return activated(gate, activation) * up
    return ACTIVATION_FUNCTIONS[activation](product) if activation else product


def epilogue_reference(product: jax.Array, *, bias: Any = None, activation: str = "",
                       residual: Any = None, gated: bool = False) -> jax.Array:
    """activation(product + bias) + residual in fp32 (the kernel's epilogue, by XLA): `bias`
    broadcasts against the product's last axis, `residual` has the result's shape; `gated` as in
    `activated`."""
    out = product.astype(jnp.float32)
    if bias is not None:
        out = out + bias.astype(jnp.float32)
    out = activated(out, activation, gated)
    if residual is not None:
        out = out + residual.astype(jnp.float32)
    return out
