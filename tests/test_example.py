"""examples/train_mlp.py runs end to end (shortened) and learns: jtblas Dense layers, forward and
backward, through the interpreter on CPU."""

import importlib.util
import pathlib
import sys

import pytest

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "train_mlp.py"


def load_example():
    spec = importlib.util.spec_from_file_location("train_mlp", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # Flax modules are dataclasses, which look their module up
    spec.loader.exec_module(module)
    return module


def test_train_mlp_short_run_learns(capsys):
    pytest.importorskip("sklearn")
    pytest.importorskip("optax")
    accuracy = load_example().main(["--epochs", "2", "--hidden", "64", "--no-progress"])
    printed = capsys.readouterr().out
    assert "epoch   2  loss" in printed and "test accuracy" in printed
    assert accuracy > 0.8  # about 0.9 after two epochs; chance is 0.1
