"""The one training loop: translation models, AB-Net and its kin, masked-LM BERTs and embedding generators.

joeynmt's TrainManager is the model. A model family subclasses `TrainLoop` and says what is particular to it:
the batches of an epoch (`plan`), one batch's tensors (`collate`), its loss (`loss`), and, where a dev set picks
the checkpoint, its evaluation (`validate`). The loop owns everything else, the same for every family:

- updates: non-finite loss check, backward, gradient clipping (`Cadence.clip_norm`), optimizer and schedule step;
- a learning-curve window every `log_every` updates, an evaluation every `eval_every`, a checkpoint every
  `checkpoint_every` (and at the end);
- checkpoint selection (the later update wins a tie) and early stopping after `patience` evaluations without gain;
- exact resume: the `last` checkpoint holds weights, optimizer, schedule, torch's RNG and the loop's state, so a
  killed run goes on with the same batches and dropout masks as one never stopped, and a run that reached its
  `max_updates` goes on when the budget is raised, as if it had had the larger one from the start;
- progress: a tqdm bar in a terminal, a line every few percent elsewhere (vocabridge.progress).
"""

from __future__ import annotations

import math
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from safetensors.torch import load_model, save_model

from vocabridge.checkpoint import checkpoint_record, load_checkpoint, save_checkpoint
from vocabridge.errors import VocabridgeError
from vocabridge.fileio import atomic_dir, recover_dir
from vocabridge.progress import progress, write


class TrainingError(VocabridgeError):
    """Training cannot go on (a loss that is not finite, a checkpoint that does not fit)."""


@dataclass
class Cadence:
    """When the loop does what, in updates; and the update's own settings."""

    max_updates: int
    log_every: int
    checkpoint_every: int
    eval_every: int = 0  # 0: no evaluation (and no checkpoint selection)
    patience: int = 0  # evaluations without a gain before stopping; 0: never
    clip_norm: float | None = None  # the gradients' global norm; None: no clipping
    seed: int | None = None  # torch's RNG at a fresh start (dropout); None: left as it is (no dropout)


