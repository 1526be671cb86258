"""Doors into other RL engines: ``trl`` (``make_trl_reward``, a judge as a reward function of your own TRL runs) and
``verl`` (a custom reward function calling ``evolm serve``).

OpenRLHF and slime need no code here: they call ``evolm serve``'s ``/get_reward`` and ``/reward``
directly (``evolm.serve``).
"""
