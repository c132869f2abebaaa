"""The seed's Trainer example under `accelerate launch`, adapted to a tiny local model.

Run as the seed writes it: `PYTHONPATH=$CHECKPOINT_VENDOR accelerate launch --config_file
fsdp_config.yaml --num_processes N train_accelerate.py`, from a File Storage volume that every
node mounts (the seed's /mnt/experiment/...). Adapted, as in nodeagent/tests/checkpoint_scripts/
seed_train.py: tokenizer, model and dataset are built locally (`support.py` beside this file);
the model is tiny and `use_cpu=True` (no bf16, no GPU) — with it, accelerate trains the FSDP
config's processes as DDP over gloo, since FSDP sharding needs accelerators here; results go
next to this script (the shared volume), so every rank of every node commits one concurrent
checkpoint; each rank prints its steps (test instrumentation).
"""

import argparse
import os

import support  # adapted: tiny local tokenizer, model and dataset (this script's directory)
from datastates.llm import DecoratedCheckpointing
from transformers import DataCollatorForLanguageModeling, Trainer, TrainerCallback, TrainingArguments


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--local_rank",
        type=int,
        default=-1,
        help="local rank passed from distributed launcher (Deepspeed, torchrun, etc.)"
    )
    return parser.parse_args()


class RankLines(TrainerCallback):
    """Test instrumentation: every rank says which step it finished (the Trainer logs on rank 0 only)."""

    def on_step_end(self, args, state, control, **kwargs):
        os.write(1, f"rank {args.process_index} of {args.world_size} step {state.global_step}\n".encode())


if __name__ == "__main__":
    args = parse_args()
    tokenizer = support.char_tokenizer()  # adapted: AutoTokenizer.from_pretrained(model_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenized = support.text_dataset(tokenizer)  # adapted: load_dataset("wikitext", ...) + map
    train_dataset = tokenized[:48]
    valid_dataset = tokenized[48:56]
    data_collator = DataCollatorForLanguageModeling(tokenizer=tokenizer, mlm=False)

    script_directory = os.path.dirname(os.path.abspath(__file__))
    training_args = TrainingArguments(
        # adapted: on the shared volume, one directory per job (seed: "./results")
        output_dir=os.path.join(script_directory, "results", os.environ.get("JOB_NAME", "local")),
        max_steps=int(os.environ.get("TRAIN_STEPS", "6")),  # adapted: num_train_epochs=3
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        save_strategy="steps",
        save_steps=3,
        logging_steps=2,
        eval_strategy="steps",
        eval_steps=3,
        report_to="none",
        use_cpu=True,  # adapted: bf16=True needs a GPU
        disable_tqdm=True,
    )
    model = support.tiny_llama(seed=0)  # adapted: AutoModelForCausalLM.from_pretrained(model_path)
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=valid_dataset,
        processing_class=tokenizer,
        data_collator=data_collator,
        callbacks=[RankLines()],
    )

    # ADD configuration for Concurrent CHECKPOINT ENGINE
    config = {
        "host_cache_size": 50,
        "parser_threads": 1,
        "pin_host_cache": True,
        "trainer": trainer,
    }
    ckpt_engine = DecoratedCheckpointing(runtime_config=config, rank=args.local_rank)

    resume_from_checkpoint = False
    if os.getenv("CKPT_LAST_STEP") != None:  # noqa: E711 - as the seed writes it
        resume_from_checkpoint = True

    trainer.train(resume_from_checkpoint=resume_from_checkpoint)
    os.write(1, f"rank {training_args.process_index} finished at step {trainer.state.global_step}\n".encode())
