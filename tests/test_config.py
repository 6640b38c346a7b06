import re

import pytest

from tests.conftest import ROOT
from vocabridge.cli import set_profile
from vocabridge.config import Params, apply_profile, flatten, load_params, parse, validate
from vocabridge.errors import ConfigError


def test_repository_params_and_profiles_are_valid():
    """params.yaml and every profile are grids: each row's knobs resolve, `generators` lists exactly the trained
    generators the rows use, a backtranslated row has its backward model, and no row is a seed copy (ROW+sN)."""
    from vocabridge.transfer import generators_needed, knobs_for

    params = load_params(ROOT / "params.yaml")
    assert params.lang.src == "de" and params.prepare.upstream.debian.packages
    for profile in [ROOT / "params.yaml", *sorted((ROOT / "profiles").glob("*.yaml"))]:
        grid = validate(parse(Params, apply_profile(ROOT / "params.yaml", profile), "params"))
        knobs = {row: knobs_for(row, grid.rows) for row in grid.rows}
        assert sorted(grid.generators) == generators_needed(grid.rows), profile.name
        assert all("+" not in row for row in grid.rows), profile.name
        if any(k.backtranslated for k in knobs.values()):
            assert grid.upstreams[grid.backtranslation.upstream].reverse, profile.name


def test_the_models_cells_start_from_train_at_a_fixed_thread_count_in_every_profile():
    """On a CPU another thread count gives other weights, so the trainings whose models the cells start from (the
    base model, the generators, the BERTs) and the fine-tunes name their thread count, or take compute.threads where
    a profile fixes that: never the machine's core count or $VOCABRIDGE_THREADS, so a lost workspace is remade bit
    for bit on any machine of the class. The committed studies' base model is the 2-thread one; the plm and sato
    studies' upstream models the 1-thread ones."""
    for profile in [ROOT / "params.yaml", *sorted((ROOT / "profiles").glob("*.yaml"))]:
        grid = parse(Params, apply_profile(ROOT / "params.yaml", profile), "params")
        for key, threads in (("pretrain.train", grid.pretrain.train.threads),
                             ("generator.train", grid.generator.train.threads),
                             ("plm.train", grid.plm.train.threads), ("abnet.train", grid.abnet.train.threads),
                             ("finetune.train", grid.finetune.train.threads)):
            assert (threads or grid.compute.threads) > 0, f"{profile.name}: {key}.threads follows the machine"
    assert load_params(ROOT / "params.yaml").pretrain.train.threads == 2
    for name in ("plm", "sato"):
        assert parse(Params, apply_profile(ROOT / "params.yaml", ROOT / "profiles" / f"{name}.yaml"),
                     "params").pretrain.train.threads == 1, name


def test_a_training_s_own_thread_count_wins_over_compute_and_the_environment(monkeypatch):
    """use_compute(compute, threads): a stage whose training fixes its thread count (generator.train.threads,
    plm.train.threads) runs at it whatever compute.threads or $VOCABRIDGE_THREADS say; 0 leaves them in charge."""
    import torch

    from vocabridge.config import Compute
    from vocabridge.nmt.train import use_compute

    before = torch.get_num_threads()
    monkeypatch.setenv("VOCABRIDGE_THREADS", "1")
    try:
        use_compute(Compute(threads=0, device="cpu"), 2)
        assert torch.get_num_threads() == 2
        use_compute(Compute(threads=0, device="cpu"))
        assert torch.get_num_threads() == 1
        use_compute(Compute(threads=2, device="cpu"), 0)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_a_profile_replaces_the_rows_whole_and_merges_the_rest(tmp_path):
    params, profiles = tmp_path / "params.yaml", tmp_path / "profiles"
    params.write_text("rows:\n  ft-srcv: {}\n  va-llm: {k: 5}\nseeds: [1, 2, 3]\nfinetune:\n  train_pairs: 2000\n"
                      "  train: {max_updates: 350}\n")
    profiles.mkdir()
    (profiles / "two.yaml").write_text("rows:\n  va-llm: {reg: 0.0}\n  fwet: {}\nseeds: [4]\n"
                                       "finetune: {train: {max_updates: 100}}\n")
    merged = apply_profile(params, profiles / "two.yaml")
    assert merged["rows"] == {"va-llm": {"reg": 0.0}, "fwet": {}} and merged["seeds"] == [4]
    assert merged["finetune"] == {"train_pairs": 2000, "train": {"max_updates": 100}}
    set_profile("two", params, profiles)
    grid = load_params(params)
    assert list(grid.rows) == ["va-llm", "fwet"] and grid.rows["va-llm"].k is None and grid.seeds == [4]
    assert grid.finetune.train_pairs == 2000 and grid.finetune.train.max_updates == 100


