"""`DecoratedCheckpointing`: the seed's entry point, on top of `concurrent_checkpoint`.

    config = {"host_cache_size": 50, "parser_threads": 1, "pin_host_cache": True, "trainer": trainer}
    ckpt_engine = DecoratedCheckpointing(runtime_config=config, rank=args.local_rank)
    trainer.train(resume_from_checkpoint=resume)

Messages are logged through this module's logger, `datastates.llm.decorator`, as users' logs expect.
"""

from __future__ import annotations

import logging
from typing import Any

from concurrent_checkpoint import Checkpoint, CheckpointEngine, ConfigError, PendingCheckpoint

logger = logging.getLogger(__name__)


class DecoratedCheckpointing:
    """With `runtime_config["trainer"]`: the Trainer's checkpoints become concurrent ones.

    Without a trainer, `runtime_config["output_dir"]` is required and the object is a plain engine
    (`save`, `wait`, `load_latest`). Other keys are CheckpointEngine settings (`host_cache_size` in
    GB, `parser_threads`, `pin_host_cache`, `keep_last`, `lazy`, `s3_url`, ...); unknown keys are
    an error. `rank` is the launcher's local rank (-1 outside distributed runs); the global rank
    comes from the Trainer, torch.distributed or RANK.
    """

    def __init__(self, runtime_config: dict[str, Any], rank: int = -1) -> None:
        settings = dict(runtime_config)
        trainer = settings.pop("trainer", None)
        self.local_rank = rank
        self.integration = None
        if trainer is not None:
            from concurrent_checkpoint.hf_trainer import TrainerCheckpointing

            self.integration = TrainerCheckpointing(trainer, logger=logger, **settings)
            self.engine = self.integration.engine
        else:
            output_dir = settings.pop("output_dir", None)
            if output_dir is None:
                raise ConfigError("runtime_config needs a 'trainer' or an 'output_dir'")
            self.engine = CheckpointEngine(output_dir, **settings)

    def save(self, step: int, state: Any, **kwargs: Any) -> PendingCheckpoint:
        return self._engine().save(step, state, **kwargs)

    def wait(self) -> None:
        self._engine().wait()

    def load_latest(self, **kwargs: Any) -> Checkpoint | None:
        return self._engine().load_latest(**kwargs)

    def _engine(self) -> CheckpointEngine:
        if self.engine is None:
            raise RuntimeError("concurrent checkpointing is inactive for this Trainer (see the log)")
        return self.engine
