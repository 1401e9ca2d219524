import inspect
import re
from pathlib import Path

from specproof.gate.testing import assert_lossless

import examples.plugin_verifier


def test_my_verifier_is_lossless():
    assert_lossless("examples.plugin_verifier:my_tv")


def test_the_readme_shows_the_plugin_as_examples_holds_it():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    blocks = re.findall(r"```python\n(def my_tv\(.*?)```", readme, re.S)
    assert blocks == [inspect.getsource(examples.plugin_verifier.my_tv)]
    # the negative control: the buggy twin is not the README's block
    assert inspect.getsource(examples.plugin_verifier.my_tv_root_residual) != blocks[0]
