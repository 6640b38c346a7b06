"""What a profile will cost on this machine, measured before the run.

`measure` times what dominates the pipeline on this CPU or GPU, in under a minute: a few training updates of
the profile's models at its batch sizes (pretraining, fine-tuning, the generator's frozen-model updates) at
one thread and at every core, greedy decoding (dev BLEU during training) and beam decoding with the
evaluate stage's decoder, and the start-up of a stage's Python process. `training_seconds` and its kin turn
those into the expected wall time of a piece of work (a training run with its dev evaluations, CBOW); the
pipeline's stages are priced from them in flows/estimate.py, beside the DAG it lays them over (the library knows
no stage), one stage at a time as `dvc repro` runs them and side by side as the Prefect flow runs them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from vocabridge.config import AbnetModel, Arch, Params, Training
from vocabridge.nmt.model import use_fast_attention
from vocabridge.nmt.precision import cached, cpu_elsewhere, describe_cpu
from vocabridge.nmt.train import threads_of
from vocabridge.workspace import CORPORA

# Mean pieces per training segment (source, target) when the corpora are not prepared yet: the default corpora
# with their 8k SentencePiece vocabularies (IT strings are short, verses long).
TYPICAL_PIECES = {"upstream": (12, 11), "downstream": (32, 32)}
PIECES_PER_WORD = 1.6  # the default corpora's 8k vocabularies: 1.3 (verses, English) to 2.0 (IT strings, German)
# The shape of a real batch (nmt.data.make_batches, measured on both default corpora): sorted by target length,
# a batch's targets are hardly padded, while its longest source is about 1/0.87 of the mean source; the padded
# source then fills about 97% of the token budget.
SOURCE_MEAN_OVER_LONGEST = 0.87
BUDGET_FILL = 0.97
UPSTREAM_LINES = 283_000  # the default upstream corpus (Debian gettext catalogues, LibreOffice help)
LATENCY_COST = 3.0  # evaluate.latency_sentences: a sentence decoded alone, in sentences of a batch (assumed)
WARMUP_UPDATES = 2
MEASUREMENT_LAYOUT = "7"  # bumped when what `measure` times changes (5: the trainers' own `_step`; 6: pretrain and
#                            generator at every thread count; 7: the masked-LM and AB-Net updates in the precision
#                            they train in, AB-Net's at abnet.finetune's batch): older cached figures are not reused
TIMED_UPDATES = 3
SPECIAL_IDS = {"cls": 2, "sep": 3, "mask": 4, "pad": 0}  # the random BERTs' [CLS], [SEP], [MASK], [PAD]


@dataclass
class Machine:
    """Measured figures, seconds; keys of the dicts are thread counts."""

    cpu: dict
    device: str
    startup: float = 0.0
    train: dict[str, dict[int, float]] = field(default_factory=dict)  # kind -> threads -> s/update
    greedy: dict[str, dict[int, float]] = field(default_factory=dict)  # domain -> threads -> s/sentence
    beam: dict[int, float] = field(default_factory=dict)  # threads -> s/sentence (evaluate's decoder)
    precision: dict[str, str] = field(default_factory=dict)  # kind -> bf16 | fp32
    beside: float = 1.0  # slow-down of a one-thread stage while others run beside it on the other cores
    elsewhere: float = 0.0  # cores that other work held when measured: one thread timed by its CPU time (`_clock`)
    measured_in: float = 0.0
    load: float = 0.0  # the 1-minute load average when measured: other work sharing the CPU inflates every figure

    @staticmethod
    def _ints(table: dict) -> dict:
        return {k: ({int(t): s for t, s in v.items()} if isinstance(v, dict) else v) for k, v in table.items()}

    @classmethod
    def from_json(cls, data: dict) -> Machine:
        data = dict(data)
        data["train"], data["greedy"] = cls._ints(data["train"]), cls._ints(data["greedy"])
        data["beam"] = {int(t): s for t, s in data["beam"].items()}
        return cls(**data)


_CPU_TIME = False  # `measure` sets it while other work holds cores


def _clock() -> float:
    """What timings are read off: wall time; where other work holds cores while `measure` times (`_CPU_TIME`)
    and the timed work runs on one thread, the CPU time this process got, which is what the work takes on a core
    of its own (a timing beside other work would otherwise price the whole run at the other work's pace)."""
    return time.process_time() if _CPU_TIME and torch.get_num_threads() == 1 else time.perf_counter()


def vocab_size(params: Params, domain: str) -> int:
    """The model's vocabulary size for a domain's SentencePiece models (Marian adds </s>, <unk>, <pad>)."""
    spm = getattr(params.spm, domain)
    return max(spm.de.vocab_size, spm.en.vocab_size) + 2


def typical_pieces(params: Params, domain: str, root: Path = Path(".")) -> tuple[int, int]:
    """Mean (source, target) pieces per training segment: from the prepared corpus if there is one (words x
    PIECES_PER_WORD, lines sampled over the whole file), else the default corpora's."""
    pieces = []
    for lang in (params.lang.src, params.lang.tgt):
        path = root / CORPORA / domain / f"train.{lang}"
        if not path.is_file():
            return TYPICAL_PIECES[domain]
        with path.open(encoding="utf-8") as handle:
            lines = handle.readlines()
        words = [len(line.split()) for line in lines[:: max(1, len(lines) // 5000)]]
        if not words:
            return TYPICAL_PIECES[domain]
        pieces.append(max(4, min(round(PIECES_PER_WORD * sum(words) / len(words)), 120)))
    return pieces[0], pieces[1]


def _model(arch: Arch, vocab: int):
    from transformers import MarianMTModel

    from vocabridge.nmt.model import marian_config

    torch.manual_seed(0)
    return MarianMTModel(marian_config(arch, vocab, vocab, vocab - 1))


def _batch(vocab: int, src_pieces: int, tgt_pieces: int, batch_tokens: int, device: torch.device
           ) -> dict[str, torch.Tensor]:
    """Random ids in the shape of a real batch of `batch_tokens` (see SOURCE_MEAN_OVER_LONGEST)."""
    src_len = max(1, round(src_pieces / SOURCE_MEAN_OVER_LONGEST))
    rows = max(1, int(BUDGET_FILL * batch_tokens) // max(src_len, tgt_pieces))
    gen = torch.Generator().manual_seed(0)
    src = torch.randint(2, vocab - 1, (rows, src_len), generator=gen)
    tgt = torch.randint(2, vocab - 1, (rows, tgt_pieces), generator=gen)
    src[:, -1] = tgt[:, -1] = 0
    return {k: v.to(device) for k, v in {"input_ids": src, "attention_mask": torch.ones_like(src),
                                         "decoder_input_ids": tgt.roll(1, 1), "labels": tgt}.items()}


UNUSED_CHECKPOINTS = Path(tempfile.gettempdir()) / "vocabridge-estimate-never-written"  # a timed step saves none


def _updater(arch: Arch, vocab: int, pieces: tuple[int, int], cfg: Training, device: torch.device,
             frozen: bool) -> tuple[Callable[[], None], str]:
    """One update of nmt.train's Trainer (its `_step`: loss, precision, clipping, Adam, schedule) on a fresh model
    and a batch of the real shape. `frozen`: only the embeddings learn, in fp32, as in generator pretraining."""
    from vocabridge.nmt.train import Trainer

    model = _model(arch, vocab).to(device).train()
    if frozen:
        cfg = dataclasses.replace(cfg, bf16=False)
        for name, p in model.named_parameters():
            p.requires_grad_("embed_tokens" in name)
    trainer = Trainer(model, None, None, None, ([], []), cfg, UNUSED_CHECKPOINTS, {}, "estimate")
    batch = _batch(vocab, *pieces, cfg.batch_tokens, device)
    return (lambda: trainer._step(batch)), trainer.precision.name


def _seconds_per_update(update: Callable[[], None], device: torch.device) -> float:
    for _ in range(WARMUP_UPDATES):  # the first updates allocate and pick kernels: slower than the rest
        update()
    _sync(device)
    started = _clock()
    for _ in range(TIMED_UPDATES):
        update()
    _sync(device)
    return (_clock() - started) / TIMED_UPDATES


def time_updates(arch: Arch, vocab: int, pieces: tuple[int, int], cfg: Training, threads: int, device: torch.device,
                 frozen: bool = False) -> tuple[float, str]:
    """Seconds per training update at `threads` torch threads, and the precision it ran in.

    `frozen`: only the embeddings learn and autocast is off, as in generator pretraining (fp32, the pretrained
    model frozen, gradients flowing through it to the generated rows)."""
    torch.set_num_threads(threads)
    update, precision = _updater(arch, vocab, pieces, cfg, device, frozen)
    return _seconds_per_update(update, device), precision


def mlm_updater(arch, vocab: int, cfg, pieces: int, device: torch.device) -> tuple[Callable[[], None], Any]:
    """One masked-LM update of the plm stage's BERT (plm.bert.MlmTrainer's `_step`, in the precision `cfg.bf16`
    resolves to here) on a fresh model and a batch of the real shape, and its trainer."""
    from transformers import BertConfig, BertForMaskedLM

    from vocabridge.plm.bert import MlmTrainer

    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(vocab_size=vocab, hidden_size=arch.hidden, num_hidden_layers=arch.layers,
                                       num_attention_heads=arch.heads, intermediate_size=arch.ffn,
                                       max_position_embeddings=arch.max_positions, hidden_dropout_prob=arch.dropout,
                                       attention_probs_dropout_prob=arch.dropout))
    model.set_attn_implementation("eager")
    trainer = MlmTrainer(model.train(), None, [[0]], [], cfg, UNUSED_CHECKPOINTS, {}, "estimate", device)
    gen = torch.Generator().manual_seed(0)
    length = min(pieces + 2, cfg.max_len, arch.max_positions)
    ids = torch.randint(5, vocab, (cfg.batch_sentences, length), generator=gen).to(device)
    labels = torch.where(torch.rand(ids.shape, generator=gen).to(device) < cfg.mask_prob, ids, -100)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    return (lambda: trainer._step(batch)), trainer


def time_mlm_updates(arch, vocab: int, cfg, pieces: int, threads: int, device: torch.device) -> tuple[float, str]:
    """Seconds per masked-LM update of the plm stage's BERT at `threads`, and the precision it ran in."""
    torch.set_num_threads(threads)
    update, trainer = mlm_updater(arch, vocab, cfg, pieces, device)
    return _seconds_per_update(update, device), trainer.precision.name


def abnet_kind(spec: AbnetModel | None) -> str:
    """The estimator's name for an abnets entry's model: its kind (vocabridge.plm.abnet.KINDS), and
    mask-predict for AB-Net without BERTs (every layer trains: another price)."""
    from vocabridge.plm.abnet import kind_for

    kind = kind_for(spec.decoder if spec is not None else "mask-predict").kind
    return "mask-predict" if kind == "abnet" and spec is not None and not spec.plms else kind


def abnet_updater(params: Params, vocab: int, pieces: int, device: torch.device, spec: AbnetModel,
                  cfg: Training) -> tuple[Callable[[], None], Any, dict[str, torch.Tensor]]:
    """One training update of an abnets entry's model (its trainer's `_step`: the family's loss, in the precision
    `cfg.bf16` resolves to here, Adam) on random BERTs of plm.arch's size and a batch of `cfg.batch_tokens`;
    the trainer and the batch too (for timing its decoding)."""
    from transformers import BertConfig, BertForMaskedLM

    from vocabridge.plm.abnet import build_abnet, kind_for, mask_targets, model_kind, plm_sides
    from vocabridge.plm.sponsored import auxiliary_labels
    from vocabridge.plm.train import TRAINERS

    pretrained = spec.plms
    torch.manual_seed(0)
    arch = params.plm.arch
    config = BertConfig(vocab_size=vocab, hidden_size=arch.hidden, num_hidden_layers=arch.layers,
                        num_attention_heads=arch.heads, intermediate_size=arch.ffn,
                        max_position_embeddings=arch.max_positions)
    berts = [BertForMaskedLM(config) for _ in range(2)]
    for bert in berts:
        bert.set_attn_implementation("eager")
    adapters = dataclasses.replace(params.abnet.adapters,
                                   max_target_len=min(params.abnet.adapters.max_target_len, arch.max_positions - 2))
    settings = params.abnet.sponsored
    sponsoring = kind_for(spec.decoder).kind == "plm-nmt"
    teacher = BertForMaskedLM(config) if sponsoring and plm_sides(pretrained)[0] and settings.distill else None
    model = build_abnet(*berts, adapters, pretrained is True, spec.decoder, settings, teacher, SPECIAL_IDS)
    model = model.to(device).train()
    kind = model_kind(model)
    trainer = TRAINERS[kind](model, None, None, None, ([], []), cfg, UNUSED_CHECKPOINTS, {},
                             "estimate", params.abnet.dev_decoding, params.abnet.length_weight)
    length = max(3, min(pieces + 2, arch.max_positions))
    rows = max(1, int(BUDGET_FILL * cfg.batch_tokens) // length)
    gen = torch.Generator().manual_seed(0)
    source = torch.randint(5, vocab, (rows, length), generator=gen)
    targets = torch.randint(5, vocab, (rows, length), generator=gen)
    keep = torch.ones_like(source)
    if kind == "abnet":  # the batch that AbnetTrainer's `_collate` makes: masked targets, lengths
        batch = {"source": source, "source_keep": keep, **mask_targets(targets.tolist(), 4, 0, gen)}
    else:  # AB-Net-Enc's and the PLM-sponsored model's: both sides as they are, and Eq. 9's extra terms
        batch = {"source": source, "source_keep": keep, "target": targets, "target_keep": keep}
        if kind == "plm-nmt" and settings.mlm:
            masked = torch.rand(source.shape, generator=gen) < settings.mlm
            batch |= {"mlm_source": source.masked_fill(masked, 4), "mlm_labels": source.masked_fill(~masked, -100)}
        if kind == "plm-nmt" and settings.target_lm:
            batch["lm_labels"] = auxiliary_labels(targets, keep, settings.target_lm, gen)
    batch = {k: v.to(device) for k, v in batch.items()}
    return (lambda: trainer._step(batch)), trainer, batch


def time_abnet(params: Params, vocab: int, pieces: int, threads: int, device: torch.device,
               spec: AbnetModel) -> tuple[float, float, float, str]:
    """Seconds per AB-Net fine-tune update (abnet.finetune's batch, where a study's cells spend; an upstream
    training's bigger batch is priced by `abnet_training_seconds`; BERTs frozen when `spec.plms`) and per sentence
    of its dev decoding (Mask-Predict with abnet.dev_decoding; AB-Net-Enc and PLM-sponsored: greedy) and test
    decoding (abnet.decoding; AB-Net-Enc and PLM-sponsored: beam search, evaluate.beam), on random BERTs of
    plm.arch's size, at `threads`; and the precision the update ran in."""
    from vocabridge.plm.abnet import beam_search, mask_predict, model_kind
    from vocabridge.plm.sponsored import beam_search as sponsored_beam_search

    torch.set_num_threads(threads)
    update, trainer, batch = abnet_updater(params, vocab, pieces, device, spec, params.abnet.finetune)
    per_update = _seconds_per_update(update, device)
    model = trainer.model.eval()
    kind = model_kind(model)
    enc, sponsored = kind == "abnet-enc", kind == "plm-nmt"
    source, keep = batch["source"], batch["source_keep"]
    length = source.shape[1]
    decoding = params.abnet.decoding
    sentences = source[: decoding.batch_sentences]
    if enc or sponsored:  # random weights never emit [SEP]: every sentence runs to the length limit
        search = sponsored_beam_search if sponsored else beam_search
        searched = []
        for beam in (1, params.evaluate.beam):  # greedy dev BLEU, beam search at test time
            search(model, sentences[:2], keep[:2], SPECIAL_IDS, beam, max_len=4)  # warm-up
            _sync(device)
            started = _clock()
            search(model, sentences, keep[: len(sentences)], SPECIAL_IDS, beam, max_len=length - 2)
            _sync(device)
            searched.append((_clock() - started) / len(sentences))
        return per_update, searched[0], searched[1], trainer.precision.name
    mask_predict(model, sentences, keep[: len(sentences)], SPECIAL_IDS, decoding.length_candidates, 1)  # warm-up

    def per_sentence(how) -> float:
        _sync(device)
        started = _clock()
        # random weights stop early; a trained model runs about half of its iterations (T/2)
        mask_predict(model, sentences, keep[: len(sentences)], SPECIAL_IDS, how.length_candidates,
                     max(1, how.iterations // 2))
        _sync(device)
        return (_clock() - started) / len(sentences)

    test = per_sentence(decoding)
    dev = test if params.abnet.dev_decoding == decoding else per_sentence(params.abnet.dev_decoding)
    return per_update, dev, test, trainer.precision.name


def time_beside(arch: Arch, vocab: int, pieces: tuple[int, int], cfg: Training, twins: int) -> float:
    """Seconds per one-thread update while `twins` copies of the same work run beside it, one thread each.

    The flow runs one-thread stages side by side (two fine-tunes on two cores); they share caches and memory
    bandwidth, so each is slower than alone. The twins are threads of this process (torch releases the GIL in
    its kernels), which costs no second interpreter start."""
    torch.set_num_threads(1)
    device = torch.device("cpu")
    update, _ = _updater(arch, vocab, pieces, cfg, device, False)
    stop, running = threading.Event(), threading.Semaphore(0)

    def twin() -> None:
        torch.set_num_threads(1)
        other, _ = _updater(arch, vocab, pieces, cfg, device, False)
        other()
        running.release()
        while not stop.is_set():
            other()

    workers = [threading.Thread(target=twin, daemon=True) for _ in range(twins)]
    for worker in workers:
        worker.start()
    try:
        for _ in workers:
            running.acquire()  # every twin is past its first update before the clock starts
        return _seconds_per_update(update, device)
    finally:
        stop.set()
        for worker in workers:
            worker.join()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _sources(vocab: int, sentences: int, pieces: int, device: torch.device) -> torch.Tensor:
    ids = torch.randint(2, vocab - 1, (sentences, pieces), generator=torch.Generator().manual_seed(0))
    ids[:, -1] = 0
    return ids.to(device)


@torch.inference_mode()
def time_greedy(arch: Arch, vocab: int, pieces: tuple[int, int], threads: int, device: torch.device,
                sentences: int = 24) -> float:
    """Seconds per sentence of greedy decoding (nmt.translate, fp32), (source, target) pieces long."""
    torch.set_num_threads(threads)
    model = use_fast_attention(_model(arch, vocab).to(device).eval(), device)
    ids = _sources(vocab, sentences, pieces[0], device)
    kwargs = {"num_beams": 1, "do_sample": False, "min_new_tokens": pieces[1], "max_new_tokens": pieces[1]}
    model.generate(input_ids=ids[:2], attention_mask=torch.ones_like(ids[:2]), **kwargs)
    started = _clock()
    model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **kwargs)
    _sync(device)
    return (_clock() - started) / len(ids)


def time_beam(params: Params, vocab: int, pieces: tuple[int, int], threads: int, device: torch.device,
              sentences: int = 24) -> float:
    """Seconds per sentence of the evaluate stage's beam search (its decoder and beam) on the profile's model."""
    cfg = params.evaluate
    model = _model(params.pretrain.arch, vocab).eval()
    if cfg.decoder == "transformers":
        torch.set_num_threads(threads)
        ids = _sources(vocab, sentences, pieces[0], device)
        kwargs = {"num_beams": cfg.beam, "do_sample": False, "min_new_tokens": pieces[1], "max_new_tokens": pieces[1]}
        with torch.inference_mode():
            model.to(device).generate(input_ids=ids[:2], attention_mask=torch.ones_like(ids[:2]), **kwargs)
            started = _clock()
            model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **kwargs)
        return (_clock() - started) / len(ids)
    import ctranslate2
    import numpy as np

    from vocabridge.ct2 import marian_spec, write_spec
    from vocabridge.nmt.vocab import Vocab

    tokens = ["</s>", "<unk>", *[f"p{i}" for i in range(vocab - 3)], "<pad>"]
    fake = Vocab(tokens, None, b"")  # the conversion needs the token list only
    with tempfile.TemporaryDirectory(prefix="vocabridge-estimate-") as tmp:
        write_spec(marian_spec(model, fake, fake), Path(tmp) / "ct2")
        translator = ctranslate2.Translator(str(Path(tmp) / "ct2"), device=device.type, intra_threads=threads)
        rng = np.random.default_rng(0)
        batch = [[tokens[i] for i in rng.integers(2, vocab - 1, pieces[0] - 1)] + ["</s>"] for _ in range(sentences)]
        opts = {"beam_size": cfg.beam, "min_decoding_length": pieces[1], "max_decoding_length": pieces[1]}
        translator.translate_batch(batch[:2], **opts)
        started = _clock()
        translator.translate_batch(batch, **opts)
        return (_clock() - started) / sentences


def time_startup() -> float:
    """Seconds a stage's process spends importing its libraries before it does anything."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "import torch, transformers, sacrebleu, pandas, vocabridge.config"],
                   check=True, capture_output=True)
    return time.monotonic() - started


def measure(params: Params, cores: int | None = None, device: torch.device | None = None,
            progress: bool = True) -> Machine:
    """Time this machine on the profile's models (about 30-60 s on a 2-core CPU for the default profile). Where
    other work holds a core (`cpu_elsewhere`), only one thread is timed, by the CPU time it got (`_clock`): stages
    with more threads are then priced at one thread's figure, and `Machine.elsewhere` says so."""
    global _CPU_TIME
    try:
        return _measure(params, cores, device, progress)
    finally:
        _CPU_TIME = False


def _measure(params: Params, cores: int | None, device: torch.device | None, progress: bool) -> Machine:
    cores = cores or threads_of(0)
    device = device or torch.device("cuda" if params.compute.device in ("auto", "cuda") and torch.cuda.is_available()
                                    else "cpu")
    global _CPU_TIME
    elsewhere = cpu_elsewhere(1.0) if device.type == "cpu" else 0.0
    busy = elsewhere >= 0.5  # other work holds a core: one thread, timed by the CPU time it got
    thread_counts = ([1] if busy else sorted({1, cores})) if device.type == "cpu" else [cores]
    started = time.monotonic()
    saved_threads = torch.get_num_threads()
    machine = Machine(cpu=describe_cpu() | {"cores": cores}, device=str(device), elsewhere=round(elsewhere, 2))
    _CPU_TIME = busy

    def note(what: str) -> None:
        if progress:
            print(f"estimate: timing {what} ...", file=sys.stderr, flush=True)

    note("stage start-up")
    machine.startup = time_startup()
    up, down = (typical_pieces(params, d) for d in ("upstream", "downstream"))
    arch = params.pretrain.arch
    # every kind at each thread count a stage may get: the flow gives a pretraining or a generator one thread when
    # another stage runs beside it (sato and liu pretrain four upstream models, two at once)
    jobs = [("pretrain", params.pretrain.train, "upstream", up, thread_counts, False),
            ("generator", _generator_training(params), "upstream", up, thread_counts, True),
            ("finetune-upstream", params.finetune.train, "upstream", down, thread_counts, False),
            ("finetune-downstream", params.finetune.train, "downstream", down, thread_counts, False)]
    timed: dict[tuple, tuple[float, str]] = {}  # the same work is timed once (equal vocabularies, batches)
    for kind, cfg, vocab_domain, pieces, counts, frozen in jobs:
        if kind == "generator" and not params.generators:
            continue
        if kind == "pretrain" and params.pretrain.external_model:
            continue
        machine.train[kind] = {}
        for threads in counts:
            key = (vocab_size(params, vocab_domain), pieces, dataclasses.astuple(cfg), threads, frozen)
            if key not in timed:
                note(f"{kind} updates at {threads} thread(s)")
                timed[key] = time_updates(arch, key[0], pieces, cfg, threads, device, frozen)
            machine.train[kind][threads], machine.precision[kind] = timed[key]
    own_plms = [spec for spec in params.plms.values() if not spec.model]
    if own_plms:
        vocab = max(spec.vocab_size for spec in own_plms)
        machine.train["plm"] = {}
        for threads in thread_counts:
            note(f"masked-LM updates (plm) at {threads} thread(s)")
            machine.train["plm"][threads], machine.precision["plm"] = time_mlm_updates(
                params.plm.arch, vocab, params.plm.train, down[0], threads, device)
    for spec in params.abnets.values():
        kind = abnet_kind(spec)
        if kind in machine.train:
            continue
        vocab = max([s.vocab_size for s in params.plms.values()] or [8000])
        machine.train[kind], machine.greedy[kind], machine.greedy[f"{kind}-test"] = {}, {}, {}
        for threads in thread_counts:
            note(f"{kind} updates and decoding at {threads} thread(s)")
            (machine.train[kind][threads], machine.greedy[kind][threads], machine.greedy[f"{kind}-test"][threads],
             machine.precision[kind]) = time_abnet(params, vocab, down[0], threads, device, spec)
    if device.type == "cpu" and cores > 1 and not busy:  # beside other work the twins would time it, not ours
        note(f"finetune updates at 1 thread, {cores - 1} beside it")
        alone = machine.train["finetune-downstream"][1]
        beside = time_beside(arch, vocab_size(params, "downstream"), down, params.finetune.train, cores - 1)
        machine.beside = round(max(1.0, beside / alone), 3)
    for domain, pieces in (("upstream", up), ("downstream", down)):
        note(f"greedy decoding ({domain})")
        machine.greedy[domain] = {t: time_greedy(arch, vocab_size(params, domain), pieces, t, device)
                                  for t in thread_counts}
    note(f"beam search ({params.evaluate.decoder}, beam {params.evaluate.beam})")
    machine.beam = {t: time_beam(params, vocab_size(params, "downstream"), down, t, device) for t in thread_counts}
    torch.set_num_threads(saved_threads)
    machine.measured_in = round(time.monotonic() - started, 1)
    machine.load = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else 0.0
    return machine


def _generator_training(params: Params) -> Training:
    g = params.generator.train
    return Training(batch_tokens=g.batch_tokens, label_smoothing=g.label_smoothing, bf16=False)


def measurement_key(params: Params, cores: int) -> str:
    """What the measurements depend on: the machine and the parts of params that shape the timed work."""
    parts = [MEASUREMENT_LAYOUT, json.dumps(describe_cpu() | {"cores": cores}, sort_keys=True), torch.__version__,
             json.dumps(dataclasses.asdict(params.pretrain.arch), sort_keys=True),
             json.dumps([dataclasses.asdict(params.spm), dataclasses.asdict(params.evaluate),
                         dataclasses.asdict(params.pretrain.train), dataclasses.asdict(params.finetune.train),
                         dataclasses.asdict(params.generator.train), params.compute.device,
                         sorted(params.generators), dataclasses.asdict(params.plm),
                         dataclasses.asdict(params.abnet), {k: dataclasses.asdict(v) for k, v in params.abnets.items()},
                         {code: dataclasses.asdict(spec) for code, spec in params.plms.items()}],
                        sort_keys=True, default=str)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def cached_measure(params: Params, cores: int | None = None, fresh: bool = False, progress: bool = True) -> Machine:
    """`measure`, kept per machine and profile beside the precision probe's cache (the flow reuses it)."""
    cores = cores or threads_of(0)

    def fresh_entry() -> dict:
        return dataclasses.asdict(measure(params, cores, progress=progress))

    key = measurement_key(params, cores)
    try:
        return Machine.from_json(cached("estimate", key, fresh_entry, fresh))
    except (TypeError, KeyError, AttributeError):  # a cache entry of an older layout
        return Machine.from_json(cached("estimate", key, fresh_entry, fresh=True))


def at(table: dict[int, float], threads: int) -> float:
    """A measured figure at `threads`, or the nearest thread count measured."""
    if threads in table:
        return table[threads]
    return table[min(table, key=lambda t: abs(t - threads))]


def cbow_seconds(pieces: float, epochs: int) -> float:
    """gensim CBOW on one thread, both languages: about 7 s per epoch per 1.6M pieces a language (the default's
    downstream text: 50k lines of 32 pieces)."""
    return 7 * epochs * pieces / (50000 * 32)


def count_lines(path: Path, default: int) -> int:
    """The lines of a prepared file, or `default` where it is not prepared yet."""
    if path.is_file():
        with path.open("rb") as handle:
            return sum(1 for _ in handle)
    return default


def training_seconds(machine: Machine, kind: str, greedy_domain: str, cfg: Training, threads: int,
                     dev_sentences: int) -> float:
    """A training run of `cfg.max_updates` measured `kind` updates with its dev evaluations (greedy BLEU, loss)."""
    evals = cfg.max_updates // max(cfg.eval_every, 1) + 2  # update 0 and the last update
    sentences = min(cfg.dev_sentences, dev_sentences)
    update = at(machine.train[kind], threads)
    # each evaluation: greedy dev BLEU, and dev loss (a forward pass, about a third of an update, per batch)
    loss_batches = sentences * TYPICAL_PIECES[greedy_domain][1] / max(cfg.batch_tokens, 1)
    return (cfg.max_updates * update
            + evals * (sentences * at(machine.greedy[greedy_domain], threads) + loss_batches * update / 3))


DISTILL_BATCH_COST = 1.0  # a distillation batch against a fine-tune update of as many tokens: the teacher's forward
#                          pass on its longer pieces, the student's forward and backward with frozen weights
#                          (benchmarks/distill_settings.py; see distill_seconds)


def distill_seconds(machine: Machine, pairs: int, epochs: int, threads: int, finetune_batch_tokens: int) -> float:
    """Token distillation (`distill` rows' transfer): `epochs` passes over `pairs` downstream pairs in batches of
    distill.BATCH_TOKENS, each priced as a fine-tune update of its size, and a forward pass over the pairs before
    and after (about a third of an update a batch)."""
    from vocabridge.transfer.distill import BATCH_TOKENS

    batches = pairs * max(TYPICAL_PIECES["downstream"]) / (BATCH_TOKENS * BUDGET_FILL)
    per_batch = at(machine.train["finetune-downstream"], threads) * BATCH_TOKENS / max(finetune_batch_tokens, 1)
    return batches * per_batch * DISTILL_BATCH_COST * (epochs + 2 / 3)


def abnet_training_seconds(machine: Machine, kind: str, cfg: Training, threads: int, dev_sentences: int,
                           timed_batch_tokens: int) -> float:
    """An AB-Net family training run (`abnet_kind`) with its dev decoding at each evaluation; its updates priced
    from the ones `time_abnet` timed at `timed_batch_tokens` (abnet.finetune's), in proportion to the batch."""
    evals = cfg.max_updates // max(cfg.eval_every, 1) + 2
    update = at(machine.train[kind], threads) * cfg.batch_tokens / max(timed_batch_tokens, 1)
    sentences = min(cfg.dev_sentences, dev_sentences)
    return cfg.max_updates * update + evals * sentences * (at(machine.greedy[kind], threads) + update / 10)
