"""DeepSpeed: `DeepSpeedEngine.save_checkpoint` / `load_checkpoint` through the concurrent engine.

    model_engine, optimizer, _, scheduler = deepspeed.initialize(...)
    wrap_deepspeed_engine(model_engine, host_cache_size=8)
    model_engine.save_checkpoint("out")            # returns after the snapshot; written in background
    model_engine.load_checkpoint("out")            # newest complete checkpoint (or tag="global_stepN")

Only the engine object's methods are replaced (no DeepSpeed class is patched). Each rank saves its
own shard: its optimizer state (its ZeRO partition under stage 1/2/3) and, on the ranks where
DeepSpeed itself would save it (`save_non_zero_checkpoint`), the module weights. Loading assumes
pure data parallelism: a rank without module weights in its shard reads rank 0's.

Under ZeRO stage 3 the weights are partitioned across ranks: like DeepSpeed's own checkpoint,
the shard holds no module weights, and loading restores each rank's parameter partition from
the fp32 partition in its optimizer state. Loading is bracketed by the optimizer's checkpoint
prologue/epilogue as DeepSpeed brackets its own (partition every parameter, then gather the
persistent small ones again); saving reads only the optimizer's partitions and is not bracketed
(partitioning the parameters in the middle of training made later steps diverge to NaN on CPU).
Verified on a real DeepSpeedEngine (0.18.9, CPU, gloo): stages 0 and 3 resume bit for bit.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .engine import CheckpointEngine
from .layout import MANIFEST, ROOT_NAME
from .loading import CheckpointRef

log = logging.getLogger("concurrent_checkpoint.deepspeed")
_TAG_STEP = re.compile(r"^global_step(\d+)$")
_SAFE_TAG = re.compile(r"^[A-Za-z0-9_.-]+$")


def partitions_weights(ds: Any) -> bool:
    """ZeRO stage 3: each rank holds only its partition of the parameters."""
    check = getattr(ds, "zero_optimization_partition_weights", None)
    return bool(check()) if callable(check) else False


@contextlib.contextmanager
def checkpoint_event(ds: Any) -> Iterator[None]:
    """The optimizer's own bracket around a checkpoint (ZeRO-3: partition all, then re-gather)."""
    optimizer = getattr(ds, "optimizer", None)
    prologue = getattr(optimizer, "checkpoint_event_prologue", None)
    if callable(prologue):
        prologue()
    try:
        yield
    finally:
        epilogue = getattr(optimizer, "checkpoint_event_epilogue", None)
        if callable(epilogue):
            epilogue()


def collect_state(ds: Any, client_state: dict[str, Any] | None = None,
                  exclude_frozen_parameters: bool = False) -> dict[str, Any]:
    """What DeepSpeed's own checkpoint holds, as one state for this rank's shard."""
    module_state = None
    # ZeRO-3: the weights are in the optimizer's fp32 partitions; the module holds placeholders
    if getattr(ds, "save_non_zero_checkpoint", True) and not partitions_weights(ds):
        module_state = ds.module.state_dict()
        if exclude_frozen_parameters:
            frozen = {n for n, p in ds.module.named_parameters() if not p.requires_grad}
            module_state = {k: v for k, v in module_state.items() if k not in frozen}
    optimizer = getattr(ds, "optimizer", None)
    scheduler = getattr(ds, "lr_scheduler", None)
    return {
        "module": module_state,
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "lr_scheduler": scheduler.state_dict() if scheduler is not None else None,
        "global_steps": int(ds.global_steps),
        "global_samples": int(getattr(ds, "global_samples", 0)),
        "skipped_steps": int(getattr(ds, "skipped_steps", 0)),
        "dp_world_size": int(getattr(ds, "dp_world_size", 1)),
        "client_state": dict(client_state or {}),
    }


def restore_state(ds: Any, state: dict[str, Any], module_state: dict[str, Any] | None, *,
                  load_module_strict: bool = True, load_optimizer_states: bool = True,
                  load_lr_scheduler_states: bool = True, load_module_only: bool = False) -> None:
    optimizer = getattr(ds, "optimizer", None)
    if module_state is not None:
        ds.module.load_state_dict(module_state, strict=load_module_strict)
    elif partitions_weights(ds) and optimizer is not None and state.get("optimizer") is not None:
        # ZeRO-3: the parameters come back from the fp32 partitions (moments only if asked)
        _load_optimizer(ds, optimizer, state["optimizer"],
                        load_optimizer_states=load_optimizer_states and not load_module_only)
        load_optimizer_states = False
    if load_module_only:
        return
    if load_optimizer_states and optimizer is not None and state.get("optimizer") is not None:
        _load_optimizer(ds, optimizer, state["optimizer"])
    scheduler = getattr(ds, "lr_scheduler", None)
    if load_lr_scheduler_states and scheduler is not None and state.get("lr_scheduler") is not None:
        scheduler.load_state_dict(state["lr_scheduler"])
    ds.global_steps = state["global_steps"]
    if hasattr(ds, "global_samples"):
        ds.global_samples = state["global_samples"]
    if hasattr(ds, "skipped_steps"):
        ds.skipped_steps = state["skipped_steps"]


def _load_optimizer(ds: Any, optimizer: Any, state: Any, load_optimizer_states: bool = True) -> None:
    parameters = inspect.signature(optimizer.load_state_dict).parameters
    if "state_dict_list" in parameters:
        # ZeRO optimizers take every data-parallel rank's state and pick their own by dp rank;
        # without elastic resharding only this rank's entry is read.
        kwargs: dict[str, Any] = {}
        if "load_optimizer_states" in parameters:
            kwargs["load_optimizer_states"] = load_optimizer_states
        if "load_from_fp32_weights" in parameters and callable(getattr(ds, "zero_load_from_fp32_weights", None)):
            kwargs["load_from_fp32_weights"] = ds.zero_load_from_fp32_weights()
        optimizer.load_state_dict([state] * int(getattr(ds, "dp_world_size", 1)), **kwargs)
    else:
        optimizer.load_state_dict(state)


