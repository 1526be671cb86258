"""Doors into other RL engines: ``verl`` (a custom reward function calling ``evolm serve``).

OpenRLHF and slime need no code here: they call ``evolm serve``'s ``/get_reward`` and ``/reward``
directly (``evolm.serve.app``).
"""