@dataclass
class LoopState:
    """What the loop keeps across a resume; a family's state adds its own fields."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    target_tokens: int = 0
    seconds: float = 0.0  # the loop's wall time (updates, and the evaluations and checkpoints within)
    checkpoint_seconds: float = 0.0  # ... writing `last` and `best`
    best_step: int = 0
    bad_evals: int = 0
    stopped: str = ""

    def ending(self) -> dict:
        """How the run ended, as a cell's record says it: `stopped_by` patience (an early stop) or cap (max_updates),
        and `best_at_end`, whether the best checkpoint is the last update (a run stopped by the cap there has not
        converged; under `gained`'s rule an early stop never ends on its best)."""
        by = "patience" if self.stopped.startswith("early stop") else \
            "cap" if self.stopped.startswith("max_updates") else self.stopped or None
        return {"stopped_by": by, "best_at_end": self.step > 0 and self.best_step == self.step}


def gained(score: float, best: float) -> bool:
    """The one rule for a dev evaluation: a score at least as good as every earlier one is a gain, a tie too. The
    best checkpoint moves to it (more training, never the untouched start) and patience starts again."""
    return score >= best


@dataclass
class Loss:
    """One batch's loss (the tensor to minimise) and the figures its learning curve shows."""

    value: torch.Tensor
    parts: dict[str, torch.Tensor] = field(default_factory=dict)  # e.g. Lp and Ld of generator training


class TrainLoop:
    """Train `module` with `optimizer` (and `scheduler`) as `cadence` says; a family fills in the hooks below."""

    State: ClassVar[type[LoopState]] = LoopState
    unit: ClassVar[str] = "upd"
    selection: ClassVar[str] = "dev score"  # what `validate` scores, for the early-stop message
    replayed: ClassVar[tuple[str, ...]] = ()  # settings (fingerprint keys) whose early stop `replay` re-decides
    #                                            from a checkpoint: a run under other values of them is the same run

    def __init__(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 scheduler: torch.optim.lr_scheduler.LRScheduler | None, cadence: Cadence, ckpt_dir: Path,
                 fingerprint: dict, name: str, device: torch.device):
        self.module, self.optimizer, self.scheduler, self.cadence = module, optimizer, scheduler, cadence
        self.ckpt_dir, self.fingerprint, self.name, self.device = Path(ckpt_dir), fingerprint, name, device
        self.state = self.State()
        self._last_saved = 0

    # -- what a model family defines ----------------------------------------------------------------------------
    def plan(self, epoch: int) -> Sequence[Any]:
        """The batches of `epoch` (whatever `collate` takes), the same on every run."""
        raise NotImplementedError

    def collate(self, item: Any, step: int) -> tuple[Any, int]:
        """Batch `item` as the tensors `loss` takes, on the device, and its target tokens; update `step` (from 0)
        may draw its own randomness from (seed, step), so that a resumed run draws the same."""
        raise NotImplementedError

    def loss(self, batch: Any) -> Loss:
        raise NotImplementedError

    def validate(self) -> float | None:
        """Evaluate on dev data and record it in the family's log; the selection score (higher is better), or
        None where nothing is selected."""
        return None

    def logged(self, row: dict) -> None:
        """A learning-curve window: step, the mean loss and parts, lr, target tokens a second."""

    def improved(self) -> None:
        """The evaluation just made is the best so far: the family notes its figures."""

    def best_score(self) -> float:
        """The selection score of the best evaluation so far (-inf before any), from the figures `improved` noted."""
        return -math.inf

    def replay(self, state: dict) -> tuple[int, int | None] | None:
        """What this run's patience makes of the evaluations in `state` (a checkpoint's, or this run's own): the
        evaluations without a gain at their end and the update of the early stop (None: no stop); None where the
        family keeps no record of its evaluations (a gain is then a new best score, and a saved early stop stays)."""
        return None

    def postfix(self, row: dict) -> dict:
        """The progress bar's figures after a window."""
        return {"loss": row["loss"], "tok_s": row["target_tokens_per_s"]}

    def adjust_gradients(self) -> None:
        """After backward, before clipping: e.g. hold some parameters or rows (vocabridge.nmt.forgetting)."""

    def describe(self) -> str | None:
        """A line said once when training starts (e.g. its precision)."""
        return None

    # -- one update ---------------------------------------------------------------------------------------------
    def _step(self, batch: Any) -> dict[str, float]:
        """One optimizer update on `batch`; the loss and its parts as numbers."""
        loss = self.loss(batch)
        if not torch.isfinite(loss.value):
            raise TrainingError(f"{self.name}: loss is {loss.value.item()} at update {self.state.step + 1}; stopped. "
                                f"The last good checkpoint is {self.ckpt_dir / 'last'} (update {self._last_saved})")
        self.optimizer.zero_grad(set_to_none=True)
        if loss.value.requires_grad:  # a batch can leave nothing to learn (a generator's batch without new tokens)
            loss.value.backward()
            self.adjust_gradients()
            if self.cadence.clip_norm is not None:
                torch.nn.utils.clip_grad_norm_(self.module.parameters(), self.cadence.clip_norm)
            self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        return {"loss": loss.value.item(), **{k: v.item() for k, v in loss.parts.items()}}

    # -- checkpoints --------------------------------------------------------------------------------------------
    def save(self, which: str) -> None:
        """`last` (everything a resume needs) or `best` (the weights), atomically."""
        started = time.perf_counter()
        if which == "last":
            record = {"state": asdict(self.state), "fingerprint": self.fingerprint}
            if self.scheduler is not None:
                record["scheduler"] = {k: v for k, v in self.scheduler.state_dict().items() if k != "lr_lambdas"}
            save_checkpoint(self.ckpt_dir, self.module, self.optimizer, record)
            self._last_saved = self.state.step
        else:
            with atomic_dir(self.ckpt_dir / which) as tmp:
                save_model(self.module, str(tmp / "model.safetensors"))
        self.state.checkpoint_seconds += time.perf_counter() - started

    def _resume(self) -> bool:
        record = checkpoint_record(self.ckpt_dir)
        if record is None:
            return False
        replayed = self.replay(record.get("state") or {})
        if not self._continues(record.get("state") or {}, replayed):
            shutil.rmtree(self.ckpt_dir)  # another budget's run that this one cannot take over exactly
            return False
        saved = load_checkpoint(self.ckpt_dir, self.fingerprint, self.module, self.optimizer, self.device,
                                self.replayed, record)
        if saved is None:
            return False
        recover_dir(self.ckpt_dir / "best")  # the best weights that `last`'s state names, if a kill set them aside
        if self.scheduler is not None:
            self.scheduler.load_state_dict(self.scheduler.state_dict() | saved["scheduler"])
            for group, lr in zip(self.optimizer.param_groups, self.scheduler.get_last_lr(), strict=True):
                group["lr"] = lr
        self.state = self.State(**saved["state"])
        if not self.state.stopped.startswith("early stop") and self.state.step < self.cadence.max_updates:
            self.state.stopped = ""  # ran to an end that is now further on: go on (an early stop stays one ...
        if replayed is not None:  # ... unless this run's patience, replayed, says otherwise)
            self.state.bad_evals, stop = replayed
            if stop is not None:
                self.state.stopped = self._stop_message()
            elif self.state.stopped.startswith("early stop"):
                self.state.stopped = ""
        self._last_saved = self.state.step
        return True

    def _continues(self, saved: dict, replayed: tuple[int, int | None] | None) -> bool:
        """Whether a checkpoint of this run (under any budget: `same_run`) is where a run to this budget would be:
        not past this budget and, if it ended at its own smaller one, without an end-of-run evaluation or log row
        off the cadence that a longer run would not have made (it would also have chosen its best by it); nor
        stopped earlier by this run's patience (`replayed`: what `replay` makes of it)."""
        cadence, step = self.cadence, saved.get("step", 0)
        if step > cadence.max_updates:
            return False
        ended = step < cadence.max_updates and bool(saved.get("stopped")) and \
            not saved["stopped"].startswith("early stop")
        off_cadence = any(every and step % every for every in (cadence.eval_every, cadence.log_every))
        stop = replayed[1] if replayed is not None else None
        return not (ended and off_cadence) and (stop is None or stop >= step)

    def load_best(self) -> None:
        load_model(self.module, str(self.ckpt_dir / "best" / "model.safetensors"), device=str(self.device))

    # -- the loop -----------------------------------------------------------------------------------------------
    def _evaluate(self) -> None:
        st, cadence = self.state, self.cadence
        score = self.validate()
        self.module.train()
        if score is None:
            return
        best = self.best_score()
        replayed = self.replay(vars(st))  # one rule for a run and its resume: the family's, over its whole log
        st.bad_evals = replayed[0] if replayed is not None else 0 if gained(score, best) else st.bad_evals + 1
        if gained(score, best):
            st.best_step = st.step
            self.improved()
            self.save("best")
        if cadence.patience and st.bad_evals >= cadence.patience:
            st.stopped = self._stop_message()

    def _stop_message(self) -> str:
        return f"early stop: no {self.selection} gain in {self.state.bad_evals} evaluations"

    def train(self) -> LoopState:
        """Run to max_updates or an early stop; with evaluations, the best weights end up in ckpt_dir/best."""
        cadence = self.cadence
        resumed = self._resume()
        st = self.state
        said = self.describe()
        if said:
            write(f"{self.name}: {said}", file=sys.stderr)
        if resumed:
            write(f"{self.name}: resuming from the checkpoint at update {st.step} ({self.ckpt_dir / 'last'})",
                  file=sys.stderr)
        self.module.train()
        if not resumed:
            if cadence.seed is not None:
                torch.manual_seed(cadence.seed)  # dropout: the run's seed, not whatever seeded the process
            if cadence.eval_every:
                self._evaluate()  # update 0: the starting point of the learning curve
            self.save("last")
        bar = progress(total=cadence.max_updates, initial=st.step, desc=self.name, unit=self.unit)
        window: dict[str, float] = {}
        window_n, window_tokens, window_start = 0, 0, time.perf_counter()
        while st.step < cadence.max_updates and not st.stopped:
            plan = self.plan(st.epoch)
            while st.batch_in_epoch < len(plan) and st.step < cadence.max_updates and not st.stopped:
                batch, tokens = self.collate(plan[st.batch_in_epoch], st.step)
                for key, value in self._step(batch).items():
                    window[key] = window.get(key, 0.0) + value
                st.step += 1
                st.batch_in_epoch += 1
                st.target_tokens += tokens
                window_n += 1
                window_tokens += tokens
                bar.update(1)
                last = st.step == cadence.max_updates
                if st.step % cadence.log_every == 0 or last:
                    elapsed = time.perf_counter() - window_start
                    st.seconds += elapsed
                    row = {"step": st.step, **{k: round(v / window_n, 4) for k, v in window.items()},
                           "target_tokens_per_s": round(window_tokens / max(elapsed, 1e-9), 1)}
                    if self.scheduler is not None:
                        row["lr"] = float(f"{self.scheduler.get_last_lr()[0]:.6g}")
                    self.logged(row)
                    bar.set_postfix(**self.postfix(row))
                    window, window_n, window_tokens, window_start = {}, 0, 0, time.perf_counter()
                if cadence.eval_every and (st.step % cadence.eval_every == 0 or last):
                    self._evaluate()
                if st.step % cadence.checkpoint_every == 0 or last or st.stopped:
                    self.save("last")
            if st.batch_in_epoch >= len(plan):
                st.epoch += 1
                st.batch_in_epoch = 0
        bar.close()
        if not st.stopped:
            st.stopped = "max_updates reached" if cadence.max_updates else "no training (max_updates 0)"
            self.save("last")
        return st
