"""Reinforcement learning: SAC and PPO loops, DAgger distillation, replay, run directories, evaluation."""
