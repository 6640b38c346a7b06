"""The `vocabridge` command: helpers around the pipeline that are not DVC stages."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from ruamel.yaml import YAML

from vocabridge.config import Cbow, Diagnostics, SpmModel, TransferMethod, apply_profile, flatten, read_yaml
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
    for dotted, value in flatten(read_yaml(overlay_path) | {"profile": name}).items():
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
    return changed


def adapt_methods() -> dict[str, object]:
    """The methods `adapt` offers: every initialiser that needs no more than the user's model and text."""
    from vocabridge.transfer import METHODS

    return {name: m for name, m in METHODS.items() if m.adapts and not m.needs & {"generator", "corpus"}}


def adapt(args: argparse.Namespace) -> dict:
    """Give a user's Marian/OPUS-MT model vocabularies fitted to their in-domain text (see `adapt --help`)."""
    from vocabridge.cbow import save_vectors, train_cbow
    from vocabridge.corpora.user import read_text_lines
    from vocabridge.fileio import atomic_dir, write_json
    from vocabridge.nmt.model import check_model_dir, save_model
    from vocabridge.tokenizers import train_spm
    from vocabridge.transfer import Resources, get_method, knobs_for

    check_model_dir(args.model)
    method = get_method(args.method)
    knobs = knobs_for(args.method, {args.method: TransferMethod(sides=args.sides, shared=args.shared, k=args.k,
                                                                 reg=args.reg)})
    roles = {"encoder": ("src", args.src_text), "decoder": ("tgt", args.tgt_text)}
    adapted = ["encoder", "decoder"] if knobs.sides == "both" else [knobs.sides]
    for side in adapted:
        if not roles[side][1]:
            raise ConfigError(f"adapt: --sides {knobs.sides} needs --{roles[side][0]}-text")
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
            if "cbow" in method.needs:
                import sentencepiece as spm

                sp = spm.SentencePieceProcessor(model_file=str(spm_files[role]))
                cfg = Cbow(window=args.cbow_window, epochs=args.cbow_epochs, min_count=1, threads=1, seed=args.seed)
                cbow_files[role] = work / f"{role}.bin"
                save_vectors(train_cbow(lines, sp, dim, cfg, role), cbow_files[role])
        for role in ("src", "tgt"):  # the side that is kept still needs a path; it is not read
            spm_files.setdefault(role, work / "unused.model")
        text = {roles[side][0]: list(roles[side][1]) for side in adapted} if "text" in method.needs else {}
        res = Resources(pretrained=args.model, downstream_spm=spm_files, seed=args.seed, cbow=cbow_files, knobs=knobs,
                        diagnostics=Diagnostics(probes=args.probes), text=text)
        model, src, tgt, diagnostics = method.build(res)
        diagnostics |= {"method": args.method, "vocab_size": {"src": len(src), "tgt": len(tgt)},
                        "pretrained": str(args.model)}
        with atomic_dir(args.out) as tmp:
            save_model(model, src, tgt, tmp)
            write_json(tmp / "diagnostics.json", diagnostics)
    return diagnostics


def audit(args: argparse.Namespace) -> tuple[list[dict], list]:
    """`vocabridge audit`: how the model's vocabularies fit the text (vocabridge.audit); OUT/audit.{json,md,png}."""
    import dataclasses

    import sentencepiece as spm

    from vocabridge.audit import audit_side, detect_side, markdown, plot, table_rows
    from vocabridge.corpora.user import read_text_lines
    from vocabridge.fileio import atomic_dir, write_json
    from vocabridge.nmt.model import check_model_dir

    check_model_dir(args.model)
    if not (args.text or args.src_text or args.tgt_text):
        raise ConfigError("audit: give --text, or --src-text and/or --tgt-text")
    if args.text and (args.src_text or args.tgt_text):
        raise ConfigError("audit: --text picks its side itself; give it alone, or --src-text/--tgt-text")
    if any(size < 10 for size in args.sizes):
        raise ConfigError(f"audit: --sizes: every size must be at least 10, got {args.sizes}")
    models = {role: spm.SentencePieceProcessor(model_file=str(args.model / f"{name}.spm"))
              for role, name in (("src", "source"), ("tgt", "target"))}
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


def _d_model(model_dir: Path) -> int:
    import json

    return int(json.loads((model_dir / "config.json").read_text(encoding="utf-8"))["d_model"])


