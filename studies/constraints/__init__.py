"""EvoLM where the better answer is known: IFEval-style constraints a program checks (docs/RESULTS.md leads with it).

``python -m studies.constraints --help`` lists the steps; each writes into ``studies/constraints/results/``.
"""
