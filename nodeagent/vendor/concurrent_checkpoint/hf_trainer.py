"""Hugging Face Trainer: the Trainer's own checkpoints go through the concurrent engine.

    trainer = Trainer(model=model, args=TrainingArguments(output_dir="out", save_steps=200, ...), ...)
    TrainerCheckpointing(trainer, host_cache_size=8)
    trainer.train(resume_from_checkpoint=True)

What changes on this one Trainer object (its instance methods are replaced, the class is not):
  _save_checkpoint   at each `save_steps`, model, optimizer, scheduler, scaler, RNG states and the
                     trainer state are snapshotted and written in the background to
                     `<output_dir>/concurrent_checkpoint/step-N/` instead of `<output_dir>/checkpoint-N/`.
  train              `resume_from_checkpoint=True` resumes from the newest complete concurrent
                     checkpoint (or step `CKPT_LAST_STEP`); with none it logs
                     "[Concurrent Checkpoint] No Checkpoint found with step: -1" and starts fresh
                     instead of raising ValueError.
  _load_*            read from a concurrent checkpoint directory; any other path (a classic
                     `checkpoint-N`) goes to the Trainer's own loaders unchanged.
Everything else (when to save, logging, evaluation, `save_model()`) is the Trainer's own.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import logging
import os
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from transformers import __version__ as transformers_version
from transformers.trainer_callback import ExportableState
from transformers.trainer_utils import SaveStrategy, get_last_checkpoint
from transformers.training_args import ParallelMode

from .distributed import broadcast_from_rank0
from .engine import CheckpointEngine
from .layout import MANIFEST, step_name
from .rng import capture_rng_state, restore_rng_state

log = logging.getLogger("concurrent_checkpoint.hf_trainer")
NOT_FOUND = "[Concurrent Checkpoint] No Checkpoint found with step: %d"
TRAINER_STATE = "trainer_state.json"
ENV_LAST_STEP = "CKPT_LAST_STEP"

# method -> parameters it must take; checked at install time so a transformers release that
# renamed one fails loudly at start-up instead of silently skipping checkpoints
_PATCHED: dict[str, tuple[str, ...]] = {
    "train": ("resume_from_checkpoint",),
    "_save_checkpoint": ("model", "trial"),
    "_load_from_checkpoint": ("resume_from_checkpoint", "model"),
    "_load_optimizer_and_scheduler": ("checkpoint",),
    "_load_scaler": ("checkpoint",),
    "_load_rng_state": ("checkpoint",),
    "_load_best_model": (),
}


class TrainerCheckpointing:
    def __init__(self, trainer: Any, *, logger: logging.Logger | None = None, **settings: Any) -> None:
        """Install on `trainer`. `settings` are CheckpointEngine settings (host_cache_size, ...)."""
        if getattr(trainer, "_concurrent_checkpointing", None) is not None:
            raise RuntimeError("concurrent checkpointing is already installed on this Trainer")
        _check_trainer(trainer)
        self.trainer = trainer
        self.log = logger or log
        self.engine: CheckpointEngine | None = None
        self._originals: dict[str, Any] = {}
        self._shards: dict[tuple[str, int], dict[str, Any]] = {}
        if trainer.is_fsdp_enabled:
            self.log.warning("[Concurrent Checkpoint] FSDP is not supported; the Trainer keeps its own "
                             "checkpoints")
            return
        args = trainer.args
        if args.save_total_limit and "keep_last" not in settings:
            settings["keep_last"] = args.save_total_limit
        settings.setdefault("rank", args.process_index)
        settings.setdefault("world_size", args.world_size)
        self.engine = CheckpointEngine(args.output_dir, **settings)
        self._install()
        trainer._concurrent_checkpointing = self

    # --- resume --------------------------------------------------------------------------------

    def resolve_resume(self) -> str | None:
        """The directory to resume from: step CKPT_LAST_STEP if set, else the newest; None if none."""
        assert self.engine is not None
        requested = _requested_step(self.log)
        ref = self.engine.locate(requested if requested >= 0 else None)
        if ref is None and requested >= 0:
            self.log.error(NOT_FOUND, requested)
            ref = self.engine.locate(None)
            if ref is not None:
                self.log.warning("[Concurrent Checkpoint] resuming from the newest complete step %d instead",
                                 ref.step)
        agreed = broadcast_from_rank0(None if ref is None else ref.step)
        if agreed is not None and (ref is None or ref.step != agreed):
            ref = self.engine.locate(agreed)
        if ref is None:
            classic = self._classic_checkpoint()
            if classic is not None:
                self.log.warning("[Concurrent Checkpoint] no concurrent checkpoint; resuming from the "
                                 "Trainer's own %s", classic)
                return classic
            if requested < 0:
                self.log.error(NOT_FOUND, requested)
            self.log.warning("[Concurrent Checkpoint] starting training from the beginning")
            return None
        self.log.info("[Concurrent Checkpoint] resuming from step %d (%s)", ref.step, ref.path)
        return str(ref.path)

    # --- replaced methods ----------------------------------------------------------------------

    def train(self, resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any) -> Any:
        if isinstance(resume_from_checkpoint, bool) and resume_from_checkpoint:
            resume_from_checkpoint = self.resolve_resume()
        return self._originals["train"](resume_from_checkpoint, *args, **kwargs)

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        tr = self.trainer
        if trial is not None or tr.hp_search_backend is not None:
            return self._originals["_save_checkpoint"](model, trial)  # per-trial dirs: not ours
        assert self.engine is not None
        tr.store_flos()
        step = tr.state.global_step
        primary = tr.args.process_index == 0
        files: dict[str, bytes] = {}
        if primary:
            self._track_best_model(step)
            files[TRAINER_STATE] = self._trainer_state_json()
            if tr.is_deepspeed_enabled:
                files[f"global_step{step}"] = b"concurrent_checkpoint\n"  # what transformers globs for
        self.engine.save(step, self._collect_state(primary), files=files, metadata={
            "source": "transformers.Trainer", "transformers": transformers_version, "global_step": step})
        return None

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        if not _is_concurrent(resume_from_checkpoint):
            return self._originals["_load_from_checkpoint"](resume_from_checkpoint, model)
        state = self._shard(resume_from_checkpoint, 0)
        self._load_model(model if model is not None else self.trainer.model, state)
        return None

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        if checkpoint is None or not _is_concurrent(checkpoint):
            return self._originals["_load_optimizer_and_scheduler"](checkpoint)
        tr = self.trainer
        state = self._shard(checkpoint, 0)
        if not tr.is_deepspeed_enabled and state.get("optimizer") is not None:
            tr.optimizer.load_state_dict(state["optimizer"])
        if state.get("scheduler") is not None:
            tr.lr_scheduler.load_state_dict(state["scheduler"])
        return None

    def _load_scaler(self, checkpoint: str | None) -> None:
        if checkpoint is None or not _is_concurrent(checkpoint):
            return self._originals["_load_scaler"](checkpoint)
        state = self._shard(checkpoint, 0)
        scaler = getattr(self.trainer.accelerator, "scaler", None)
        if scaler is not None and state.get("scaler") is not None:
            scaler.load_state_dict(state["scaler"])
        for key in ("model", "optimizer", "scheduler", "scaler", "deepspeed"):
            state.pop(key, None)  # loaded; only the RNG states are still needed
        return None

    def _load_rng_state(self, checkpoint: str | None) -> None:
        if checkpoint is None or not _is_concurrent(checkpoint):
            return self._originals["_load_rng_state"](checkpoint)
        rng = self._shard(checkpoint, self.trainer.args.process_index).get("rng")
        self._shards.clear()
        if rng is None:
            self.log.info("[Concurrent Checkpoint] %s holds no RNG state; reproducibility is not "
                          "guaranteed", checkpoint)
            return None
        restore_rng_state(rng)
        return None

    def _load_best_model(self) -> None:
        best = self.trainer.state.best_model_checkpoint
        if not best or not _is_concurrent(best):
            return self._originals["_load_best_model"]()
        self.log.info("[Concurrent Checkpoint] loading the best model from %s (score %s)", best,
                      self.trainer.state.best_metric)
        self._load_model(self.trainer.model, self._shard(best, 0))
        self._shards.clear()
        return None

    # --- helpers -------------------------------------------------------------------------------

    def _install(self) -> None:
        for name in _PATCHED:
            original = getattr(self.trainer, name)
            self._originals[name] = original
            setattr(self.trainer, name, _replacement(original, getattr(self, name)))
        self.trainer.add_callback(_EngineCallback(self))
        if self.trainer.is_deepspeed_enabled:
            self._wrap_accelerator_prepare()

    def _collect_state(self, primary: bool) -> dict[str, Any]:
        tr = self.trainer
        args = tr.args
        state: dict[str, Any] = {"global_step": tr.state.global_step}
        if tr.is_deepspeed_enabled:
            from .deepspeed_integration import collect_state
            state["deepspeed"] = collect_state(tr.model_wrapped)
            if primary and type(tr.lr_scheduler).__name__ != "DeepSpeedSchedulerWrapper":
                state["scheduler"] = tr.lr_scheduler.state_dict()
        elif primary:
            state["model"] = tr.model.state_dict()
            if not args.save_only_model:
                state["optimizer"] = tr.optimizer.state_dict()
                state["scheduler"] = tr.lr_scheduler.state_dict()
                scaler = getattr(tr.accelerator, "scaler", None)
                if scaler is not None:
                    state["scaler"] = scaler.state_dict()
        if not args.save_only_model:
            state["rng"] = capture_rng_state(all_cuda_devices=args.parallel_mode == ParallelMode.DISTRIBUTED)
        return state

    def _load_model(self, model: Any, state: dict[str, Any]) -> None:
        if state.get("model") is None:
            return  # DeepSpeed checkpoints: the engine's load_checkpoint restores the weights
        result = model.load_state_dict(state["model"], strict=False)
        issue = getattr(self.trainer, "_issue_warnings_after_load", None)
        if callable(issue):
            issue(result)

    def _shard(self, path: str, rank: int) -> dict[str, Any]:
        key = (str(path), rank)
        if key not in self._shards:
            assert self.engine is not None
            self._shards[key] = self.engine.read(self.engine.ref_from_dir(path), rank=rank)
        return self._shards[key]

    def _track_best_model(self, step: int) -> None:
        """The Trainer's best-model bookkeeping, pointed at our step directories."""
        tr = self.trainer
        assert self.engine is not None
        best = tr.state.best_global_step
        if not best or tr.args.save_strategy not in (SaveStrategy.STEPS, SaveStrategy.EPOCH, SaveStrategy.BEST):
            return
        if best == step or self.engine.has_step(best):
            tr.state.best_model_checkpoint = str(self.engine.root / step_name(best))
            self.engine.protected_steps = {best}  # retention keeps it for load_best_model_at_end

    def _trainer_state_json(self) -> bytes:
        tr = self.trainer
        for cb in [c for c in tr.callback_handler.callbacks + [tr.control] if isinstance(c, ExportableState)]:
            name = cb.__class__.__name__
            if isinstance(tr.state.stateful_callbacks.get(name), list):
                tr.state.stateful_callbacks[name].append(cb.state())
            else:
                tr.state.stateful_callbacks[name] = cb.state()
        # the same text TrainerState.save_to_json writes
        return (json.dumps(dataclasses.asdict(tr.state), indent=2, sort_keys=True) + "\n").encode()

    def _classic_checkpoint(self) -> str | None:
        output_dir = self.trainer.args.output_dir
        return get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None

    def _wrap_accelerator_prepare(self) -> None:
        """DeepSpeed: the engine object appears inside accelerator.prepare; wrap it there so that
        transformers' deepspeed_load_checkpoint reaches our load_checkpoint."""
        from .deepspeed_integration import DeepSpeedCheckpointing

        accelerator = self.trainer.accelerator
        original = accelerator.prepare

        @functools.wraps(original)
        def prepare(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            for obj in result if isinstance(result, tuple) else (result,):
                if (hasattr(obj, "save_checkpoint") and hasattr(obj, "load_checkpoint")
                        and hasattr(obj, "module") and getattr(obj, "_concurrent_checkpointing", None) is None):
                    DeepSpeedCheckpointing(obj, engine=self.engine)
            return result

        accelerator.prepare = prepare


class _EngineCallback(TrainerCallback):
    def __init__(self, integration: TrainerCheckpointing) -> None:
        self.integration = integration

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # lazy copies finish before parameters change, also for optimizers that are not
        # torch.optim.Optimizer subclasses (DeepSpeed's ZeRO)
        if self.integration.engine is not None:
            self.integration.engine.wait_for_snapshot()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        engine = self.integration.engine
        if engine is None:
            return
        try:
            engine.wait()  # when train() returns, every checkpoint it took is durable
        except Exception as exc:  # already logged when it happened; the trained model still matters
            self.integration.log.error("[Concurrent Checkpoint] %s", exc)


def _replacement(original: Any, implementation: Any) -> Any:
    """A plain function standing in for a bound method, keeping the original's name and doc."""

    @functools.wraps(original)
    def replaced(*args: Any, **kwargs: Any) -> Any:
        return implementation(*args, **kwargs)

    return replaced


def _is_concurrent(path: Any) -> bool:
    return isinstance(path, (str, os.PathLike)) and (Path(path) / MANIFEST).is_file()


def _requested_step(logger: logging.Logger) -> int:
    raw = os.environ.get(ENV_LAST_STEP, "").strip()
    if not raw:
        return -1
    try:
        return int(raw)
    except ValueError:
        logger.error("[Concurrent Checkpoint] %s=%r is not a step number; using the newest checkpoint",
                     ENV_LAST_STEP, raw)
        return -1


def _check_trainer(trainer: Any) -> None:
    for name, wanted in _PATCHED.items():
        method = getattr(trainer, name, None)
        if not callable(method):
            raise RuntimeError(f"transformers {transformers_version}: Trainer has no {name}(); "
                               "concurrent checkpointing does not support this version")
        have = list(inspect.signature(method).parameters)
        if list(wanted) != have[:len(wanted)]:
            raise RuntimeError(f"transformers {transformers_version}: Trainer.{name}{tuple(have)} differs "
                               f"from the expected {wanted}; concurrent checkpointing does not support it")
