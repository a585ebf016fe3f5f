"""Flax layers whose products run on jtblas: `Dense` (flax.linen) and `Linear` (flax.nnx), and
`GatedDense` / `GatedLinear`, a gated linear unit (SwiGLU's gate and up projections) in one launch.

Each subclasses Flax's own layer, with `jtblas.dot_general` as the default `dot_general` and one
more attribute, `activation` (default None), so class names, arguments, defaults, parameter names
and shapes are Flax's: checkpoints move between `flax.linen.Dense` and `jtblas.nn.Dense` (and
between `flax.nnx.Linear` and `jtblas.nn.Linear`) unchanged.

With the default `dot_general` and `promote_dtype`, a layer is one fused `jtblas.matmul`: the
bias and the activation run in the kernel's epilogue (no pass over the output), and a kernel
stored in a wider dtype than the computation's (an fp32 kernel, `dtype=jnp.bfloat16`) is read as
stored and converted in registers (no converted copy; its gradient comes back in fp32). The
values are Flax's computation in `dtype` (the kernel rounded to it), except that the bias is added
as stored to the fp32 product before the one rounding to `dtype`, where Flax rounds the bias to
`dtype` and the product first.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp
from flax import linen, nnx
from flax.linen.dtypes import promote_dtype
from flax.nnx.nn import dtypes
from flax.nnx.nn.linear import default_bias_init, default_kernel_init
from flax.typing import DotGeneralT, Dtype, Initializer, PrecisionLike, PromoteDtypeFn

from jtblas.config import ACTIVATIONS, OPERAND_DTYPE_BYTES
from jtblas.contraction import dot_general
from jtblas.epilogue import ACTIVATION_FUNCTIONS
from jtblas.operands import compute_dtype, is_static_dim
from jtblas.ops import matmul

__all__ = ["Dense", "GatedDense", "GatedLinear", "Linear"]


def _check_activation(activation: Any) -> None:
    if activation is not None and activation not in ACTIVATIONS:
        raise ValueError(f"jtblas.nn: activation must be None or one of {ACTIVATIONS}, got {activation!r}")


def _fused(inputs: Any, kernel: Any, bias: Any, *, dtype: Any, precision: Any, activation: str | None,
           preferred_element_type: Any = None, gated: bool = False) -> Any:
    """activation(inputs · kernel + bias) as one `jtblas.matmul` in Flax's computation dtype (the
    promoted dtype of the three, or `dtype`), or None where the kernel cannot run it (a dtype it
    does not take, a symbolic or empty shape): the caller then runs Flax's own computation.
    `gated`: the kernel's columns are a gate's then an up projection's (`jtblas.matmul`)."""
    arrays = [x for x in (inputs, kernel, bias) if x is not None]
    if not all(hasattr(x, "dtype") and all(is_static_dim(d) for d in jnp.shape(x)) for x in arrays):
        return None
    dtype = jnp.dtype(dtype if dtype is not None else jnp.result_type(*arrays))
    out_dtype = jnp.dtype(preferred_element_type if preferred_element_type is not None else dtype)
    if (dtype.name not in OPERAND_DTYPE_BYTES or out_dtype.name not in OPERAND_DTYPE_BYTES
            or any(jnp.dtype(x.dtype).name not in OPERAND_DTYPE_BYTES for x in arrays)
            or inputs.ndim == 0 or 0 in inputs.shape):
        return None
    inputs = jnp.asarray(inputs, dtype)
    # The kernel as stored where the product computes in `dtype` all the same (a wider kernel read
    # and converted in registers); else converted here, as Flax does.
    if compute_dtype(inputs, kernel, precision) != dtype:
        kernel = jnp.asarray(kernel, dtype)
    flat = inputs.reshape(1, -1) if inputs.ndim == 1 else inputs
    y = matmul(flat, kernel, bias=bias, activation=activation, gated=gated, precision=precision,
               preferred_element_type=out_dtype)
    return y.reshape(*inputs.shape[:-1], y.shape[-1])


def _flax_dense(inputs: Any, kernel: Any, bias: Any, *, product: Any, precision: Any, dtype: Any,
                promote: PromoteDtypeFn = promote_dtype) -> Any:
    """Flax's Dense computation (`flax.linen.Dense.__call__`): the three promoted to `dtype`, the
    last axis contracted by `product` (None: `jax.lax.dot_general`), the bias added."""
    inputs, kernel, bias = promote(inputs, kernel, bias, dtype=dtype)
    y = (product or jax.lax.dot_general)(inputs, kernel, (((inputs.ndim - 1,), (0,)), ((), ())), precision=precision)
    if bias is not None:
        y += jnp.reshape(bias, (1,) * (y.ndim - 1) + (-1,))
    return y


def _unfused_activation(y: Any, activation: str | None) -> Any:
    return y if activation is None else ACTIVATION_FUNCTIONS[activation](y)


