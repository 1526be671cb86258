"""Run directories to HTML: one run's report, a comparison of runs, plots, intervals, templates/."""


def __getattr__(name: str) -> object:  # evolm.report was a module until 0.1: its names still resolve, with a warning
    from evolm._moved import moved_attribute

    return moved_attribute(__name__, "evolm.report.report", name)
