"""Vocabulary transfer: each method builds its initial model (vocabularies + embeddings) from the pretrained one.

A method is an entry of METHODS; the transfer@method stage calls its builder and writes the model directory.
The baselines keep or replace the whole model; the vocabulary-adaptation methods share `adapt`, which runs
one initialiser (methods.py) per adapted side through the Plan interface (plan.py), swaps the new rows into
the model (swap.py) and collects the diagnostics (diagnostics.py). att-eg, patt-eg and patt-eg-kd (Liu et al.
2021) load the generator the `generator` stage pretrained (generator_training.py) and run `generated` with it;
avg-eg needs no training. All four adapt the decoder only by default (the paper's Table 2); `sides: both` in
`rows.<row>` applies the same generator to the encoder too. With `extend: N` a row keeps the pretrained
vocabulary and appends N pieces of the adapted one instead of replacing it (extension.py); every initialiser makes
the appended rows.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import numpy as np

from vocabridge.cbow import load_vectors
from vocabridge.config import Diagnostics, Training, TransferMethod
from vocabridge.corpora.user import read_text_lines
from vocabridge.errors import ConfigError, InputError
from vocabridge.families import FAMILIES, family
from vocabridge.fileio import sha256_file
from vocabridge.nmt.model import build_model, load_model
from vocabridge.nmt.vocab import Vocab, pair_vocabs
from vocabridge.transfer.diagnostics import leave_one_out, neighbours
from vocabridge.transfer.extension import extend_vocab
from vocabridge.transfer.focus_ref import build as focus_reference
from vocabridge.transfer.generator import load_generator
from vocabridge.transfer.init_map import InitMap, apply_map, resolve
from vocabridge.transfer.methods import (
    anchors,
    cbow,
    embedding_recon,
    fwet,
    generated,
    independent,
    linear,
    mean_init,
    random_init,
    word2vec,
)
from vocabridge.transfer.plan import Side
from vocabridge.transfer.swap import matrices, pair, swap_embeddings

if TYPE_CHECKING:  # the stages import this package for its table of methods; models load when a method builds
    from transformers.models.marian.modeling_marian import MarianMTModel


@dataclass
class Resources:
    """What a method may draw on."""

    pretrained: Path  # Marian model directory
    downstream_spm: dict[str, Path]  # the adapted vocabularies' SentencePiece models, by role (src, tgt)
    seed: int = 1
    cbow: dict[str, Path] = field(default_factory=dict)  # the new domain's CBOW vectors, by role (src, tgt)
    text: dict[str, list[Path]] = field(default_factory=dict)  # the new domain's training text, by role (fwet)
    knobs: TransferMethod = field(default_factory=TransferMethod)  # resolved: no None left
    diagnostics: Diagnostics = field(default_factory=Diagnostics)
    corpus: Path | None = None  # the downstream corpus folder (train.LANG, mono.LANG): focus-ref trains on it
    generator: Path | None = None  # the generator stage's folder (VARIANT.safetensors), or one generator file:
    #                                att-eg, patt-eg, patt-eg-kd
    init_map: InitMap | None = None  # rows the user names (`adapt --init-map`): they replace the method's
    pairs: tuple[list[Path], list[Path]] | None = None  # the new domain's parallel text: source files, target
    #                                                     files, line by line (distill's teacher forcing)


Built = tuple["MarianMTModel", Vocab, Vocab, dict]  # model, source vocab, target vocab, diagnostics


NEEDS = frozenset({"cbow", "text", "corpus", "generator", "pairs"})  # what a method may draw on beyond the
#                                                                    pretrained model


@dataclass(frozen=True)
class Method:
    """One row kind of the matrix: how its initial model is built and what that needs."""

    build: Callable[[Resources], Built]
    summary: str = ""  # a new token's row, in a line (`vocabridge adapt --help`)
    needs: frozenset[str] = frozenset()  # of NEEDS: the new domain's CBOW vectors, its training text, its corpus
    #                                      folder, a generator the generator stage trained
    finetune: bool = True  # out-domain is evaluated as it is
    vocabulary: str = "downstream"  # whose vocabulary the model ends up with: upstream | downstream
    defaults: dict = field(default_factory=dict)  # knobs that differ from DEFAULT_KNOBS
    generator: str | None = None  # the generator variant (params' generator.variants) the method needs
    family: str = "nmt"  # vocabridge.families: nmt, a Marian model; abnet, an AB-Net of the abnet stage
    #                      (vocabridge.plm), which the transfer stage takes as it is

    def __post_init__(self):
        if not self.needs <= NEEDS:
            raise ValueError(f"Method.needs: unknown {sorted(self.needs - NEEDS)} (known: {sorted(NEEDS)})")
        if self.family not in FAMILIES:
            raise ValueError(f"Method.family: unknown {self.family!r} (known: {', '.join(FAMILIES)})")

    @property
    def adapts(self) -> bool:
        """Swaps in new vocabularies from the pretrained model's own (not a baseline that keeps or replaces it)."""
        return isinstance(self.build, partial) and self.build.func in (adapt, with_generator, distilled)

    @property
    def distills(self) -> bool:
        """Token distillation: its rows start from another method's (`init_from`), then train."""
        return isinstance(self.build, partial) and self.build.func is distilled


