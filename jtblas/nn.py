"""Flax layers whose products run on jtblas: `Dense` (flax.linen) and `Linear` (flax.nnx).

Each subclasses Flax's own layer and only changes the default `dot_general` to
`jtblas.dot_general`, so class names, arguments, defaults, parameter names and shapes are
Flax's: checkpoints move between `flax.linen.Dense` and `jtblas.nn.Dense` (and between
`flax.nnx.Linear` and `jtblas.nn.Linear`) unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import jax.numpy as jnp
from flax import linen, nnx
from flax.nnx.nn import dtypes
from flax.nnx.nn.linear import default_bias_init, default_kernel_init
from flax.typing import DotGeneralT, Dtype, Initializer, PrecisionLike, PromoteDtypeFn

from jtblas.contraction import dot_general

__all__ = ["Dense", "Linear"]


class Dense(linen.Dense):
    """A linear transformation applied over the last dimension of the input, by jtblas.

    ``flax.linen.Dense`` with ``dot_general=jtblas.dot_general``: same attributes, defaults and
    parameters (``kernel`` [in, out], ``bias`` [out]), so a ``flax.linen.Dense`` checkpoint loads
    as is. The product runs jtblas's Triton kernel (fp32 accumulation, model-chosen tiles) and its
    gradients are jtblas GEMMs too; inputs it does not cover (e.g. float64) use
    ``jax.lax.dot_general``.

    Example usage::

      >>> import jax, jax.numpy as jnp
      >>> import jtblas
      >>> layer = jtblas.nn.Dense(features=4)
      >>> params = layer.init(jax.random.key(0), jnp.ones((1, 3)))
      >>> jax.tree_util.tree_map(jnp.shape, params)
      {'params': {'bias': (4,), 'kernel': (3, 4)}}

    Attributes:
      features: the number of output features.
      use_bias: whether to add a bias to the output (default: True).
      dtype: the dtype of the computation (default: infer from input and params).
      param_dtype: the dtype passed to parameter initializers (default: float32).
      precision: numerical precision of the computation, see ``jax.lax.Precision``; for fp32,
        HIGHEST gives full fp32 products, anything else tf32 (default: None).
      kernel_init: initializer function for the weight matrix (default: lecun_normal).
      bias_init: initializer function for the bias (default: zeros).
      promote_dtype: function to promote the dtype of ``(inputs, kernel, bias)`` to ``dtype``
        (default: ``flax.linen.dtypes.promote_dtype``).
      dot_general: the dot product function (default: ``jtblas.dot_general``).
      dot_general_cls: a class instantiated to get the dot product function; takes precedence
        over ``dot_general`` (default: None).
    """

    dot_general: DotGeneralT | None = dot_general


class Linear(nnx.Linear):
    """A linear transformation applied over the last dimension of the input, by jtblas.

    ``flax.nnx.Linear`` with ``dot_general=jtblas.dot_general``: same arguments, defaults and
    parameters (``kernel`` [in_features, out_features], ``bias`` [out_features]), so its state
    is interchangeable with ``flax.nnx.Linear``'s.

    Example usage::

      >>> from flax import nnx
      >>> import jax, jax.numpy as jnp
      >>> import jtblas
      >>> layer = jtblas.nn.Linear(in_features=3, out_features=4, rngs=nnx.Rngs(0))
      >>> layer(jnp.ones((2, 3))).shape
      (2, 4)

    Attributes:
      in_features: the number of input features.
      out_features: the number of output features.
      use_bias: whether to add a bias to the output (default: True).
      dtype: the dtype of the computation (default: infer from input and params).
      param_dtype: the dtype passed to parameter initializers (default: float32).
      precision: numerical precision of the computation, see ``jax.lax.Precision`` (default:
        None).
      kernel_init: initializer function for the weight matrix (default: lecun_normal).
      bias_init: initializer function for the bias (default: zeros).
      dot_general: the dot product function (default: ``jtblas.dot_general``).
      promote_dtype: function to promote the dtype of ``(inputs, kernel, bias)`` to ``dtype``
        (default: ``flax.nnx.nn.dtypes.promote_dtype``).
      preferred_element_type: the output dtype of the product, passed to ``dot_general``
        (default: None, the operands' dtype).
      rngs: rng key (keyword only, required).
      kernel_metadata: metadata set on the kernel ``Param`` (default: empty).
      bias_metadata: metadata set on the bias ``Param`` (default: empty).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        use_bias: bool = True,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        precision: PrecisionLike = None,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = default_bias_init,
        dot_general: DotGeneralT = dot_general,
        promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
        preferred_element_type: Dtype | None = None,
        rngs: nnx.Rngs,
        kernel_metadata: Mapping[str, Any] = MappingProxyType({}),
        bias_metadata: Mapping[str, Any] = MappingProxyType({}),
    ):
        super().__init__(
            in_features,
            out_features,
            use_bias=use_bias,
            dtype=dtype,
            param_dtype=param_dtype,
            precision=precision,
            kernel_init=kernel_init,
            bias_init=bias_init,
            dot_general=dot_general,
            promote_dtype=promote_dtype,
            preferred_element_type=preferred_element_type,
            rngs=rngs,
            kernel_metadata=kernel_metadata,
            bias_metadata=bias_metadata,
        )
