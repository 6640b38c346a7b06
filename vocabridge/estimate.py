"""What a profile will cost on this machine, measured before the run.

`measure` times what dominates the pipeline on this CPU or GPU, in under a minute: a few training updates of
the profile's models at its batch sizes (pretraining, fine-tuning, the generator's frozen-model updates) at
one thread and at every core, greedy decoding (dev BLEU during training) and beam decoding with the
evaluate stage's decoder, and the start-up of a stage's Python process. `stage_seconds` turns those into
the expected wall time of one stage; flows/estimate.py adds them up over dvc.yaml's DAG, one stage at a time
as `dvc repro` runs them and side by side as the Prefect flow runs them.

The short stages (downloads, SentencePiece, CBOW, report) are not timed: they take fixed figures measured on
the default profile (a few minutes in all), scaled by the sizes in params.yaml.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from vocabridge.config import Arch, Params, Training
from vocabridge.nmt.precision import cached, describe_cpu, resolve_bf16
from vocabridge.nmt.train import threads_of
from vocabridge.transfer import generators_needed, get_method

# Typical segment lengths in pieces when the corpora are not prepared yet (IT strings are short, verses long).
TYPICAL_PIECES = {"upstream": 14, "downstream": 38}
DVC_OVERHEAD = 2.5  # seconds `dvc repro --single-item` adds around a stage's command (hashing, lock)
TIMED_UPDATES = 2


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


def vocab_size(params: Params, domain: str) -> int:
    """The model's vocabulary size for a domain's SentencePiece models (Marian adds </s>, <unk>, <pad>)."""
    spm = getattr(params.spm, domain)
    return max(spm.de.vocab_size, spm.en.vocab_size) + 2


def typical_pieces(params: Params, domain: str, root: Path = Path(".")) -> int:
    """Mean pieces per training segment: from the prepared corpus if there is one (words x 1.4), else typical."""
    path = root / "data" / "corpora" / domain / f"train.{params.lang.tgt}"
    if path.is_file():
        with path.open(encoding="utf-8") as handle:
            words = [len(line.split()) for _, line in zip(range(5000), handle, strict=False)]
        if words:
            return max(4, min(int(1.4 * sum(words) / len(words)) + 1, 120))
    return TYPICAL_PIECES[domain]


def _model(arch: Arch, vocab: int):
    from transformers import MarianMTModel

    from vocabridge.nmt.model import marian_config

    torch.manual_seed(0)
    return MarianMTModel(marian_config(arch, vocab, vocab, vocab - 1))


def _batch(vocab: int, pieces: int, batch_tokens: int, device: torch.device) -> dict[str, torch.Tensor]:
    rows = max(1, batch_tokens // pieces)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(2, vocab - 1, (rows, pieces), generator=gen)
    ids[:, -1] = 0
    return {k: v.to(device) for k, v in {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                                         "decoder_input_ids": ids.roll(1, 1), "labels": ids}.items()}


def time_updates(arch: Arch, vocab: int, pieces: int, cfg: Training, threads: int, device: torch.device,
                 frozen: bool = False) -> tuple[float, str]:
    """Seconds per training update of nmt.train's step (Adam, label smoothing, clipping, its precision).

    `frozen`: only the embeddings learn and autocast is off, as in generator pretraining (fp32, the pretrained
    model frozen, gradients flowing through it to the generated rows)."""
    torch.set_num_threads(threads)
    model = _model(arch, vocab).to(device).train()
    precision = resolve_bf16(False if frozen else cfg.bf16, device)
    if frozen:
        for name, p in model.named_parameters():
            p.requires_grad_("embed_tokens" in name)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=1e-4)
    batch = _batch(vocab, pieces, cfg.batch_tokens, device)
    labels = batch.pop("labels")

    def update() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision.bf16):
            logits = model(**batch).logits
        loss = F.cross_entropy(logits.float().view(-1, vocab), labels.view(-1), label_smoothing=cfg.label_smoothing)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.clip_norm)
        optimizer.step()

    update()
    _sync(device)
    started = time.perf_counter()
    for _ in range(TIMED_UPDATES):
        update()
    _sync(device)
    return (time.perf_counter() - started) / TIMED_UPDATES, precision.name


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.inference_mode()
def time_greedy(arch: Arch, vocab: int, pieces: int, threads: int, device: torch.device, sentences: int = 24) -> float:
    """Seconds per sentence of greedy decoding (nmt.translate, fp32) with outputs as long as the inputs."""
    torch.set_num_threads(threads)
    model = _model(arch, vocab).to(device).eval()
    ids = _batch(vocab, pieces, sentences * pieces, device)["input_ids"]
    kwargs = {"num_beams": 1, "do_sample": False, "min_new_tokens": pieces, "max_new_tokens": pieces}
    model.generate(input_ids=ids[:2], attention_mask=torch.ones_like(ids[:2]), **kwargs)
    started = time.perf_counter()
    model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **kwargs)
    _sync(device)
    return (time.perf_counter() - started) / len(ids)


def time_beam(params: Params, vocab: int, pieces: int, threads: int, device: torch.device,
              sentences: int = 24) -> float:
    """Seconds per sentence of the evaluate stage's beam search (its decoder and beam) on the profile's model."""
    cfg = params.evaluate
    model = _model(params.pretrain.arch, vocab).eval()
    if cfg.decoder == "transformers":
        torch.set_num_threads(threads)
        ids = _batch(vocab, pieces, sentences * pieces, torch.device("cpu"))["input_ids"].to(device)
        kwargs = {"num_beams": cfg.beam, "do_sample": False, "min_new_tokens": pieces, "max_new_tokens": pieces}
        with torch.inference_mode():
            model.to(device).generate(input_ids=ids[:2], attention_mask=torch.ones_like(ids[:2]), **kwargs)
            started = time.perf_counter()
            model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **kwargs)
        return (time.perf_counter() - started) / len(ids)
    import ctranslate2
    import numpy as np
    from transformers.utils import logging as hf_logging

    from vocabridge.ct2 import _converter

    hf_logging.disable_progress_bar()  # a scratch model's save and reload, not the user's work
    from vocabridge.nmt.vocab import Vocab

    tokens = ["</s>", "<unk>", *[f"p{i}" for i in range(vocab - 3)], "<pad>"]
    fake = Vocab(tokens, None, b"")  # the converter needs the token list only
    with tempfile.TemporaryDirectory(prefix="vocabridge-estimate-") as tmp:
        model.save_pretrained(Path(tmp) / "hf", safe_serialization=True)
        converter = _converter(Path(tmp) / "hf", fake, fake)
        converter.load_tokenizer = lambda *args, **kwargs: SimpleNamespace(  # no SentencePiece files to read
            get_vocab=lambda: {t: i for i, t in enumerate(tokens)}, eos_token="</s>", unk_token="<unk>")
        converter.convert(str(Path(tmp) / "ct2"), force=True)
        translator = ctranslate2.Translator(str(Path(tmp) / "ct2"), device=device.type, intra_threads=threads)
        rng = np.random.default_rng(0)
        batch = [[tokens[i] for i in rng.integers(2, vocab - 1, pieces)] + ["</s>"] for _ in range(sentences)]
        opts = {"beam_size": cfg.beam, "min_decoding_length": pieces, "max_decoding_length": pieces}
        translator.translate_batch(batch[:2], **opts)
        started = time.perf_counter()
        translator.translate_batch(batch, **opts)
        return (time.perf_counter() - started) / sentences


def time_startup() -> float:
    """Seconds a stage's process spends importing its libraries before it does anything."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch, transformers, sacrebleu, pandas, vocabridge.config"],
                   check=True, capture_output=True)
    return time.perf_counter() - started