def keep_pretrained(res: Resources) -> Built:
    """The pretrained model with its own (upstream) vocabulary: out-domain and ft-srcv."""
    model, src, tgt = load_model(res.pretrained)
    return model, src, tgt, {"rows": {"copied": 1.0}}


def abnet_model(res: Resources) -> Built:
    """AB-Net rows start from an AB-Net directory of the abnet stage, not from a Marian model."""
    raise InputError("AB-Net rows (abnet, abnet-enc, mask-predict, plm-nmt) run in the pipeline only: their initial "
                     "model is an entry of params.yaml's abnets, trained by `dvc repro abnet@NAME`")


def from_scratch(res: Resources) -> Built:
    """A model of the pretrained model's size, randomly initialised, with the downstream vocabularies."""
    pretrained, _, _ = load_model(res.pretrained)
    c = pretrained.config
    arch = SimpleNamespace(d_model=c.d_model, encoder_layers=c.encoder_layers, decoder_layers=c.decoder_layers,
                           heads=c.encoder_attention_heads, ffn_dim=c.encoder_ffn_dim, dropout=c.dropout,
                           attention_dropout=c.attention_dropout, max_positions=c.max_position_embeddings)
    src, tgt = pair_vocabs(res.downstream_spm["src"], res.downstream_spm["tgt"])
    return build_model(arch, src, tgt, res.seed), src, tgt, {"rows": {"random": 1.0}}


def adapt(res: Resources, initializer: Callable, check_loo: bool = True) -> Built:
    """Replace the vocabularies of the adapted sides, rows from `initializer`; the other side is kept."""
    model, old_src, old_tgt = load_model(res.pretrained)
    knobs, cfg = res.knobs, res.diagnostics
    chosen = {"encoder", "decoder"} if knobs.sides == "both" else {knobs.sides}
    knob_values = {k: v for k, v in dataclasses.asdict(knobs).items() if v is not None}  # `method` for named rows
    diagnostics = {"sides": sorted(chosen), "knobs": knob_values}
    new_src, new_tgt = old_src, old_tgt
    if "encoder" in chosen:
        new_src, diagnostics["src_extension"] = adapted_vocab(old_src, "src", res)
    if "decoder" in chosen:
        new_tgt, diagnostics["tgt_extension"] = adapted_vocab(old_tgt, "tgt", res)
    src, tgt = pair(new_src, new_tgt)
    mats = matrices(model)
    mapped = resolve(res.init_map, {name: (old.tokens, new.tokens) for name, old, new in (
        ("encoder", old_src, src), ("decoder", old_tgt, tgt)) if name in chosen}) if res.init_map else {}
    plans = {}
    for name, role, old, new in (("encoder", "src", old_src, src), ("decoder", "tgt", old_tgt, tgt)):
        emb = mats[name]
        aux_file = res.cbow.get(role)
        aux = load_vectors(aux_file, emb.shape[1]) if name in chosen and aux_file else None
        text = [line for f in res.text.get(role, []) for line in read_text_lines(f)] if name in chosen else None
        side = Side(name, old.tokens, new.tokens, emb, aux, old.sp, str(aux_file), new.sp, text or None)
        rng = np.random.default_rng(res.seed)
        if name not in chosen:
            plans[name] = random_init(side, dataclasses.replace(knobs, shared="copy"), rng)
            diagnostics[name] = {"adapted": False, "rows": plans[name].shares()}
            continue
        rows = mapped.get(name, {})
        plans[name] = plan = apply_map(initializer(side, knobs, rng), rows)
        diagnostics[name] = {
            "adapted": True, "rows": plan.shares(), **plan.stats,
            "leave_one_out": leave_one_out(side, initializer, knobs, cfg.held_out, cfg.seed) if check_loo else None,
            "neighbours": neighbours(side, plan, plan.apply(emb), cfg.probes),
        }
        if res.init_map:  # which rows the map made: new token -> the pretrained tokens it was copied from
            diagnostics[name]["init_map"] = {new.tokens[i]: [old.tokens[j] for j in js] for i, js in rows.items()}
    decoder = plans["decoder"]
    model = swap_embeddings(model, src, tgt, plans["encoder"].apply(mats["encoder"]), decoder.apply(mats["decoder"]),
                            decoder.apply_bias(mats["bias"]),
                            None if mats["output"] is None else decoder.apply(mats["output"]))
    return model, src, tgt, diagnostics


