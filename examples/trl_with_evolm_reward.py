"""Plug EvoLM's rubric + judge reward into your own TRL GRPO run (two tiny steps on CPU).

Each dataset row carries its own rubric (written beforehand, e.g. with `evolm rubric`), so the
reward is computed row by row and stays correct when TRL splits groups across processes.

Run:  .venv/bin/python examples/trl_with_evolm_reward.py
"""

import tempfile

from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from evolm import Judge, load_backend, load_model, make_trl_reward

rubric = {"criteria": [
    {"criterion": "The final answer is equivalent to 42.", "weight": 0.8},
    {"criterion": "The answer is one short sentence.", "weight": 0.2},
]}
rows = [{"prompt": [{"role": "user", "content": "What is 6 times 7?"}], "rubric": rubric},
        {"prompt": [{"role": "user", "content": "What is 40 plus 2?"}], "rubric": rubric}]

judge = Judge(load_backend("smollm2-135m-instruct", device="cpu"), mode="prob")
model, tokenizer = load_model("smollm2-135m-instruct", device="cpu")
args = GRPOConfig(output_dir=tempfile.mkdtemp(), max_steps=2, per_device_train_batch_size=4, num_generations=4,
                  max_completion_length=24, learning_rate=1e-5, logging_steps=1, report_to=[], use_cpu=True,
                  save_strategy="no", disable_tqdm=True)
trainer = GRPOTrainer(model=model, reward_funcs=[make_trl_reward(judge)], args=args,
                      train_dataset=Dataset.from_list(rows), processing_class=tokenizer)
trainer.train()
print("mean reward per step:", [round(h["reward"], 3) for h in trainer.state.log_history if "reward" in h])
