"""Hardware profiles: what `jtblas calibrate` measured on one GPU, as a versioned JSON file.

A profile overrides only the fields it measured of a built-in description (`base`), so it stays
small and a later fix to a built-in datasheet number still reaches every field it did not measure:

    {
      "schema": 1,
      "device": "NVIDIA H200",            # torch/JAX device name, matched case-insensitively
      "driver": "570.124.06",             # NVIDIA driver version (see `driver_version`)
      "date": "2026-12-01T10:00:00+00:00",
      "base": "h200",                     # the built-in description the fields override
      "hardware": {"dram_bytes_per_s": 4.31e12, "tensor_flops": {"bfloat16": 7.8e14}, ...},
      "constants": {"load_bytes_per_clock": 61.0},   # optional: jtblas.constants.Constants
      "measured": {...}                   # optional, free-form: the raw measurements
    }

`load` is strict: a missing field, a wrong type, a non-positive number, a number outside the
plausible range (`plausible_range`: 1/8 to 8 times the built-in descriptions' values) or an
unknown schema raises `ProfileError` naming the file, the field and the value. `load_or_none`
(what automatic detection uses) turns that into a warning and None, so a damaged profile falls
back to the built-in description. Profiles live in
`profile_dir()` (`$XDG_CACHE_HOME/jtblas/profiles`, default `~/.cache/jtblas/profiles`) under
`<device>-<driver>.json`. Pure Python: no JAX, no torch.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import functools
import json
import os
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any

from jtblas.constants import DEFAULT_CONSTANTS, Constants
from jtblas.gpus import BUILTIN, Hardware

SCHEMA = 1

# Hardware fields a profile may set, by kind. `name` and `source` are set by the loader.
_INT_FIELDS = ("sm_count", "l2_bytes", "smem_per_sm", "smem_per_block", "regs_per_sm",
               "max_regs_per_thread", "max_threads_per_sm")
_FLOAT_FIELDS = ("clock_hz", "dram_bytes_per_s", "l2_bytes_per_s", "fp32_flops", "launch_seconds")
HARDWARE_FIELDS = frozenset(_INT_FIELDS + _FLOAT_FIELDS
                            + ("name", "full_name", "compute_capability", "tensor_flops", "wgmma", "busy_sm_rates"))
# A busy-SM rate (`Hardware.busy_sm_rates`) is the SMs' rate over the all-busy one: from half it
# (a measurement gone wrong) to twice it (an H200's boost clock is 1.13x its clock under load).
BUSY_SM_RATE_RANGE = (0.5, 2.0)


# Plausibility: a measured number must lie within 1/8 to 8 times the range of the built-in
# descriptions' values of that field (jtblas.gpus: H200, H100, A100; the model's defaults for
# `constants`). That admits measurement noise and smaller or newer NVIDIA parts (an L4's 300 GB/s
# of DRAM is 1/6 of the A100's), and rejects unit slips (x1000: GB/s for bytes/s, KiB for bytes)
# and typos (smem_per_block 1, sm_count 1e30, tensor_flops 1e-300) that a positivity check passes
# and that would otherwise steer every pick (or leave no config that fits).
PLAUSIBLE_FACTOR = 8


def plausible_range(field: str, dtype: str | None = None) -> tuple[float, float]:
    """(low, high) a profile may set `field` to (`dtype`: a `tensor_flops` rate; `field`
    "constants.<name>": a model constant): PLAUSIBLE_FACTOR around the built-in values."""
    if field.startswith("constants."):
        values = [getattr(DEFAULT_CONSTANTS, field.removeprefix("constants."))]
    elif dtype is not None:
        values = [hw.tensor_flops[dtype] for hw in BUILTIN.values() if dtype in hw.tensor_flops]
    else:
        values = [getattr(hw, field) for hw in BUILTIN.values()]
    return min(values) / PLAUSIBLE_FACTOR, max(values) * PLAUSIBLE_FACTOR


def _check_plausible(value: float, field: str, fail, dtype: str | None = None) -> None:
    low, high = plausible_range(field, dtype)
    if not low <= value <= high:
        raise fail(f"is {value:.6g}, outside the plausible range [{low:.4g}, {high:.4g}] "
                   f"(1/{PLAUSIBLE_FACTOR} to {PLAUSIBLE_FACTOR} times the built-in descriptions' values; "
                   "a unit slip or a typo?)")


class ProfileError(ValueError):
    """A hardware profile that cannot be used; the message names the file and the bad field."""


def profile_dir() -> Path:
    """Where calibrated profiles are stored: `$XDG_CACHE_HOME/jtblas/profiles` (default ~/.cache)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "jtblas" / "profiles"