def adapted_vocab(old: Vocab, role: str, res: Resources) -> tuple[Vocab, dict | None]:
    """The vocabulary that replaces `old`: the adapted one, or with `extend: N` the pretrained one with N of the
    adapted one's pieces appended (and what the extension did)."""
    new = Vocab.from_spm(res.downstream_spm[role])
    if not res.knobs.extend:
        return new, None
    text = [line for f in res.text.get(role, []) for line in read_text_lines(f)]
    return extend_vocab(old, new.sp, text, res.knobs.extend)


def adapted(initializer: Callable, **kw) -> Callable[[Resources], Built]:
    return partial(adapt, initializer=initializer, **kw)


def with_generator(res: Resources, variant: str) -> Built:
    """`generated` with the generator the generator stage trained (variant = params' generator.variants key)."""
    if res.generator is None:
        raise InputError("this method needs a trained embedding generator; run `dvc repro generator`")
    dim = json.loads((res.pretrained / "config.json").read_text(encoding="utf-8"))["d_model"]
    path = res.generator if res.generator.is_file() else \
        res.generator / f"{generator_for(variant, res.knobs.sides)}.safetensors"  # a file: `adapt --generator`
    gen = load_generator(path, dim, model_sha256=sha256_file(res.pretrained / "model.safetensors"))
    kind = "att" if variant == "att" else "patt"
    if gen.kind != kind:
        raise InputError(f"{path}: a generator of kind '{gen.kind}'; this method needs kind '{kind}'")
    return adapt(res, partial(generated, generator=gen))


def trained_generator(variant: str) -> Callable[[Resources], Built]:
    return partial(with_generator, variant=variant)


def distilled(res: Resources) -> Built:
    """The rows of `init_from`, then fitted by token distillation from the pretrained model (distill.py) on the new
    domain's parallel text."""
    from vocabridge.transfer.distill import Settings, distill

    if res.pairs is None:
        raise InputError("distill needs the new domain's parallel text (source and target, line by line)")
    model, src, tgt, diagnostics = METHODS[res.knobs.init_from].build(res)
    teacher, old_src, old_tgt = load_model(res.pretrained)
    src_lines, tgt_lines = ([line for f in files for line in read_text_lines(f)] for files in res.pairs)
    knobs = res.knobs
    settings = Settings(align=knobs.align, epochs=knobs.distill_epochs, lr=knobs.distill_lr,
                        pairs=knobs.distill_pairs, output=knobs.distill_output, seed=res.seed)
    diagnostics["distill"] = distill(teacher, old_src, old_tgt, model, src, tgt, src_lines, tgt_lines, settings)
    diagnostics["init_from"] = knobs.init_from
    return model, src, tgt, diagnostics


