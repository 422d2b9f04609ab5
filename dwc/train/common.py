"""Pieces both algorithms share: device choice, the squashed-Gaussian policy, evaluation."""
from __future__ import annotations

import contextlib
import math

import gymnasium as gym
import numpy as np
import torch

from dwc.core.errors import OptionError
from dwc.ir.graph import check_observation

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise OptionError("device", f" {name}: no CUDA GPU is available to this torch build "
                        f"(torch {torch.__version__}); use --device cpu or auto")
    try:
        return torch.device(name)
    except RuntimeError:
        raise OptionError("device", f" {name!r} is not a device (use auto, cpu or cuda)") from None


PRECISIONS = ("auto", "float32", "bfloat16")


def fast_bf16(device: torch.device) -> bool:
    """True where bf16 matmuls run much faster than float32: a CPU with AMX tiles (Intel Xeon
    4th gen and later; measured 4.6x on the critics' 256 x 256 layer, 10x on a published-size
    wiring gradient) or with AVX512-BF16 dot products (AMD Zen 4 and later, Intel Cooper Lake;
    measured on an AMD EPYC 3.2x on the 256 x 256 layer, 2.5-3.5x on published-size wiring
    gradients, none on a small thermometer layer whose float32 route is a histogram).
    GPUs are left at float32 by ``auto``: at batch 256 their updates are bound by kernel
    launches, not arithmetic (and the bf16 path has not been measured on one)."""
    if device.type != "cpu":
        return False
    probes = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")  # private API: absent means unknown, so no
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in probes)


def resolve_precision(name: str, device: torch.device) -> torch.dtype:
    """The dtype of the large training matmuls: the critics' and the MLP actor's hidden layer and
    the LUT layers' wiring-score gradient. Everything else (LUT forward and tables, EFD, losses,
    optimiser state, inference) stays float32, and a DWC's circuit is exact whatever this is.
    ``auto`` is float32 everywhere: bf16 is faster where :func:`fast_bf16`, but over 5 paired Hopper
    seeds (results/hopper-ab) it cost the MLP return (IQM ratio 0.81), and a DWC pairs with its MLP
    baseline only at the same precision, so bf16 is only taken when asked for (``bfloat16``)."""
    if name not in PRECISIONS:
        raise OptionError("precision", f" {name!r}: choose from {', '.join(PRECISIONS)}")
    if name == "auto":
        return torch.float32
    return getattr(torch, name)


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed memory for reuse instead of returning it to the OS.

    By default glibc serves blocks above a (dynamic, 128 KB - 32 MB) threshold with fresh mmaps and
    trims the heap top: a training loop that allocates the same MB-sized tensors every step then
    page-faults them in again each time (zeroed 4 KB pages), measured at ~20% of a DWC update on CPU.
    The cost is a process that does not shrink back after its peak. No-op (False) off glibc."""
    import ctypes
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(libc.mallopt(m_mmap_threshold, 32 << 20) and libc.mallopt(m_trim_threshold, 1 << 30))


@contextlib.contextmanager
def flush_denormals():
    """Gradient updates with denormal floats flushed to zero (this thread's FTZ/DAZ flags).

    Adam's first moment of a score whose gradient stays zero (the wiring candidates of a LUT no
    later slot reads) decays by 0.9 a step into the denormal range, where x86 takes a ~100-cycle
    assist per operation: measured 2x slower actor steps for a 2 x 1024 DWC after 2000 updates.
    Only updates run under it, so environment steps and evaluation keep IEEE semantics. Yields
    whether it flushes (not where the CPU cannot)."""
    flushing = torch.set_flush_denormal(True)
    try:
        yield flushing
    finally:
        if flushing:
            torch.set_flush_denormal(False)


def critic_view(sc, normalize, obs: torch.Tensor) -> torch.Tensor:
    """What SAC's critics read of ``obs``: the observation itself, or ``normalize(obs)`` (the actor's
    normaliser) where ``sc.critic_input`` says "normalized" (runs made before the raw default)."""
    return normalize(obs) if sc.critic_input == "normalized" else obs


def squashed_log_prob(actor, mean: torch.Tensor, log_std: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """log pi(a) for a = tanh(u) * scale + bias with u ~ N(mean, std), summed over action dims."""
    logp = -0.5 * ((u - mean) / log_std.exp()).square() - log_std - LOG_SQRT_2PI
    logp = logp - torch.log(actor.action_scale * (1 - torch.tanh(u).square()) + 1e-6)
    return logp.sum(-1)


def sample_action(actor, obs: torch.Tensor, noise: torch.Tensor | None = None):
    """Reparameterised sample: (action, log_prob, pre-tanh u); ``noise`` ~ N(0, 1) drawn here if not given."""
    mean, log_std = actor.dist_params(obs)
    u = mean + log_std.exp() * (torch.randn_like(mean) if noise is None else noise)
    return actor.squash(u), squashed_log_prob(actor, mean, log_std, u), u


@torch.no_grad()
def evaluate(act_fn, env_id: str, episodes: int, seed: int, progress: bool = False) -> dict:
    """Deterministic episodes of ``act_fn(obs: np.ndarray) -> np.ndarray`` on fresh seeded envs."""
    from tqdm import tqdm
    env = gym.make(env_id)
    returns, lengths = [], []
    for ep in tqdm(range(episodes), desc=f"eval {env_id}", disable=not progress, unit="ep"):
        obs, _ = env.reset(seed=seed + ep)
        done, ret, n = False, 0.0, 0
        while not done:
            check_observation(obs, f"at step {n} of the evaluation episode with seed {seed + ep}")
            obs, r, term, trunc, _ = env.step(act_fn(obs))
            ret += float(r)
            n += 1
            done = term or trunc
        returns.append(ret)
        lengths.append(n)
    env.close()
    r = np.asarray(returns)
    return {"env": env_id, "episodes": episodes, "seed": seed, "mean_return": float(r.mean()),
            "median_return": float(np.median(r)), "std_return": float(r.std()),
            "min_return": float(r.min()), "max_return": float(r.max()),
            "mean_length": float(np.mean(lengths)), "returns": [float(x) for x in r]}


def actor_act_fn(actor, device):
    def act(obs: np.ndarray) -> np.ndarray:
        o = torch.as_tensor(obs, dtype=torch.float32, device=device).unsqueeze(0)
        return actor.act(o)[0].cpu().numpy()
    return act


class EpisodeTracker:
    """Sums rewards per env and logs each finished episode's return and length."""

    def __init__(self, num_envs: int):
        self.ret = np.zeros(num_envs)
        self.len = np.zeros(num_envs, dtype=np.int64)
        self.recent: list[float] = []
        self.episodes = 0

    def step(self, run, step: int, rewards: np.ndarray, dones: np.ndarray) -> None:
        self.ret += rewards
        self.len += 1
        for i in np.flatnonzero(dones):
            self.episodes += 1
            self.recent = (self.recent + [float(self.ret[i])])[-10:]
            run.log(step, **{"charts/episodic_return": self.ret[i], "charts/episodic_length": self.len[i]})
            self.ret[i], self.len[i] = 0.0, 0

    def state_dict(self) -> dict:
        return {"ret": self.ret.copy(), "len": self.len.copy(), "recent": list(self.recent), "episodes": self.episodes}

    def load_state_dict(self, s: dict) -> None:
        self.ret, self.len = s["ret"].copy(), s["len"].copy()
        self.recent, self.episodes = list(s["recent"]), s["episodes"]

    def postfix(self, sps: float) -> dict:
        return {"sps": f"{sps:.0f}", "ret": f"{np.mean(self.recent):.1f}" if self.recent else "-"}


