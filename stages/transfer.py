"""Stage transfer@ROW-SEED: build a cell's initial model (vocabularies and embeddings) from the pretrained one.

Writes the model directory with diagnostics.json (rows copied/projected/random, leave-one-out reconstruction,
probe neighbours; also copied to data/diagnostics/ROW/sSEED.json for the cell record) and the numbers DVC tracks as
metrics in data/metrics/transfer/ROW/sSEED.json: zero-shot greedy dev BLEU and dev perplexity before any
fine-tuning, leave-one-out cosine per side. The seed draws what is random in the initial model (new random rows).
The resources come from the row's stamp (stage row@ROW), whose hashes are checked against the files read.
"""

from __future__ import annotations

import json

from stages._grid import cell_stage_args
from vocabridge import workspace as paths
from vocabridge.corpora.user import read_text_lines
from vocabridge.entry import run
from vocabridge.errors import ConfigError, InputError
from vocabridge.families import ABNET, family
from vocabridge.fileio import atomic_dir, sha256_file, write_json
from vocabridge.grid import Cell
from vocabridge.nmt.forgetting import write_old_rows
from vocabridge.nmt.model import save_model
from vocabridge.nmt.train import use_compute
from vocabridge.transfer import Resources, get_method, knobs_for
from vocabridge.transfer.diagnostics import zero_shot


def main(argv: list[str]) -> None:
    cell, params = cell_stage_args(__doc__, argv)
    name = cell.row
    method = get_method(name, params.rows)
    lang, corpus = params.lang, paths.CORPORA / "downstream"
    knobs = knobs_for(name, params.rows)
    check_stamp(name)
    if knobs.train_pairs is not None:
        available = sum(len(read_text_lines(f)) for f in (corpus / f"train.{lang.src}", corpus / f"extra.{lang.src}")
                        if f.is_file())  # the training pairs, and those kept out of the vocabularies' text
        if knobs.train_pairs > available:
            raise ConfigError(f"params.yaml: rows.{name}.train_pairs: {knobs.train_pairs} is more than the "
                              f"{available} training pairs of {corpus}")
    if family(method.family) is ABNET:  # its AB-Net as the abnet stage left it (or its decoder adapted)
        abnet_row(cell, params, knobs, method)
        return
    res = resources(params, knobs, cell.seed)
    use_compute(params.compute)
    model, src, tgt, diagnostics = method.build(res)
    diagnostics |= {"method": name, "vocab_size": {"src": len(src), "tgt": len(tgt)}, "vocabulary": method.vocabulary}
    with atomic_dir(paths.init_model(cell)) as tmp:
        save_model(model, src, tgt, tmp)
        write_json(tmp / "diagnostics.json", diagnostics)
        write_old_rows(tmp, res.pretrained)  # what a fine-tune that keeps the pretrained rows holds
    n = params.diagnostics.dev_sentences
    scores = zero_shot(model, src, tgt, read_text_lines(corpus / f"dev.{lang.src}")[:n],
                       read_text_lines(corpus / f"dev.{lang.tgt}")[:n])
    for side in ("encoder", "decoder"):
        loo = (diagnostics.get(side) or {}).get("leave_one_out")
        scores[f"leave_one_out_cosine_{side}"] = loo["mean_cosine"] if loo else None
    write_json(paths.per_cell(paths.DIAGNOSTICS, cell, ".json"), diagnostics)
    write_json(paths.per_cell(paths.METRICS / "transfer", cell, ".json"), scores)
    print(cell.name, scores)


def check_stamp(row: str) -> dict:
    """The row's stamp (stage row@ROW), its resources' hashes checked against the files: a cell never starts from
    other resources than the ones its DVC dependency names."""
    stamp_file = paths.row_file(row)
    if not stamp_file.is_file():
        raise InputError(f"{stamp_file}: missing; run `dvc repro row@{row}`")
    stamp = json.loads(stamp_file.read_text(encoding="utf-8"))
    for key, entry in stamp["resources"].items():
        if sha256_file(entry["path"]) != entry["sha256"]:
            raise InputError(f"{entry['path']}: changed since {stamp_file} was written ({key}); run "
                             f"`dvc repro row@{row}` first")
    return stamp


