"""Hardware profiles (`jtblas.profiles`) and their detection (`jtblas.hardware`): schema round
trip, strict errors naming the field, warning + built-in fallback in detection, profiles steering
selection and `jtblas explain`. What `jtblas calibrate` writes into them: tests/calibrate/test_calibrate_*.py."""

import dataclasses
import json
from pathlib import Path

import pytest

import jtblas
from jtblas import cli, constants, hardware, jax_triton_adapter, model, profiles
from tests.reference import use_jax_triton_031

H200_FIELDS = dict(dram_bytes_per_s=4.1e12, l2_bytes_per_s=9.0e12, fp32_flops=50e12, launch_seconds=2.5e-6,
                   clock_hz=1.7e9, sm_count=132, tensor_flops={"bfloat16": 760e12, "float16": 765e12,
                                                               "float32": 380e12})


def _profile(**changes):
    fields = dict(H200_FIELDS)
    fields.update(changes.pop("hardware", {}))
    return profiles.make(device="NVIDIA H200", driver="570.124.06", base="h200", hardware=fields,
                         date="2026-12-01T00:00:00+00:00", **changes)


def _write(tmp_path, profile, name="profile.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(profile))
    return path


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch, tmp_path):
    """No profile or GPU override from the caller's environment; an empty cache directory."""
    monkeypatch.delenv(hardware.PROFILE_ENV_VAR, raising=False)
    monkeypatch.delenv(hardware.ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    model.clear_cache()


def test_round_trip_overrides_only_measured_fields(tmp_path):
    path = profiles.save(_profile(constants={"load_bytes_per_clock": 48.0}), tmp_path / "sub" / "p.json")
    hw = hardware.load_profile(path)
    expected = dataclasses.replace(hardware.H200, **{k: v for k, v in H200_FIELDS.items() if k != "tensor_flops"},
                                   tensor_flops={**hardware.H200.tensor_flops, **H200_FIELDS["tensor_flops"]},
                                   constants={"load_bytes_per_clock": 48.0}, source=hw.source)
    assert hw == expected
    assert hw.tensor_flops["float8"] == hardware.H200.tensor_flops["float8"]  # not measured: kept
    assert hw.l2_bytes == hardware.H200.l2_bytes and hw.name == "h200"
    assert str(path) in hw.source and "NVIDIA H200" in hw.source and "570.124.06" in hw.source
    assert hw.model_constants().load_bytes_per_clock == 48.0
    assert hw.model_constants().memory_latency_seconds == constants.DEFAULT_CONSTANTS.memory_latency_seconds
    # Saved as plain JSON with the schema number; the loaded description is the same each time.
    assert json.loads(path.read_text())["schema"] == profiles.SCHEMA
    assert hardware.load_profile(path) == hw and hash(hardware.load_profile(path)) == hash(hw)
    assert hardware.get(str(path)) == hw and hardware.get(path) == hw


def _bad(tmp_path, mutate):
    profile = _profile()
    mutate(profile)
    return _write(tmp_path, profile)


@pytest.mark.parametrize("mutate, field", [
    (lambda p: p.pop("device"), "device"),
    (lambda p: p.pop("schema"), "schema"),
    (lambda p: p.update(schema=2), "schema"),
    (lambda p: p.update(schema="1"), "schema"),
    (lambda p: p.update(base="h300"), "base"),
    (lambda p: p["hardware"].update(dram_bytes_per_s=-4e12), "hardware.dram_bytes_per_s"),
    (lambda p: p["hardware"].update(dram_bytes_per_s="fast"), "hardware.dram_bytes_per_s"),
    (lambda p: p["hardware"].update(sm_count=132.5), "hardware.sm_count"),
    (lambda p: p["hardware"].update(sm_count=0), "hardware.sm_count"),
    (lambda p: p["hardware"].update(warp_size=32), "hardware.warp_size"),
    (lambda p: p["hardware"]["tensor_flops"].update(bfloat16=0), "hardware.tensor_flops.bfloat16"),
    (lambda p: p["hardware"].update(wgmma="yes"), "hardware.wgmma"),
    (lambda p: p["hardware"].update(busy_sm_rates=[]), "hardware.busy_sm_rates"),
    (lambda p: p["hardware"].update(busy_sm_rates=[[0.5, 1.1, 2]]), "hardware.busy_sm_rates"),
    (lambda p: p["hardware"].update(busy_sm_rates=[[1.5, 1.1]]), "hardware.busy_sm_rates"),
    (lambda p: p["hardware"].update(busy_sm_rates=[[0.5, 1100.0]]), "hardware.busy_sm_rates"),
    (lambda p: p["hardware"].update(busy_sm_rates=[[1.0, 1.0], [0.5, 1.1]]), "hardware.busy_sm_rates"),
    (lambda p: p["hardware"].update(busy_sm_rates=[[0.5, True]]), "hardware.busy_sm_rates"),
    (lambda p: p.update(hardware=[1, 2]), "hardware"),
    (lambda p: p.update(constants={"memory_latency_seconds": -1e-6}), "constants.memory_latency_seconds"),
    (lambda p: p.update(constants={"latency": 1e-6}), "constants.latency"),
])
def test_strict_loader_names_the_bad_field(tmp_path, mutate, field):
    path = _bad(tmp_path, mutate)
    with pytest.raises(profiles.ProfileError, match=f"field '{field}'"):
        hardware.load_profile(path)
    with pytest.raises(ValueError):  # ProfileError is a ValueError
        jtblas.select(64, 64, 64, hardware=str(path))


def test_strict_loader_rejects_malformed_and_truncated_files(tmp_path):
    good = json.dumps(_profile())
    truncated = _write(tmp_path, None, "truncated.json")
    truncated.write_text(good[: len(good) // 2])
    with pytest.raises(profiles.ProfileError, match="not valid JSON"):
        hardware.load_profile(truncated)
    array = tmp_path / "array.json"
    array.write_text("[1, 2]")
    with pytest.raises(profiles.ProfileError, match="JSON object"):
        hardware.load_profile(array)
    with pytest.raises(profiles.ProfileError, match="cannot be read"):
        hardware.load_profile(tmp_path / "missing.json")
    with pytest.raises(profiles.ProfileError, match="smem_per_block"):  # Hardware's own consistency check
        hardware.load_profile(_bad(tmp_path, lambda p: p["hardware"].update(smem_per_block=10**6)))


def test_environment_variable_is_honoured_without_a_gpu(tmp_path, monkeypatch):
    path = _write(tmp_path, _profile(hardware=dict(dram_bytes_per_s=1.0e12)))
    monkeypatch.setenv(hardware.PROFILE_ENV_VAR, str(path))
    hw = hardware.detect()
    assert hw.dram_bytes_per_s == 1.0e12 and str(path) in hw.source
    explanation = jtblas.explain(16, 12288, 4096)
    assert explanation.hardware == hw
    assert f"hardware: profile {path}" in explanation.format(top=1)


@pytest.mark.parametrize("damage", ["truncate", "negative", "schema"])
def test_damaged_profile_in_environment_warns_and_falls_back(tmp_path, monkeypatch, damage):
    profile = _profile()
    if damage == "negative":
        profile["hardware"]["l2_bytes_per_s"] = -1
    if damage == "schema":
        profile["schema"] = 99
    path = _write(tmp_path, profile, f"{damage}.json")
    if damage == "truncate":
        path.write_text(path.read_text()[:40])
    monkeypatch.setenv(hardware.PROFILE_ENV_VAR, str(path))
    monkeypatch.setattr(hardware, "_first_gpu", lambda: None)
    with pytest.warns(UserWarning, match="built-in description"):
        hw = hardware.detect()
    assert hw is hardware.DEFAULT


def _fake_gpu(monkeypatch, device="NVIDIA H200", driver="570.124.06"):
    monkeypatch.setattr(hardware, "_first_gpu", lambda: (device, (9, 0)))
    monkeypatch.setattr(profiles, "driver_version", lambda: driver)
    # A GPU whose jaxlib allocates global scratch (as jaxlib 0.11 on the GPU machine), so the
    # built-in description comes back unchanged (`hardware.for_launch`).
    use_jax_triton_031(monkeypatch)
    monkeypatch.setattr(jax_triton_adapter, "_jaxlib_kernel_takes_scratch", lambda: True)


def test_detect_picks_up_the_cached_profile_for_this_gpu_and_driver(tmp_path, monkeypatch):
    _fake_gpu(monkeypatch)
    assert hardware.detect() is hardware.H200  # nothing cached yet: the built-in
    path = profiles.save(_profile(), profiles.profile_path("NVIDIA H200", "570.124.06"))
    assert path.parent == tmp_path / "cache" / "jtblas" / "profiles"
    assert path.name == "nvidia-h200-570.124.06.json"
    hw = hardware.detect()
    assert hw.dram_bytes_per_s == H200_FIELDS["dram_bytes_per_s"] and str(path) in hw.source
    # Another driver: its own (absent) profile, so the built-in.
    _fake_gpu(monkeypatch, driver="575.1")
    assert hardware.detect() is hardware.H200
    # JTBLAS_GPU names a built-in and beats the cached profile; JTBLAS_PROFILE beats both.
    _fake_gpu(monkeypatch)
    monkeypatch.setenv(hardware.ENV_VAR, "h100")
    assert hardware.detect() is hardware.H100
    other = _write(tmp_path, _profile(hardware=dict(dram_bytes_per_s=2e12)), "other.json")
    monkeypatch.setenv(hardware.PROFILE_ENV_VAR, str(other))
    assert hardware.detect().dram_bytes_per_s == 2e12


def test_damaged_cached_profile_warns_and_falls_back(tmp_path, monkeypatch):
    _fake_gpu(monkeypatch)
    path = profiles.profile_path("NVIDIA H200", "570.124.06")
    path.parent.mkdir(parents=True)
    path.write_text('{"schema": 1, "device": "NVIDIA H200", "dri')
    with pytest.warns(UserWarning, match="not valid JSON.*built-in description"):
        assert hardware.detect() is hardware.H200
    # A profile of another device stored under this name is not used either.
    profiles.save(_profile() | {"device": "NVIDIA H100"}, path)
    with pytest.warns(UserWarning, match="describes 'NVIDIA H100'"):
        assert hardware.detect() is hardware.H200


def test_selection_is_deterministic_for_a_profile_and_profiles_matter(tmp_path):
    path = _write(tmp_path, _profile())
    slow = _write(tmp_path, _profile(hardware=dict(dram_bytes_per_s=0.5e12)), "slow.json")
    shapes = [(1, 4096, 14336), (16, 12288, 4096), (32, 4096, 4096), (64, 14336, 4096)]
    changed = []
    for m, n, k in shapes:
        first = jtblas.select(m, n, k, hardware=str(path))
        model.clear_cache()
        assert jtblas.select(m, n, k, hardware=hardware.load_profile(path)) == first
        assert jtblas.explain(m, n, k, hardware=str(path)).config == first
        base = jtblas.explain(m, n, k, hardware=str(path)).winner
        low = jtblas.explain(m, n, k, hardware=str(slow)).winner
        changed.append(low.config != base.config or low.predicted_seconds > 1.5 * base.predicted_seconds)
    assert any(changed)


def test_profile_constants_reach_the_model(tmp_path):
    path = _write(tmp_path, _profile(constants={"memory_latency_seconds": 3e-6}))
    winner = jtblas.explain(16, 12288, 4096, hardware=str(path)).winner
    assert winner.memory_latency == 3e-6
    default = constants.DEFAULT_CONSTANTS.memory_latency_seconds
    assert jtblas.explain(16, 12288, 4096, hardware="h200").winner.memory_latency == default


def test_explain_cli_names_the_profile(tmp_path, capsys):
    path = _write(tmp_path, _profile())
    assert cli.main(["explain", "16", "12288", "4096", "--profile", str(path), "--top", "2"]) == 0
    assert f"hardware: profile {path}" in capsys.readouterr().out
    assert cli.main(["explain", "16", "12288", "4096", "--gpu", "h100", "--top", "2"]) == 0
    assert "hardware: built-in" in capsys.readouterr().out
