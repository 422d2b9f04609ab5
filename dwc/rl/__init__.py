"""Reinforcement learning: SAC and PPO loops, replay, run directories, evaluation."""