class DeepSpeedCheckpointing:
    """Replaces an engine object's save_checkpoint / load_checkpoint / step (see module doc)."""

    def __init__(self, ds_engine: Any, engine: CheckpointEngine | None = None, **settings: Any) -> None:
        if getattr(ds_engine, "_concurrent_checkpointing", None) is not None:
            raise RuntimeError("this DeepSpeed engine is already wrapped")
        self.ds = ds_engine
        self._settings = settings
        self._engines: dict[Path, CheckpointEngine] = {}
        self._shared = engine
        if engine is not None:
            self._engines[engine.root.parent.resolve()] = engine
        self._originals = {name: getattr(ds_engine, name) for name in ("save_checkpoint", "load_checkpoint", "step")}
        ds_engine.save_checkpoint = self.save_checkpoint
        ds_engine.load_checkpoint = self.load_checkpoint
        ds_engine.step = self.step
        ds_engine._concurrent_checkpointing = self

    def engine_for(self, output_dir: str | Path) -> CheckpointEngine:
        key = Path(output_dir).resolve()
        if key not in self._engines:
            settings = dict(self._settings)
            settings.setdefault("rank", getattr(self.ds, "global_rank", None))
            settings.setdefault("world_size", getattr(self.ds, "world_size", None))
            self._engines[key] = CheckpointEngine(key, **settings)
        return self._engines[key]

    def save_checkpoint(self, save_dir: str, tag: Any = None, client_state: dict | None = None,
                        save_latest: bool = True, exclude_frozen_parameters: bool = False) -> bool:
        step = int(self.ds.global_steps)
        tag = f"global_step{step}" if tag is None else str(tag)
        engine = self.engine_for(save_dir)
        files = {}
        if engine.rank == 0 and _SAFE_TAG.match(tag):
            # a file named like DeepSpeed's tag directory: transformers' resume looks for `global_step*`
            files[tag] = tag.encode()
        state = collect_state(self.ds, client_state, exclude_frozen_parameters)
        engine.save(step, state, files=files, metadata={"source": "deepspeed", "tag": tag})
        return True

    def load_checkpoint(self, load_dir: str, tag: Any = None, load_module_strict: bool = True,
                        load_optimizer_states: bool = True, load_lr_scheduler_states: bool = True,
                        load_module_only: bool = False, custom_load_fn: Any = None
                        ) -> tuple[str | None, dict | None]:
        if custom_load_fn is not None:
            raise NotImplementedError("custom_load_fn is not supported with concurrent checkpoints")
        engine, ref = self._find(Path(load_dir), None if tag is None else str(tag))
        if ref is None:
            log.warning("[Concurrent Checkpoint] no checkpoint under %s (tag %s)", load_dir, tag)
            return None, None
        state = _deepspeed_part(engine.read(ref))
        module_state = state.get("module")
        if module_state is None and engine.rank != 0:
            module_state = _deepspeed_part(engine.read(ref, rank=0)).get("module")
        with checkpoint_event(self.ds):
            restore_state(self.ds, state, module_state, load_module_strict=load_module_strict,
                          load_optimizer_states=load_optimizer_states,
                          load_lr_scheduler_states=load_lr_scheduler_states, load_module_only=load_module_only)
        log.info("[Concurrent Checkpoint] DeepSpeed engine restored from step %d (%s)", ref.step, ref.path)
        return str(ref.path), state.get("client_state", {})

    def step(self, *args: Any, **kwargs: Any) -> Any:
        for engine in self._engines.values():
            engine.wait_for_snapshot()  # lazy copies must finish before parameters change
        return self._originals["step"](*args, **kwargs)

    def wait(self) -> None:
        for engine in self._engines.values():
            engine.wait()

    def close(self) -> None:
        """Wait for pending checkpoints and put the engine's own methods back."""
        for path, engine in list(self._engines.items()):
            if engine is not self._shared:
                engine.close()
            del self._engines[path]
        for name, method in self._originals.items():
            setattr(self.ds, name, method)
        self.ds._concurrent_checkpointing = None

    def _find(self, path: Path, tag: str | None) -> tuple[CheckpointEngine, CheckpointRef | None]:
        if (path / MANIFEST).is_file():  # a step directory itself (what the Trainer passes)
            root = next((p for p in path.parents if p.name == ROOT_NAME), None)
            engine = self.engine_for(root.parent if root is not None else path.parent)
            return engine, engine.ref_from_dir(path)
        engine = self.engine_for(path)
        if tag is None:
            return engine, engine.locate()
        match = _TAG_STEP.match(tag)
        if match:
            return engine, engine.locate(int(match.group(1)))
        for step in reversed(engine.complete_steps()):
            ref = engine.locate(step)
            if ref is not None and ref.manifest.metadata.get("tag") == tag:
                return engine, ref
        return engine, None


def _deepspeed_part(state: dict[str, Any]) -> dict[str, Any]:
    """A Trainer checkpoint nests the engine's state under "deepspeed"; a direct save does not."""
    return state["deepspeed"] if isinstance(state.get("deepspeed"), dict) else state


def wrap_deepspeed_engine(ds_engine: Any, **settings: Any) -> DeepSpeedCheckpointing:
    """Route a DeepSpeed engine's checkpoints through concurrent checkpointing (see module doc)."""
    return DeepSpeedCheckpointing(ds_engine, **settings)
