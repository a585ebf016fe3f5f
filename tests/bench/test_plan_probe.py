"""benchmarks/plan_probe.py times what it says: each plan name becomes the contender it names (the
model's pick, a repack mode, a forced config), every contender computes the same product as XLA's
dot on small odd stand-ins (Triton's interpreter on CPU), and bad arguments exit with one line."""

import jax
import pytest

from tests.reference import load_script


@pytest.fixture(scope="module")
def plan_probe():
    return load_script("benchmarks/plan_probe.py")


@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
def test_every_plan_computes_the_product(plan_probe, layout):
    shape = plan_probe.parse_product(f"37x61x29:{layout}")
    assert (shape.m, shape.n, shape.k, shape.layout) == (37, 61, 29, layout)
    plans = ["pick", "always", "strides", "never", "16x32x32 w4 s2 g1"] + (["transpose"] if layout[1] == "T" else [])
    dots = plan_probe.plan_dots(shape, plans)
    assert list(dots) == ["xla", *plans]
    agreed = plan_probe.agreement(dots, shape)
    assert agreed["xla"] == 0.0
    for name in plans:
        assert isinstance(agreed[name], float) and agreed[name] < 2e-2, (name, agreed[name])


def test_repack_modes_really_copy(plan_probe):
    """The mode contenders trace the copies they name (a pad of B for 37x61x29 NN), the plain one none."""
    shape = plan_probe.parse_product("37x61x29")
    dots = plan_probe.plan_dots(shape, ["always", "strides", "never"])
    a = jax.ShapeDtypeStruct((37, 29), "bfloat16")
    b = jax.ShapeDtypeStruct((29, 61), "bfloat16")
    texts = {name: str(jax.make_jaxpr(dot)(a, b)) for name, dot in dots.items()}
    assert "pad[" in texts["always"] and "pad[" in texts["strides"] and "pad[" not in texts["never"]
    assert "slice" in texts["always"] and "slice" not in texts["strides"]


@pytest.mark.parametrize("argv,words", [
    (["12x34"], "MxNxK"),
    (["0x4x4"], "sizes >= 1"),
    (["4x4x4:NX"], "layout"),
    (["4x4x4", "--plans", "pick,bogus"], "bogus"),
    (["4x4x4", "--trials", "0"], "--trials"),
])
def test_bad_arguments_exit_with_one_line(plan_probe, argv, words, capsys):
    assert plan_probe.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("plan_probe: ") and words in err[0]