class Dense(linen.Dense):
    """A linear transformation applied over the last dimension of the input, by jtblas.

    ``flax.linen.Dense`` with ``dot_general=jtblas.dot_general`` and an optional activation:
    same attributes, defaults and parameters (``kernel`` [in, out], ``bias`` [out]), so a
    ``flax.linen.Dense`` checkpoint loads as is. With the default ``dot_general`` and
    ``promote_dtype`` the layer is one ``jtblas.matmul`` with the bias and activation in its
    epilogue and the kernel read as stored (module doc); its gradients are jtblas GEMMs too.
    Inputs the kernel does not cover (e.g. float64) use Flax's computation with
    ``jax.lax.dot_general``, and a custom ``dot_general``, ``dot_general_cls`` or
    ``promote_dtype`` is Flax's computation with it (the activation applied after).

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
      activation: None or one of ``jtblas.ACTIVATIONS`` ("relu", "gelu_tanh", "gelu", "silu"),
        applied to the output (default: None).
    """

    dot_general: DotGeneralT | None = dot_general
    activation: str | None = None

    @linen.compact
    def __call__(self, inputs: Any) -> Any:
        """Applies the linear transformation (and the activation) along the last dimension.

        Args:
          inputs: The nd-array to be transformed.

        Returns:
          The transformed input.
        """
        _check_activation(self.activation)
        kernel = self.param("kernel", self.kernel_init, (jnp.shape(inputs)[-1], self.features), self.param_dtype)
        bias = self.param("bias", self.bias_init, (self.features,), self.param_dtype) if self.use_bias else None
        if self.dot_general is dot_general and self.dot_general_cls is None and self.promote_dtype is promote_dtype:
            y = _fused(inputs, kernel, bias, dtype=self.dtype, precision=self.precision, activation=self.activation)
            if y is not None:
                return y
        product = self.dot_general_cls() if self.dot_general_cls is not None else self.dot_general
        y = _flax_dense(inputs, kernel, bias, product=product, precision=self.precision, dtype=self.dtype,
                        promote=self.promote_dtype)
        return _unfused_activation(y, self.activation)


class GatedDense(linen.Module):
    """A gated linear unit over the last dimension, by one jtblas launch:
    ``activation(x · kernel[:, :F] + bias[:F]) * (x · kernel[:, F:] + bias[F:])`` with F =
    ``features`` (SwiGLU with the default ``"silu"``; GEGLU with ``"gelu"``; the bilinear unit with
    None).

    The parameters are those of ``flax.linen.Dense(2 * features)`` of the same name: ``kernel``
    [in, 2 * features] (the gate's columns, then the up projection's) and, with ``use_bias``,
    ``bias`` [2 * features]; so a model that ran ``Dense(2 * features)`` and split its output
    (``gate, up = jnp.split(y, 2, -1); activation(gate) * up``) loads its checkpoint unchanged.
    With the default ``dot_general`` the layer is one ``jtblas.matmul(..., gated=True)``: each
    tile of the product holds a gate column block and the matching up column block and writes
    only their product, so the [.., 2 * features] projection is never written; its gradients are
    jtblas GEMMs. Inputs the kernel does not take (e.g. float64) use that Dense-and-split
    computation in Flax with ``jax.lax.dot_general``.

    Example usage::

      >>> import jax, jax.numpy as jnp
      >>> import jtblas
      >>> layer = jtblas.nn.GatedDense(features=4)
      >>> params = layer.init(jax.random.key(0), jnp.ones((1, 3)))
      >>> jax.tree_util.tree_map(jnp.shape, params)
      {'params': {'kernel': (3, 8)}}

    Attributes:
      features: the number of output features (the kernel has twice as many columns).
      activation: None or one of ``jtblas.ACTIVATIONS``, applied to the gate (default: "silu").
      use_bias: whether to add a bias to both projections (default: False, as in Llama's MLP).
      dtype: the dtype of the computation (default: infer from input and params).
      param_dtype: the dtype passed to parameter initializers (default: float32).
      precision: numerical precision of the computation, see ``jax.lax.Precision``.
      kernel_init: initializer function for the weight matrix (default: lecun_normal).
      bias_init: initializer function for the bias (default: zeros).
      dot_general: the dot product function (default: ``jtblas.dot_general``); another one runs
        the Dense-and-split computation with it.
    """

    features: int
    activation: str | None = "silu"
    use_bias: bool = False
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    precision: PrecisionLike = None
    kernel_init: Initializer = default_kernel_init
    bias_init: Initializer = default_bias_init
    dot_general: DotGeneralT | None = dot_general

    @linen.compact
    def __call__(self, inputs: Any) -> Any:
        """Applies the gated linear unit along the last dimension.

        Args:
          inputs: The nd-array to be transformed.

        Returns:
          The transformed input, ``features`` wide.
        """
        _check_activation(self.activation)
        kernel = self.param("kernel", self.kernel_init, (jnp.shape(inputs)[-1], 2 * self.features), self.param_dtype)
        bias = self.param("bias", self.bias_init, (2 * self.features,), self.param_dtype) if self.use_bias else None
        if self.dot_general is dot_general:
            y = _fused(inputs, kernel, bias, dtype=self.dtype, precision=self.precision, activation=self.activation,
                       gated=True)
            if y is not None:
                return y
        y = _flax_dense(inputs, kernel, bias, product=self.dot_general, precision=self.precision, dtype=self.dtype)
        gate, up = jnp.split(y, 2, axis=-1)
        return _unfused_activation(gate, self.activation) * up