def test_a_profile_extends_another_and_states_only_what_differs(tmp_path):
    params, profiles = tmp_path / "params.yaml", tmp_path / "profiles"
    params.write_text("rows:\n  ft-srcv: {}\nseeds: [1]\nfinetune:\n  train_pairs: 2000\n  train: {max_updates: 350}\n")
    profiles.mkdir()
    (profiles / "base.yaml").write_text("rows:\n  ft-srcv: {}\n  fwet: {}\nseeds: [1, 2]\n"
                                        "finetune: {train: {max_updates: 100, patience: 6}}\n")
    (profiles / "big.yaml").write_text("extends: base\nfinetune: {train_pairs: 8000, train: {max_updates: 800}}\n")
    merged = apply_profile(params, profiles / "big.yaml")
    assert merged["rows"] == {"ft-srcv": {}, "fwet": {}} and merged["seeds"] == [1, 2] and merged["profile"] == "big"
    assert merged["finetune"] == {"train_pairs": 8000, "train": {"max_updates": 800, "patience": 6}}
    set_profile("big", params, profiles)
    grid = load_params(params)
    assert grid.profile == "big" and grid.finetune.train.patience == 6 and grid.finetune.train_pairs == 8000
    (profiles / "loop.yaml").write_text("extends: loop\n")
    with pytest.raises(ConfigError, match="extends: 'loop' extends itself"):
        apply_profile(params, profiles / "loop.yaml")
    (profiles / "orphan.yaml").write_text("extends: nowhere\n")
    with pytest.raises(ConfigError, match="orphan.yaml: extends: no profile"):
        apply_profile(params, profiles / "orphan.yaml")


def test_rows_and_seeds_are_checked(tmp_path):
    path = tmp_path / "params.yaml"
    for text, message in (("rows: {}", "rows: the grid needs at least one row"),
                          ("rows:\n  va-llm+s2: {method: va-llm}", "rows.va-llm+s2: a row name of letters"),
                          ("rows:\n  va-llm: {seed: 2}", "unknown key 'seed'"),
                          ("seeds: []", "seeds: a list of distinct seeds"),
                          ("seeds: [1, 1]", "seeds: a list of distinct seeds"),
                          ("seeds: [-1]", "seeds: a list of distinct seeds")):
        path.write_text(text + "\n")
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_params(path)


