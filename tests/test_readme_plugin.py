"""The README's ``my_tv`` is the function ``examples/plugin_verifier.py`` holds, letter for letter (the README
block a user copies is the one certified, gated and tested). The negative control: the buggy twin's source is
not the README's block."""

import inspect
import re
from pathlib import Path

import examples.plugin_verifier


def test_the_readme_shows_the_plugin_as_examples_holds_it():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    blocks = re.findall(r"```python\n(def my_tv\(.*?)```", readme, re.S)
    assert blocks == [inspect.getsource(examples.plugin_verifier.my_tv)]
    assert inspect.getsource(examples.plugin_verifier.my_tv_root_residual) != blocks[0]
