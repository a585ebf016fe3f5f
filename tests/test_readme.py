"""The README's example runs as written (docs that drift from the code fail here)."""

import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README.md has no python example"
    namespace: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    y, dx, dw = namespace["y"], namespace["dx"], namespace["dw"]
    assert y.shape == (256, 1024) and dx.shape == (256, 512) and dw.shape == (512, 1024)
