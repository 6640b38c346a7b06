"""The `vocabridge` command: helpers around the pipeline that are not DVC stages."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from types import SimpleNamespace

from ruamel.yaml import YAML

from vocabridge.config import (
    WHOLE,
    Cbow,
    Compute,
    Diagnostics,
    Evaluate,
    Finetune,
    GeneratorParams,
    GeneratorTraining,
    Spm,
    SpmModel,
    TransferMethod,
    apply_profile,
    flatten,
    read_profile,
)
from vocabridge.entry import run
from vocabridge.errors import ConfigError


def set_profile(name: str, params: Path = Path("params.yaml"), profiles: Path = Path("profiles")) -> list[str]:
    """Merge profiles/NAME.yaml into params.yaml in place (comments kept); returns the changed keys."""
    overlay_path = profiles / f"{name}.yaml"
    if not overlay_path.is_file():
        known = sorted(p.stem for p in profiles.glob("*.yaml"))
        raise ConfigError(f"{overlay_path}: no such profile (known: {known})")
    apply_profile(params, overlay_path)  # validates the merged result before anything is written
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 110
    doc = yaml.load(params.read_text(encoding="utf-8"))
    changed = []
    overlay = read_profile(overlay_path) | {"profile": name}
    for key in WHOLE & set(overlay):  # the profile's rows are the grid's rows
        if doc.get(key) != overlay[key]:
            doc[key] = overlay[key]
            changed.append(key)
    for dotted, value in flatten({k: v for k, v in overlay.items() if k not in WHOLE}).items():
        node = doc
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        if node.get(leaf) != value:
            node[leaf] = value
            changed.append(dotted)
    tmp = params.with_name(f".{params.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        yaml.dump(doc, handle)
    tmp.replace(params)
    cells = params.parent / "results" / name / "cells"  # the study's committed cells, which the report reads
    if not cells.is_dir():
        cells.mkdir(parents=True)
        (cells / "README.md").write_text(
            f"# Cells of the `{name}` profile\n\nOne folder per finished cell, ROW/sSEED/ (record.json, hyp.txt, "
            f"upstream_hyp.txt, curve.csv), added by `vocabridge results --cells`; the report reads them with the "
            f"workspace's own data/cells.\n", encoding="utf-8")
    return changed


def adapt_methods() -> dict[str, object]:
    """The methods `adapt` offers: every initialiser that needs no more than the user's model and text (and, for
    att-eg, patt-eg and patt-eg-kd, a generator from `vocabridge train-generator`)."""
    from vocabridge.transfer import METHODS

    return {name: m for name, m in METHODS.items() if m.adapts and "corpus" not in m.needs}


def adapt(args: argparse.Namespace) -> dict:
    """Give a user's Marian/OPUS-MT, NLLB-200 or M2M100 model vocabularies fitted to their in-domain text (see
    `adapt --help`)."""
    from vocabridge.architectures import check_model_dir
    from vocabridge.cbow import save_vectors, train_cbow
    from vocabridge.corpora.user import read_text_lines
    from vocabridge.fileio import atomic_dir, write_json
    from vocabridge.nmt.forgetting import write_old_rows
    from vocabridge.nmt.model import save_model
    from vocabridge.tokenizers import train_spm
    from vocabridge.transfer import Resources, get_method, knobs_for, needs, start_method
    from vocabridge.transfer.init_map import read_init_map

    arch = check_model_dir(args.model)
    init_map = read_init_map(args.init_map) if args.init_map else None  # its line errors before any training
    rows = {args.method: TransferMethod(
        sides=args.sides, shared=args.shared, k=args.k, reg=args.reg, extend=args.extend, init_from=args.init_from,
        align=args.align, distill_epochs=args.distill_epochs, distill_lr=args.distill_lr,
        distill_pairs=args.distill_pairs, distill_output=args.distill_output)}
    method, start, uses = get_method(args.method), start_method(args.method, rows), needs(args.method, rows)
    knobs = knobs_for(args.method, rows)
    pairs = distill_pairs(args) if "pairs" in uses else None  # a text that is not parallel fails before training
    if arch.shared:
        return adapt_shared(args, arch, method, knobs, init_map, pairs)
    roles = {"encoder": ("src", args.src_text), "decoder": ("tgt", args.tgt_text)}
    adapted = ["encoder", "decoder"] if knobs.sides == "both" else [knobs.sides]
    for side in adapted:
        if not roles[side][1]:
            raise ConfigError(f"adapt: --sides {knobs.sides} needs --{roles[side][0]}-text")
    if start.generator and not args.generator:
        raise ConfigError(f"adapt: --method {args.method} needs --generator FILE (train one with `vocabridge "
                          f"train-generator --variant {start.generator}`)")
    dim = _d_model(args.model)
    with tempfile.TemporaryDirectory(prefix="vocabridge-adapt-") as work:
        work = Path(work)
        spm_files, cbow_files = {}, {}
        for side in adapted:
            role, files = roles[side]
            lines = [line for f in files for line in read_text_lines(f)]
            spm_files[role] = work / f"{role}.model"
            spm_cfg = SpmModel(vocab_size=args.vocab_size, hard_vocab_limit=False)  # at most vocab_size pieces
            spm_files[role].write_bytes(train_spm(lines, spm_cfg, args.seed, args.threads, f"adapt.{role}"))
            if "cbow" in uses:
                import sentencepiece as spm

                sp = spm.SentencePieceProcessor(model_file=str(spm_files[role]))
                cfg = Cbow(window=args.cbow_window, epochs=args.cbow_epochs, min_count=1, threads=1, seed=args.seed)
                cbow_files[role] = work / f"{role}.bin"
                save_vectors(train_cbow(lines, sp, dim, cfg, role), cbow_files[role])
        for role in ("src", "tgt"):  # the side that is kept still needs a path; it is not read
            spm_files.setdefault(role, work / "unused.model")
        text = {roles[side][0]: list(roles[side][1]) for side in adapted} if "text" in uses or knobs.extend else {}
        res = Resources(pretrained=args.model, downstream_spm=spm_files, seed=args.seed, cbow=cbow_files, knobs=knobs,
                        diagnostics=Diagnostics(probes=args.probes), text=text,
                        generator=args.generator if start.generator else None, init_map=init_map,
                        pairs=(list(args.src_text), list(args.tgt_text)) if pairs else None)
        model, src, tgt, diagnostics = method.build(res)
        diagnostics |= {"method": args.method, "vocab_size": {"src": len(src), "tgt": len(tgt)},
                        "pretrained": str(args.model)}
        with atomic_dir(args.out) as tmp:
            save_model(model, src, tgt, tmp)
            write_json(tmp / "diagnostics.json", diagnostics)
            write_old_rows(tmp, args.model)  # what `finetune --freeze-old-rows` holds
    return diagnostics


def distill_pairs(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """--src-text and --tgt-text as parallel text (distill's teacher forcing): as many lines on each side."""
    from vocabridge.corpora.user import read_text_lines

    src, tgt = ([line for f in files for line in read_text_lines(f)] for files in (args.src_text, args.tgt_text))
    if not src or len(src) != len(tgt):
        raise ConfigError(f"adapt: --method {args.method} reads parallel text: --src-text and --tgt-text line by line "
                          f"(given {len(src)} and {len(tgt)} lines)")
    return src, tgt


def adapt_shared(args: argparse.Namespace, arch, method, knobs, init_map, pairs=None) -> dict:
    """`adapt` for NLLB-200 and M2M100: one vocabulary trained on the text of both languages replaces (or with
    --extend, extends) the model's shared one (vocabridge.transfer.shared); distill then fits the new rows on
    `pairs`, read in --src-lang and --tgt-lang."""
    from vocabridge.cbow import load_vectors, save_vectors, train_cbow
    from vocabridge.corpora.user import read_text_lines
    from vocabridge.fileio import atomic_dir, write_json
    from vocabridge.nmt.shared import save_model, train_shared_spm
    from vocabridge.transfer import METHODS
    from vocabridge.transfer.shared import adapt_shared as build
    from vocabridge.transfer.shared import distill_shared

    if knobs.sides != "both":
        raise ConfigError(f"adapt: {args.model} is a {arch.label} model with one vocabulary for both languages; "
                          f"--sides does not apply (leave it out)")
    start = METHODS[knobs.init_from] if method.distills else method
    if start.generator:
        raise ConfigError(f"adapt: --method {args.method} needs a generator, which `train-generator` trains for "
                          f"Marian models only; pick another method for a {arch.label} model")
    if pairs is not None and not (args.src_lang and args.tgt_lang):
        raise ConfigError(f"adapt: --method {args.method} on a {arch.label} model needs --src-lang and --tgt-lang "
                          f"(the language codes its sentences start with, e.g. '{arch.lang_example}')")
    lines = [line for f in [*args.src_text, *args.tgt_text] for line in read_text_lines(f)]
    if not lines:
        raise ConfigError("adapt: give --src-text and/or --tgt-text (the shared vocabulary is trained on both)")
    blob = train_shared_spm(lines, args.vocab_size, args.seed, args.threads)
    with tempfile.TemporaryDirectory(prefix="vocabridge-adapt-") as work:
        aux, aux_file = None, "CBOW vectors"
        if "cbow" in start.needs:
            import sentencepiece as spm

            dim = _d_model(args.model)
            cfg = Cbow(window=args.cbow_window, epochs=args.cbow_epochs, min_count=1, threads=1, seed=args.seed)
            aux_file = str(Path(work) / "shared.bin")
            save_vectors(train_cbow(lines, spm.SentencePieceProcessor(model_proto=blob), dim, cfg, "shared"),
                         Path(aux_file))
            aux = load_vectors(Path(aux_file), dim)
        options = start.build.keywords
        model, vocab, diagnostics = build(args.model, blob, lines, options["initializer"], knobs,
                                          Diagnostics(probes=args.probes), args.seed, aux, aux_file, init_map,
                                          options.get("check_loo", True))
    if pairs is not None:
        diagnostics["distill"] = distill_shared(model, vocab, args.model, pairs, knobs, args.seed, args.src_lang,
                                                args.tgt_lang)
        diagnostics["init_from"] = knobs.init_from
    diagnostics |= {"method": args.method, "vocab_size": {"shared": len(vocab)}, "pretrained": str(args.model),
                    "architecture": arch.name}
    with atomic_dir(args.out) as tmp:
        save_model(model, vocab, tmp, like=args.model)
        write_json(tmp / "diagnostics.json", diagnostics)
    return diagnostics


def audit(args: argparse.Namespace) -> tuple[list[dict], list]:
    """`vocabridge audit`: how the model's vocabularies fit the text (vocabridge.audit); OUT/audit.{json,md,png}."""
    import dataclasses

    import sentencepiece as spm

    from vocabridge.architectures import SPM_FILE, check_model_dir
    from vocabridge.audit import audit_side, detect_side, markdown, plot, table_rows
    from vocabridge.corpora.user import read_text_lines
    from vocabridge.fileio import atomic_dir, write_json

    arch = check_model_dir(args.model)
    if not (args.text or args.src_text or args.tgt_text):
        raise ConfigError("audit: give --text, or --src-text and/or --tgt-text")
    if args.text and (args.src_text or args.tgt_text):
        raise ConfigError("audit: --text picks its side itself; give it alone, or --src-text/--tgt-text")
    if any(size < 10 for size in args.sizes):
        raise ConfigError(f"audit: --sizes: every size must be at least 10, got {args.sizes}")
    files = {"src": SPM_FILE, "tgt": SPM_FILE} if arch.shared else {"src": "source.spm", "tgt": "target.spm"}
    models = {role: spm.SentencePieceProcessor(model_file=str(args.model / name)) for role, name in files.items()}
    texts = {role: [line for f in files for line in read_text_lines(f)]
             for role, files in (("src", args.src_text), ("tgt", args.tgt_text)) if files}
    if args.text:
        lines = [line for f in args.text for line in read_text_lines(f)]
        texts = {detect_side(models["src"], models["tgt"], lines): lines}
    corpora = {role: [line for f in files for line in read_text_lines(f)]
               for role, files in (("src", args.model_src_corpus), ("tgt", args.model_tgt_corpus)) if files}
    audits = [audit_side(models[role], text, role, args.sizes, args.seed, args.threads, corpora.get(role), args.rare)
              for role, text in texts.items()]
    with atomic_dir(args.out) as tmp:
        write_json(tmp / "audit.json", {"model": str(args.model), "sides": [dataclasses.asdict(a) for a in audits]})
        plot(audits, tmp / "audit.png")
        (tmp / "audit.md").write_text(markdown(audits, str(args.model), "audit.png"), encoding="utf-8")
    return table_rows(audits), audits


def finetune(args: argparse.Namespace) -> dict:
    """`vocabridge finetune`: the pipeline's training loop on the user's pairs; resumes from --checkpoints."""
    import shutil
    from dataclasses import asdict

    from vocabridge.architectures import check_model_dir
    from vocabridge.config import Lang, Training
    from vocabridge.corpora.user import read_text_lines
    from vocabridge.fileio import atomic_dir, sha256_file, write_json
    from vocabridge.nmt.model import load_model, save_model
    from vocabridge.nmt.train import fingerprint_of, fit, use_compute, write_logs

    arch = check_model_dir(args.model)
    check_langs(args, arch, "finetune")
    files = {"train.src": args.src_train, "train.tgt": args.tgt_train, "dev.src": args.src_dev, "dev.tgt": args.tgt_dev}
    for split in ("train", "dev"):
        src, tgt = files[f"{split}.src"], files[f"{split}.tgt"]
        n_src, n_tgt = len(read_text_lines(src)), len(read_text_lines(tgt))
        if n_src != n_tgt:
            raise ConfigError(f"finetune: {src} has {n_src} lines but {tgt} has {n_tgt}: the pairs must be aligned")
    cfg = Training(max_updates=args.max_updates, batch_tokens=args.batch_tokens, lr=args.lr, warmup=args.warmup,
                   eval_every=args.eval_every, dev_sentences=args.dev_sentences, select_by=args.select_by,
                   patience=args.patience, checkpoint_every=args.checkpoint_every, threads=args.threads,
                   bf16={"auto": "auto", "true": True, "false": False}[args.bf16], seed=args.seed)
    checkpoints = args.checkpoints or args.out.with_name(args.out.name + ".checkpoints")
    device = use_compute(SimpleNamespace(threads=args.threads, device=args.device))
    keep, mixed = keep_options(args, arch)
    if arch.shared:
        return finetune_shared(args, cfg, files, checkpoints, device)
    model, src, tgt = load_model(args.model, str(device))
    fingerprint = fingerprint_of("finetune", asdict(cfg), sha256_file(args.model / "model.safetensors"),
                                 *(sha256_file(f) for f in files.values()),
                                 *([asdict(keep)] if keep else []), *([mixed] if mixed else []))
    with tempfile.TemporaryDirectory(prefix="vocabridge-finetune-") as corpus:
        for name, path in files.items():
            shutil.copyfile(path, Path(corpus) / name)
        if mixed:
            mix_pairs(Path(corpus), mixed)
        state, summary = fit(model, src, tgt, Path(corpus), Lang("src", "tgt"), cfg, checkpoints, fingerprint,
                             "finetune", keep=keep)
    with atomic_dir(args.out) as tmp:
        save_model(model.cpu(), src, tgt, tmp)
        write_logs(state, tmp / "curves")
        write_json(tmp / "metrics.json", summary | {"model": str(args.model)})
    return summary


def keep_options(args: argparse.Namespace, arch):
    """`finetune`'s forgetting options: what it holds (nmt.forgetting.Keep or None) and the original-domain pairs
    it mixes in (None, or {src, tgt, share}); checked before anything trains."""
    from vocabridge.corpora.user import read_text_lines
    from vocabridge.nmt.forgetting import Keep, read_old_rows

    holding = args.freeze_old_rows or args.new_rows_first
    mixing = args.mix_src is not None or args.mix_tgt is not None
    if (holding or mixing) and arch.shared:
        raise ConfigError(f"finetune: --freeze-old-rows, --new-rows-first and --mix-* are for Marian models; "
                          f"{args.model} is a {arch.label} model")
    if args.new_rows_first < 0:
        raise ConfigError(f"finetune: --new-rows-first must be >= 0, got {args.new_rows_first}")
    keep = Keep(read_old_rows(args.model), args.freeze_old_rows, args.new_rows_first) if holding else None
    if not mixing:
        return keep, None
    if args.mix_src is None or args.mix_tgt is None:
        raise ConfigError("finetune: give both --mix-src and --mix-tgt (the original-domain pairs)")
    if not 0 < args.mix_share < 1:
        raise ConfigError(f"finetune: --mix-share must be between 0 and 1, got {args.mix_share}")
    n_src, n_tgt = len(read_text_lines(args.mix_src)), len(read_text_lines(args.mix_tgt))
    if n_src != n_tgt or not n_src:
        raise ConfigError(f"finetune: {args.mix_src} has {n_src} lines and {args.mix_tgt} {n_tgt}: the pairs must "
                          f"be aligned and not empty")
    return keep, {"src": str(args.mix_src), "tgt": str(args.mix_tgt), "share": args.mix_share}


def mix_pairs(corpus: Path, mixed: dict) -> int:
    """Append to corpus/train.{src,tgt} a fixed sample of the original-domain pairs, `share` of the whole (all of
    them when there are fewer); returns how many."""
    import numpy as np

    from vocabridge.corpora.user import read_text_lines
    from vocabridge.fileio import write_lines

    pairs = len(read_text_lines(corpus / "train.src"))
    extra = [read_text_lines(Path(mixed[role])) for role in ("src", "tgt")]
    want = min(len(extra[0]), max(1, round(mixed["share"] / (1 - mixed["share"]) * pairs)))
    chosen = np.sort(np.random.default_rng(0).permutation(len(extra[0]))[:want])
    for role, lines in zip(("src", "tgt"), extra, strict=True):
        write_lines(corpus / f"train.{role}", read_text_lines(corpus / f"train.{role}") + [lines[i] for i in chosen])
    return want


def check_langs(args: argparse.Namespace, arch, command: str) -> None:
    """NLLB-200 and M2M100 need the language codes of both sides; a Marian model knows its pair."""
    given = args.src_lang is not None or args.tgt_lang is not None
    if arch.shared and (args.src_lang is None or args.tgt_lang is None):
        raise ConfigError(f"{command}: {args.model} is a {arch.label} model: give --src-lang and --tgt-lang "
                          f"(language codes such as {arch.lang_example})")
    if given and not arch.shared:
        raise ConfigError(f"{command}: --src-lang/--tgt-lang are for NLLB-200 and M2M100 models; {args.model} is "
                          f"a {arch.label} model, which knows its language pair")


def finetune_shared(args: argparse.Namespace, cfg, files: dict[str, Path], checkpoints: Path, device) -> dict:
    """`finetune` for NLLB-200 and M2M100 (nmt.shared.fit): the pairs carry the language codes."""
    from dataclasses import asdict

    from vocabridge.fileio import atomic_dir, sha256_file, write_json
    from vocabridge.nmt.shared import fit, load_model, save_model
    from vocabridge.nmt.train import fingerprint_of, write_logs

    model, vocab = load_model(args.model, str(device))
    src, tgt = vocab.for_lang(args.src_lang, args.model), vocab.for_lang(args.tgt_lang, args.model)
    fingerprint = fingerprint_of("finetune", asdict(cfg), sha256_file(args.model / "model.safetensors"),
                                 *(sha256_file(f) for f in files.values()), args.src_lang, args.tgt_lang)
    state, summary = fit(model, src, tgt, files, cfg, checkpoints, fingerprint, "finetune")
    with atomic_dir(args.out) as tmp:
        save_model(model.cpu(), vocab, tmp, like=args.model, src_lang=args.src_lang, tgt_lang=args.tgt_lang)
        write_logs(state, tmp / "curves")
        write_json(tmp / "metrics.json", summary | {"model": str(args.model)})
    return summary


# generator variants: (kind, kd_lambda), the defaults of params' generator.variants (their one home: config.py)
VARIANTS = {name: (v.kind, v.kd_lambda) for name, v in GeneratorParams().variants.items()}


def variant_method(variant: str) -> str:
    """The adapt method that uses a generator of this variant (the method registry's `generator`)."""
    from vocabridge.transfer import METHODS

    return next(name for name, m in METHODS.items() if m.generator == variant)


def train_generator(args: argparse.Namespace) -> dict:
    """`vocabridge train-generator`: an embedding generator (Liu et al. 2021) trained against the user's frozen
    model on parallel text it translates well; resumes from --checkpoints."""
    from dataclasses import asdict

    from vocabridge.config import GeneratorTraining, Resegment
    from vocabridge.corpora.user import read_text_lines
    from vocabridge.fileio import sha256_file, write_json
    from vocabridge.nmt.data import Parallel
    from vocabridge.nmt.model import check_model_dir, load_model
    from vocabridge.nmt.train import fingerprint_of, use_compute
    from vocabridge.transfer.generator import Generator, save_generator
    from vocabridge.transfer.generator_training import GeneratorTrainer, summary

    check_model_dir(args.model)
    if args.out.suffix != ".safetensors":
        raise ConfigError(f"train-generator: --out {args.out}: name it FILE.safetensors")
    src_lines, tgt_lines = read_text_lines(args.src_text), read_text_lines(args.tgt_text)
    if len(src_lines) != len(tgt_lines):
        raise ConfigError(f"train-generator: {args.src_text} has {len(src_lines)} lines but {args.tgt_text} has "
                          f"{len(tgt_lines)}: the pairs must be aligned")
    kind, kd_lambda = VARIANTS[args.variant]
    cfg = GeneratorTraining(steps=args.steps, batch_tokens=args.batch_tokens, lr=args.lr, seed=args.seed,
                            checkpoint_every=args.checkpoint_every, log_every=min(25, args.steps) or 1)
    device = use_compute(SimpleNamespace(threads=args.threads, device=args.device))
    model, src, tgt = load_model(args.model, str(device))
    data = Parallel.encode(src_lines, tgt_lines, src, tgt, cfg.max_len)
    if not len(data):
        raise ConfigError(f"train-generator: no pair of {args.src_text} fits {cfg.max_len} pieces a side")
    model_sha = sha256_file(args.model / "model.safetensors")
    fingerprint = fingerprint_of("train-generator", args.variant, args.sides, asdict(cfg), asdict(Resegment()),
                                 model_sha, sha256_file(args.src_text), sha256_file(args.tgt_text))
    gen = Generator(kind, model.config.d_model, cfg.patt_scale)
    checkpoints = args.checkpoints or args.out.with_name(args.out.stem + ".checkpoints")
    trainer = GeneratorTrainer(model, src, tgt, data, gen, kd_lambda, cfg, Resegment(), checkpoints, fingerprint,
                               name=f"generator {args.variant}", sides=args.sides)
    state = trainer.train()
    result = summary(state, trainer) | {"variant": args.variant, "sides": args.sides, "train_pairs": len(data),
                                        "model": str(args.model)}
    save_generator(gen, args.out, model_sha256=model_sha)
    write_json(args.out.with_suffix(".json"), result)
    return result


def translate(args: argparse.Namespace) -> dict:
    """`vocabridge translate`: beam search by the evaluate stage's decoders (CTranslate2, or transformers' search on
    a GPU too), plain text in and out (stdout without --output)."""
    import sys

    import torch

    from vocabridge.architectures import check_model_dir
    from vocabridge.corpora.user import read_text_lines
    from vocabridge.fileio import atomic_file
    from vocabridge.nmt.train import device_of, threads_of
    from vocabridge.nmt.translate import ModelTranslator

    arch = check_model_dir(args.model)
    check_langs(args, arch, "translate")
    lines = read_text_lines(args.input)
    threads = threads_of(args.threads)
    torch.set_num_threads(threads)
    search = {"beam": args.beam, "length_penalty": args.length_penalty, "batch_tokens": args.batch_tokens}
    if arch.shared and args.decoder == "ctranslate2":  # converted from the directory, as a Marian model is
        from vocabridge.nmt.shared import translate_lines_ct2

        hyps, speed = translate_lines_ct2(args.model, lines, args.src_lang, args.tgt_lang, threads=threads,
                                           device=device_of(args.device).type, **search)
    elif arch.shared:
        from vocabridge.nmt.precision import resolve_bf16
        from vocabridge.nmt.shared import translate_lines

        device = device_of(args.device)
        hyps, speed = translate_lines(args.model, lines, args.src_lang, args.tgt_lang, device,
                                      bf16=resolve_bf16(args.bf16, device).bf16, **search)
    else:
        translator = ModelTranslator(args.model, args.decoder, device_of(args.device), args.bf16, threads)
        hyps, speed = translator(lines, **search)
    if args.output:
        with atomic_file(args.output) as handle:
            handle.write("".join(f"{h}\n" for h in hyps))
    else:
        sys.stdout.write("".join(f"{h}\n" for h in hyps))
    return speed


def _d_model(model_dir: Path) -> int:
    import json

    return int(json.loads((model_dir / "config.json").read_text(encoding="utf-8"))["d_model"])


def workspace_command(argv: list[str]) -> None:
    """`vocabridge estimate|results`: the workspace's commands (flows/workspace.py: they read dvc.yaml's DAG and
    ask DVC what is stale), run in the project's root as a process of their own, so that the library imports no
    pipeline. Exits with its status."""
    import subprocess
    import sys

    root = Path.cwd()
    if not (root / "dvc.yaml").is_file() or not (root / "flows" / "workspace.py").is_file():
        raise ConfigError(f"{root}: not the project's root (no dvc.yaml and flows/); run `vocabridge {argv[0]}` "
                          "there")
    status = subprocess.run([sys.executable, "-m", "flows.workspace", *argv], cwd=root).returncode
    if status:
        raise SystemExit(status)


def sizes_command(folders: list[Path], out: Path, methods: list[str] | None, negligible: float = 0.5) -> str:
    """`vocabridge sizes`: vocabridge.sizes over results folders, written atomically."""
    from vocabridge.fileio import atomic_dir
    from vocabridge.sizes import BASE, REFERENCE, SCRATCH, gather, write

    found = gather(folders)
    table = found.table
    known = list(dict.fromkeys(table.loc[table["against"] == REFERENCE, "row"]))
    methods = methods or [r for r in known if r not in (SCRATCH, BASE, "out-domain")]
    unknown = [m for m in methods if m not in known]
    if unknown:
        raise ConfigError(f"sizes: --methods: no comparison of {unknown} against {REFERENCE} in {folders}")
    with atomic_dir(out) as tmp:
        written = write(found, methods, tmp, negligible)
    counts = ", ".join(f"{n:,}" for n in sorted(found.sizes.values()))
    return f"{out}: {', '.join(written)} over {len(folders)} sizes ({counts} training pairs)"


def add_lang_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--src-lang", default=None, metavar="CODE",
                        help="NLLB-200/M2M100 only: the source language code (deu_Latn for NLLB, de for M2M100)")
    parser.add_argument("--tgt-lang", default=None, metavar="CODE",
                        help="NLLB-200/M2M100 only: the target language code (eng_Latn for NLLB, en for M2M100)")


