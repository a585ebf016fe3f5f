"""Bad input raises an error that names the argument and the values; nothing runs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jtblas

A = jnp.ones((8, 16), jnp.bfloat16)
B = jnp.ones((16, 4), jnp.bfloat16)


@pytest.mark.parametrize(
    "a,b,kwargs,error,words",
    [
        (jnp.ones(16, jnp.bfloat16), B, {}, ValueError, ["rank", "a.shape=(16,)"]),
        (A, jnp.ones((2, 16, 4), jnp.bfloat16), {}, ValueError, ["rank", "b.shape=(2, 16, 4)"]),
        (A, jnp.ones((15, 4), jnp.bfloat16), {}, ValueError, ["contract", "16 != 15"]),
        (A, B, {"transpose_b": True}, ValueError, ["contract", "16 != 4"]),
        (jnp.ones((2, 16, 8), jnp.bfloat16), B, {"transpose_a": True}, ValueError, ["transpose_a", "2-D"]),
        (A, B.astype(jnp.int8), {}, TypeError, ["unsupported dtype int8 of b"]),
        (A.astype(jnp.int32), B.astype(jnp.int32), {}, TypeError, ["unsupported dtype int32"]),
        (A.astype(jnp.complex64), B.astype(jnp.complex64), {}, TypeError, ["complex64"]),
        (np.ones((8, 16)), np.ones((16, 4)), {}, TypeError, ["float64"]),
        ([[1.0]], B, {}, TypeError, ["a must be", "list"]),
        (A, "b", {}, TypeError, ["b must be", "str"]),
        (A, B, {"preferred_element_type": jnp.int8}, TypeError, ["preferred_element_type", "int8"]),
        (A, B, {"precision": "fastest-please"}, ValueError, ["precision", "fastest-please"]),
        (A, B, {"config": {"block_m": 64}}, TypeError, ["config", "dict"]),
        (A, B, {"transpose_a": "yes"}, TypeError, ["transpose_a must be a bool", "'yes'"]),
        (A, B, {"transpose_b": 1}, TypeError, ["transpose_b must be a bool", "int"]),
    ],
)
def test_bad_operands(a, b, kwargs, error, words):
    with pytest.raises(error) as info:
        jtblas.matmul(a, b, **kwargs)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize(
    "fields,words",
    [
        ({"block_m": 48}, ["block_m", "power of two", "48"]),
        ({"block_n": 8}, ["block_n", "8"]),
        ({"block_k": 1024}, ["block_k", "1024"]),
        ({"num_warps": 3}, ["num_warps", "3"]),
        ({"num_stages": 0}, ["num_stages", "0"]),
        ({"group_m": 6}, ["group_m", "6"]),
        ({"split_k": 0}, ["split_k", "0"]),
        ({"split_k": 257}, ["split_k", "257"]),
        ({"split_k": 2.0}, ["split_k", "2.0"]),
        ({"block_m": 64.0}, ["block_m", "64.0"]),
        ({"swap_ab": 1}, ["swap_ab", "bool", "1"]),
        ({"swap_ab": True, "tma": True}, ["tma", "swap_ab", "cannot both"]),
    ],
)
def test_invalid_config_values(fields, words):
    with pytest.raises(ValueError) as info:
        jtblas.Config(**fields)
    for word in words:
        assert word in str(info.value)


def test_config_over_shared_memory_names_the_budget():
    config = jtblas.Config(block_m=256, block_n=256, block_k=128, num_stages=4)
    with pytest.raises(ValueError) as info:
        jtblas.matmul(A, B, config=config)
    message = str(info.value)
    assert "shared memory" in message and "524288" in message and str(232448) in message


def test_config_is_hashable_and_static():
    config = jtblas.Config(block_m=32, block_n=32, block_k=32, num_warps=4, num_stages=2)
    assert hash(config) == hash(jtblas.Config(block_m=32, block_n=32, block_k=32, num_warps=4, num_stages=2))
    f = jax.jit(lambda x, y, c: jtblas.matmul(x, y, config=c), static_argnums=2)
    assert f(A, B, config).shape == (8, 4)


# ------------------------------------------------------------------------------ hardware choice and profiles


def _profile_file(tmp_path, **fields):
    import json

    from jtblas import profiles

    profile = profiles.make(device="NVIDIA H200", driver="570.124.06", base="h200", hardware={},
                            date="2026-12-01T00:00:00+00:00")
    for key, value in fields.items():
        if key == "constants":
            profile["constants"] = value
        else:
            profile["hardware"][key] = value
    path = tmp_path / "my-profile.json"
    path.write_text(json.dumps(profile))
    return path


@pytest.mark.parametrize(
    "fields,field,value",
    [
        ({"smem_per_block": 1}, "hardware.smem_per_block", "1"),
        ({"regs_per_sm": 1}, "hardware.regs_per_sm", "1"),
        ({"sm_count": 10**30}, "hardware.sm_count", "1e+30"),
        ({"tensor_flops": {"bfloat16": 1e-300}}, "hardware.tensor_flops.bfloat16", "1e-300"),
        ({"dram_bytes_per_s": 4300.0}, "hardware.dram_bytes_per_s", "4300"),  # TB/s written as GB/s
        ({"launch_seconds": 1.1}, "hardware.launch_seconds", "1.1"),  # µs written as s
        ({"constants": {"memory_latency_seconds": 1000.0}}, "constants.memory_latency_seconds", "1000"),
    ],
)
def test_implausible_profile_values_name_file_field_and_value(tmp_path, fields, field, value):
    from jtblas import hardware, profiles

    path = _profile_file(tmp_path, **fields)
    with pytest.raises(profiles.ProfileError) as info:
        hardware.load_profile(path)
    message = str(info.value)
    assert str(path) in message and f"field '{field}'" in message and f"is {value}," in message
    assert "plausible range" in message
    with pytest.raises(ValueError, match="plausible range"):  # the same through the public API
        jtblas.select(64, 64, 64, hardware=str(path))


def test_profile_fraction_over_one_is_refused(tmp_path):
    from jtblas import hardware, profiles

    path = _profile_file(tmp_path, constants={"l2_usable_fraction": 1.5})
    with pytest.raises(profiles.ProfileError, match="constants.l2_usable_fraction.*fraction, at most 1"):
        hardware.load_profile(path)


def test_plausible_profile_of_a_smaller_gpu_loads(tmp_path):
    """An L4-like part (58 SMs, 300 GB/s, 121 TFLOP/s fp16) is within the plausible range."""
    from jtblas import hardware

    path = _profile_file(tmp_path, sm_count=58, dram_bytes_per_s=3.0e11,
                         tensor_flops={"bfloat16": 1.21e14, "float16": 1.21e14})
    hw = hardware.load_profile(path)
    assert hw.sm_count == 58 and str(path) in hw.source
    assert jtblas.select(64, 64, 64, hardware=str(path)) is not None


def test_unknown_hardware_argument_names_the_argument():
    with pytest.raises(ValueError) as info:
        jtblas.select(64, 64, 64, hardware="h300")
    assert "hardware='h300'" in str(info.value) and "h200" in str(info.value)


def test_bad_environment_variable_names_it(monkeypatch, tmp_path):
    from jtblas import hardware

    monkeypatch.delenv(hardware.PROFILE_ENV_VAR, raising=False)
    monkeypatch.setenv(hardware.ENV_VAR, "garbage")
    with pytest.raises(hardware.HardwareChoiceError, match="JTBLAS_GPU='garbage' \\(environment variable\\)"):
        jtblas.select(64, 64, 64)
    missing = tmp_path / "missing.json"
    monkeypatch.setenv(hardware.ENV_VAR, str(missing))
    with pytest.raises(ValueError) as info:
        jtblas.select(64, 64, 64)
    assert "JTBLAS_GPU=" in str(info.value) and str(missing) in str(info.value) and "cannot be read" in str(info.value)


def test_no_fitting_config_names_the_description_used():
    import dataclasses

    from jtblas import hardware

    tiny = dataclasses.replace(hardware.H200, smem_per_block=1024, source="a test description with 1 KB")
    with pytest.raises(ValueError) as info:
        jtblas.select(64, 64, 64, hardware=tiny)
    assert "no kernel configuration fits" in str(info.value) and "a test description with 1 KB" in str(info.value)


# ------------------------------------------------------------------------------ the command line


def _cli(argv, capsys):
    """(exit status, stdout, stderr) of `jtblas argv` run in this process."""
    from jtblas import cli

    try:
        status = cli.main(argv)
    except SystemExit as exit_:  # argparse's own exits (--help, usage errors)
        status = exit_.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize(
    "argv,words",
    [
        (["explain", "0", "-5", "x"], ["argument M", "0"]),
        (["explain", "16", "16", "x"], ["argument K", "'x'"]),
        (["explain", "16", "16"], ["required", "K"]),
        (["explain", "16", "16", "16", "--dtype", "fp64"], ["--dtype", "fp64"]),
        (["explain", "16", "16", "16", "--layout", "XY"], ["--layout", "XY"]),
        (["explain", "16", "16", "16", "--gpu", "h300"], ["--gpu", "h300"]),
        (["explain", "16", "16", "16", "--profile", "/nonexistent.json"], ["/nonexistent.json", "cannot be read"]),
        (["explain", "16", "16", "16", "--profile", "/nonexistent"], ["/nonexistent", "cannot be read"]),
        (["nonsense"], ["nonsense"]),
    ],
)
def test_cli_user_mistakes_are_one_line_and_status_2(capsys, monkeypatch, argv, words):
    monkeypatch.delenv("JTBLAS_GPU", raising=False)
    monkeypatch.delenv("JTBLAS_PROFILE", raising=False)
    status, _, err = _cli(argv, capsys)
    assert status == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jtblas") and "error:" in lines[0], err
    for word in words:
        assert word in lines[0]


def test_cli_bad_environment_variable_is_one_line_naming_it(capsys, monkeypatch):
    monkeypatch.delenv("JTBLAS_PROFILE", raising=False)
    monkeypatch.setenv("JTBLAS_GPU", "garbage")
    status, _, err = _cli(["explain", "16", "16", "16"], capsys)
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert "JTBLAS_GPU='garbage'" in err and "environment variable" in err


def test_cli_implausible_profile_is_one_line_naming_file_and_field(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("JTBLAS_GPU", raising=False)
    path = _profile_file(tmp_path, smem_per_block=1)
    status, _, err = _cli(["explain", "16", "16", "16", "--profile", str(path)], capsys)
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert str(path) in err and "hardware.smem_per_block" in err


def test_explain_columns_are_defined_in_help_and_docs(capsys):
    import pathlib

    from jtblas.model.explain import COLUMNS

    status, out, _ = _cli(["explain", "--help"], capsys)
    assert status == 0
    table = jtblas.explain(100, 200, 300, hardware="h200").format(top=1)
    header = table.splitlines()[2].split()
    assert header == list(COLUMNS)  # every printed column has a definition
    docs = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "model.md").read_text()
    for name, text in COLUMNS.items():
        assert f"  {name} " in out and text.split(":")[0][:30] in " ".join(out.split())
        assert f"| `{name}` |" in docs, f"docs/model.md does not define explain's column {name!r}"


def test_cli_bench_with_a_bad_environment_variable_is_one_line(capsys, monkeypatch, tmp_path):
    from jtblas.bench import cli as bench_cli

    monkeypatch.setattr(bench_cli, "gpu_problem", lambda: "JAX sees no GPU")
    monkeypatch.delenv("JTBLAS_PROFILE", raising=False)
    monkeypatch.setenv("JTBLAS_GPU", "garbage")
    status, _, err = _cli(["bench", "--shapes", "deepk", "--max-shapes", "1", "--out", str(tmp_path)], capsys)
    assert status == 2
    assert err.strip().splitlines()[-1].startswith("jtblas bench: error: JTBLAS_GPU='garbage'")
    assert "Traceback" not in err


def test_bad_profile_environment_variable_warns_naming_it(monkeypatch, tmp_path):
    from jtblas import hardware

    monkeypatch.delenv(hardware.ENV_VAR, raising=False)
    path = _profile_file(tmp_path, regs_per_sm=1)
    monkeypatch.setenv(hardware.PROFILE_ENV_VAR, str(path))
    with pytest.warns(UserWarning) as record:
        assert hardware.detect() is hardware.DEFAULT  # falls back to the built-in description
    message = " ".join(str(w.message) for w in record)
    assert str(path) in message and "JTBLAS_PROFILE" in message and "hardware.regs_per_sm" in message