DEFAULT_KNOBS = TransferMethod(sides="both", shared="copy", k=10, reg=1e-3, max_members=10, patt_scale="code",
                               fwet_weights="softmax", extend=0, backtranslated=False, upstream="base")
REPROJECT = {"shared": "reproject"}  # Sato et al.'s code maps every ordinary token, shared ones too
# distill's defaults, chosen on zero-shot dev perplexity of the study's base model (results/distill-settings):
# one pass at 1e-3, words by their last piece, hidden states only
DISTILL = {"init_from": "ft-tgtv-random", "align": "last", "distill_epochs": 1, "distill_lr": 1e-3, "distill_pairs": 0,
           "distill_output": 0.0}

CBOW = frozenset({"cbow"})

METHODS: dict[str, Method] = {
    "out-domain": Method(keep_pretrained, finetune=False, vocabulary="upstream"),
    "in-domain": Method(from_scratch),
    "ft-srcv": Method(keep_pretrained, vocabulary="upstream"),
    # the vocabulary adapted before pretraining: an upstream model of their own (params.yaml `upstreams`), fine-tuned
    # as it is: FT-tgtV (Sato et al. 2020; Liu et al.'s Downstream Vocab), Joint Vocab, BPE-Drop (Liu et al. 2021)
    "ft-tgtv": Method(keep_pretrained, vocabulary="downstream", defaults={"upstream": "ft-tgtv"}),
    "joint-vocab": Method(keep_pretrained, vocabulary="joint", defaults={"upstream": "joint-vocab"}),
    "bpe-drop": Method(keep_pretrained, vocabulary="upstream", defaults={"upstream": "bpe-drop"}),
    # multi-domain learning (Sato et al. 2020's MDL): one model trained on both domains by target-token mixing
    # (upstreams.mdl: mix_downstream), evaluated as it is
    "mdl": Method(keep_pretrained, finetune=False, vocabulary="joint", defaults={"upstream": "mdl"}),
    "ft-tgtv-random": Method(adapted(random_init), "random, at the pretrained rows' per-dimension mean and spread "
                             "(Aji et al. 2020)"),
    "mean": Method(adapted(mean_init), "the mean of the pretrained rows (transformers' resize_token_embeddings with "
                   "mean_resizing)"),
    "va-cbow": Method(adapted(cbow), "its CBOW vector as it is (Sato et al. 2020)", CBOW, defaults=REPROJECT),
    "va-linear": Method(adapted(linear), "its CBOW vector under the orthogonal map fitted on shared tokens (Sato "
                        "et al. 2020)", CBOW, defaults=REPROJECT),
    "va-llm": Method(adapted(partial(anchors, select="knn", weighting="lle")), "locally linear combination of its "
                     "k nearest shared tokens in CBOW space (Sato et al. 2020)", CBOW, defaults=REPROJECT),
    "focus": Method(adapted(partial(anchors, select="all", weighting="sparsemax")), "sparsemax over its CBOW "
                    "similarity to every shared token (FOCUS)", CBOW),
    # the FOCUS reference implementation itself (optional extra `focus`), its own fastText vectors
    "focus-ref": Method(focus_reference, "the FOCUS reference implementation", frozenset({"corpus"})),
    # no leave-one-out for fvt: the pretrained tokenizer still knows every hidden token
    "fvt": Method(adapted(partial(anchors, select="pieces", weighting="mean"), check_loo=False),
                  "mean of its pieces under the pretrained tokenizer (FVT)"),
    # Liu et al. 2021 adapt the decoder only; `transfer.avg-eg.sides: both` gives the both-sides row
    "avg-eg": Method(adapted(generated), "mean of Sm(w), its subwords and hyperwords in the pretrained vocabulary "
                     "(Liu et al. 2021, Eq. 1)", defaults={"sides": "decoder"}),
    # the same with a generator pretrained by the generator stage (Eq. 2; Eq. 3; Eq. 3 trained with Ld, lambda 0.5)
    "att-eg": Method(trained_generator("att"), "attention over Sm(w) (Liu et al. 2021, Eq. 2)",
                     frozenset({"generator"}), defaults={"sides": "decoder"}, generator="att"),
    "patt-eg": Method(trained_generator("patt"), "attention over Sm(w) by morphological relation (Eq. 3)",
                      frozenset({"generator"}), defaults={"sides": "decoder"}, generator="patt"),
    "patt-eg-kd": Method(trained_generator("patt-kd"), "patt-eg trained with hidden-state distillation (Eq. 5)",
                         frozenset({"generator"}), defaults={"sides": "decoder"}, generator="patt-kd"),
    # no leave-one-out for fwet: the pretrained tokenizer still segments text into the hidden tokens
    "fwet": Method(adapted(fwet, check_loo=False), "softmax over its co-segmentation counts with pretrained tokens "
                   "on the new text (Duan & Zhao 2023)", frozenset({"text"})),
    # the other initialisers of Liu et al.'s Table 2, decoder side as there
    "word2vec": Method(adapted(word2vec), "CBOW on the new text around shared rows held at their pretrained values",
                       frozenset({"text"}), defaults={"sides": "decoder"}),
    "embedding-recon": Method(adapted(embedding_recon), "mean of its character n-grams' vectors fitted to the "
                              "pretrained rows (Zhao et al. 2018)", defaults={"sides": "decoder"}),
    # AB-Net (Guo et al. 2020) and its Mask-Predict baseline without BERT: an AB-Net of params.yaml's `abnets`
    # (trained on the upstream corpus by the abnet stage) fine-tuned on the downstream pairs, Mask-Predict decoding
    "abnet": Method(abnet_model, "the target BERT's own row (AB-Net: frozen BERTs, adapters)", family="abnet",
                    vocabulary="plm", defaults={"upstream": "abnet"}),
    "mask-predict": Method(abnet_model, "a row of the from-scratch target-side model (Mask-Predict)",
                           family="abnet", vocabulary="plm", defaults={"upstream": "mask-predict"}),
    # AB-Net-Enc: the adapted source BERT and an autoregressive decoder from scratch (abnets.NAME.decoder:
    # autoregressive), beam search
    "abnet-enc": Method(abnet_model, "a row of the from-scratch autoregressive decoder (AB-Net-Enc)", family="abnet",
                        vocabulary="plm", defaults={"upstream": "abnet-enc"}),
    # Duan & Zhao's PLM-sponsored model: both BERTs fine-tuned, a coordinator, half-layer distillation
    # (abnets.NAME.decoder: coordinator), greedy search
    "plm-nmt": Method(abnet_model, "the target BERT's own row (PLM-sponsored model)", family="abnet",
                      vocabulary="plm", defaults={"upstream": "plm-nmt"}),
    "independent-encoder": Method(adapted(independent), "random, and every other row too: a new embedding layer",
                                  defaults={"sides": "decoder"}),
    # token distillation (after Dobler et al. 2025): the rows of `init_from`, fitted so that the frozen pretrained
    # model's word states under the new pieces match its states under its own on the new domain's parallel text
    "distill": Method(partial(distilled), "another method's row (init_from), fitted so that the frozen model's "
                      "word states under the new pieces match those under its own (token distillation)",
                      frozenset({"pairs"}), defaults=DISTILL),
}
INIT_FROM = {"random": "ft-tgtv-random"}  # init_from's short names
DISTILL_ONLY = ("init_from", "align", "distill_epochs", "distill_lr", "distill_pairs", "distill_output")


