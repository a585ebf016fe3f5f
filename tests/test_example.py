"""examples/train_mlp.py runs end to end (shortened) and learns: jtblas Dense layers, forward and
backward, through the interpreter on CPU."""

import pytest

from tests.reference import load_script


def load_example():
    return load_script("examples/train_mlp.py")


def test_train_mlp_short_run_learns(capsys):
    pytest.importorskip("sklearn")
    pytest.importorskip("optax")
    accuracy = load_example().main(["--epochs", "2", "--hidden", "64", "--no-progress"])
    printed = capsys.readouterr().out
    assert "epoch   2  loss" in printed and "test accuracy" in printed
    assert accuracy > 0.8  # about 0.9 after two epochs; chance is 0.1