class Linear(nnx.Linear):
    """A linear transformation applied over the last dimension of the input, by jtblas.

    ``flax.nnx.Linear`` with ``dot_general=jtblas.dot_general`` and an optional activation:
    same arguments, defaults and parameters (``kernel`` [in_features, out_features], ``bias``
    [out_features]), so its state is interchangeable with ``flax.nnx.Linear``'s. With the default
    ``dot_general`` and ``promote_dtype`` (and no ``out_sharding``) a call is one fused
    ``jtblas.matmul`` (module doc); otherwise Flax's computation, then the activation.

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
      activation: None or one of ``jtblas.ACTIVATIONS``, applied to the output (default: None).
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
        activation: str | None = None,
    ):
        _check_activation(activation)
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
        self.activation = activation

    def __call__(self, inputs: Any, out_sharding: Any = None) -> Any:
        """Applies the linear transformation (and the activation) along the last dimension.

        Args:
          inputs: The nd-array to be transformed.
          out_sharding: an output sharding, passed to ``dot_general`` (Flax's computation).

        Returns:
          The transformed input.
        """
        y = self._fused_call(inputs, out_sharding)
        if y is not None:
            return y
        return _unfused_activation(super().__call__(inputs, out_sharding=out_sharding), self.activation)

    def _fused_call(self, inputs: Any, out_sharding: Any, gated: bool = False) -> Any:
        """The layer as one fused `jtblas.matmul` (`_fused`), or None where Flax's computation runs
        (an output sharding, a custom `dot_general` or `promote_dtype`, inputs the kernel does not take)."""
        if (out_sharding is not None or self.dot_general is not dot_general
                or self.promote_dtype is not dtypes.promote_dtype):
            return None
        bias = self.bias[...] if self.bias is not None else None
        return _fused(inputs, self.kernel[...], bias, dtype=self.dtype, precision=self.precision,
                      activation=self.activation, preferred_element_type=self.preferred_element_type, gated=gated)


class GatedLinear(Linear):
    """``GatedDense`` for flax.nnx: ``activation(x · kernel[:, :F] + bias[:F]) * (x · kernel[:, F:]
    + bias[F:])`` with F = ``features``, in one jtblas launch (``jtblas.matmul(..., gated=True)``).

    A ``jtblas.nn.Linear(in_features, 2 * features)`` (the state of ``flax.nnx.Linear(in_features,
    2 * features)``: ``kernel`` [in_features, 2 * features], the gate's columns then the up
    projection's, and with ``use_bias`` a ``bias`` [2 * features]) whose call pairs the two halves;
    inputs the kernel does not take, a custom ``dot_general`` or ``promote_dtype``, or an
    ``out_sharding`` run Flax's Linear and then split.

    Example usage::

      >>> from flax import nnx
      >>> import jax.numpy as jnp
      >>> import jtblas
      >>> layer = jtblas.nn.GatedLinear(3, 4, rngs=nnx.Rngs(0))
      >>> layer.kernel.shape, layer(jnp.ones((2, 3))).shape
      ((3, 8), (2, 4))

    Attributes:
      in_features, features: the input and output widths (the kernel has 2 * features columns).
      activation: None or one of ``jtblas.ACTIVATIONS``, applied to the gate (default: "silu").
      use_bias: whether to add a bias to both projections (default: False).
      The other keyword arguments are ``flax.nnx.Linear``'s (``rngs`` required).
    """

    def __init__(self, in_features: int, features: int, *, activation: str | None = "silu", use_bias: bool = False,
                 **linear_arguments: Any):
        super().__init__(in_features, 2 * features, use_bias=use_bias, activation=activation, **linear_arguments)
        self.features = features

    def __call__(self, inputs: Any, out_sharding: Any = None) -> Any:
        """Applies the gated linear unit along the last dimension.

        Args:
          inputs: The nd-array to be transformed.
          out_sharding: an output sharding of the [.., 2 * features] projection, passed to
            ``dot_general`` (Flax's computation).

        Returns:
          The transformed input, ``features`` wide.
        """
        y = self._fused_call(inputs, out_sharding, gated=True)
        if y is not None:
            return y
        gate, up = jnp.split(nnx.Linear.__call__(self, inputs, out_sharding=out_sharding), 2, axis=-1)
        return _unfused_activation(gate, self.activation) * up
