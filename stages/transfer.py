"""Stage transfer@METHOD: build the method's initial model (vocabularies and embeddings) from the pretrained one."""

from __future__ import annotations

from stages import _paths as paths
from vocabridge.entry import run
from vocabridge.fileio import atomic_dir, write_json
from vocabridge.nmt.model import save_model
from vocabridge.transfer import Resources, get_method


def main(argv: list[str]) -> None:
    name, params = paths.method_stage_args(__doc__, argv)
    method = get_method(name)
    lang = params.lang
    res = Resources(pretrained=paths.PRETRAINED,
                    downstream_spm={"src": paths.SPM / "downstream" / f"{lang.src}.model",
                                    "tgt": paths.SPM / "downstream" / f"{lang.tgt}.model"},
                    seed=params.finetune.train.seed)
    model, src, tgt, diagnostics = method.build(res)
    with atomic_dir(paths.init_model(name)) as tmp:
        save_model(model, src, tgt, tmp)
        write_json(tmp / "diagnostics.json", diagnostics | {"method": name, "vocab_size": {
            "src": len(src), "tgt": len(tgt)}, "vocabulary": method.vocabulary})


if __name__ == "__main__":
    run(main)
