"""Which GPU description applies: a built-in by name, a calibrated profile, or the GPU in use.

The descriptions themselves are `jtblas.gpus` (re-exported here: `hardware.H200`,
`hardware.Hardware`); calibrated profiles (`jtblas calibrate`, `jtblas.profiles`) override the
measured fields of a built-in description. `detect()` picks one up for the GPU in use,
`load_profile(path)` reads one. The model imports `jtblas.gpus`, not this module.
"""

from __future__ import annotations

import dataclasses
import os
import warnings

import jax

from jtblas import launch, profiles
from jtblas.gpus import A100, BUILTIN, DEFAULT, H100, H200, Hardware

ENV_VAR = "JTBLAS_GPU"
PROFILE_ENV_VAR = "JTBLAS_PROFILE"


class HardwareChoiceError(ValueError):
    """A GPU description asked for by a name that names none (the message says where it came from)."""


def get(name_or_hardware: str | os.PathLike | Hardware | None = None) -> Hardware:
    """Returns a description: a `Hardware` as given, a built-in by name, a calibrated profile by
    path (a string ending in ".json", or a path object; see `load_profile`), or `detect()` for None."""
    if isinstance(name_or_hardware, Hardware):
        return name_or_hardware
    if name_or_hardware is None:
        return detect()
    if isinstance(name_or_hardware, os.PathLike) or (
            isinstance(name_or_hardware, str) and name_or_hardware.strip().lower().endswith(".json")):
        return load_profile(name_or_hardware)
    if not isinstance(name_or_hardware, str):
        raise TypeError(f"hardware must be a name, a profile path, a Hardware or None, "
                        f"got {type(name_or_hardware).__name__}")
    key = name_or_hardware.strip().lower()
    if key not in BUILTIN:
        raise HardwareChoiceError(
            f"hardware={name_or_hardware!r} names no GPU description: give a built-in name {sorted(BUILTIN)}, "
            "a calibrated profile's path (ending in .json), a jtblas.hardware.Hardware, or None to detect the GPU")
    return BUILTIN[key]


def from_device_kind(device_kind: str, compute_capability: tuple[int, int] | None) -> Hardware:
    """Maps a JAX `device_kind` (e.g. "NVIDIA H200") to a description; unknown GPUs warn and get
    the built-in with the nearest compute capability."""
    kind = device_kind.lower()
    for hw in BUILTIN.values():
        if hw.name in kind:
            return hw
    if compute_capability is None:
        nearest = DEFAULT
    else:
        nearest = min(
            BUILTIN.values(),
            key=lambda hw: (abs(_cc_number(hw.compute_capability) - _cc_number(compute_capability)),
                            hw.name != DEFAULT.name),
        )
    warnings.warn(
        f"jtblas has no description of {device_kind!r} (compute capability {compute_capability}); "
        f"using {nearest.name!r}. Set {ENV_VAR} to choose another.",
        stacklevel=3,
    )
    return nearest


def _cc_number(cc: tuple[int, int]) -> int:
    return 10 * cc[0] + cc[1]


def load_profile(path: str | os.PathLike) -> Hardware:
    """The description in a calibrated profile (JSON written by `jtblas calibrate`): its base
    built-in with the measured fields replaced. Raises `jtblas.profiles.ProfileError` (a
    ValueError naming the bad field) for a missing, malformed or truncated file."""
    return profiles.load(path)


def detect() -> Hardware:
    """The description of the current JAX default device.

    Precedence: a profile named by the `JTBLAS_PROFILE` environment variable (a path; honoured
    with or without a GPU), then `JTBLAS_GPU` (a built-in name), then for the first GPU its
    calibrated profile in `jtblas.profiles.profile_dir()` if one matches its name and the driver
    version, else the built-in for its `device_kind`; `DEFAULT` when JAX has no GPU (CPU
    interpreter runs). A damaged profile warns and falls back to the next rule. For a GPU, `tma`
    is turned off where the launcher cannot allocate the TMA kernel's scratch (`for_launch`).
    """
    path = os.environ.get(PROFILE_ENV_VAR)
    if path:
        hardware = profiles.load_or_none(path, source=f"the {PROFILE_ENV_VAR} environment variable")
        if hardware is not None:
            return hardware
    override = os.environ.get(ENV_VAR)
    if override:
        try:
            return get(override)
        except HardwareChoiceError:
            raise HardwareChoiceError(
                f"{ENV_VAR}={override!r} (environment variable) names no GPU description: set it to a "
                f"built-in name {sorted(BUILTIN)} or a calibrated profile's path (ending in .json), or "
                "unset it to detect the GPU") from None
        except profiles.ProfileError as error:  # names the file, not where the path came from
            raise profiles.ProfileError(f"{ENV_VAR}={override!r} (environment variable): {error}") from None
    gpu = _first_gpu()
    if gpu is None:
        return DEFAULT
    device_kind, capability = gpu
    driver = profiles.driver_version()
    cached = profiles.profile_path(device_kind, driver)
    if cached.is_file():
        hardware = profiles.load_or_none(cached, device=device_kind, driver=driver)
        if hardware is not None:
            return for_launch(hardware, "cuda")
    return for_launch(from_device_kind(device_kind, capability), "cuda")


def for_launch(hardware: Hardware, platform: str) -> Hardware:
    """`hardware` as kernels launched on `platform` ("cuda" or "cpu") can use it: without the TMA
    kernel where the launcher cannot give it the global scratch its descriptors need (a CUDA
    jaxlib older than 0.11; the CPU interpreter runs it)."""
    if hardware.tma and not launch.global_scratch_supported(platform):
        return dataclasses.replace(hardware, tma=False)
    return hardware


def _first_gpu() -> tuple[str, tuple[int, int] | None] | None:
    """(device_kind, compute capability) of JAX's first GPU, or None without one."""
    try:
        devices = jax.devices("gpu")
    except RuntimeError:
        return None
    if not devices:
        return None
    device = devices[0]
    capability = getattr(device, "compute_capability", None)
    if isinstance(capability, str):
        major, _, minor = capability.partition(".")
        capability = (int(major), int(minor or 0))
    return device.device_kind, capability


__all__ = ["A100", "BUILTIN", "DEFAULT", "ENV_VAR", "H100", "H200", "HardwareChoiceError", "PROFILE_ENV_VAR",
           "Hardware", "detect", "for_launch", "from_device_kind", "get", "load_profile"]
