"""Speed of the anchor-based initialisers at the papers' size: VA-LLM, our `focus`, FOCUS's own weighting step.

    python benchmarks/va_llm.py                     # 16k new tokens, 16k pretrained, ~3k shared, d 512
    python benchmarks/va_llm.py --new 4000 --old 4000 --shared 800

One side of the papers' setting (16k-piece vocabularies, Transformer-base d = 512) with synthetic vectors:
Gaussian CBOW vectors for the new vocabulary and Gaussian pretrained rows. The work done does not depend on
the values: exact k-nearest-neighbour search, one k x k solve per token and the sparsemax over all shared
tokens cost the same for any vectors. The one exception is the size of each sparsemax support (how many
shared rows a focus token combines); it is printed, since real CBOW vectors give other supports.

Timed, side by side, on the same tokens and the same auxiliary vectors:
- va-llm: `anchors(select="knn", weighting="lle")` with the method's knobs (k = 10, reg = 1e-3, shared tokens
  re-projected as in Sato et al.'s code, so every ordinary token is mapped), plan and rows;
- focus (ours): `anchors(select="all", weighting="sparsemax")`, shared tokens copied, plan and rows;
- focus (reference): `deepfocus.focus.focus_additional_token_initialization`, the weighting step of the FOCUS
  reference implementation, given the same shared tokens (with their pretrained rows and CBOW vectors) and the
  same new tokens. Its numba kernels are compiled on a small input first; the compile time is printed apart.
  Needs the optional extra (`pip install -e '.[focus]'`); without it the script says so and times ours only.

The project's goal: va-llm under 10 s on a 2-core CPU, with exact neighbours.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from gensim.models import KeyedVectors

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vocabridge.transfer import knobs_for  # noqa: E402
from vocabridge.transfer.methods import anchors  # noqa: E402
from vocabridge.transfer.plan import Side  # noqa: E402

GOAL_S = 10.0


def synthetic_side(n_new: int, n_old: int, n_shared: int, dim: int, seed: int) -> Side:
    """Marian-style vocabularies (`</s>`, `<unk>`, pieces, `<pad>`) with `n_shared` pieces in common."""
    rng = np.random.default_rng(seed)
    shared = [f"\u2581s{i}" for i in range(n_shared)]
    old = ["</s>", "<unk>", *shared, *(f"\u2581o{i}" for i in range(n_old - 3 - n_shared)), "<pad>"]
    new = ["</s>", "<unk>", *shared, *(f"\u2581n{i}" for i in range(n_new - 3 - n_shared)), "<pad>"]
    aux = KeyedVectors(vector_size=dim)
    ordinary = new[2:-1]
    aux.add_vectors(ordinary, rng.standard_normal((len(ordinary), dim), dtype=np.float32))
    emb = rng.standard_normal((len(old), dim), dtype=np.float32) * 0.05
    return Side("decoder", old, new, emb, aux)


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def ours(side: Side, method: str, **kw) -> tuple[np.ndarray, object]:
    plan = anchors(side, knobs_for(method, {}), np.random.default_rng(1), **kw)
    return plan.apply(side.emb), plan


def reference_inputs(side: Side):
    """FOCUS's token records for the tokens our `focus` configuration uses: anchors and tokens to map."""
    from deepfocus.vocab_helper import NewToken, OverlappingToken, TokenClass

    def token(native: str, i: int, descriptor: str) -> TokenClass:
        return TokenClass(native_form=native, id=i, canonical_form=native, fuzzy_form=native.lower(),
                          uncased_form=native.lower(), no_whitespace_form=native, is_beginning_of_word=True,
                          descriptor=descriptor)

    new_ids, old_ids, vecs = side.anchors()
    emb = torch.from_numpy(side.emb)
    overlapping = {}
    for i, j, v in zip(new_ids.tolist(), old_ids.tolist(), vecs, strict=True):
        tok = side.new_tokens[i]
        overlapping[tok] = OverlappingToken(source=[token(tok, j, "source")], target=token(tok, i, "target"),
                                            source_embedding=emb[j], auxiliary_embedding=v)
    anchor_set = set(new_ids.tolist())
    todo = np.array([i for i, t in enumerate(side.new_tokens)
                     if i not in anchor_set and side.aux.has_index_for(t)], dtype=np.int64)
    ids, todo_vecs = side.aux_rows(todo)
    new = {side.new_tokens[i]: NewToken(target=token(side.new_tokens[i], i, "target"), auxiliary_embedding=v)
           for i, v in zip(ids.tolist(), todo_vecs, strict=True)}
    return overlapping, new