def measure(params: Params, cores: int | None = None, device: torch.device | None = None,
            progress: bool = True) -> Machine:
    """Time this machine on the profile's models (about 30-60 s on a 2-core CPU for the default profile)."""
    cores = cores or threads_of(0)
    device = device or torch.device("cuda" if params.compute.device in ("auto", "cuda") and torch.cuda.is_available()
                                    else "cpu")
    thread_counts = sorted({1, cores}) if device.type == "cpu" else [cores]
    started = time.perf_counter()
    saved_threads = torch.get_num_threads()
    machine = Machine(cpu=describe_cpu() | {"cores": cores}, device=str(device))

    def note(what: str) -> None:
        if progress:
            print(f"estimate: timing {what} ...", file=sys.stderr, flush=True)

    note("stage start-up")
    machine.startup = time_startup()
    up, down = (typical_pieces(params, d) for d in ("upstream", "downstream"))
    arch = params.pretrain.arch
    jobs = [("pretrain", params.pretrain.train, "upstream", up, [cores], False),
            ("generator", _generator_training(params), "upstream", up, [cores], True),
            ("finetune-upstream", params.finetune.train, "upstream", down, thread_counts, False),
            ("finetune-downstream", params.finetune.train, "downstream", down, thread_counts, False)]
    timed: dict[tuple, tuple[float, str]] = {}  # the same work is timed once (equal vocabularies, batches)
    for kind, cfg, vocab_domain, pieces, counts, frozen in jobs:
        if kind == "generator" and not generators_needed(params.methods, params.transfer):
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
    for domain, pieces in (("upstream", up), ("downstream", down)):
        note(f"greedy decoding ({domain})")
        machine.greedy[domain] = {t: time_greedy(arch, vocab_size(params, domain), pieces, t, device)
                                  for t in thread_counts}
    note(f"beam search ({params.evaluate.decoder}, beam {params.evaluate.beam})")
    machine.beam = {t: time_beam(params, vocab_size(params, "downstream"), down, t, device) for t in thread_counts}
    torch.set_num_threads(saved_threads)
    machine.measured_in = round(time.perf_counter() - started, 1)
    machine.load = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else 0.0
    return machine


