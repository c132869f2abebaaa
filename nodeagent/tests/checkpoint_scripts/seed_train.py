"""The seed's Spot Training example, adapted to a tiny local model (no download, no `datasets`).

Run as a job runs it: `PYTHONPATH=$CHECKPOINT_VENDOR python seed_train.py`. Differences from the
seed, all marked "adapted": the tokenizer and Llama model are built locally, the dataset is a list
of tokenized lines from a small text file, the output directory comes from OUTPUT_DIR, the model is
tiny and trains on the CPU, and "test instrumentation" lines let the test preempt the run and read
its result.
"""

import argparse
import os
import signal
import sys

import support  # adapted: tiny local tokenizer, model and dataset (this script's directory)
import torch
from datastates.llm import DecoratedCheckpointing
from transformers import (
    DataCollatorForLanguageModeling,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--local_rank",
        type=int,
        default=-1,
        help="local rank passed from distributed launcher (Deepspeed, torchrun, etc.)"
    )
    return parser.parse_args()


class Preemption(TrainerCallback):
    """Test instrumentation: a spot preemption, SIGKILL once the last checkpoint is durable."""

    def __init__(self, engine, step):
        self.engine, self.step = engine, step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            self.engine.wait()
            os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    args = parse_args()

    tokenizer = support.char_tokenizer()  # adapted: AutoTokenizer.from_pretrained(model_path)

    # Set pad token to EOS if not already defined
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token

    # adapted: load_dataset("wikitext", ...) and dataset.map(tokenize_function)
    tokenized = support.text_dataset(tokenizer)
    train_dataset = tokenized[:48]
    valid_dataset = tokenized[48:56]

    data_collator = DataCollatorForLanguageModeling(
        tokenizer=tokenizer,
        mlm=False  # Causal LM (not masked LM)
    )

    training_args = TrainingArguments(
        output_dir=os.environ.get("OUTPUT_DIR", "./results"),  # adapted: the platform's OUTPUT_DIR
        max_steps=8,  # adapted: num_train_epochs=3
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        save_strategy="steps",
        save_steps=3,
        logging_steps=2,
        eval_strategy="steps",
        eval_steps=4,
        report_to="none",
        use_cpu=True,  # adapted: bf16=True and deepspeed=ds_config_path need a GPU
        disable_tqdm=True,
    )

    model = support.tiny_llama(seed=0)  # adapted: AutoModelForCausalLM.from_pretrained(model_path)

    # Initialize Trainer
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=valid_dataset,  # Optional: validation set for evaluation
        processing_class=tokenizer,
        data_collator=data_collator,
    )

    # ADD configuration for Concurrent CHECKPOINT ENGINE
    config = {
        "host_cache_size": 50,
        "parser_threads": 1,
        "pin_host_cache": True,
        "trainer": trainer,
    }

    ckpt_engine = DecoratedCheckpointing(runtime_config=config, rank=args.local_rank)

    if os.environ.get("PREEMPT_AT_STEP"):  # test instrumentation
        trainer.add_callback(Preemption(ckpt_engine, int(os.environ["PREEMPT_AT_STEP"])))

    resume_from_checkpoint = False

    if os.getenv("CKPT_LAST_STEP") != None:  # noqa: E711 - as the seed writes it
        resume_from_checkpoint = True

    trainer.train(resume_from_checkpoint=resume_from_checkpoint)

    # test instrumentation: what the test compares between runs
    project = sorted(m for m in sys.modules if m.split(".")[0] in ("django", "console", "nodeagent"))
    torch.save({"params": support.parameters_of(model), "global_step": trainer.state.global_step,
                "project_modules": project}, os.path.join(training_args.output_dir, "result.pt"))
