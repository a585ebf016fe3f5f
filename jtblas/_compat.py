"""The jax, Triton and jax-triton versions jtblas launches kernels with, checked once.

Two jax-triton generations call a kernel differently (docs/decisions.md, 2026-12-04):

- jax-triton 0.3.1 (with triton 3.6): lowers to jaxlib's legacy custom call; `jtblas.jax_triton_adapter`
  redirects it to the typed-FFI target and gives a TMA kernel its global scratch as an XLA buffer.
- jax-triton 0.4.x (with triton 3.7-3.9, jax >= 0.11): lowers to the typed-FFI target itself
  (`CUSTOM_CALL_TARGET_NAME = "triton_kernel_call_ffi"`, jax_triton/triton_lib.py), has no
  `custom_call_target_name` argument (an unknown keyword becomes a kernel metaparameter there),
  and lets jaxlib allocate global scratch per launch; jtblas patches nothing in it.

Any other version is refused with the versions found, never guessed at.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import re

SUPPORTED = ("jax 0.10-0.12 with triton 3.6-3.9; for CUDA, jax-triton 0.3.1 with triton 3.6, "
             "or jax-triton 0.4.x with triton 3.7-3.9 and jax >= 0.11")

Version = tuple[int, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Stack:
    """Installed versions, as (major, minor, ...) tuples; `jax_triton` is None where it is not
    installed (the CPU interpreter needs only Triton)."""

    jax: Version
    triton: Version
    jax_triton: Version | None

    @property
    def jax_triton_lowers_to_ffi(self) -> bool:
        """jax-triton 0.4.x: the typed-FFI target, `out_type=`, no `custom_call_target_name`."""
        return self.jax_triton is not None and self.jax_triton[:2] == (0, 4)


def parse(version: str) -> Version:
    """'0.12.0.1' -> (0, 12, 0, 1); '3.9.0+git1234' -> (3, 9, 0): the leading numbers."""
    match = re.match(r"\d+(\.\d+)*", version)
    if match is None:
        raise RuntimeError(f"jtblas: cannot read the version {version!r}; supported: {SUPPORTED}")
    return tuple(int(part) for part in match.group(0).split("."))


def installed() -> dict[str, str | None]:
    """The versions in use: jax's and Triton's own (already imported by jtblas; whatever the
    distribution is named: torch's nightlies ship Triton as pytorch-triton), jax-triton's from its
    package metadata (importing it needs the jax CUDA plugin)."""
    import jax
    import triton

    found: dict[str, str | None] = {"jax": jax.__version__, "triton": triton.__version__}
    try:
        found["jax-triton"] = importlib.metadata.version("jax-triton")
    except importlib.metadata.PackageNotFoundError:
        found["jax-triton"] = None
    return found


def check(found: dict[str, str | None]) -> Stack:
    """The `Stack` of `found` (distribution name -> version or None), or a RuntimeError naming the
    versions found and the supported range."""
    shown = ", ".join(f"{name} {version or 'not installed'}" for name, version in found.items())

    def refuse(reason: str) -> RuntimeError:
        return RuntimeError(f"jtblas: {reason} (found {shown}); supported: {SUPPORTED}")

    if found.get("jax") is None or found.get("triton") is None:
        raise refuse("jax and triton are required")
    jax, triton = parse(found["jax"]), parse(found["triton"])
    jax_triton = parse(found["jax-triton"]) if found.get("jax-triton") else None
    if not (0, 10) <= jax[:2] <= (0, 12):
        raise refuse(f"unsupported jax {found['jax']}")
    if not (3, 6) <= triton[:2] <= (3, 9):
        raise refuse(f"unsupported triton {found['triton']}")
    if jax_triton is not None:
        if jax_triton[:3] == (0, 3, 1):
            # jax-triton 0.3.1's internals that `jtblas.jax_triton_adapter` wraps were read against triton 3.6.
            if triton[:2] != (3, 6):
                raise refuse("jax-triton 0.3.1 is supported with triton 3.6 only")
        elif jax_triton[:2] == (0, 4):
            # jax-triton 0.4.x's own requirements (its package metadata): triton >= 3.7, jax >= 0.11.
            if triton[:2] < (3, 7) or jax[:2] < (0, 11):
                raise refuse("jax-triton 0.4.x needs triton >= 3.7 and jax >= 0.11")
        else:
            raise refuse(f"unsupported jax-triton {found['jax-triton']}")
    return Stack(jax=jax, triton=triton, jax_triton=jax_triton)


@functools.cache
def stack() -> Stack:
    """The installed `Stack`, checked on first use (the first kernel launch)."""
    return check(installed())