def _generator_training(params: Params) -> Training:
    g = params.generator.train
    return Training(batch_tokens=g.batch_tokens, label_smoothing=g.label_smoothing, bf16=False)


def measurement_key(params: Params, cores: int) -> str:
    """What the measurements depend on: the machine and the parts of params that shape the timed work."""
    parts = [json.dumps(describe_cpu() | {"cores": cores}, sort_keys=True), torch.__version__,
             json.dumps(dataclasses.asdict(params.pretrain.arch), sort_keys=True),
             json.dumps([dataclasses.asdict(params.spm), dataclasses.asdict(params.evaluate),
                         dataclasses.asdict(params.pretrain.train), dataclasses.asdict(params.finetune.train),
                         dataclasses.asdict(params.generator.train), params.compute.device,
                         generators_needed(params.methods, params.transfer)], sort_keys=True, default=str)]
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


def _at(table: dict[int, float], threads: int) -> float:
    """A measured figure at `threads`, or the nearest thread count measured."""
    if threads in table:
        return table[threads]
    return table[min(table, key=lambda t: abs(t - threads))]


def _count_lines(path: Path, default: int) -> int:
    if path.is_file():
        with path.open("rb") as handle:
            return sum(1 for _ in handle)
    return default


def _training(machine: Machine, kind: str, greedy_domain: str, cfg: Training, threads: int,
              dev_sentences: int) -> float:
    evals = cfg.max_updates // max(cfg.eval_every, 1) + 2  # update 0 and the last update
    return (cfg.max_updates * _at(machine.train[kind], threads)
            + evals * min(cfg.dev_sentences, dev_sentences) * _at(machine.greedy[greedy_domain], threads))


def stage_seconds(stage: str, params: Params, machine: Machine, threads: int, root: Path = Path(".")) -> float:
    """Expected wall time of one DVC stage (`pretrain`, `finetune@va-llm`) at `threads` torch threads."""
    group, _, item = stage.partition("@")
    start = machine.startup + DVC_OVERHEAD
    corpora = root / "data" / "corpora"
    down_dev = _count_lines(corpora / "downstream" / f"dev.{params.lang.src}", params.prepare.downstream.dev_size)
    up_dev = _count_lines(corpora / "upstream" / f"dev.{params.lang.src}", params.prepare.upstream.dev_size)
    bible = params.prepare.downstream.bible
    mono = bible.mono_size or 40000  # all of the Bible's other translations: about 40k lines per language
    size = (bible.train_size or 30000) + mono  # CBOW and SentencePiece text, against 10k + 40k in the default
    if group == "prepare":
        if item == "upstream":
            debian = params.prepare.upstream.debian
            return start + 3 + 0.25 * len(debian.packages) + (25 if debian.libreoffice_help else 0)
        return start + 6
    if group == "spm":
        return start + 3 + 10 * size / 50000
    if group == "mismatch":
        return start + 1
    if group == "cbow":
        return start + 2 + 7 * params.cbow.epochs * size / 50000
    if group == "pretrain":
        if params.pretrain.external_model:
            return start + 5
        cfg = params.pretrain.train
        return start + 10 + _training(machine, "pretrain", "upstream", cfg, cfg.threads or threads, up_dev)
    if group == "generator":
        variants = generators_needed(params.methods, params.transfer)
        per = params.generator.train.steps * _at(machine.train.get("generator", {0: 0.0}), threads)
        return start + len(variants) * (10 + per)
    if group == "transfer":
        return start + 8 + params.diagnostics.dev_sentences * 2 * _at(machine.greedy["downstream"], threads)
    if group == "finetune":
        method = get_method(item, params.transfer)
        if not method.finetune:
            return start + 1
        kind = "finetune-upstream" if method.vocabulary == "upstream" else "finetune-downstream"
        cfg = params.finetune.train
        return start + 5 + _training(machine, kind, "downstream", cfg, cfg.threads or threads, down_dev)
    if group == "evaluate":
        test = _count_lines(corpora / "downstream" / f"test.{params.lang.src}", params.prepare.downstream.test_size)
        return start + 4 + test * _at(machine.beam, threads)
    if group == "report":
        return start + 5 + 2 * len(params.methods)
    return start
