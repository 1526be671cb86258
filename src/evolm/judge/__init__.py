"""The frozen judge: its modes (``judge``), the prompts it sends, how replies are read, its cache, a reward-model
baseline."""