def get_method(name: str, rows: dict[str, TransferMethod] | None = None) -> Method:
    """The method a row of the grid runs: a method's own name, or a row of params.yaml's `rows` named otherwise,
    with `method:` (e.g. `patt-eg-kd-both: {method: patt-eg-kd, sides: both}`)."""
    if name in METHODS:
        return METHODS[name]
    base = (rows or {}).get(name, TransferMethod()).method
    if base is None:
        raise ConfigError(f"params.yaml: rows.{name}: unknown method '{name}' (known: {sorted(METHODS)}; a row "
                          f"of your own names its method with `method:`)")
    if base not in METHODS:
        raise ConfigError(f"params.yaml: rows.{name}.method: unknown method '{base}' (known: {sorted(METHODS)})")
    return METHODS[base]


def start_method(name: str, rows: dict[str, TransferMethod] | None = None) -> Method:
    """The method that makes a row's first rows: its own, or for distill its `init_from`'s (whose resources, CBOW
    vectors or a trained generator, the row needs too)."""
    method = get_method(name, rows)
    if not method.distills:
        return method
    return METHODS[knobs_for(name, rows or {}).init_from]


def needs(name: str, rows: dict[str, TransferMethod] | None = None) -> frozenset[str]:
    """Everything a row's method draws on, its starting method's included."""
    return get_method(name, rows).needs | start_method(name, rows).needs


