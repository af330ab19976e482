"""Asynchronous decoupled-PPO training: algorithms, trainer, rollout controller, the training loop."""
