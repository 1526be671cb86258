"""The co-evolution run: plan, one step, rewards, replay buffer, held-out eval, and the door into TRL."""