def add_workspace_commands(sub) -> None:
    """The workspace's commands, `estimate` and `results`, on an argparse subparsers object: one definition for
    `vocabridge --help` here and for flows/workspace.py, which runs them (the library imports no pipeline)."""
    est = sub.add_parser(
        "estimate", help="measure this machine (under a minute) and print each stage's expected wall time",
        description="Time a few training updates of the profile's models at the flow's thread layout, greedy and "
                    "beam decoding and a stage's start-up on this machine, then price every stage of dvc.yaml "
                    "for `dvc repro` (one at a time) and for the Prefect flow (side by side). Run it in the "
                    "project's root. Measurements are cached per machine and profile (--fresh times again).")
    est.add_argument("--profile", default=None,
                     help="price profiles/NAME.yaml over params.yaml without changing it (default: params.yaml)")
    est.add_argument("--fresh", action="store_true", help="measure again instead of using the cached figures")
    est.add_argument("--jobs", type=int, default=0, help="the flow's stages at once (default as the flow: 0)")
    res = sub.add_parser(
        "results", help="copy the finished run's report, metrics, curves and dvc.lock into results/PROFILE",
        description="The results ledger: the report, its tables and plots, every stage's metrics, the "
                    "dvc.lock and params.yaml of the run, and a line naming the CPU/GPU and thread layout, into "
                    "results/PROFILE/ (replaced, except results/PROFILE/cells: the study's committed cells stay "
                    "and the workspace's finished cells are added) to commit. Refuses while `dvc status` shows "
                    "stale stages. --cells copies only the finished cells, while a run is still going.")
    res.add_argument("--out", type=Path, default=None, help="where to write (default results/PROFILE)")
    res.add_argument("--allow-stale", action="store_true", help="collect even if `dvc status` is not clean")
    res.add_argument("--cells", action="store_true",
                     help="only copy the workspace's finished cells (data/cells) into OUT/cells: adds, never "
                          "deletes, needs no finished run")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="vocabridge", description="Vocabulary adaptation for NMT.")
    sub = parser.add_subparsers(dest="command", required=True)
    prof = sub.add_parser("profile", help="merge profiles/NAME.yaml into params.yaml (e.g. tiny, paper)")
    prof.add_argument("name")
    prof.add_argument("--params", type=Path, default=Path("params.yaml"))
    prof.add_argument("--profiles", type=Path, default=Path("profiles"))
    ad = sub.add_parser(
        "adapt", help="fit a Marian/OPUS-MT model's vocabularies to in-domain text",
        description="Train SentencePiece models (and CBOW vectors) on your in-domain text, initialise the new "
                    "tokens' embeddings from the model's own with one method, and write the adapted model "
                    "directory (loads with transformers' AutoModelForSeq2SeqLM and MarianTokenizer). Fine-tune "
                    "it on your in-domain pairs afterwards.")
    ad.add_argument("--model", type=Path, required=True,
                    help="the pretrained Marian/OPUS-MT directory (config.json, model.safetensors, *.spm, vocab), "
                         "or an NLLB-200/M2M100 one (sentencepiece.bpe.model, tokenizer files)")
    ad.add_argument("--src-text", type=Path, nargs="+", default=[],
                    help="in-domain source-language text, one sentence per line (needed to adapt the encoder)")
    ad.add_argument("--tgt-text", type=Path, nargs="+", default=[],
                    help="in-domain target-language text, one sentence per line (needed to adapt the decoder)")
    ad.add_argument("--out", type=Path, required=True, help="where to write the adapted model directory")
    offered = adapt_methods() if argv[:1] == ["adapt"] else {}  # the registry imports torch: only when adapting
    ad.add_argument("--method", choices=list(offered) or None, default="va-llm", metavar="METHOD",
                    help="how a new token's row is made: "
                         + "; ".join(f"{name}: {m.summary}" for name, m in offered.items()) + " (default va-llm)")
    ad.add_argument("--sides", choices=("encoder", "decoder", "both"), default="both",
                    help="which vocabularies to replace (default both)")
    ad.add_argument("--shared", choices=("copy", "reproject"), default=None,
                    help="tokens in both vocabularies: keep the pretrained row, or map them like new ones "
                         "(default: reproject for va-*, copy otherwise)")
    ad.add_argument("--k", type=int, default=None, help="va-llm: nearest shared neighbours (default 10)")
    ad.add_argument("--reg", type=float, default=None,
                    help="va-llm: regulariser x trace of the local Gram matrix (default 0.001; 0 = none)")
    ad.add_argument("--generator", type=Path, default=None, metavar="FILE",
                    help="att-eg, patt-eg, patt-eg-kd: the generator `vocabridge train-generator` trained against "
                         "this model (a .safetensors file)")
    ad.add_argument("--extend", type=int, default=0, metavar="N",
                    help="keep the model's vocabulary and append the N pieces of the vocabulary trained on your text "
                         "that cut pieces per word most, instead of replacing it; the model's rows and its "
                         "segmentation of other words stay as they were (default 0: replace)")
    ad.add_argument("--init-map", type=Path, default=None, metavar="FILE",
                    help="rows you choose: a UTF-8 file of lines NEW<TAB>OLD[<TAB>OLD...], tokens written as the "
                         "vocabularies hold them (word-initial pieces with their '\u2581'); NEW's row becomes OLD's "
                         "row (the mean of several OLD rows) on each adapted side whose new vocabulary holds NEW "
                         "and whose pretrained one holds OLD, whatever --method makes for the others; blank lines are "
                         "skipped; diagnostics.json lists the rows under init_map")
    dist = ad.add_argument_group("token distillation (--method distill; reads --src-text and --tgt-text as parallel "
                                 "text)")
    dist.add_argument("--init-from", default=None, metavar="METHOD",
                      help="the method whose rows the distillation starts from (default random: ft-tgtv-random)")
    dist.add_argument("--align", choices=("last", "mean"), default=None,
                      help="a word's state: its last piece's, or the mean over its pieces (default last)")
    dist.add_argument("--distill-epochs", type=int, default=None, help="passes over the pairs (default 1)")
    dist.add_argument("--distill-lr", type=float, default=None, help="Adam's learning rate (default 0.001)")
    dist.add_argument("--distill-pairs", type=int, default=None,
                      help="the first N pairs only (default 0: all)")
    dist.add_argument("--distill-output", type=float, default=None,
                      help="weight of an output term: each target word's log-probability matched to the model's "
                           "own (default 0: hidden states only)")
    add_lang_flags(dist)
    ad.add_argument("--vocab-size", type=int, default=SpmModel().vocab_size,
                    help="SentencePiece vocabulary size per language, at most (default %(default)s)")
    ad.add_argument("--cbow-window", type=int, default=Cbow().window,
                    help="CBOW context window (default %(default)s)")
    ad.add_argument("--cbow-epochs", type=int, default=Cbow().epochs,
                    help="CBOW training epochs (default %(default)s)")
    ad.add_argument("--probes", type=int, default=Diagnostics().probes,
                    help="new tokens whose neighbours diagnostics.json lists (default %(default)s)")
    ad.add_argument("--seed", type=int, default=1, help="seed of SentencePiece, CBOW and random rows (default 1)")
    ad.add_argument("--threads", type=int, default=Spm().threads,
                    help="SentencePiece training threads (default %(default)s)")
    au = sub.add_parser(
        "audit", help="how well a Marian/OPUS-MT model's vocabularies fit your text, and what size to adapt to",
        description="Segment your text with the model's vocabulary and with SentencePiece vocabularies trained on "
                    "it at a few sizes: pieces per word (fertility), the share of tokens the model's vocabulary "
                    "lacks, the frequent words it shatters, optionally the share of pieces it barely saw in its own "
                    "corpus, and a recommended size. Writes OUT/audit.json, audit.md and audit.png.")
    au.add_argument("--model", type=Path, required=True,
                    help="the Marian/OPUS-MT directory (config.json, model.safetensors, source.spm, target.spm, vocab) "
                         "or an NLLB-200/M2M100 one")
    au.add_argument("--text", type=Path, nargs="+", default=[],
                    help="text of one language, one sentence per line; its side (source or target) is detected")
    au.add_argument("--src-text", type=Path, nargs="+", default=[], help="source-language text")
    au.add_argument("--tgt-text", type=Path, nargs="+", default=[], help="target-language text")
    au.add_argument("--sizes", type=int, nargs="+", default=[2000, 4000, 8000, 16000],
                    help="SentencePiece vocabulary sizes to train on the text, at most (default 2000 4000 8000 16000)")
    au.add_argument("--model-src-corpus", type=Path, nargs="+", default=[],
                    help="the model's own source training text, to count the pieces it barely saw (optional)")
    au.add_argument("--model-tgt-corpus", type=Path, nargs="+", default=[],
                    help="the model's own target training text (optional)")
    au.add_argument("--rare", type=int, default=10,
                    help="with a model corpus: a piece seen fewer times than this is barely seen (default 10)")
    au.add_argument("--out", type=Path, default=Path("audit"), help="where to write the report (default audit/)")
    au.add_argument("--seed", type=int, default=1, help="SentencePiece seed (default 1)")
    au.add_argument("--threads", type=int, default=Spm().threads,
                    help="SentencePiece training threads (default %(default)s)")
    ft = sub.add_parser(
        "finetune", help="fine-tune a Marian/OPUS-MT model (adapted or not) on your in-domain pairs",
        description="The pipeline's training loop (Adam, inverse-square-root warm-up, label smoothing, bf16 where "
                    "this machine runs it faster, dev selection and early stopping) on your aligned pairs. Progress "
                    "bar; checkpoints in --checkpoints, and the same command again resumes where it stopped. Writes "
                    "the best model to --out (with metrics.json and curves/).")
    ft.add_argument("--model", type=Path, required=True,
                    help="the Marian/OPUS-MT (or NLLB-200/M2M100) directory to start from")
    for split, what in (("train", "training pairs"), ("dev", "dev pairs (selection)")):
        for role, lang in (("src", "source"), ("tgt", "target")):
            ft.add_argument(f"--{role}-{split}", type=Path, required=True,
                            help=f"{lang} side of the {what}, one sentence per line")
    ft.add_argument("--out", type=Path, required=True, help="where to write the fine-tuned model directory")
    add_lang_flags(ft)
    ft.add_argument("--checkpoints", type=Path, default=None, help="checkpoint folder (default OUT.checkpoints)")
    recipe = Finetune().train  # the defaults: params.yaml's finetune.train (threads and device: compute's)
    ft.add_argument("--max-updates", type=int, default=recipe.max_updates,
                    help="training updates (default %(default)s)")
    ft.add_argument("--batch-tokens", type=int, default=recipe.batch_tokens,
                    help="padded tokens of the longer side per batch (default %(default)s)")
    ft.add_argument("--lr", type=float, default=recipe.lr, help="peak learning rate (default %(default)s)")
    ft.add_argument("--warmup", type=int, default=recipe.warmup, help="warm-up updates (default %(default)s)")
    ft.add_argument("--eval-every", type=int, default=recipe.eval_every,
                    help="updates between dev evaluations (default %(default)s)")
    ft.add_argument("--dev-sentences", type=int, default=recipe.dev_sentences,
                    help="dev pairs evaluated (default %(default)s)")
    ft.add_argument("--select-by", choices=("bleu", "loss"), default=recipe.select_by,
                    help="the dev figure that picks the checkpoint: greedy BLEU or cross-entropy (default "
                         "%(default)s)")
    ft.add_argument("--patience", type=int, default=recipe.patience,
                    help="evaluations without gain before stopping; 0: never (default %(default)s)")
    ft.add_argument("--checkpoint-every", type=int, default=recipe.checkpoint_every,
                    help="updates between checkpoints (default %(default)s)")
    ft.add_argument("--threads", type=int, default=Compute().threads,
                    help="torch threads; 0: every core (default %(default)s)")
    ft.add_argument("--device", default=Compute().device,
                    help="auto (cuda when there is one), cpu, cuda (default %(default)s)")
    ft.add_argument("--bf16", choices=("auto", "true", "false"), default=str(recipe.bf16).lower(),
                    help="bf16 autocast: auto where this machine runs it faster than fp32 (default %(default)s)")
    ft.add_argument("--seed", type=int, default=recipe.seed, help="batch order and dropout (default %(default)s)")
    keep = ft.add_argument_group("keeping the original domain (vocabridge/nmt/forgetting.py; Marian models)")
    keep.add_argument("--freeze-old-rows", action="store_true",
                      help="the rows of tokens the pretrained vocabulary has never train (needs a model that "
                           "`vocabridge adapt` wrote: its old_rows.json)")
    keep.add_argument("--new-rows-first", type=int, default=0, metavar="N",
                      help="the first N updates train the new rows only, then everything (default 0)")
    keep.add_argument("--mix-src", type=Path, default=None, help="source side of original-domain pairs to mix in")
    keep.add_argument("--mix-tgt", type=Path, default=None, help="target side of the original-domain pairs")
    keep.add_argument("--mix-share", type=float, default=0.2,
                      help="the share of the training pairs drawn from --mix-src/--mix-tgt (default %(default)s)")
    tg = sub.add_parser("train-generator", help="train an embedding generator (Liu et al. 2021) against your model, "
                        "for adapt's att-eg, patt-eg and patt-eg-kd",
                        description="Train an embedding generator against your frozen model on parallel text it "
                                    "translates well (its own training data, or a sample of it): words are "
                                    "re-segmented at random into pieces the vocabulary lacks, the generator makes "
                                    "their rows, and only it learns. Writes OUT (.safetensors) and OUT's .json "
                                    "summary; resumes from --checkpoints.")
    tg.add_argument("--model", type=Path, required=True, help="the Marian/OPUS-MT directory")
    tg.add_argument("--src-text", type=Path, required=True, help="source side of the parallel text")
    tg.add_argument("--tgt-text", type=Path, required=True, help="target side, aligned line by line")
    tg.add_argument("--out", type=Path, required=True, help="where to write the generator (FILE.safetensors)")
    tg.add_argument("--variant", choices=list(VARIANTS), default="patt-kd",
                    help="att (Eq. 2), patt (Eq. 3), patt-kd (Eq. 3 with hidden-state distillation, lambda 0.5) "
                         "(default patt-kd)")
    tg.add_argument("--sides", choices=("decoder", "both"), default="decoder",
                    help="re-segment the target side (the paper's) or both sides (default decoder)")
    gen = GeneratorTraining()  # the defaults: params.yaml's generator.train
    tg.add_argument("--steps", type=int, default=gen.steps,
                    help="Adam updates (default %(default)s; the paper: ~20k)")
    tg.add_argument("--batch-tokens", type=int, default=gen.batch_tokens,
                    help="padded tokens per batch (default %(default)s)")
    tg.add_argument("--lr", type=float, default=gen.lr, help="learning rate (default %(default)s)")
    tg.add_argument("--checkpoint-every", type=int, default=gen.checkpoint_every,
                    help="steps between checkpoints (default %(default)s)")
    tg.add_argument("--checkpoints", type=Path, default=None, help="checkpoint folder (default OUT's name "
                    "with .checkpoints)")
    tg.add_argument("--threads", type=int, default=Compute().threads,
                    help="torch threads; 0: every core (default %(default)s)")
    tg.add_argument("--device", default=Compute().device,
                    help="auto (cuda when there is one), cpu, cuda (default %(default)s)")
    tg.add_argument("--seed", type=int, default=gen.seed, help="batches and re-segmentation (default %(default)s)")
    tr = sub.add_parser("translate", help="translate plain text with a Marian/OPUS-MT model (beam search)",
                        description="One sentence per line in, one translation per line out, in input order; with "
                                    "the CTranslate2 decoder the model directory is converted on the fly.")
    tr.add_argument("--model", type=Path, required=True,
                    help="the Marian/OPUS-MT directory, or an NLLB-200/M2M100 one (decoded by transformers)")
    tr.add_argument("--input", type=Path, required=True, help="source text, one sentence per line")
    tr.add_argument("--output", type=Path, default=None, help="where to write the translations (default stdout)")
    add_lang_flags(tr)
    decoding = Evaluate()  # the defaults: params.yaml's evaluate
    tr.add_argument("--beam", type=int, default=decoding.beam, help="beam size (default %(default)s)")
    tr.add_argument("--length-penalty", type=float, default=decoding.length_penalty,
                    help="length penalty (default %(default)s)")
    tr.add_argument("--batch-tokens", type=int, default=decoding.batch_tokens,
                    help="tokens x beam per batch (default %(default)s)")
    tr.add_argument("--threads", type=int, default=Compute().threads,
                    help="CPU threads; 0: every core (default %(default)s)")
    tr.add_argument("--decoder", choices=["ctranslate2", "transformers"], default=decoding.decoder,
                    help="as evaluate.decoder: ctranslate2 (fast on a CPU) or transformers (default %(default)s)")
    tr.add_argument("--device", default=Compute().device,
                    help="transformers' device: auto, cpu, cuda, cuda:N (default %(default)s)")
    tr.add_argument("--bf16", choices=["auto", "true", "false"], default=str(decoding.bf16).lower(),
                    help="transformers only, as evaluate.bf16 (default %(default)s; false: scores independent of "
                         "the CPU)")
    add_workspace_commands(sub)
    sz = sub.add_parser(
        "sizes", help="one study's verdicts at several in-domain sizes, side by side, with two figures",
        description="Read results folders of one study run at different in-domain sizes (each a report with its "
                    "committed cells, e.g. results/study results/size-8000 results/size-all) and write OUT/sizes.md "
                    "(each method's difference from random new rows, in-domain - ft-srcv and ft-tgtv-random - "
                    "ft-srcv, per size and test set, with the folders' verdicts), sizes.csv, gains.png and "
                    "regimes.png.")
    sz.add_argument("folders", type=Path, nargs="+", help="results folders, one per size")
    sz.add_argument("--out", type=Path, required=True, help="where to write")
    sz.add_argument("--methods", nargs="+", default=None,
                    help="rows whose gain over ft-tgtv-random to draw (default: every row compared with it that "
                         "makes new rows)")
    sz.add_argument("--negligible", type=float, default=0.5, metavar="BLEU",
                    help="a gain whose 95%% interval stays below this on both test sets is negligible (default "
                         "%(default)s, as report.target_difference)")
    args = parser.parse_args(argv)
    if args.command == "sizes":
        if args.negligible <= 0:
            raise ConfigError(f"sizes: --negligible: must be above 0 BLEU, got {args.negligible}")
        print(sizes_command(args.folders, args.out, args.methods, args.negligible))
    elif args.command in ("results", "estimate"):
        workspace_command(argv)
    elif args.command == "profile":
        changed = set_profile(args.name, args.params, args.profiles)
        print(f"{args.params}: profile '{args.name}' applied, {len(changed)} keys changed")
    elif args.command == "finetune":
        summary = finetune(args)
        print(f"{args.out}: best dev {summary['selected_by'].removeprefix('dev ')} at update {summary['best_update']} "
              f"(dev BLEU {summary['best_dev_bleu']}, dev loss {summary['best_dev_loss']})")
    elif args.command == "train-generator":
        result = train_generator(args)
        print(f"{args.out}: {args.variant} generator after {result['steps']} steps; use it with `vocabridge adapt "
              f"--method {variant_method(args.variant)} --generator {args.out}`")
    elif args.command == "translate":
        speed = translate(args)
        if args.output:
            print(f"{args.output}: {speed['sentences_per_second']} sentences/s")
    elif args.command == "audit":
        import pandas as pd

        rows, audits = audit(args)
        print(pd.DataFrame(rows).to_string(index=False, na_rep=""))
        for a in audits:
            size = a.recommendation["vocab_size"] or "keep the model's"
            print(f"{a.side}: recommended vocabulary size {size}: {a.recommendation['reason']}")
        print(f"{args.out}: audit.md, audit.json, audit.png")
    elif args.command == "adapt":
        diagnostics = adapt(args)
        rows = {side: diagnostics[side]["rows"] for side in (("shared",) if "shared" in diagnostics
                                                             else ("encoder", "decoder"))}
        print(f"{args.out}: adapted with {args.method}; rows {rows}")


def entry() -> None:
    from vocabridge.allocator import reexec

    reexec()  # before the commands import torch: TCMalloc where it is installed
    run(main)


if __name__ == "__main__":
    entry()
