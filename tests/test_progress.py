"""vocabridge.progress: a tqdm bar in a terminal, a line every few percent or every minute anywhere else."""

from __future__ import annotations

import io

from tqdm import tqdm

import vocabridge.progress as progress_module
from vocabridge.progress import LineProgress, progress, write


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_500_update_loop_in_a_log_is_a_line_every_5_percent():
    """The flow's stage logs got a line per redraw (pretrain: 32%|... ten a second); now 21 lines for 500 updates."""
    log = io.StringIO()
    bar = progress(total=500, desc="pretrain", unit="upd", file=log, dynamic_ncols=True)
    assert isinstance(bar, LineProgress)
    for step in range(1, 501):
        bar.update(1)
        if step % 50 == 0:
            bar.set_postfix(loss=1.0)  # a postfix redraw is no line of its own
    bar.close()
    bar.close()  # closing twice (a with-block, then the garbage collector) adds nothing
    text = log.getvalue()
    lines = text.splitlines()
    assert "\r" not in text and text.endswith("\n")
    assert len(lines) == 21, lines  # 0%, 5%, ..., 100%
    assert lines[0].startswith("pretrain:   0%") and "0/500" in lines[0]
    assert lines[1].startswith("pretrain:   5%") and "25/500" in lines[1]
    assert lines[-1].startswith("pretrain: 100%") and "500/500" in lines[-1] and "loss=1" in lines[-1]


def test_a_slow_loop_prints_every_minute_and_the_end(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: clock[0])
    log = io.StringIO()
    with progress(total=1000, initial=158, desc="pretrain", file=log) as bar:  # resumed at update 158
        for _ in range(11):  # 11 updates of 1 in 330 s: no 5% mark, a line a minute
            clock[0] += 30
            bar.update(1)
    lines = log.getvalue().splitlines()
    assert "158/1000" in lines[0]
    assert [line.split("|")[2].split()[0] for line in lines[1:]] == ["160/1000", "162/1000", "164/1000", "166/1000",
                                                                      "168/1000", "169/1000"]  # the last at close
    log = io.StringIO()
    for _ in progress((i for i in range(10)), desc="no total", file=log):  # unknown total: the minute only
        pass
    assert len(log.getvalue().splitlines()) == 2  # opened, closed


def test_iterating_yields_everything_and_disable_prints_nothing():
    log = io.StringIO()
    assert list(progress(range(300), desc="extract", unit="pkg", file=log)) == list(range(300))
    assert len(log.getvalue().splitlines()) == 21
    quiet = io.StringIO()
    bar = progress(total=10, file=quiet, disable=True)
    bar.update(10)
    bar.close()
    assert quiet.getvalue() == ""


def test_messages_between_lines_stay_whole_lines():
    log = io.StringIO()
    bar = progress(total=100, desc="finetune", file=log)
    bar.update(3)
    write("finetune: resuming from the checkpoint at update 3", file=log)
    bar.update(97)
    bar.close()
    text = log.getvalue()
    assert "\r" not in text
    assert text.splitlines()[1] == "finetune: resuming from the checkpoint at update 3"


def test_a_terminal_gets_tqdm_s_own_bar():
    screen = Terminal()
    bar = progress(total=500, desc="pretrain", file=screen)
    assert type(bar) is tqdm and bar.dynamic_ncols
    bar.update(500)
    bar.close()
    assert "\r" in screen.getvalue()