def test_unknown_key_is_named_with_its_path(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("prepare:\n  upstream:\n    dev_sise: 10\n")
    expected = r"params.yaml: .*unknown key 'dev_sise' \(params.prepare.upstream.dev_sise\)"
    with pytest.raises(ConfigError, match=expected):
        load_params(path)


def test_wrong_types_and_choices_are_named():
    with pytest.raises(ConfigError, match=r"params.spm.upstream.de.vocab_size: expected int"):
        parse(Params, {"spm": {"upstream": {"de": {"vocab_size": "big"}}}}, "params")
    with pytest.raises(ConfigError, match=r"params.prepare.cleaning.placeholders: 'maybe' is not one of"):
        parse(Params, {"prepare": {"cleaning": {"placeholders": "maybe"}}}, "params")
    with pytest.raises(ConfigError, match=r"lang.src/lang.tgt must be 'de' and 'en'"):
        validate(parse(Params, {"lang": {"src": "fr", "tgt": "en"}}, "params"))


def test_broken_yaml_names_the_line(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("lang:\n  src: de\n  tgt: [en\n")
    with pytest.raises(ConfigError, match=r"params.yaml: line \d+ not valid YAML"):
        load_params(path)


def test_flatten_gives_dvc_set_param_keys():
    assert flatten({"a": {"b": 1, "c": {"d": [1, 2]}}, "e": {}}) == {"a.b": 1, "a.c.d": [1, 2], "e": {}}


def test_set_profile_merges_keeps_comments_and_validates(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text("# top comment\nprofile: default\nspm:\n  seed: 1  # the seed\n  threads: 2\n")
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "small.yaml").write_text("spm:\n  threads: 1\n")
    (profiles / "bad.yaml").write_text("spm:\n  thread: 1\n")
    assert set_profile("small", params, profiles) == ["spm.threads", "profile"]
    text = params.read_text()
    assert "# top comment" in text and "# the seed" in text and "threads: 1" in text
    assert load_params(params).profile == "small"
    before = params.read_text()
    with pytest.raises(ConfigError, match="unknown key 'thread'"):
        set_profile("bad", params, profiles)
    with pytest.raises(ConfigError, match="no such profile"):
        set_profile("nope", params, profiles)
    assert params.read_text() == before  # nothing written on error


def test_the_profile_command_applies_a_profile_in_the_project_folder(tmp_path):
    """`vocabridge profile NAME` as a user runs it (a process of its own, in the project's root) writes what
    set_profile writes."""
    import shutil
    import subprocess
    import sys

    from tests.conftest import project_env

    for folder in ("cli", "lib"):
        shutil.copy(ROOT / "params.yaml", (tmp_path / folder).mkdir() or tmp_path / folder / "params.yaml")
        shutil.copytree(ROOT / "profiles", tmp_path / folder / "profiles")
    proc = subprocess.run([sys.executable, "-m", "vocabridge.cli", "profile", "tiny"], cwd=tmp_path / "cli",
                          capture_output=True, text=True, env=project_env())
    assert proc.returncode == 0, proc.stderr
    changed = set_profile("tiny", tmp_path / "lib" / "params.yaml", tmp_path / "lib" / "profiles")
    assert proc.stdout == f"params.yaml: profile 'tiny' applied, {len(changed)} keys changed\n" and changed
    assert (tmp_path / "cli" / "params.yaml").read_text() == (tmp_path / "lib" / "params.yaml").read_text()
    assert load_params(tmp_path / "cli" / "params.yaml").profile == "tiny"


def test_upstream_models_are_checked(tmp_path):
    for entry, message in (("base: {vocab: downstream}", "upstreams.base: a name of letters"),
                           ("generators: {}", "upstreams.generators: a name of letters, digits, '-' and '_', not "
                                              "'base' or 'generators'"),
                           ("bpe-drop: {sampling_alpha: 1.5}", "upstreams.bpe-drop.sampling_alpha: must be in [0, 1)"),
                           ("ft-tgtv: {vocab: target}", "upstreams.ft-tgtv.vocab")):
        path = tmp_path / "params.yaml"
        path.write_text(f"upstreams:\n  {entry}\n")
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_params(path)


def test_backtranslation_and_mixing_keys_are_checked(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("upstreams:\n  backward: {reverse: true}\n  mdl: {vocab: joint, mix_downstream: true}\n"
                    "rows:\n  va-llm-bt: {method: va-llm, backtranslated: true}\n")
    params = load_params(path)
    assert params.upstreams["backward"].reverse and params.upstreams["mdl"].mix_downstream
    assert params.rows["va-llm-bt"].backtranslated and params.backtranslation.upstream == "backward"
    for text, message in (("backtranslation: {sentences: -1}", "backtranslation.sentences: must be >= 0"),
                          ("backtranslation: {beems: 2}", "backtranslation"),
                          ("upstreams:\n  backward: {reverse: maybe}", "upstreams.backward.reverse")):
        path.write_text(text + "\n")
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_params(path)


def test_a_sponsored_model_sets_its_own_terms_over_abnet_sponsored():
    from vocabridge.config import sponsored_settings

    data = {"plms": {"de": {}, "en": {}}, "abnet": {"sponsored": {"alpha": 0.8}},
            "abnets": {"plm-nmt": {"decoder": "coordinator"},
                       "plm-nmt-no-mlm": {"decoder": "coordinator", "sponsored": {"mlm": 0, "distill": False}}}}
    params = validate(parse(Params, data, "params"))
    full, ablated = sponsored_settings(params, "plm-nmt"), sponsored_settings(params, "plm-nmt-no-mlm")
    assert (full.alpha, full.mlm, full.target_lm, full.distill) == (0.8, 0.15, 0.1, True)
    assert (ablated.alpha, ablated.mlm, ablated.target_lm, ablated.distill) == (0.8, 0.0, 0.1, False)
    for entry, expected in (({"decoder": "coordinator", "sponsored": {"kd": False}},
                             r"unknown key 'kd' \(params.abnets.x.sponsored.kd\)"),
                            ({"decoder": "coordinator", "sponsored": {"distill": "no"}},
                             r"params.abnets.x.sponsored.distill: expected"),
                            ({"decoder": "coordinator", "sponsored": {"weighting": "paper"}},
                             r"params.abnets.x.sponsored.weighting: 'paper' is not one of \['eq9', 'released'\]"),
                            ({"decoder": "coordinator", "sponsored": {"target_lm": 1.5}},
                             r"abnets.x.sponsored.target_lm: a fraction in \[0, 1\)"),
                            ({"sponsored": {"mlm": 0}}, r"abnets.x.sponsored: only for `decoder: coordinator`"),
                            ({"plms": "encoder"}, r"abnets.x.plms: encoder \(a BERT on one side only\) is for "),
                            ({"decoder": "coordinator", "plms": "both"}, r"params.abnets.x.plms: expected")):
        with pytest.raises(ConfigError, match=expected):
            validate(parse(Params, data | {"abnets": {"x": entry}}, "params"))


def test_only_a_model_that_trained_upstream_has_upstream_translation_to_score():
    from vocabridge.families import ABNET, NMT

    data = {"plms": {"de": {}, "en": {}}, "abnets": {"abnet": {}, "abnet-down": {"upstream": False}}}
    params = validate(parse(Params, data, "params"))
    assert NMT.translated_upstream(params, None)  # NMT rows: in-domain keeps the floor of forgetting
    assert ABNET.translated_upstream(params, "abnet")
    assert not ABNET.translated_upstream(params, "abnet-down")


# params.yaml keys whose value deliberately differs from the dataclass default (every other leaf must equal it)
NOT_THE_DATACLASS_DEFAULT = {
    "rows",  # the study's grid; Params() keeps the smallest valid one (out-domain, in-domain, ft-srcv), which tests
    "seeds",  # and a partial params file start from without the generator stage that patt-eg-kd-both needs
    "generators",  # follows the rows (validate: exactly the generators the rows use)
    "prepare.upstream.debian.packages",  # 239 package names surveyed for this study: data, not a knob
}


def _leaves(data, path=""):
    """(dotted path, value) of every leaf of a YAML mapping; an empty mapping is a leaf of its own."""
    if isinstance(data, dict) and data:
        for key, value in data.items():
            yield from _leaves(value, f"{path}.{key}" if path else str(key))
    else:
        yield path, data


def test_params_yaml_states_the_dataclass_defaults():
    """One home per default (issue 38): every value params.yaml states equals the dataclass default of its key, so
    that a changed default on one side only fails here; the CLI's defaults are read from the same dataclasses."""
    import dataclasses

    from vocabridge.cli import VARIANTS
    from vocabridge.config import GeneratorParams, read_yaml

    raw = read_yaml(ROOT / "params.yaml")
    stated = dataclasses.asdict(parse(Params, raw, "params"))  # parsed: "4" and 3 as the types say
    default = dataclasses.asdict(Params())
    differ = []
    for path, _ in _leaves(raw):
        if any(path == key or path.startswith(key + ".") for key in NOT_THE_DATACLASS_DEFAULT):
            continue
        ours, theirs = stated, default
        for key in path.split("."):
            ours, theirs = ours[key], theirs.get(key, "<no default>") if isinstance(theirs, dict) else "<no default>"
        if ours != theirs:
            differ.append(f"{path}: params.yaml {ours!r}, dataclass {theirs!r}")
    assert not differ, "\n".join(differ)
    for key in NOT_THE_DATACLASS_DEFAULT:  # an allow-listed key that agrees again leaves the list
        value_yaml, value_default = stated, default
        for part in key.split("."):
            value_yaml, value_default = value_yaml[part], value_default[part]
        assert value_yaml != value_default, f"{key} equals its dataclass default: drop it from the allow-list"
    assert VARIANTS == {name: (v.kind, v.kd_lambda) for name, v in GeneratorParams().variants.items()}