def slug(text: str) -> str:
    """`text` as a file-name-safe lower-case name (a profile's name, e.g. "nvidia-h200")."""
    return re.sub(r"[^a-z0-9.]+", "-", text.strip().lower()).strip("-") or "unknown"


def profile_path(device: str, driver: str) -> Path:
    """The cache path of the profile of `device` under `driver` (e.g. nvidia-h200-570.124.06.json)."""
    return profile_dir() / f"{slug(device)}-{slug(driver)}.json"


@functools.cache
def driver_version() -> str:
    """The NVIDIA driver version ("570.124.06"), or "unknown". Read without torch or JAX: from
    /proc/driver/nvidia/version (Linux), else NVML (pynvml, if installed), else libcuda's
    cuDriverGetVersion ("cuda-12080")."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
        found = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+(?:\.\d+)+)", text) or re.search(
            r"\b(\d{3,}\.\d+(?:\.\d+)?)\b", text)
        if found:
            return found.group(1)
    except OSError:
        pass
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # noqa: BLE001 - optional source; any failure means "try the next one"
        pass
    try:
        import ctypes

        libcuda = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int()
        if libcuda.cuDriverGetVersion(ctypes.byref(version)) == 0:
            return f"cuda-{version.value}"
    except (OSError, AttributeError):
        pass
    return "unknown"


def make(*, device: str, driver: str, base: str, hardware: dict[str, Any],
         constants: dict[str, float] | None = None, measured: dict[str, Any] | None = None,
         date: str | None = None, **extra: Any) -> dict[str, Any]:
    """A profile (a JSON-ready dict) overriding `hardware` fields (and model `constants`) of the
    built-in `base`. Validated: raises ProfileError like `load` would."""
    profile = {
        "schema": SCHEMA,
        "device": device,
        "driver": driver,
        "date": date or datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "base": base,
        "hardware": copy.deepcopy(hardware),
        "constants": dict(constants or {}),
        "measured": copy.deepcopy(measured or {}),
        **copy.deepcopy(extra),
    }
    to_hardware(profile, origin="profile")
    return profile


def save(profile: dict[str, Any], path: str | os.PathLike) -> Path:
    """Writes `profile` (validated first) to `path` atomically, creating its directory."""
    path = Path(path)
    to_hardware(profile, origin=str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=path.name, suffix=".tmp",
                                     delete=False) as handle:
        json.dump(profile, handle, indent=2, sort_keys=False)
        handle.write("\n")
    os.replace(handle.name, path)
    return path


def read(path: str | os.PathLike) -> dict[str, Any]:
    """The raw profile dict in `path` (checked to be a JSON object; not validated further)."""
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise ProfileError(f"hardware profile {str(path)!r} cannot be read: {error}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ProfileError(f"hardware profile {str(path)!r} is not valid JSON (truncated?): {error}") from None
    if not isinstance(data, dict):
        raise ProfileError(f"hardware profile {str(path)!r} must be a JSON object, got {type(data).__name__}")
    return data


def load(path: str | os.PathLike) -> Hardware:
    """The `Hardware` a profile file describes: its base built-in with the profile's fields
    replaced, `source` naming the file. Raises ProfileError (naming the field) if it is unusable."""
    return to_hardware(read(path), origin=str(path))


def load_or_none(path: str | os.PathLike, *, device: str | None = None,
                 driver: str | None = None, source: str | None = None) -> Hardware | None:
    """`load`, but a damaged profile (or one for another device or driver, when given) warns and
    returns None, so the caller falls back to the built-in description. Cached per file version.
    `source` says where the path came from in the warning (e.g. "the JTBLAS_PROFILE environment
    variable")."""
    named = f" (named by {source})" if source else ""
    try:
        stat = os.stat(path)
    except OSError as error:
        warnings.warn(f"jtblas: hardware profile {str(path)!r}{named} cannot be read ({error}); "
                      "using the built-in description", stacklevel=3)
        return None
    return _load_cached(str(path), stat.st_mtime_ns, stat.st_size, device, driver, named)


@functools.lru_cache(maxsize=64)
def _load_cached(path: str, mtime_ns: int, size: int, device: str | None, driver: str | None,
                 named: str = "") -> Hardware | None:
    del mtime_ns, size  # cache keys only: an edited file is read again
    try:
        profile = read(path)
        hardware = to_hardware(profile, origin=path)
        if device is not None and profile["device"].strip().lower() != device.strip().lower():
            raise ProfileError(f"hardware profile {path!r} describes {profile['device']!r}, not {device!r}")
        if driver is not None and profile["driver"] != driver:
            raise ProfileError(f"hardware profile {path!r} was measured under driver {profile['driver']!r}, "
                               f"not {driver!r}")
        return hardware
    except ProfileError as error:
        warnings.warn(f"jtblas: ignoring {error}{named}; using the built-in description", stacklevel=4)
        return None


def to_hardware(profile: dict[str, Any], *, origin: str) -> Hardware:
    """Validates a profile dict and builds its `Hardware` (`origin` names it in errors and source)."""

    def fail(field: str, message: str) -> ProfileError:
        return ProfileError(f"hardware profile {origin!r}: field {field!r} {message}")

    if not isinstance(profile, dict):
        raise ProfileError(f"hardware profile {origin!r} must be a JSON object, got {type(profile).__name__}")
    for field in ("schema", "device", "driver", "date", "base", "hardware"):
        if field not in profile:
            raise fail(field, "is missing")
    schema = profile["schema"]
    if isinstance(schema, bool) or not isinstance(schema, int):
        raise fail("schema", f"must be an integer, got {schema!r}")
    if schema != SCHEMA:
        raise fail("schema", f"is {schema}, a schema this jtblas does not read (it reads {SCHEMA}); "
                             "run `jtblas calibrate` again")
    for field in ("device", "driver", "date", "base"):
        if not isinstance(profile[field], str) or not profile[field].strip():
            raise fail(field, f"must be a non-empty string, got {profile[field]!r}")
    if profile["base"] not in BUILTIN:
        raise fail("base", f"must name a built-in description {sorted(BUILTIN)}, got {profile['base']!r}")
    base = BUILTIN[profile["base"]]

    fields = profile["hardware"]
    if not isinstance(fields, dict):
        raise fail("hardware", f"must be an object, got {type(fields).__name__}")
    changes: dict[str, Any] = {}
    for key, value in fields.items():
        name = f"hardware.{key}"
        if key not in HARDWARE_FIELDS:
            raise fail(name, f"is not a hardware field a profile may set ({sorted(HARDWARE_FIELDS)})")
        if key in _INT_FIELDS:
            if isinstance(value, bool) or not isinstance(value, int):
                raise fail(name, f"must be an integer, got {value!r}")
        elif key in _FLOAT_FIELDS:
            value = _positive_number(value, lambda message, name=name: fail(name, message))
        elif key in ("name", "full_name"):
            if not isinstance(value, str) or not value.strip():
                raise fail(name, f"must be a non-empty string, got {value!r}")
        elif key == "wgmma":
            if not isinstance(value, bool):
                raise fail(name, f"must be true or false, got {value!r}")
        elif key == "compute_capability":
            if (not isinstance(value, (list, tuple)) or len(value) != 2
                    or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in value)):
                raise fail(name, f"must be [major, minor], got {value!r}")
            value = (value[0], value[1])
        elif key == "busy_sm_rates":
            value = checked_busy_sm_rates(value, lambda message, name=name: fail(name, message))
        elif key == "tensor_flops":
            if not isinstance(value, dict):
                raise fail(name, f"must be an object of dtype: FLOP/s, got {type(value).__name__}")
            rates = dict(base.tensor_flops)
            known_dtypes = sorted({d for hw in BUILTIN.values() for d in hw.tensor_flops})
            for dtype, rate in value.items():
                check = lambda message, n=f"{name}.{dtype}": fail(n, message)  # noqa: E731
                if dtype not in known_dtypes:
                    raise check(f"is not a dtype the model rates ({known_dtypes})")
                rates[dtype] = _positive_number(rate, check)
                _check_plausible(rates[dtype], key, check, dtype=dtype)
            value = rates
        if isinstance(value, int) and not isinstance(value, bool) and value <= 0:
            raise fail(name, f"must be positive, got {value!r}")
        if key in _INT_FIELDS + _FLOAT_FIELDS:
            _check_plausible(value, key, lambda message, name=name: fail(name, message))
        changes[key] = value

    constants = profile.get("constants", {})
    if not isinstance(constants, dict):
        raise fail("constants", f"must be an object, got {type(constants).__name__}")
    known = {f.name for f in dataclasses.fields(Constants)}
    checked = {}
    for key, value in constants.items():
        name = f"constants.{key}"
        if key not in known:
            raise fail(name, f"is not a model constant ({sorted(known)})")
        checked[key] = _positive_number(value, lambda message, name=name: fail(name, message))
        _check_plausible(checked[key], name, lambda message, name=name: fail(name, message))
        if key.endswith(("fraction", "efficiency")) and checked[key] > 1:
            raise fail(name, f"is a fraction, at most 1, got {value!r}")
    if checked:
        changes["constants"] = checked
    if "measured" in profile and not isinstance(profile["measured"], dict):
        raise fail("measured", f"must be an object, got {type(profile['measured']).__name__}")

    source = (f"profile {origin} ({profile['device']}, driver {profile['driver']}, "
              f"measured {profile['date']}; base {base.name})")
    try:
        return dataclasses.replace(base, **changes, source=source)
    except (ValueError, TypeError) as error:  # Hardware's own checks (e.g. smem_per_block ≤ smem_per_sm)
        raise ProfileError(f"hardware profile {origin!r}: {error}") from None


