"""Asynchronous decoupled-PPO training: the configs (`config.py`), the training run and its step loop (`run.py`),
the rollout controller and replay buffer, the algorithms, the trainers (local, FSDP2), checkpoints and resume."""