def estimate_command(profile: str | None, fresh: bool, jobs: int) -> str:
    """`vocabridge estimate`: flows/estimate.py lays the stage prices over dvc.yaml's DAG (read by DVC)."""
    import sys

    root = Path.cwd()
    if not (root / "dvc.yaml").is_file() or not (root / "flows" / "estimate.py").is_file():
        raise ConfigError(f"{root}: not the project's root (no dvc.yaml and flows/); run `vocabridge estimate` there")
    sys.path.insert(0, str(root))
    from flows.estimate import estimate, format_estimate

    current = read_yaml(root / "params.yaml").get("profile", "default")
    return format_estimate(estimate(root, profile, fresh, jobs), profile or current)


def results_command(out: Path | None, allow_stale: bool) -> Path:
    """`vocabridge results`: the finished run's outputs into the ledger (vocabridge.ledger), refusing outputs
    that `dvc status` says are stale."""
    import json
    import subprocess
    import sys

    import torch

    from vocabridge.ledger import collect
    from vocabridge.nmt.precision import describe_cpu

    root = Path.cwd()
    if not (root / "dvc.yaml").is_file():
        raise ConfigError(f"{root}: not the project's root (no dvc.yaml); run `vocabridge results` there")
    if not allow_stale:
        proc = subprocess.run([sys.executable, "-m", "dvc", "status", "--json"], cwd=root, capture_output=True,
                              text=True)
        if proc.returncode != 0:
            raise ConfigError(f"dvc status failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
        stale = sorted(json.loads(proc.stdout or "{}"))
        if stale:
            raise ConfigError(f"dvc status: {len(stale)} stage(s) not up to date ({', '.join(stale[:5])}"
                              f"{', ...' if len(stale) > 5 else ''}); finish the run, or --allow-stale")
    profile = read_yaml(root / "params.yaml").get("profile", "default")
    cpu = describe_cpu()
    if torch.cuda.is_available():
        cpu["gpu"] = torch.cuda.get_device_name()
    return collect(root, out or root / "results" / profile, profile, cpu)


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
                    help="the pretrained Marian/OPUS-MT directory (config.json, model.safetensors, *.spm, vocab)")
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
    ad.add_argument("--vocab-size", type=int, default=8000,
                    help="SentencePiece vocabulary size per language, at most (default 8000)")
    ad.add_argument("--cbow-window", type=int, default=5, help="CBOW context window (default 5)")
    ad.add_argument("--cbow-epochs", type=int, default=5, help="CBOW training epochs (default 5)")
    ad.add_argument("--probes", type=int, default=5,
                    help="new tokens whose neighbours diagnostics.json lists (default 5)")
    ad.add_argument("--seed", type=int, default=1, help="seed of SentencePiece, CBOW and random rows (default 1)")
    ad.add_argument("--threads", type=int, default=2, help="SentencePiece training threads (default 2)")
    au = sub.add_parser(
        "audit", help="how well a Marian/OPUS-MT model's vocabularies fit your text, and what size to adapt to",
        description="Segment your text with the model's vocabulary and with SentencePiece vocabularies trained on "
                    "it at a few sizes: pieces per word (fertility), the share of tokens the model's vocabulary "
                    "lacks, the frequent words it shatters, optionally the share of pieces it barely saw in its own "
                    "corpus, and a recommended size. Writes OUT/audit.json, audit.md and audit.png.")
    au.add_argument("--model", type=Path, required=True,
                    help="the Marian/OPUS-MT directory (config.json, model.safetensors, source.spm, target.spm, vocab)")
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
    au.add_argument("--threads", type=int, default=2, help="SentencePiece training threads (default 2)")
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
        description="The results ledger: the report, seeds tables, learning curves, every stage's metrics, the "
                    "dvc.lock and params.yaml of the run, and a line naming the CPU/GPU and thread layout, into "
                    "results/PROFILE/ (replaced whole) to commit. Refuses while `dvc status` shows stale stages.")
    res.add_argument("--out", type=Path, default=None, help="where to write (default results/PROFILE)")
    res.add_argument("--allow-stale", action="store_true", help="collect even if `dvc status` is not clean")
    args = parser.parse_args(argv)
    if args.command == "results":
        print(f"{results_command(args.out, args.allow_stale)}: the run's results, ready to commit")
    elif args.command == "estimate":
        print(estimate_command(args.profile, args.fresh, args.jobs))
    elif args.command == "profile":
        changed = set_profile(args.name, args.params, args.profiles)
        print(f"{args.params}: profile '{args.name}' applied, {len(changed)} keys changed")
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
        rows = {side: diagnostics[side]["rows"] for side in ("encoder", "decoder")}
        print(f"{args.out}: adapted with {args.method}; rows {rows}")


def entry() -> None:
    run(main)


if __name__ == "__main__":
    entry()
