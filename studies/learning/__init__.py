"""The learning study: does EvoLM learn on one CPU, and how do its regimes and rubric writers compare?

``python -m studies.learning --help`` lists the steps; each keeps what it measured in ``studies/learning/results/``
(docs/RESULTS.md links and quotes them).
"""
