"""Write a rubric for a question with SmolLM2, then score two answers against it.

Run:  .venv/bin/python examples/score_with_rubric.py
"""

from evolm import Judge, JudgeItem, SamplingParams, load_backend, parse_rubric, write_rubrics

backend = load_backend("smollm2-135m-instruct", device="cpu")  # converted once into ~/.cache/evolm
question = "Convert 2 hours into minutes."

written = write_rubrics(backend, [question], SamplingParams(temperature=0.6, top_p=0.95, max_new_tokens=256, seed=0))[0]
rubric = written.rubric or parse_rubric(
    '{"criteria": [{"criterion": "The final answer is equivalent to 120 minutes.", "weight": 0.8},'
    ' {"criterion": "Shows the conversion 2 x 60.", "weight": 0.2}]}'
)  # a 135M model does not always write valid JSON: fall back to a hand-written rubric
print("rubric written by the model is", "valid" if written.valid else "invalid; using a fallback")

judge = Judge(backend, mode="prob")  # one forward pass per answer, deterministic
good, bad = "2 hours is 2 x 60 = 120 minutes.", "2 hours is 200 minutes."
scores = [j.score for j in judge.score([JudgeItem(question, good, rubric), JudgeItem(question, bad, rubric)])]
print(f"good answer: {scores[0]:.3f}   bad answer: {scores[1]:.3f}")
