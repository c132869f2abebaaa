"""Tiny models and training loops shared by the checkpoint tests and their subprocess scripts.

Importable two ways: `from nodeagent.tests.checkpoint_scripts import support` (tests) and
`import support` (scripts run from this directory). It imports nothing from the project.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
VENDOR = HERE.parents[1] / "vendor"
TEXT = HERE / "tiny_corpus.txt"


def vendor_on_path() -> None:
    """Make the vendored library importable, as PYTHONPATH=$CHECKPOINT_VENDOR does in a job."""
    if str(VENDOR) not in sys.path:
        sys.path.insert(0, str(VENDOR))


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment of a training subprocess: PYTHONPATH is the vendor directory alone."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CKPT_LAST_STEP")}
    env.update(PYTHONPATH=str(VENDOR), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    env.update(extra)
    return env


# --- plain PyTorch ------------------------------------------------------------------------------

class TinyNet(nn.Module):
    """Linear layers, a BatchNorm (buffers) and dropout (uses the RNG), small enough for CPU tests."""

    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, width), nn.BatchNorm1d(width), nn.ReLU(),
                                 nn.Dropout(0.2), nn.Linear(width, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def make_plain(seed: int = 0, width: int = 64) -> tuple[nn.Module, torch.optim.Optimizer, Any]:
    torch.manual_seed(seed)
    model = TinyNet(width)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    return model, optimizer, scheduler


def plain_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """A batch drawn from the global RNG, so resuming needs the RNG state back."""
    x = torch.randn(32, 16)
    return x, (x[:, :4] * 2).sum(dim=1).long() % 4


def plain_state(model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, step: int) -> dict:
    from concurrent_checkpoint import capture_rng_state

    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(), "rng": capture_rng_state(), "step": step}


def restore_plain(state: dict, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any) -> int:
    from concurrent_checkpoint import restore_rng_state

    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    restore_rng_state(state["rng"])
    return state["step"]


def train_plain(model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, start: int,
                stop: int, on_step: Callable[[int], None] | None = None) -> list[float]:
    """Steps start+1..stop; returns the losses. `on_step(step)` runs after each optimizer step."""
    losses = []
    model.train()
    for step in range(start + 1, stop + 1):
        x, y = plain_batch()
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        if on_step is not None:
            on_step(step)
    return losses


# --- Hugging Face Trainer -----------------------------------------------------------------------

def tiny_llama(seed: int) -> Any:
    """A 2-layer Llama with random weights from a local config (nothing downloaded)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         attention_dropout=0.1, tie_word_embeddings=True)
    return LlamaForCausalLM(config).to(torch.float32)


def char_tokenizer() -> Any:
    """A character-level tokenizer built from the local corpus (no download)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = sorted(set(TEXT.read_text(encoding="utf-8")))
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2} | {c: i + 3 for i, c in enumerate(chars)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>",
                                   unk_token="<unk>")


def text_dataset(tokenizer: Any, length: int = 32) -> list[dict[str, list[int]]]:
    lines = [line for line in TEXT.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [dict(tokenizer(line, truncation=True, max_length=length, padding="max_length")) for line in lines]


def token_dataset(count: int = 48, length: int = 16, seed: int = 1234) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(count):
        ids = torch.randint(3, 96, (length,), generator=generator)
        rows.append({"input_ids": ids, "labels": ids.clone(), "attention_mask": torch.ones(length, dtype=torch.long)})
    return rows


def training_args(output_dir: str | Path, max_steps: int, save_steps: int, **extra: Any) -> Any:
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=str(output_dir), max_steps=max_steps, save_strategy="steps", save_steps=save_steps,
        per_device_train_batch_size=4, learning_rate=5e-3, warmup_steps=2, lr_scheduler_type="linear",
        logging_steps=1, report_to="none", use_cpu=True, seed=7, dataloader_num_workers=0,
        disable_tqdm=True, **extra)


def record_losses(model: nn.Module) -> list[float]:
    """Every training forward's exact loss, in order (the Trainer's logs round them)."""
    losses: list[float] = []

    def hook(module: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        if module.training and getattr(output, "loss", None) is not None:
            losses.append(output.loss.item())

    model.register_forward_hook(hook, with_kwargs=True)
    return losses


def parameters_of(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_bitwise_equal(actual: Any, expected: Any, where: str = "state") -> None:
    """Same structure, same types, tensors equal bit for bit (NaN and -0.0 included)."""
    import numpy as np

    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{where}: {type(actual)} is not a tensor"
        assert (actual.dtype, tuple(actual.shape)) == (expected.dtype, tuple(expected.shape)), where
        a = actual.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
        b = expected.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
        assert torch.equal(a, b), f"{where}: tensor bytes differ"
    elif isinstance(expected, dict):
        assert isinstance(actual, dict) and list(actual) == list(expected), f"{where}: keys differ"
        for key in expected:
            assert_bitwise_equal(actual[key], expected[key], f"{where}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert type(actual) is type(expected) and len(actual) == len(expected), f"{where}: sequence differs"
        for i, (a, b) in enumerate(zip(actual, expected, strict=True)):
            assert_bitwise_equal(a, b, f"{where}[{i}]")
    elif isinstance(expected, np.ndarray):
        assert isinstance(actual, np.ndarray) and actual.dtype == expected.dtype, where
        assert actual.tobytes() == expected.tobytes(), f"{where}: array differs"
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"
