"""The version check: the installed stack passes, anything outside the supported range is refused
with the versions found, before a kernel is launched."""

import jax.numpy as jnp
import pytest

import jtblas
from jtblas import _compat

SUPPORTED = [
    dict(jax="0.10.2", triton="3.6.0", **{"jax-triton": "0.3.1"}),  # CI's first stack
    dict(jax="0.11.2", triton="3.6.0", **{"jax-triton": "0.3.1"}),  # the GPU machine
    dict(jax="0.11.2", triton="3.9.0", **{"jax-triton": "0.4.1"}),  # the GPU machine with the slim wheel
    dict(jax="0.12.0.1", triton="3.9.0", **{"jax-triton": "0.4.1"}),  # CI's second stack
    dict(jax="0.12.0", triton="3.7.1", **{"jax-triton": "0.4.0"}),
    dict(jax="0.10.2", triton="3.9.0", **{"jax-triton": None}),  # CPU only: the interpreter
]

REFUSED = [
    (dict(jax="0.12.0", triton="3.10.0", **{"jax-triton": "0.4.1"}), "unsupported triton 3.10.0"),
    (dict(jax="0.13.0", triton="3.9.0", **{"jax-triton": "0.4.1"}), "unsupported jax 0.13.0"),
    (dict(jax="0.9.2", triton="3.6.0", **{"jax-triton": "0.3.1"}), "unsupported jax 0.9.2"),
    (dict(jax="0.12.0", triton="3.9.0", **{"jax-triton": "0.5.0"}), "unsupported jax-triton 0.5.0"),
    (dict(jax="0.10.2", triton="3.6.0", **{"jax-triton": "0.3.0"}), "unsupported jax-triton 0.3.0"),
    (dict(jax="0.12.0", triton="3.9.0", **{"jax-triton": "0.3.1"}), "0.3.1 is supported with triton 3.6 only"),
    (dict(jax="0.11.2", triton="3.6.0", **{"jax-triton": "0.4.1"}), "needs triton >= 3.7"),
    (dict(jax="0.10.2", triton="3.9.0", **{"jax-triton": "0.4.1"}), "needs triton >= 3.7 and jax >= 0.11"),
    (dict(jax="0.12.0", triton=None, **{"jax-triton": None}), "jax and triton are required"),
]


@pytest.fixture
def fresh_stack():
    _compat.stack.cache_clear()
    yield
    _compat.stack.cache_clear()


def test_installed_stack_is_supported(fresh_stack):
    stack = _compat.stack()
    assert (0, 10) <= stack.jax[:2] <= (0, 12) and (3, 6) <= stack.triton[:2] <= (3, 9)


@pytest.mark.parametrize("found", SUPPORTED, ids=lambda f: "-".join(str(v) for v in f.values()))
def test_supported_versions_pass(found):
    stack = _compat.check(found)
    assert stack.jax_triton_lowers_to_ffi == (found["jax-triton"] or "").startswith("0.4.")


@pytest.mark.parametrize("found,reason", REFUSED, ids=[r for _, r in REFUSED])
def test_other_versions_are_refused_with_what_was_found(found, reason):
    with pytest.raises(RuntimeError, match=reason) as error:
        _compat.check(found)
    message = str(error.value)
    assert all(version in message for version in found.values() if version)  # what was found
    assert _compat.SUPPORTED in message


def test_versions_are_read_as_numbers():
    assert _compat.parse("0.12.0.1") == (0, 12, 0, 1)
    assert _compat.parse("3.9.0+git1234abcd") == (3, 9, 0)
    assert _compat.parse("3.10.0") > _compat.parse("3.9.0")
    with pytest.raises(RuntimeError, match="cannot read the version 'dev'"):
        _compat.parse("dev")


def test_a_launch_refuses_an_unknown_triton(monkeypatch, fresh_stack):
    """The check runs before any kernel: an unknown Triton fails loudly, not inside the kernel."""
    monkeypatch.setattr(_compat, "installed", lambda: dict(jax="0.12.0", triton="3.10.0", **{"jax-triton": None}))
    a = jnp.ones((8, 8), jnp.float32)
    with pytest.raises(RuntimeError, match=r"unsupported triton 3\.10\.0 \(found jax 0\.12\.0, triton 3\.10\.0"):
        jtblas.matmul(a, a)
