"""Training: SAC (one loop for one or several seeds), PPO, DAgger distillation, environments,
replay, the run directory while training, checkpoints, device and precision. Reads models and
the IR; never imports the hardware layers."""