def _positive_number(value: Any, fail) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail(f"must be a number, got {value!r}")
    if not value > 0 or value == float("inf"):
        raise fail(f"must be a positive finite number, got {value!r}")
    return float(value)


def checked_busy_sm_rates(value: Any, fail=ValueError) -> tuple[tuple[float, float], ...]:
    """`busy_sm_rates` as `Hardware` holds them, from a profile's [[fraction, rate], ...]:
    fractions ascending in (0, 1], rates in BUSY_SM_RATE_RANGE; else raises `fail(message)`."""
    low, high = BUSY_SM_RATE_RANGE
    if not isinstance(value, (list, tuple)) or not value:
        raise fail(f"must be a non-empty list of [fraction of SMs busy, rate] pairs, got {value!r}")
    points = []
    for point in value:
        if (not isinstance(point, (list, tuple)) or len(point) != 2
                or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in point)):
            raise fail(f"must hold [fraction, rate] pairs of numbers, got {point!r}")
        fraction, rate = float(point[0]), float(point[1])
        if not 0 < fraction <= 1 or not low <= rate <= high:
            raise fail(f"has {list(point)!r}: fractions must lie in (0, 1] and rates in [{low}, {high}]")
        points.append((fraction, rate))
    if [p[0] for p in points] != sorted({p[0] for p in points}):
        raise fail(f"must list its fractions in ascending order, each once, got {value!r}")
    return tuple(points)


__all__ = ["SCHEMA", "HARDWARE_FIELDS", "PLAUSIBLE_FACTOR", "ProfileError", "checked_busy_sm_rates", "driver_version",
           "load", "load_or_none", "plausible_range",
           "make", "profile_dir", "profile_path", "read", "save", "to_hardware"]