def resources(params, knobs, seed: int) -> Resources:
    """What the row's method may draw on, from the pipeline's data/ folders."""
    lang, corpus = params.lang, paths.CORPORA / "downstream"
    return Resources(pretrained=paths.upstream(knobs.upstream),
                     downstream_spm={"src": paths.SPM / "downstream" / f"{lang.src}.model",
                                     "tgt": paths.SPM / "downstream" / f"{lang.tgt}.model"},
                     seed=seed,
                     cbow={"src": paths.CBOW / f"{lang.src}.bin", "tgt": paths.CBOW / f"{lang.tgt}.bin"},
                     knobs=knobs, diagnostics=params.diagnostics, generator=paths.GENERATORS,
                     text={role: [c for c in (corpus / f"train.{code}", corpus / f"mono.{code}") if c.is_file()]
                           for role, code in (("src", lang.src), ("tgt", lang.tgt))},
                     corpus=corpus, pairs=([corpus / f"train.{lang.src}"], [corpus / f"train.{lang.tgt}"]))


def abnet_row(cell: Cell, params, knobs, method) -> None:
    """An AB-Net row's initial model is its AB-Net as the abnet stage left it, or with `target_vocabulary` a
    PLM-sponsored model whose decoder took the downstream vocabulary; zero-shot dev BLEU by Mask-Predict (AB-Net-Enc,
    PLM-sponsored: greedy search) when that AB-Net was trained upstream; none for `upstream: false` (a model never
    trained to translate writes every verse to the length limit: minutes of decoding a cell for a BLEU of 0, and
    the fine-tune's curve starts with that model's dev BLEU anyway); no dev perplexity (a masked LM has none to
    compare with the NMT rows')."""
    import shutil

    import sacrebleu

    from vocabridge.plm.abnet import load_abnet, save_abnet
    from vocabridge.plm.train import translate_abnet
    from vocabridge.plm.vocabulary import adapt_plm_decoder

    name, lang, corpus = cell.row, params.lang, paths.CORPORA / "downstream"
    source = paths.upstream(knobs.upstream)
    model, source_tokenizer, target_tokenizer = load_abnet(source)
    diagnostics = {"method": name, "vocabulary": "plm", "upstream": knobs.upstream, "rows": {"copied": 1.0}}
    if knobs.target_vocabulary:
        use_compute(params.compute)
        target_tokenizer, diagnostics["decoder"] = adapt_plm_decoder(model, target_tokenizer,
                                                                     resources(params, knobs, cell.seed), name, method)
        diagnostics |= {"vocabulary": "plm+downstream target", "rows": diagnostics["decoder"]["rows"]}
    diagnostics |= {"vocab_size": {"src": len(source_tokenizer), "tgt": len(target_tokenizer)},
                    "vocabulary_fit": plm_vocabulary_fit(source_tokenizer, target_tokenizer, lang)}
    with atomic_dir(paths.init_model(cell)) as tmp:
        if knobs.target_vocabulary:
            save_abnet(model, tmp, source_tokenizer, target_tokenizer)
        else:
            shutil.copytree(source, tmp, dirs_exist_ok=True)
        write_json(tmp / "diagnostics.json", diagnostics)
    scores = {"dev_bleu": None, "dev_perplexity": None, "leave_one_out_cosine_encoder": None,
              "leave_one_out_cosine_decoder": None}
    if ABNET.translated_upstream(params, knobs.upstream):
        n = params.diagnostics.dev_sentences
        sources, refs = (read_text_lines(corpus / f"dev.{code}")[:n] for code in (lang.src, lang.tgt))
        use_compute(params.compute)
        hyps, _ = translate_abnet(model, source_tokenizer, target_tokenizer, sources, params.abnet.decoding)
        scores["dev_bleu"] = round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)
    write_json(paths.per_cell(paths.DIAGNOSTICS, cell, ".json"), diagnostics)
    write_json(paths.per_cell(paths.METRICS / "transfer", cell, ".json"), scores)
    print(cell.name, scores)


def plm_vocabulary_fit(source_tokenizer, target_tokenizer, lang) -> dict[str, dict]:
    """The mismatch stage's figures for the PLMs' fixed vocabularies: each side against the downstream
    SentencePiece model of its language, on the downstream test text."""
    from vocabridge.tokenizers import load_spm, mismatch, plm_vocabulary

    corpus = paths.CORPORA / "downstream"
    return {side: mismatch(plm_vocabulary(tokenizer), load_spm(paths.SPM / "downstream" / f"{code}.model"),
                           read_text_lines(corpus / f"test.{code}"))
            for side, tokenizer, code in (("src", source_tokenizer, lang.src), ("tgt", target_tokenizer, lang.tgt))}


if __name__ == "__main__":
    run(main)
