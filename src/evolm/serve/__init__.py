"""The reward server (``evolm serve``): OpenRLHF's and slime's reward protocols over one judge."""


def __getattr__(name: str) -> object:  # evolm.serve was a module until 0.1: its names still resolve, with a warning
    from evolm._moved import moved_attribute

    return moved_attribute(__name__, "evolm.serve.app", name)
