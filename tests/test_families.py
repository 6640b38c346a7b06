"""The model families (vocabridge.families, vocabridge.family_models): one object per family that the pipeline asks,
and no stage, flow or library module that compares a family's name instead."""

import ast

import pytest

from tests.conftest import ROOT
from vocabridge.config import Params, parse, validate
from vocabridge.errors import ConfigError
from vocabridge.families import ABNET, FAMILIES, NMT, family, of_model_dir
from vocabridge.family_models import MODELS, models_of
from vocabridge.transfer import METHODS, finetune_training


def test_every_family_has_its_models_and_every_method_a_family():
    assert set(MODELS) == set(FAMILIES)
    assert all(models_of(fam).family is fam for fam in FAMILIES.values())
    assert {m.family for m in METHODS.values()} == set(FAMILIES)  # both families have rows
    with pytest.raises(ValueError, match="unknown model family 'bert'"):
        family("bert")


def test_each_family_s_budget_weights_and_upstream_models():
    data = {"plms": {"de": {}, "en": {}}, "abnets": {"abnet": {}}, "rows": {"abnet": {}, "ft-srcv": {"max_updates": 7}}}
    params = validate(parse(Params, data, "params"))
    assert NMT.training(params) == params.finetune.train and ABNET.training(params) == params.abnet.finetune
    assert NMT.training(params, 7).max_updates == 7 and finetune_training("ft-srcv", params).max_updates == 7
    assert finetune_training("abnet", params) == params.abnet.finetune
    assert NMT.weights(ROOT).name == "model.safetensors" and ABNET.weights(ROOT).name == "adapters.safetensors"
    NMT.check_upstream("ft-srcv", "base", params)
    ABNET.check_upstream("abnet", "abnet", params)
    with pytest.raises(ConfigError, match=r"rows.x.upstream: 'base' is not an AB-Net model; add abnets.base "
                                          r"\(AB-Net models: abnet\)"):
        ABNET.check_upstream("x", "base", params)
    with pytest.raises(ConfigError, match=r"rows.x.upstream: 'abnet' is not an upstream model; add upstreams.abnet "
                                          r"\(upstream models: base\)"):
        NMT.check_upstream("x", "abnet", params)


def test_a_model_directory_says_its_family(tmp_path):
    assert of_model_dir(tmp_path) is NMT
    (tmp_path / "abnet.json").write_text("{}")
    assert of_model_dir(tmp_path) is ABNET


def test_nothing_outside_the_families_compares_a_family_s_name():
    """A new family is a subclass in families.py and family_models.py, not an `if method.family == "abnet"` in every
    stage: no code compares a `.family` (or a variable named family) with a string."""
    found = []
    homes = {ROOT / "vocabridge" / "families.py", ROOT / "vocabridge" / "family_models.py"}
    for folder in ("vocabridge", "stages", "flows"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path in homes:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Compare):
                    continue
                sides = [node.left, *node.comparators]
                named = any((isinstance(s, ast.Attribute) and s.attr == "family")
                            or (isinstance(s, ast.Name) and s.id == "family") for s in sides)
                literal = any(isinstance(s, ast.Constant) and isinstance(s.value, str) for s in sides)
                if named and literal:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, "compare family objects from vocabridge.families instead: " + ", ".join(found)