def finetune_training(name: str, params, seed: int | None = None) -> Training:
    """The training config a row's fine-tune runs under: its method family's, with the row's own `max_updates`
    where it sets one, and with `seed` a cell's (the grid's seed: batch order and dropout)."""
    training = family(get_method(name, params.rows).family).training(params, knobs_for(name, params.rows).max_updates)
    return training if seed is None else dataclasses.replace(training, seed=seed)


def generator_for(variant: str, sides: str) -> str:
    """The trained generator a row uses: VARIANT for rows that adapt the decoder (trained re-segmenting the
    target side, as Liu et al.), VARIANT-both for the others (trained re-segmenting both sides)."""
    return variant if sides == "decoder" else f"{variant}-both"


def generators_needed(rows: dict[str, TransferMethod]) -> list[str]:
    """The trained generators that the grid's rows use (params.yaml's `generators` must list them)."""
    return sorted({generator_for(start_method(m, rows).generator, knobs_for(m, rows).sides) for m in rows
                   if start_method(m, rows).generator})


def resolved_knobs(name: str, rows: dict[str, TransferMethod]) -> dict:
    """A row's knobs as its cells ran them (method named), the input of its knobs digest."""
    knobs = dataclasses.asdict(knobs_for(name, rows))
    knobs["method"] = knobs["method"] or name
    return knobs


def target_initializer(name: str, knobs: TransferMethod, method: Method) -> tuple[Callable, Method]:
    """The initialiser (and its method) that makes a PLM decoder's rows for `transfer.NAME.target_vocabulary`."""
    where = f"params.yaml: rows.{name}.target_vocabulary"
    if method is not METHODS["plm-nmt"]:
        raise ConfigError(f"{where}: only for PLM-sponsored rows (method plm-nmt)")
    chosen = METHODS.get(knobs.target_vocabulary)
    usable = sorted(k for k, m in METHODS.items() if m.adapts and m.build.func is adapt)
    if chosen is None or not chosen.adapts or chosen.build.func is not adapt:
        raise ConfigError(f"{where}: '{knobs.target_vocabulary}' is not an initialiser a PLM decoder can take "
                          f"(one of {usable}; the trained generators are trained against the NMT model)")
    return chosen.build.keywords["initializer"], chosen


