from specproof.gate.testing import assert_lossless

def test_my_verifier_is_lossless():
    assert_lossless("examples.plugin_verifier:my_tv")
