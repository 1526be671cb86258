"""Run directories to HTML: one run's report, a comparison of runs, plots, intervals, templates/."""