class RateMeter:
    """Env-steps per second over the window since the previous ``rate()`` call."""

    def __init__(self, step: int):
        import time
        self._clock = time.perf_counter
        self.step, self.t = step, self._clock()
        self.last = 0.0

    def rate(self, step: int) -> float:
        now = self._clock()
        if now > self.t and step > self.step:
            self.last = (step - self.step) / (now - self.t)
        self.step, self.t = step, now
        return self.last


class PhaseClock:
    """Where a training loop's wall time goes: ``lap(phase)`` charges the time since the previous lap to
    ``phase``; ``report(iterations)`` gives ``time/<phase>_ms``, milliseconds per loop iteration since
    the previous report, and starts again. On a GPU the update is queued, not waited for: its device
    time shows in the next phase that reads a result back (acting)."""

    def __init__(self, clock=None):
        import time
        self._clock = clock or time.perf_counter  # seconds; another for a test
        self.t = self._clock()
        self.spent: dict[str, float] = {}

    def lap(self, phase: str) -> None:
        now = self._clock()
        self.spent[phase] = self.spent.get(phase, 0.0) + now - self.t
        self.t = now

    def report(self, iterations: int) -> dict:
        out = {f"time/{phase}_ms": 1000.0 * s / max(iterations, 1) for phase, s in self.spent.items()}
        self.spent.clear()
        return out


class GraphedCall:
    """Calls ``fn(*tensors)`` as a replayed CUDA graph: one launch instead of tens or hundreds.

    One graph per pattern of arguments (``None`` or not), e.g. SAC's critic-only and critic+actor
    updates, or per input shape of an acting forward. Arguments are copied into static tensors the graph reads; the first ``warmup`` calls of
    each pattern run eagerly on a side stream (they create optimiser state and cuBLAS workspaces, as
    capture requires), then the next one is captured and every later call is a replay. ``fn`` must
    not sync with the host (no ``.item()``, no data-dependent shapes). If capture fails anyway, one
    line says so and the calls run eagerly from then on: slower, never wrong.
    """

    def __init__(self, fn, warmup: int = 3):
        self.fn, self.warmup = fn, warmup
        self.graphs: dict = {}  # pattern -> (graph, static inputs, static outputs)
        self.calls: dict = {}
        self.failed = False

    def __call__(self, *args):
        if self.failed:
            return self.fn(*args)
        key = tuple(None if a is None else a.shape for a in args)
        if key in self.graphs:
            graph, static_in, out = self.graphs[key]
            for dst, src in zip(static_in, args):
                if dst is not None:
                    dst.copy_(src, non_blocking=True)
            graph.replay()
            return out
        self.calls[key] = self.calls.get(key, 0) + 1
        static_in = [None if a is None else a.clone() for a in args]
        if self.calls[key] <= self.warmup:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                out = self.fn(*static_in)
            torch.cuda.current_stream().wait_stream(side)
            return out
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                out = self.fn(*static_in)
        except Exception as e:  # noqa: BLE001 - any capture failure means: run eagerly
            self.failed = True
            print(f"note: CUDA graph capture failed ({type(e).__name__}: {str(e).splitlines()[0][:120]}); "
                  "continuing without graphs", flush=True)
            torch.cuda.synchronize()
            return self.fn(*args)
        self.graphs[key] = (graph, static_in, out)
        graph.replay()  # capture records the work without doing it
        return out
