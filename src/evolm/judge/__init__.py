"""The frozen judge: its modes (``judge``), the prompts it sends, how replies are read, what an answer may not
write for it (``self_assessment``, on ``normalise``'s copy), its cache, a reward-model baseline."""