def knobs_for(name: str, given: dict[str, TransferMethod]) -> TransferMethod:
    """The row's knobs: params.yaml's `rows.<name>` over its method's defaults over DEFAULT_KNOBS."""
    for key, row in given.items():
        if key in METHODS and row.method not in (None, key):
            raise ConfigError(f"params.yaml: rows.{key}.method: '{key}' is a method itself; name the row "
                              f"differently to run '{row.method}' under it")
        if key not in METHODS and row.method is None:
            raise ConfigError(f"params.yaml: rows.{key}: unknown method '{key}' (known: {sorted(METHODS)}; a row of "
                              f"your own needs `method:`)")
        get_method(key, given)
    merged = dataclasses.replace(DEFAULT_KNOBS, **get_method(name, given).defaults)
    overrides = {k: v for k, v in dataclasses.asdict(given.get(name, TransferMethod())).items() if v is not None}
    knobs = dataclasses.replace(merged, **overrides)
    if knobs.extend < 0:
        raise ConfigError(f"params.yaml: rows.{name}.extend: must be >= 0 (0: replace), got {knobs.extend}")
    if knobs.extend and not get_method(name, given).adapts:
        raise ConfigError(f"params.yaml: rows.{name}.extend: the method '{knobs.method or name}' does not adapt "
                          f"a vocabulary, so there is nothing to extend")
    knobs = check_distill(name, knobs, get_method(name, given))
    if (get_method(name, given).generator or (knobs.init_from and METHODS[knobs.init_from].generator)) \
            and knobs.upstream != "base":
        raise ConfigError(f"params.yaml: rows.{name}.upstream: '{knobs.upstream}': the generator stage trains "
                          f"its generators against the base model only; this method runs on `base`")
    if knobs.extend and "shared" not in overrides:
        knobs = dataclasses.replace(knobs, shared="copy")  # extension keeps the pretrained rows
    if knobs.target_vocabulary is not None:
        target_initializer(name, knobs, get_method(name, given))
    if knobs.k < 1:
        raise ConfigError(f"params.yaml: rows.{name}.k: must be at least 1, got {knobs.k}")
    if knobs.max_updates is not None and knobs.max_updates < 1:
        raise ConfigError(f"params.yaml: rows.{name}.max_updates: must be at least 1, got {knobs.max_updates}")
    if knobs.train_pairs is not None and knobs.train_pairs < 0:
        raise ConfigError(f"params.yaml: rows.{name}.train_pairs: must be >= 0 (0: all), got {knobs.train_pairs}")
    if knobs.reg < 0:
        raise ConfigError(f"params.yaml: rows.{name}.reg: must be >= 0, got {knobs.reg}")
    check_keep(name, knobs, get_method(name, given))
    return knobs


def check_distill(name: str, knobs: TransferMethod, method: Method) -> TransferMethod:
    """distill's knobs: only on a distill row, `init_from` an initialiser that adapts a vocabulary (its short name
    resolved, so that `random` and `ft-tgtv-random` are one row)."""
    where = f"params.yaml: rows.{name}"
    if not method.distills:
        stray = [k for k in DISTILL_ONLY if getattr(knobs, k) is not None]
        if stray:
            raise ConfigError(f"{where}.{stray[0]}: only for token distillation rows (method distill)")
        return knobs
    start = INIT_FROM.get(knobs.init_from, knobs.init_from)
    usable = sorted([*INIT_FROM, *(k for k, m in METHODS.items() if m.adapts and not m.distills)])
    if start not in METHODS or not METHODS[start].adapts or METHODS[start].distills:
        raise ConfigError(f"{where}.init_from: '{knobs.init_from}' is not an initialiser to start from (one of "
                          f"{usable})")
    if knobs.align not in ("last", "mean"):
        raise ConfigError(f"{where}.align: last or mean, got {knobs.align!r}")
    if knobs.distill_epochs < 0 or knobs.distill_pairs < 0 or knobs.distill_output < 0 or not knobs.distill_lr > 0:
        raise ConfigError(f"{where}: distill_epochs, distill_pairs and distill_output must be >= 0 and distill_lr > "
                          f"0, got {knobs.distill_epochs}, {knobs.distill_pairs}, {knobs.distill_output}, "
                          f"{knobs.distill_lr}")
    return dataclasses.replace(knobs, init_from=start)


def check_keep(name: str, knobs: TransferMethod, method: Method) -> None:
    """The fine-tune's forgetting knobs (vocabridge.nmt.forgetting): for a Marian row that fine-tunes."""
    held = knobs.freeze_old_rows or knobs.new_rows_first or knobs.mix_upstream
    if held and (not family(method.family).forgetting_knobs or not method.finetune):
        raise ConfigError(f"params.yaml: rows.{name}: freeze_old_rows, new_rows_first and mix_upstream need a "
                          f"translation-model row that fine-tunes; '{knobs.method or name}' is not one")
    if knobs.new_rows_first is not None and knobs.new_rows_first < 0:
        raise ConfigError(f"params.yaml: rows.{name}.new_rows_first: must be >= 0, got {knobs.new_rows_first}")
    if knobs.mix_upstream is not None and not 0 <= knobs.mix_upstream < 1:
        raise ConfigError(f"params.yaml: rows.{name}.mix_upstream: a share in [0, 1), got {knobs.mix_upstream}")
