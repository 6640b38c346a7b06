"""A PLM decoder with the downstream vocabulary: the target BERT's embedding rows (and its tied output layer's rows
and bias) re-made for the downstream SentencePiece vocabulary by an initialiser of vocabridge.transfer.

Duan & Zhao (2023, §2.4) give the PLM-sponsored model's decoder the NMT vocabulary through FWET (Algorithm 1);
this module does the same with any initialiser behind the method contract (random rows, va-llm, avg-eg, fwet,
...), so that the PLM decoder asks this project's question: which rows make a new vocabulary work best. The new
vocabulary is the downstream SentencePiece model's pieces as a BERT-style tokenizer (bert_tokenizer_from_spm), so
the model directory, fine-tuning and decoding stay those of every AB-Net row.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from vocabridge.cbow import load_vectors
from vocabridge.corpora.user import read_text_lines
from vocabridge.errors import InputError
from vocabridge.plm.abnet import model_kind
from vocabridge.plm.bert import bert_tokenizer_from_spm
from vocabridge.tokenizers import TokenizerPieces, load_spm, spelled_tokens
from vocabridge.transfer import Method, Resources, target_initializer
from vocabridge.transfer.diagnostics import leave_one_out, neighbours
from vocabridge.transfer.plan import Plan, Side


def target_side(model, tokenizer, spm_model: Path, aux=None, text: list[str] | None = None,
                aux_file: str = "CBOW vectors"):
    """The decoder's Side (pretrained: the target BERT's vocabulary and rows; new: the downstream pieces, BERT's
    special tokens first) and the new tokenizer."""
    new_tokenizer = bert_tokenizer_from_spm(spm_model)
    emb = model.target_bert.get_input_embeddings().weight.detach().float().numpy().copy()
    side = Side("decoder", spelled_tokens(tokenizer), spelled_tokens(new_tokenizer), emb, aux,
                TokenizerPieces(tokenizer), aux_file, load_spm(spm_model), text)
    return side, new_tokenizer


def swap_target_vocabulary(model, plan: Plan, new_tokenizer) -> None:
    """Give the target BERT the plan's rows for `new_tokenizer`'s vocabulary: input embeddings, the tied output
    layer and its bias (rows given directly get bias 0)."""
    bert = model.target_bert
    if not bert.config.tie_word_embeddings:
        raise InputError("the target BERT's output layer is not tied to its embeddings: its rows cannot follow the "
                         "new vocabulary")
    old = bert.get_input_embeddings().weight.detach().float().numpy()
    bias = bert.cls.predictions.bias.detach().float().numpy()
    rows, new_bias = plan.apply(old), plan.apply_bias(bias)
    if len(rows) != len(new_tokenizer):
        raise InputError(f"the plan has {len(rows)} rows for a vocabulary of {len(new_tokenizer)}")
    bert.resize_token_embeddings(len(rows))
    with torch.no_grad():
        bert.get_input_embeddings().weight.copy_(torch.from_numpy(np.ascontiguousarray(rows)))
        bert.cls.predictions.bias.copy_(torch.from_numpy(new_bias))
    bert.config.pad_token_id = new_tokenizer.pad_token_id
    bert.get_input_embeddings().padding_idx = new_tokenizer.pad_token_id


def adapt_plm_decoder(model, tokenizer, res: Resources, row: str, method: Method) -> tuple[object, dict]:
    """Give a PLM-sponsored model's decoder the downstream target vocabulary, its rows made by the initialiser
    of `transfer.ROW.target_vocabulary`; the new tokenizer and the diagnostics."""
    knobs = res.knobs
    initializer, chosen = target_initializer(row, knobs, method)
    if model_kind(model) != "plm-nmt":
        raise InputError(f"params.yaml: transfer.{row}.target_vocabulary: the upstream model '{knobs.upstream}' is "
                         f"an {model_kind(model)} model; only a PLM-sponsored one (abnets.NAME.decoder: coordinator) "
                         f"takes a new decoder vocabulary")
    emb_dim = model.target_bert.config.hidden_size
    aux_file = res.cbow.get("tgt") if "cbow" in chosen.needs else None
    aux = load_vectors(aux_file, emb_dim) if aux_file else None
    text = [line for f in res.text.get("tgt", []) for line in read_text_lines(f)] if "text" in chosen.needs else None
    side, new_tokenizer = target_side(model, tokenizer, res.downstream_spm["tgt"], aux, text, str(aux_file))
    plan = initializer(side, knobs, np.random.default_rng(res.seed))
    check_loo = chosen.build.keywords.get("check_loo", True)
    diagnostics = {
        "adapted": True, "initializer": knobs.target_vocabulary, "rows": plan.shares(), **plan.stats,
        "leave_one_out": leave_one_out(side, initializer, knobs, res.diagnostics.held_out, res.diagnostics.seed)
        if check_loo else None,
        "neighbours": neighbours(side, plan, plan.apply(side.emb), res.diagnostics.probes),
    }
    swap_target_vocabulary(model, plan, new_tokenizer)
    return new_tokenizer, diagnostics