def reference(side: Side):
    """Seconds of the numba compile, seconds of the weighting step, its rows; None if deepfocus is missing."""
    try:
        from deepfocus.focus import focus_additional_token_initialization
    except ImportError as err:
        return None, str(err)
    small = synthetic_side(60, 60, 20, 8, seed=2)
    overlapping, new = reference_inputs(small)
    compile_s, _ = timed(lambda: focus_additional_token_initialization(
        overlapping, new, torch.zeros(len(small.new_tokens), 8), device="cpu"))
    overlapping, new = reference_inputs(side)
    target = torch.zeros(len(side.new_tokens), side.emb.shape[1])
    seconds, rows = timed(lambda: focus_additional_token_initialization(overlapping, new, target, device="cpu"))
    return (compile_s, seconds, rows.numpy(), sorted(t.target.id for t in new.values())), None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new", type=int, default=16000, help="new vocabulary size")
    parser.add_argument("--old", type=int, default=16000, help="pretrained vocabulary size")
    parser.add_argument("--shared", type=int, default=3000, help="pieces both vocabularies hold")
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    side = synthetic_side(args.new, args.old, args.shared, args.dim, args.seed)
    print(f"new {len(side.new_tokens)}, pretrained {len(side.old_tokens)}, shared {len(side.shared[0])}, "
          f"d {args.dim}; torch threads {torch.get_num_threads()}", flush=True)

    llm_knobs = knobs_for("va-llm", {})
    llm_s, (_, llm_plan) = timed(lambda: ours(side, "va-llm", select="knn", weighting="lle"))
    print(f"va-llm (k={llm_knobs.k}, reg={llm_knobs.reg}, shared={llm_knobs.shared}): {llm_s:.2f} s for "
          f"{llm_plan.stats['projected']} tokens, exact neighbours; goal < {GOAL_S:.0f} s: "
          f"{'met' if llm_s < GOAL_S else 'NOT met'}", flush=True)

    focus_s, (focus_rows, focus_plan) = timed(lambda: ours(side, "focus", select="all", weighting="sparsemax"))
    mapped = sum(k == "projected" for k in focus_plan.kind)
    print(f"focus (ours): {focus_s:.2f} s for {mapped} tokens over {focus_plan.stats['anchors']} shared tokens, "
          f"mean sparsemax support {focus_plan.stats['mean_support']}", flush=True)

    result, missing = reference(side)
    if result is None:
        print(f"focus (reference): deepfocus is missing ({missing}); install the extra: pip install -e '.[focus]'")
        return
    compile_s, ref_s, ref_rows, ref_ids = result
    diff = float(np.abs(ref_rows[ref_ids] - focus_rows[ref_ids]).max()) if ref_ids else 0.0
    print(f"focus (reference, deepfocus focus_additional_token_initialization): {ref_s:.2f} s for {len(ref_ids)} "
          f"tokens (numba compile before it: {compile_s:.2f} s); rows differ from ours by at most {diff:.2e}")
    print(f"ratios (ours / reference): focus {focus_s / ref_s:.3f}, va-llm {llm_s / ref_s:.3f}; "
          f"reference / ours: focus {ref_s / focus_s:.1f}x, va-llm {ref_s / llm_s:.1f}x")


if __name__ == "__main__":
    main()
