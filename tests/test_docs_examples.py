"""The training examples of docs/progress.md run as printed (issue 8: "runnable examples").

Each block is taken from the doc and run in its own Python process with small stand-ins
for what it leaves to the user (a model, an optimizer, a loader; ``torch.save`` and
``torch.load``; Lightning's ``Callback`` and a trainer calling its hooks), the real
client (``slurm_shockwave.client.reporter``) with no service to find, and the checkpoint
signal really sent to the process mid-epoch. Checked: the checkpoint is written on the
signal, acknowledged, the loop trains on (it must not exit on its own), and run again as
a requeued job (``SLURM_RESTART_COUNT``) it resumes at the checkpointed epoch. The doc's
``/scratch/`` is the one change made to the text.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "progress.md"

TORCH_STUB = '''
import pickle

def save(obj, path):
    with open(path, "wb") as f:
        pickle.dump(obj, f)

def load(path):
    with open(path, "rb") as f:
        return pickle.load(f)
'''

LIGHTNING_STUB = '''
import os, signal
from __main__ import LOG  # the example's log (LOOP_PRELUDE)
class Callback:
    pass
class Trainer:
    """Lightning's trainer as far as the doc's block uses it: fit calls the callbacks'
    hooks for max_epochs epochs of three batches (from the checkpoint's epoch when
    given one), and the checkpoint signal arrives mid-epoch in a run not resumed."""
    def __init__(self, max_epochs, callbacks, plugins):
        self.max_epochs, self.callbacks, self.plugins = max_epochs, callbacks, plugins
        self.current_epoch = 0
    def save_checkpoint(self, path):
        LOG.append(["saved", self.current_epoch])
        with open(path, "w") as f:
            f.write(str(self.current_epoch))
    def fit(self, model, train_dataloaders, ckpt_path=None):
        LOG.append(["fit", [type(p).__name__ for p in self.plugins],
                    [p.auto_requeue for p in self.plugins], ckpt_path])
        self.train_dataloader = train_dataloaders
        start = int(open(ckpt_path).read()) if ckpt_path else 0
        for cb in self.callbacks:
            cb.on_fit_start(self, model)
        for epoch in range(start, self.max_epochs):
            self.current_epoch = epoch
            for cb in self.callbacks:
                cb.on_train_epoch_start(self, model)
            for i in range(3):
                if (epoch, i) == (1, 1) and ckpt_path is None:
                    os.kill(os.getpid(), signal.SIGUSR1)
                for cb in self.callbacks:
                    cb.on_train_batch_end(self, model, None,
                                          ([0.0] * train_dataloaders.batch_size, None), i)
            for cb in self.callbacks:
                cb.on_train_epoch_end(self, model)
'''
ENVIRONMENTS_STUB = '''
class SLURMEnvironment:
    def __init__(self, auto_requeue=True, requeue_signal=None):
        self.auto_requeue, self.requeue_signal = auto_requeue, requeue_signal
'''

# What the loop leaves to the user, and a log of what the doc's code did. The loader
# sends the checkpoint signal in the middle of the second epoch of the first run.
LOOP_PRELUDE = '''
import json, os, signal
from slurm_shockwave.client import reporter as _reporter

LOG = []
_real_report, _real_ack = _reporter.report, _reporter.checkpointed

def _report(**kw):
    LOG.append(["report", kw["epoch"], kw["batch_size"]])
    return _real_report(**kw)

def _ack():
    LOG.append(["checkpointed"])
    return _real_ack()

_reporter.report, _reporter.checkpointed = _report, _ack

class _Loss:
    def backward(self):
        pass

class _Model:
    def __init__(self):
        self.w = 0.0
    def __call__(self, x):
        self.w += 1.0
        return x
    def state_dict(self):
        return {"w": self.w}
    def load_state_dict(self, state):
        self.w = state["w"]

class _Optimizer:
    def zero_grad(self):
        pass
    def step(self):
        pass
    def state_dict(self):
        return {}
    def load_state_dict(self, state):
        pass

class _Loader:
    batch_size = 4
    def __init__(self):
        self.epoch = 0
    def __iter__(self):
        self.epoch += 1
        LOG.append(["epoch_start"])
        for step in range(3):
            if os.environ.get("SEND_SIGNAL_AT") == f"{self.epoch},{step}":
                os.kill(os.getpid(), signal.SIGUSR1)
            yield [0.0] * 4, [0.0] * 4

model, optimizer, loader, epochs = _Model(), _Optimizer(), _Loader(), 4
criterion = lambda out, y: _Loss()
'''

EPILOGUE = '''
print(json.dumps(LOG))
'''


def _block(heading: str) -> str:
    """The first ```python block after ``heading`` in docs/progress.md."""
    text = DOC.read_text()
    at = text.index(heading)
    found = re.search(r"```python\n(.*?)```", text[at:], re.DOTALL)
    assert found, f"no python block after {heading!r}"
    return found.group(1)


def _run(code: str, tmp: Path, **env: str) -> list[list[object]]:
    stubs = tmp / "stubs"
    (stubs / "lightning" / "pytorch" / "plugins").mkdir(parents=True, exist_ok=True)
    (stubs / "torch.py").write_text(TORCH_STUB)
    (stubs / "lightning" / "__init__.py").write_text("")
    (stubs / "lightning" / "pytorch" / "__init__.py").write_text(LIGHTNING_STUB)
    (stubs / "lightning" / "pytorch" / "plugins" / "__init__.py").write_text("")
    (stubs / "lightning" / "pytorch" / "plugins" / "environments.py").write_text(
        ENVIRONMENTS_STUB)
    script = tmp / "example.py"
    script.write_text(code.replace("/scratch/", f"{tmp}/"))
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("SHOCKWAVE_", "SLURM_"))}
    run_env = {**clean, "PYTHONPATH": f"{stubs}{os.pathsep}{ROOT}", "SLURM_JOB_ID": "4242",
               "SHOCKWAVE_SIGNAL": "USR1", "HOME": str(tmp), **env}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         env=run_env, timeout=60, cwd=tmp)
    assert out.returncode == 0, out.stderr
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_pytorch_style_loop_checkpoints_on_the_signal_and_resumes_after_a_requeue(
        tmp_path: Path) -> None:
    loop = _block("### A plain PyTorch-style loop")
    # (the doc's import comes first in its block: the prelude wraps the same module)
    code = LOOP_PRELUDE + loop + EPILOGUE
    first = _run(code, tmp_path, SEND_SIGNAL_AT="2,1")
    # checkpointed and acknowledged in the second epoch, then trained on to the end
    assert ["checkpointed"] in first
    assert [e[1] for e in first if e[0] == "report"] == [1, 2, 3, 4]
    assert all(e[2] == 4 for e in first if e[0] == "report")
    assert (tmp_path / "4242.pt").exists()
    # requeued: resumes at the start of the epoch it checkpointed in (the second)
    again = _run(code, tmp_path, SLURM_RESTART_COUNT="1")
    assert [e[1] for e in again if e[0] == "report"] == [2, 3, 4]
    assert ["checkpointed"] not in again


def test_the_lightning_callback_checkpoints_on_the_signal_and_resumes_after_a_requeue(
        tmp_path: Path) -> None:
    callback = _block("### A PyTorch Lightning callback")
    code = LOOP_PRELUDE + callback + EPILOGUE
    first = _run(code, tmp_path)
    # Lightning's own requeue off, nothing to resume from
    assert first[0] == ["fit", ["SLURMEnvironment"], [False], None], first
    assert ["saved", 1] in first and ["checkpointed"] in first
    assert first.index(["saved", 1]) < first.index(["checkpointed"])
    # trained on after the acknowledgement, every epoch reported with the loader's size
    assert [e[1:] for e in first if e[0] == "report"] == [[1, 4], [2, 4], [3, 4], [4, 4]]
    ckpt = tmp_path / "4242.ckpt"
    assert ckpt.exists()
    # requeued: the trainer is given the checkpoint, and resumes in its epoch
    again = _run(code, tmp_path, SLURM_RESTART_COUNT="1")
    assert again[0] == ["fit", ["SLURMEnvironment"], [False], str(ckpt)], again
    assert [e[1] for e in again if e[0] == "report"] == [2, 3, 4]
    assert ["checkpointed"] not in again
