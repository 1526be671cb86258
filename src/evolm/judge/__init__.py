"""The frozen judge: its modes (``judge``), the prompts it sends, how replies are read, its cache, a reward-model
baseline."""


def __getattr__(name: str) -> object:  # evolm.judge was a module until 0.1: its names still resolve, with a warning
    from evolm._moved import moved_attribute

    return moved_attribute(__name__, "evolm.judge.judge", name)
