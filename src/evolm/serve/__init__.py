"""The reward server (``evolm serve``): OpenRLHF's and slime's reward protocols over one judge."""

